// Gateway addresses (lib/compile/addresses.ts): every served Gateway gets the
// addresses of the --publish-service Service in status.addresses; spec.addresses
// is honoured when it asks for addresses that Service has, and otherwise says so
// in Accepted / Programmed with Gateway API's reasons, while the listeners serve.
import t from 'tap'
import { compile, type CompileOptions } from '../../lib/compile/compile.ts'
import { References } from '../../lib/compile/references.ts'
import type { Condition, ObjectStatus } from '../../lib/compile/status.ts'
import type { Gateway, Service } from '../../lib/resources/model.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { formatProblem } from '../../lib/resources/problem.ts'
import * as b from './builders.ts'

type Obj = Parameters<typeof b.snapshotOf>[0][number]

const PUBLISH = 'sallyport-system/sallyport'

function publishService(extra: Partial<Service> = {}): Service {
  const s = b.service('sallyport', [{ name: 'http', port: 80 }], { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], ...extra })
  return { ...s, meta: { ...s.meta, namespace: 'sallyport-system', uid: 'publish' } }
}

function gw(addresses: Gateway['addresses'] = [], name = 'gw', port = 8080): Gateway {
  return b.gateway(name, [b.listener('http', port)], { addresses })
}

function run(objects: Obj[], options: Partial<CompileOptions> = { publishService: PUBLISH }) {
  return compile(b.snapshotOf([b.gatewayClass(), ...objects]), { ...b.opts, ...options })
}

function gatewayStatus(status: { objects: ReadonlyMap<string, ObjectStatus> }, name = 'gw'): ObjectStatus {
  return status.objects.get(`Gateway/default/${name}`) as ObjectStatus
}

function cond(s: ObjectStatus, type: string): Condition {
  return s.conditions.find(c => c.type === type) as Condition
}

t.test('a ClusterIP Service: its cluster IPs, both families, on every served Gateway', async t => {
  const { status, problems } = run([publishService({ clusterIPs: ['10.96.0.10', 'fd00::a'] }), gw(), gw([], 'other', 8081)])
  for (const name of ['gw', 'other']) t.same(gatewayStatus(status, name).addresses, [{ type: 'IPAddress', value: '10.96.0.10' }, { type: 'IPAddress', value: 'fd00::a' }], name)
  t.equal(cond(gatewayStatus(status), 'Programmed').status, 'True')
  t.same(problems, [])
})

t.test('a LoadBalancer Service: its ingress ip and hostname first, then the cluster IP', async t => {
  const { status } = run([publishService({ type: 'LoadBalancer', loadBalancerIngress: [{ ip: '203.0.113.7', hostname: null }, { ip: null, hostname: 'lb.example.net' }] }), gw()])
  t.same(gatewayStatus(status).addresses, [
    { type: 'IPAddress', value: '203.0.113.7' }, { type: 'Hostname', value: 'lb.example.net' }, { type: 'IPAddress', value: '10.96.0.10' },
  ])
})

t.test('spec.externalIPs are published after the load balancer\'s and before the cluster IPs', async t => {
  const { status } = run([publishService({ externalIPs: ['198.51.100.20'], loadBalancerIngress: [{ ip: '203.0.113.7', hostname: null }] }), gw()])
  t.same(gatewayStatus(status).addresses, [
    { type: 'IPAddress', value: '203.0.113.7' }, { type: 'IPAddress', value: '198.51.100.20' }, { type: 'IPAddress', value: '10.96.0.10' },
  ])
})

t.test('a headless Service has no address: none published, and a warning', async t => {
  const { status, problems } = run([publishService({ clusterIP: 'None', clusterIPs: [] }), gw()])
  t.same(gatewayStatus(status).addresses, [], 'sallyport owns the field: it holds nothing')
  t.equal(cond(gatewayStatus(status), 'Programmed').status, 'True', 'the Gateway still serves')
  t.equal(problems.length, 1)
  t.equal(problems[0]?.severity, 'warning')
  t.match(formatProblem(problems[0] as never), /^--publish-service:0: Service sallyport-system\/sallyport: the Service has no address/)
})

t.test('a missing Service: no addresses, one warning for the whole compile, nothing fails', async t => {
  const { status, problems, table } = run([gw(), gw([], 'other', 8081)])
  t.same(gatewayStatus(status).addresses, [])
  t.same(gatewayStatus(status, 'other').addresses, [])
  t.equal(problems.length, 1, 'one problem, not one per Gateway')
  t.match(problems[0], { severity: 'warning', kind: 'Service', namespace: 'sallyport-system', name: 'sallyport', message: /no such Service/ })
  t.ok(table.ports.has(8080), 'the Gateway serves')
  // --namespace leaving the Service's namespace out is the likely cause: said so.
  const snapshot: Snapshot = { ...b.snapshotOf([b.gatewayClass(), gw()]), watchedNamespaces: new Set(['default']) }
  t.match(compile(snapshot, { ...b.opts, publishService: PUBLISH }).problems[0]?.message, /namespace sallyport-system is not watched \(--namespace\)/)
  // So is a --label-selector, which the API server applies to Services too: the Service may exist, unread.
  const selected: Snapshot = { ...b.snapshotOf([b.gatewayClass(), gw()]), labelSelector: 'egress=sallyport' }
  const message = compile(selected, { ...b.opts, publishService: PUBLISH }).problems[0]?.message
  t.match(message, /matches --label-selector egress=sallyport/)
  t.notMatch(message, /no such Service/)
  t.match(compile({ ...selected, watchedNamespaces: new Set(['default']) }, { ...b.opts, publishService: PUBLISH }).problems[0]?.message, /not watched \(--namespace\)/, 'a namespace not watched says so first')
})

t.test('without --publish-service: no addresses in status (sallyport publishes none; `routes` prints none), no problem', async t => {
  const { status, problems } = run([publishService(), gw()], {})
  t.notOk('addresses' in gatewayStatus(status), 'no addresses key at all')
  t.same(problems, [])
})

t.test('a Gateway none of whose listeners serves is bound to no address', async t => {
  const { status } = run([publishService(), b.gateway('gw', [b.listener('bad', 8080, 'UDP')])])
  t.same(gatewayStatus(status).addresses, [])
})

t.test('spec.addresses naming published addresses: those, and only those, in status; Programmed', async t => {
  const lb = publishService({ type: 'LoadBalancer', clusterIPs: ['10.96.0.10', 'fd00::a'], loadBalancerIngress: [{ ip: '203.0.113.7', hostname: 'LB.example.net' }] })
  let { status } = run([lb, gw([{ type: 'IPAddress', value: '10.96.0.10' }])])
  t.same(gatewayStatus(status).addresses, [{ type: 'IPAddress', value: '10.96.0.10' }])
  t.same([cond(gatewayStatus(status), 'Accepted').reason, cond(gatewayStatus(status), 'Programmed').reason], ['Accepted', 'Programmed'])
  ;({ status } = run([lb, gw([{ type: 'IPAddress', value: 'fd00:0:0::a' }, { type: 'Hostname', value: 'lb.example.net.' }])]))
  t.same(gatewayStatus(status).addresses, [{ type: 'IPAddress', value: 'fd00::a' }, { type: 'Hostname', value: 'LB.example.net' }], 'IPs compared as numbers, hostnames without case or trailing dot')
  t.equal(cond(gatewayStatus(status), 'Programmed').status, 'True')
  ;({ status } = run([lb, gw([{ type: 'IPAddress', value: '' }])]))
  t.same(gatewayStatus(status).addresses, [{ type: 'IPAddress', value: '203.0.113.7' }, { type: 'IPAddress', value: '10.96.0.10' }, { type: 'IPAddress', value: 'fd00::a' }], 'a type without a value: every published address of that type')
  t.equal(cond(gatewayStatus(status), 'Programmed').status, 'True')
})

t.test('spec.addresses naming an address the Service does not have: Programmed=False AddressNotUsable; still Accepted and serving', async t => {
  const { status, table } = run([publishService(), gw([{ type: 'IPAddress', value: '10.96.0.10' }, { type: 'IPAddress', value: '192.0.2.1' }])])
  const s = gatewayStatus(status)
  t.match(cond(s, 'Programmed'), { status: 'False', reason: 'AddressNotUsable', message: /192\.0\.2\.1 \(IPAddress\) cannot be used: Service sallyport-system\/sallyport \(--publish-service\) has 10\.96\.0\.10; the listeners are still served/ })
  t.match(cond(s, 'Accepted'), { status: 'True', reason: 'Accepted' })
  t.same(s.addresses, [{ type: 'IPAddress', value: '10.96.0.10' }], 'the usable one is listed')
  t.ok(table.ports.has(8080), 'the listener serves')
  t.equal(s.listeners[0]?.conditions.find(c => c.type === 'Programmed')?.status, 'True', 'its listener is Programmed')
})

t.test('spec.addresses of a type with no value, that the Service has none of: AddressNotAssigned', async t => {
  const { status } = run([publishService(), gw([{ type: 'Hostname', value: '' }])])
  t.match(cond(gatewayStatus(status), 'Programmed'), { status: 'False', reason: 'AddressNotAssigned', message: /any Hostname cannot be assigned/ })
  t.same(gatewayStatus(status).addresses, [])
})

t.test('spec.addresses of an unsupported type: Accepted=False UnsupportedAddress (conformance GatewayStaticAddresses), listeners serve', async t => {
  const { status, table } = run([publishService(), gw([{ type: 'example.com/pool', value: 'blue' }, { type: 'IPAddress', value: '10.96.0.10' }])])
  const s = gatewayStatus(status)
  t.match(cond(s, 'Accepted'), { status: 'False', reason: 'UnsupportedAddress', message: /blue \(example\.com\/pool\): sallyport supports address types IPAddress and Hostname/ })
  t.match(cond(s, 'Programmed'), { status: 'False', reason: 'AddressNotUsable' })
  t.same(s.addresses, [{ type: 'IPAddress', value: '10.96.0.10' }])
  t.ok(table.ports.has(8080))
})

t.test('spec.addresses without --publish-service: AddressNotUsable saying to set it; no addresses written', async t => {
  const { status } = run([publishService(), gw([{ type: 'IPAddress', value: '10.96.0.10' }])], {})
  const s = gatewayStatus(status)
  t.match(cond(s, 'Programmed'), { status: 'False', reason: 'AddressNotUsable', message: /cannot be assigned: sallyport publishes no addresses \(start it with --publish-service NAMESPACE\/NAME/ })
  t.notOk('addresses' in s)
})

t.test('a listener problem keeps its reason; the address problem is added to its message', async t => {
  const { status } = run([publishService(), b.gateway('gw', [b.listener('bad', 8080, 'UDP')], { addresses: [{ type: 'IPAddress', value: '192.0.2.1' }] })])
  t.match(cond(gatewayStatus(status), 'Programmed'), { status: 'False', reason: 'Invalid', message: /no listener is programmed; requested address 192\.0\.2\.1/ })
  t.notMatch(cond(gatewayStatus(status), 'Programmed').message, /still served/, 'nothing serves: not said to')
})

t.test('references: a change to the published Service recompiles; another Service does not', async t => {
  const base: Obj[] = [b.gatewayClass(), gw(), publishService()]
  const refs = new References()
  const before = b.snapshotOf([...base, b.service('unrelated')])
  const result = compile(refs.track(before), { ...b.opts, publishService: PUBLISH })
  void result.status
  const churned = b.snapshotOf([...base, b.service('unrelated', [{ name: 'http', port: 81 }])])
  t.ok(refs.onlyUnreferenced(before, { ...before, services: churned.services }), 'unrelated Service churn: the table stays')
  const lb = b.snapshotOf([b.gatewayClass(), gw(), publishService({ type: 'LoadBalancer', loadBalancerIngress: [{ ip: '203.0.113.7', hostname: null }] }), b.service('unrelated')])
  t.notOk(refs.onlyUnreferenced(before, { ...before, services: lb.services }), 'the published Service got a load balancer: recompiled')
  const gone = b.snapshotOf([b.gatewayClass(), gw(), b.service('unrelated')])
  t.notOk(refs.onlyUnreferenced(before, { ...before, services: gone.services }), 'the published Service went away: recompiled')
  // A missing Service is referenced too: creating it recompiles.
  const refs2 = new References()
  void compile(refs2.track(gone), { ...b.opts, publishService: PUBLISH }).status
  t.notOk(refs2.onlyUnreferenced(gone, { ...gone, services: before.services }), 'the published Service created: recompiled')
})
