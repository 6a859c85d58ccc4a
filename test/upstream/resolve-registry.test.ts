// The registry and DNS answers (issue 5): every address of a name is an
// endpoint (balanced, each with its own pool), a dead address falls back to
// the next, a changed answer rotates pools while a request in flight on the
// old address finishes, and a refused answer fails with 502. Names come from
// a resolve function (the dnsmasq-backed tests are in resolve.test.ts and
// test/dns/); addresses are 127.0.0.1 and 127.0.0.2 only.
import t, { type Test } from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { addressesOnOnePort } from '../helpers/blackhole.ts'
import { cluster, expectError, expectResponse, forward, readBody, request, table } from './fixtures.ts'

function server(name: string, hold: { release: (() => void) | null } = { release: null }): http.Server {
  return http.createServer((req, res) => {
    if (req.url === '/hold') { hold.release = () => res.end(`${name} held`); return }
    res.end(name)
  })
}

async function listenOn(s: http.Server, host: string, port: number): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    s.once('error', reject)
    s.listen(port, host, () => { s.removeListener('error', reject); resolve() })
  })
  return (s.address() as AddressInfo).port
}

async function close(s: http.Server): Promise<void> {
  s.closeAllConnections()
  await new Promise<void>((resolve) => s.close(() => resolve()))
}

/** Two servers on the same port of 127.0.0.1 and 127.0.0.2 (a few tries for a port free on both). */
async function pair(t: Test, hold?: { release: (() => void) | null }): Promise<number> {
  for (let i = 0; i < 20; i++) {
    const a = server('a', hold)
    const port = await listenOn(a, '127.0.0.1', 0)
    const b = server('b')
    try {
      await listenOn(b, '127.0.0.2', port)
      t.teardown(async () => { await close(a); await close(b) })
      return port
    } catch {
      await close(a)
    }
  }
  throw new Error('no port free on both loopback addresses')
}

const allowLoopback = { allowCidrs: ['127.0.0.0/8'] }

t.test('all addresses of a name are endpoints, balanced; a dead one falls back to the other', async (t) => {
  const port = await pair(t)
  let answer = ['127.0.0.1', '127.0.0.2']
  const up = createUpstreams({ resolve: async () => answer, guard: allowLoopback, dns: { minTtlMs: 200, maxTtlMs: 200, staleMs: 0 } })
  t.teardown(() => up.close())
  const c = cluster({ hostname: 'api.test', endpoints: [{ host: 'api.test', port, kind: 'hostname', weight: 1, zone: null }] })
  up.retain(table([c]))
  const seen = new Set<string>()
  for (let i = 0; i < 6; i++) {
    const res = expectResponse(await forward(up, request(c, { authority: 'api.test' })))
    seen.add(await readBody(res.body))
  }
  t.same([...seen].sort(), ['a', 'b'], 'requests spread over both addresses')
  const keys = up.stats().map((s) => s.key.split('|')[0]).sort()
  t.same(keys, [`127.0.0.1:${port}`, `127.0.0.2:${port}`], 'one pool per address')

  // A name whose first address is dead: the connect failure moves to the next address.
  answer = ['127.0.0.3', '127.0.0.2']
  await new Promise((r) => setTimeout(r, 300))
  for (let i = 0; i < 4; i++) {
    const res = expectResponse(await forward(up, request(c, { authority: 'api.test' })))
    t.equal(await readBody(res.body), 'b')
  }
})

t.test('a changed answer rotates pools; the request in flight on the old address finishes', async (t) => {
  const hold = { release: null as (() => void) | null }
  const port = await pair(t, hold)
  let answer = ['127.0.0.1']
  const up = createUpstreams({ resolve: async () => answer, guard: allowLoopback, dns: { minTtlMs: 200, maxTtlMs: 200, staleMs: 0 } })
  t.teardown(() => up.close())
  const c = cluster({ hostname: 'api.test', endpoints: [{ host: 'api.test', port, kind: 'hostname', weight: 1, zone: null }] })
  up.retain(table([c]))
  const held = forward(up, request(c, { path: '/hold', authority: 'api.test' }))
  for (let i = 0; i < 100 && hold.release === null; i++) await new Promise((r) => setTimeout(r, 20))
  t.ok(hold.release !== null, 'the request is at 127.0.0.1')
  answer = ['127.0.0.2']
  await new Promise((r) => setTimeout(r, 300))
  const next = expectResponse(await forward(up, request(c, { authority: 'api.test' })))
  t.equal(await readBody(next.body), 'b', 'new requests go to the new address')
  t.same(up.stats().map((s) => s.key.split('|')[0]), [`127.0.0.2:${port}`], 'the old pool is retired (draining)')
  hold.release?.()
  const old = expectResponse(await held)
  t.equal(await readBody(old.body), 'a held', 'the in-flight request was not dropped')
})

t.test('without an allowance loopback answers are refused: 502 destination refused', async (t) => {
  const up = createUpstreams({ resolve: async () => ['127.0.0.1', '169.254.169.254'] })
  t.teardown(() => up.close())
  const c = cluster({ hostname: 'api.test', endpoints: [{ host: 'api.test', port: 80, kind: 'hostname', weight: 1, zone: null }] })
  const err = expectError(await forward(up, request(c, { authority: 'api.test' })))
  t.equal(err.code, 'SP_ERR_DESTINATION_REFUSED')
  t.equal(err.status, 502)
  t.match(err.message, /127\.0\.0\.1 \(loopback\), 169\.254\.169\.254 \(link-local\)/)
  const again = expectError(await forward(up, request(c, { authority: 'api.test' })))
  t.equal(again.code, 'SP_ERR_DESTINATION_REFUSED', 'answered from the cached verdict')
})

/**
 * A name (answering 127.0.0.3, where nothing listens) behind a resolver that can
 * move it and be slowed, cached 200 ms and served up to 60 s stale; and a cluster
 * of it. `expire()` lets its answer go stale: used once, it is refreshed ahead,
 * then left to expire unused.
 */
async function movingName(t: Test, port: number, protocol: 'HTTP' | 'TCP' = 'HTTP') {
  const name = { answer: ['127.0.0.3'], delayMs: 0, queries: 0 }
  const up = createUpstreams({
    resolve: async () => { name.queries++; const a = name.answer; if (name.delayMs > 0) await new Promise((r) => setTimeout(r, name.delayMs)); return a },
    guard: allowLoopback, dns: { minTtlMs: 200, maxTtlMs: 200, staleMs: 60_000 },
  })
  t.teardown(() => up.close())
  const c = cluster({ protocol, hostname: 'api.test', endpoints: [{ host: 'api.test', port, kind: 'hostname', weight: 1, zone: null }] })
  up.retain(table([c]))
  const expire = (): Promise<void> => new Promise((r) => setTimeout(r, 700))
  return { name, up, c, expire }
}

t.test('every address of an expired answer refusing: the request waits for the refresh and goes to the new address', async (t) => {
  const { name, up, c, expire } = await movingName(t, await pair(t))
  // A fresh answer whose only address refuses: that is the answer, the request fails.
  const refused = expectError(await forward(up, request(c, { authority: 'api.test' })))
  t.equal(refused.code, 'SP_ERR_UPSTREAM_CONNECT', 'a fresh answer is not asked again')

  // The answer expires; the name moves, and its refresh takes 100 ms: the next request is
  // sent to the stale address (served while the refresh runs) and refused.
  await expire()
  name.answer = ['127.0.0.2']
  name.delayMs = 100
  const before = name.queries
  const res = expectResponse(await forward(up, request(c, { authority: 'api.test' })))
  t.equal(await readBody(res.body), 'b', 'answered by the new address once the refresh came in')
  t.equal(name.queries - before, 1, 'by the one refresh the stale answer started (no query of its own)')
})

t.test('an expired answer whose refresh brings the same addresses: the connect failure is the answer', async (t) => {
  const { name, up, c, expire } = await movingName(t, await pair(t))
  expectError(await forward(up, request(c, { authority: 'api.test' })))
  await expire()
  name.delayMs = 50
  const before = name.queries
  const err = expectError(await forward(up, request(c, { authority: 'api.test' })))
  t.equal(err.code, 'SP_ERR_UPSTREAM_CONNECT', 'the same address refused again: 503')
  t.equal(name.queries - before, 1, 'after the one refresh')
})

t.test('an expired answer whose refresh hangs: the request is not held for it, the connect failure is the answer', async (t) => {
  const { name, up, c, expire } = await movingName(t, await pair(t))
  expectError(await forward(up, request(c, { authority: 'api.test' })))
  await expire()
  // The resolver takes 3 s to give the new address: longer than a request waits for a refresh.
  name.answer = ['127.0.0.2']
  name.delayMs = 3000
  const err = expectError(await forward(up, request(c, { authority: 'api.test' })))
  t.equal(err.code, 'SP_ERR_UPSTREAM_CONNECT', 'answered with the refusal, before the slow refresh came in')
})

t.test('a connect that hangs while the answer changes to one new address: the timeout moves the request there', async (t) => {
  const port = await addressesOnOnePort(t, ['127.0.0.5'], ['127.0.0.4'])
  let answer = ['127.0.0.4']
  const up = createUpstreams({ resolve: async () => answer, guard: allowLoopback, connectTimeoutMs: 1500, dns: { minTtlMs: 200, maxTtlMs: 200, staleMs: 0 } })
  t.teardown(() => up.close())
  const c = cluster({ hostname: 'api.test', endpoints: [{ host: 'api.test', port, kind: 'hostname', weight: 1, zone: null }] })
  up.retain(table([c]))
  const hanging = forward(up, request(c, { authority: 'api.test' }))
  await new Promise((r) => setTimeout(r, 100))
  answer = ['127.0.0.5']
  await new Promise((r) => setTimeout(r, 300))
  // A request past the old answer's TTL takes the new one (one address) into the cluster.
  expectResponse(await forward(up, request(c, { authority: 'api.test' })))
  const res = expectResponse(await hanging)
  t.equal(res.status, 200, 'the request whose connect timed out is answered by the new address, though it had tried one already')
})

t.test('L4: every address of an expired answer refusing, the dial waits for the refresh and connects to the new address', async (t) => {
  const port = await pair(t)
  const { name, up, c, expire } = await movingName(t, port, 'TCP')
  const dial = (): Promise<{ err: string | null; endpoint: string | null }> => new Promise((resolve) => {
    up.dialL4({ cluster: c, originateTls: false, connectMs: null }, (err, conn) => {
      conn?.socket.destroy()
      resolve({ err: err?.code ?? null, endpoint: conn?.endpoint ?? null })
    })
  })
  t.same(await dial(), { err: 'SP_ERR_UPSTREAM_CONNECT', endpoint: null }, 'a current answer refusing: the dial fails')
  await expire()
  name.answer = ['127.0.0.2']
  name.delayMs = 100
  t.same(await dial(), { err: null, endpoint: `127.0.0.2:${port}` }, 'an expired one: the refreshed address is dialled')
})
