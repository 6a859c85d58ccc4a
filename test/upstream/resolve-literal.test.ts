// An address in a name's place — an ExternalName Service whose externalName is
// an IP (`203.0.113.10`, or `169.254.169.254` from someone probing for the
// metadata service) — is judged by the destination guard without DNS. The
// verdict is the cluster's, like a DNS answer's: taken once, kept while the
// table is, so requests reuse the endpoint list (one balancer, its breaker and
// outlier state) and a refusal is logged and counted once, not once per request.
import '../helpers/capture-logs.ts'
import t from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { clearLogs, linesWith } from '../helpers/capture-logs.ts'
import { registry } from '../../lib/observe/metrics.ts'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { DestinationResolver } from '../../lib/upstream/resolve.ts'
import { cluster, expectError, expectResponse, forward, readBody, request, table } from './fixtures.ts'

const INFO = 30

async function refusals(backend: string): Promise<number> {
  const m = (await registry.getSingleMetric('sallyport_destination_refusals_total')?.get())?.values ?? []
  return m.filter((v) => v.labels.backend === backend).reduce((n, v) => n + v.value, 0)
}

t.test('an ExternalName IP that is refused: every request gets 502, the refusal is logged and counted once', async (t) => {
  const up = createUpstreams({ resolve: async () => { throw new Error('no DNS for an address') } })
  t.teardown(() => up.close())
  const c = cluster({ kind: 'Service', endpoints: [{ host: '169.254.169.254', port: 80, kind: 'hostname', weight: 1, zone: null }] })
  up.retain(table([c]))
  clearLogs()
  for (let i = 0; i < 5; i++) {
    const err = expectError(await forward(up, request(c, { authority: 'metadata.test' })))
    t.equal(err.code, 'SP_ERR_DESTINATION_REFUSED')
  }
  t.equal(await refusals(c.id), 1, 'counted once for the cluster, not once per request')
  t.equal(linesWith('destination address refused').length, 1, 'logged once')
})

t.test('an allowed ExternalName IP: requests reuse the endpoint list (no rebuild, no log line per request)', async (t) => {
  const s = http.createServer((_req, res) => res.end('ok'))
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { s.closeAllConnections(); s.close() })
  const port = (s.address() as AddressInfo).port
  const up = createUpstreams({ resolve: async () => { throw new Error('no DNS for an address') }, guard: { allowCidrs: ['127.0.0.0/8'] } })
  t.teardown(() => up.close())
  const c = cluster({ kind: 'Service', endpoints: [{ host: '127.0.0.1', port, kind: 'hostname', weight: 1, zone: null }] })
  up.retain(table([c]))
  clearLogs()
  for (let i = 0; i < 5; i++) t.equal(await readBody(expectResponse(await forward(up, request(c, { authority: 'svc.test' }))).body), 'ok')
  t.equal(linesWith('backend addresses changed', INFO).length, 0, 'the endpoint list is built once')
})

t.test('DestinationResolver: an address in a name\'s place is peeked without waiting once judged', async (t) => {
  const r = new DestinationResolver({ resolve: async () => { throw new Error('no DNS for an address') }, guard: { allowCidrs: ['127.0.0.0/8'] } })
  t.teardown(() => r.close())
  const c = cluster({ kind: 'Service', endpoints: [{ host: '127.0.0.1', port: 80, kind: 'hostname', weight: 1, zone: null }] })
  const first = await r.resolve(c, '127.0.0.1')
  t.same(first.addresses, ['127.0.0.1'])
  t.equal(r.peek(c, '127.0.0.1'), first, 'the same Resolution, without waiting')
  t.equal(await r.resolve(c, '127.0.0.1'), first, 'and from resolve')
})
