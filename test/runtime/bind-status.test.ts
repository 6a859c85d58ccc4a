// withBindFailures (lib/runtime/bind-status.ts): a listener whose port cannot
// be bound is Programmed=False Pending, and its Gateway says so; a Gateway that
// compile left Programmed=False for another reason (an address it asked for)
// keeps that reason, and its addresses.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import type { ObjectStatus } from '../../lib/compile/status.ts'
import { withBindFailures } from '../../lib/runtime/bind-status.ts'
import * as b from '../compile/builders.ts'

const failure = { port: 8080, error: 'EADDRINUSE: in use', message: 'cannot listen on 127.0.0.1:8080: listen EADDRINUSE' }

function programmed(s: ObjectStatus | undefined): string {
  const c = s?.conditions.find((x) => x.type === 'Programmed')
  return `${c?.status}/${c?.reason}: ${c?.message}`
}

t.test('an unbound port: Pending on the listener; the Gateway Programmed while another listener is', async (t) => {
  const { table, status } = compile(b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('a', 8080), b.listener('b', 8081)])]), b.opts)
  const s = withBindFailures(status, table, [failure]).objects.get('Gateway/default/gw')
  t.match(programmed(s), /^True\/Programmed: 1 of 2 listeners cannot bind their port: a \(port 8080\)/)
  t.equal(s?.listeners[0]?.conditions.find((c) => c.type === 'Programmed')?.reason, 'Pending')
})

t.test('a Gateway compile left Programmed=False (AddressNotUsable) keeps that reason, and its addresses', async (t) => {
  const svc = b.service('sallyport', [{ name: 'http', port: 80 }], { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'] })
  const published = { ...svc, meta: { ...svc.meta, namespace: 'sallyport-system' } }
  const gw = b.gateway('gw', [b.listener('a', 8080), b.listener('b', 8081)], { addresses: [{ type: 'IPAddress', value: '192.0.2.1' }] })
  const { table, status } = compile(b.snapshotOf([b.gatewayClass(), published, gw]), { ...b.opts, publishService: 'sallyport-system/sallyport' })
  const s = withBindFailures(status, table, [failure]).objects.get('Gateway/default/gw')
  t.match(programmed(s), /^False\/AddressNotUsable: requested address 192\.0\.2\.1 .*; 1 of 2 listeners cannot bind their port: a \(port 8080\)/)
  t.same(s?.addresses, [], 'the addresses stay as compile made them')
})
