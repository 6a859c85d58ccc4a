// A DNS answer that changes while connects to its old addresses hang (a dead
// host, SYNs dropped): when those connects time out, the requests move to an
// address of the current answer. The retry to the next address used to take
// the old endpoint's index into the new answer's list and the process died
// with a TypeError ("reading 'inflight'") in the resilience accounting, for a
// shrinking answer (entering) and a growing one (finished). Real parts: the
// registry, dnsmasq, node:http upstreams and blackholed listeners on
// 127.0.0.x sharing one port.
import t, { type Test } from 'tap'
import { configureLogger } from '../../lib/observe/log.ts'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import type { Upstreams } from '../../lib/upstream/types.ts'
import { addressesOnOnePort } from '../helpers/blackhole.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'
import { cluster, expectResponse, forward, readBody, request, table } from '../upstream/fixtures.ts'

configureLogger({ level: 'silent' })

const skip = dnsmasqSkip()
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

interface EndpointDump { endpoint: string; inflight: number }

function healthOf(up: Upstreams, id: string): { activeRequests: number; endpoints: EndpointDump[] } {
  const h = up.resilience?.health().find((e) => e.backend === id)
  return h as unknown as { activeRequests: number; endpoints: EndpointDump[] }
}

async function answerChangesUnderPendingConnects(t: Test, before: readonly string[], after: readonly string[]): Promise<void> {
  const port = await addressesOnOnePort(t, after, before)
  const dns = await startDnsmasq(t, { hosts: before.map((a) => `${a} api.test`), ttl: 1 })
  const up = createUpstreams({
    dns: { servers: [dns.server], minTtlMs: 1000, maxTtlMs: 1000, staleMs: 0, timeoutMs: 500, tries: 1 },
    guard: { allowCidrs: ['127.0.0.0/8'] }, connectTimeoutMs: 2000,
  })
  t.teardown(() => up.close())
  const c = cluster({ hostname: 'api.test', endpoints: [{ host: 'api.test', port, kind: 'hostname', weight: 1, zone: null }] })
  up.retain(table([c]))
  // One request per old address (round robin): every connect hangs.
  const pending = before.map(() => forward(up, request(c, { authority: 'api.test' })))
  await sleep(100)
  // The provider pulls the dead addresses.
  await dns.update(after.map((a) => `${a} api.test`), { name: 'api.test', expect: after[0] })
  await sleep(1200)
  const fresh = expectResponse(await forward(up, request(c, { authority: 'api.test' })))
  t.ok(after.includes(await readBody(fresh.body)), 'new requests go to the new answer')
  // The hanging connects time out: each request moves to an address of the current answer.
  for (const p of pending) {
    const res = expectResponse(await p)
    t.ok(after.includes(await readBody(res.body)), `a request whose connect timed out moved to a current address (${res.endpoint})`)
  }
  const h = healthOf(up, c.id)
  t.equal(h.activeRequests, 0, 'nothing counted active afterwards')
  t.same(h.endpoints.map((e) => e.inflight), after.map(() => 0), 'in-flight counts of the current addresses back to 0')
}

t.test('a shrinking answer while connects to the old addresses hang: requests move on, the process lives', { skip: skip ?? false }, async (t) => {
  await answerChangesUnderPendingConnects(t, ['127.0.0.4', '127.0.0.8', '127.0.0.9'], ['127.0.0.5', '127.0.0.6'])
})

t.test('a growing answer while connects to the old addresses hang: requests move on, the process lives', { skip: skip ?? false }, async (t) => {
  await answerChangesUnderPendingConnects(t, ['127.0.0.4', '127.0.0.8'], ['127.0.0.5', '127.0.0.6', '127.0.0.7', '127.0.0.10'])
})
