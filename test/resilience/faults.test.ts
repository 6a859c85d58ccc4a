// Fault injection (issue 6) with real upstreams on 127.0.0.1 that reset, hang,
// answer 5xx or 503 with Retry-After, or refuse connections: retry triggers,
// per-try timeout, Retry-After, the retry budget and maxParallelRetries,
// maxPendingRequests / maxConnections (HTTP/1.1 and h2c), the replay bound of
// request bodies, and client aborts. Upstream-side counts are the evidence.
import t, { type Test } from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import type { Cluster, RetryPolicy, RetrySpec, RouteRule } from '../../lib/compile/table.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { NO_LIMITS, PASSIVE, ask, closedPort, ep, gateway, metric, sleep, until, upstream, type Gateway } from './fixtures.ts'

configureLogger({ level: 'silent' })

function policy(over: Partial<RetryPolicy>): RetrySpec {
  const p: RetryPolicy = { numRetries: 2, perTryTimeout: null, backoffBase: 1, backoffMax: 5, triggers: [], httpStatusCodes: [], ...over }
  return { attempts: p.numRetries, codes: [], backoffMs: null, policy: p }
}

async function serve(t: Test, clusters: Cluster[], rule: Partial<RouteRule> = {}, options: Parameters<typeof gateway>[2] = {}): Promise<Gateway> {
  const port = await freePort()
  return gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ ...rule, backends: [{ cluster: clusters[0].id }] }] }] } }, clusters), options)
}

t.test('reset trigger: a connection reset before the answer is retried; without the trigger it is not', async (t) => {
  let n = 0
  const u = await upstream(t, 'u', (req, res) => { if (++n === 1) req.socket.destroy(); else res.end('ok') })
  const gw = await serve(t, [cluster('a', u.port)], { retry: policy({ triggers: ['reset'] }) })
  const before = await metric('sallyport_upstream_retries_total', { backend: 'a', reason: 'reset' })
  const r = await ask(gw.port)
  t.equal(r.status, 200)
  t.equal(u.hits, 2, 'reset, then one retry')
  t.equal(await metric('sallyport_upstream_retries_total', { backend: 'a', reason: 'reset' }), before + 1)

  const v = await upstream(t, 'v', (req) => { req.socket.destroy() })
  const gw2 = await serve(t, [cluster('b', v.port)], { retry: policy({ triggers: ['connect-failure'] }) })
  t.equal((await ask(gw2.port)).status, 502, 'reset not in retryOn: 502')
  t.equal(v.hits, 1, 'sent once')
})

t.test('connect-failure trigger: refused connections are retried once per retry, in one place', async (t) => {
  const dead1 = await closedPort()
  const dead2 = await closedPort()
  // Two refusing endpoints and numRetries 2: three connection attempts (not 2 endpoints × 3 tries).
  const c = cluster('refusing', dead1, { endpoints: [ep(dead1), ep(dead2)] })
  const gw = await serve(t, [c], { retry: policy({ triggers: ['connect-failure'] }) })
  const errors = await metric('sallyport_upstream_connect_errors_total', { backend: 'refusing' })
  const retries = await metric('sallyport_upstream_retries_total', { backend: 'refusing', reason: 'connect' })
  t.equal((await ask(gw.port)).status, 503)
  t.equal(await metric('sallyport_upstream_connect_errors_total', { backend: 'refusing' }) - errors, 3, 'first try + 2 retries = 3 connects')
  t.equal(await metric('sallyport_upstream_retries_total', { backend: 'refusing', reason: 'connect' }) - retries, 2)

  // Without a retry policy the registry tries each endpoint once (the connect fallback).
  const live = await upstream(t, 'live')
  const gw2 = await serve(t, [cluster('fallback', dead1, { endpoints: [ep(dead1), ep(live.port)] })])
  for (let i = 0; i < 4; i++) t.equal((await ask(gw2.port)).body, 'live', 'a refused endpoint falls back to the next')

  // With the policy, a refused endpoint's retry goes to the next endpoint (round robin) and succeeds.
  const gw3 = await serve(t, [cluster('retried', dead1, { endpoints: [ep(dead1), ep(live.port)] })], { retry: policy({ triggers: ['connect-failure'] }) })
  for (let i = 0; i < 4; i++) t.equal((await ask(gw3.port)).body, 'live')
})

t.test('per-try timeout: each try of a hanging upstream times out and is retried, then 504', async (t) => {
  const u = await upstream(t, 'hang', () => { /* never answers */ })
  const gw = await serve(t, [cluster('h', u.port)], { retry: policy({ numRetries: 2, perTryTimeout: 150, triggers: ['5xx'] }) })
  const before = await metric('sallyport_upstream_retries_total', { backend: 'h', reason: 'timeout' })
  const r = await ask(gw.port)
  t.equal(r.status, 504)
  t.equal(u.hits, 3, 'three tries reached the upstream')
  t.equal(await metric('sallyport_upstream_retries_total', { backend: 'h', reason: 'timeout' }) - before, 2)
})

t.test('per-try timeout: a try cut by it counts as the endpoint\'s failure, so a hanging endpoint is ejected', async (t) => {
  // Accepts and never answers: every try there runs into the per-try timeout.
  const hang = await upstream(t, 'hang', () => { /* never answers */ })
  const ok = await upstream(t, 'ok')
  const passive = { ...PASSIVE, consecutive5xxErrors: 2, baseEjectionTimeMs: 60_000, maxEjectionPercent: 50 }
  const c = cluster('pt', hang.port, { endpoints: [ep(hang.port), ep(ok.port)], healthCheck: { active: null, passive } })
  const gw = await serve(t, [c], { retry: policy({ numRetries: 2, perTryTimeout: 150, triggers: ['5xx', 'connect-failure', 'reset'] }) })
  const before = await metric('sallyport_upstream_ejections_total', { backend: 'pt' })
  for (let i = 0; i < 4; i++) t.equal((await ask(gw.port)).body, 'ok', 'each request answered by the live endpoint in the end')
  const dump = gw.upstreams.resilience?.health().find((h) => h.backend === 'pt') as { endpoints: Array<{ endpoint: string; ejected: boolean }> }
  t.equal(dump.endpoints.find((e) => e.endpoint === `127.0.0.1:${hang.port}`)?.ejected, true, 'two per-try timeouts in a row: ejected')
  t.equal(await metric('sallyport_upstream_ejections_total', { backend: 'pt' }), before + 1, 'one ejection counted')
  const hits = hang.hits
  const started = performance.now()
  for (let i = 0; i < 6; i++) t.equal((await ask(gw.port)).body, 'ok')
  t.equal(hang.hits, hits, 'no try goes to the ejected endpoint')
  t.ok(performance.now() - started < 6 * 150, 'and no request waits for the per-try timeout any more')
})

t.test('Retry-After: the retry waits for it; past the cap the answer goes back at once', async (t) => {
  const at: number[] = []
  const u = await upstream(t, 'ra', (req, res) => {
    at.push(performance.now())
    if (req.url === '/long') return void res.writeHead(503, { 'retry-after': '30' }).end('later')
    res.writeHead(at.length === 1 ? 503 : 200, at.length === 1 ? { 'retry-after': '1' } : {}).end('x')
  })
  const gw = await serve(t, [cluster('ra', u.port)], { retry: policy({ triggers: ['retriable-status-codes'], httpStatusCodes: [503] }) })
  t.equal((await ask(gw.port)).status, 200)
  t.equal(at.length, 2)
  t.ok(at[1] - at[0] >= 900, `the retry waited for Retry-After: 1 (${Math.round(at[1] - at[0])} ms)`)
  const long = await ask(gw.port, { path: '/long' })
  t.equal(long.status, 503, 'Retry-After 30 s is over the 10 s cap: answered')
  t.equal(long.headers['retry-after'], '30', 'with the upstream\'s Retry-After')
  t.equal(at.length, 3, 'not retried')
})

t.test('retry budget: many concurrent failing requests get far fewer retries than asked for', async (t) => {
  const u = await upstream(t, 'fail', (_req, res) => { setTimeout(() => res.writeHead(503).end('no'), 100) })
  const gw = await serve(t, [cluster('bud', u.port)], { retry: policy({ numRetries: 2, triggers: ['retriable-status-codes'], httpStatusCodes: [503] }) }, { connectionsPerPool: 64 })
  const exhausted = await metric('sallyport_upstream_retry_budget_exhausted_total')
  const N = 30
  const replies = await Promise.all(Array.from({ length: N }, () => ask(gw.port)))
  t.ok(replies.every((r) => r.status === 503))
  t.ok(u.hits < N * 3, `upstream saw ${u.hits} requests, not ${N * 3}`)
  t.ok(u.hits - N <= N / 2, `at most half a retry per request (${u.hits - N} retries for ${N})`)
  t.ok(await metric('sallyport_upstream_retry_budget_exhausted_total') > exhausted, 'sallyport_upstream_retry_budget_exhausted_total counted')
})

t.test('maxParallelRetries: retries in flight are capped', async (t) => {
  const u = await upstream(t, 'fail', (_req, res) => { setTimeout(() => res.writeHead(503).end('no'), 100) })
  const c = cluster('mpr', u.port, { circuitBreaker: { ...NO_LIMITS, maxParallelRetries: 1 } })
  const gw = await serve(t, [c], { retry: policy({ numRetries: 2, triggers: ['retriable-status-codes'], httpStatusCodes: [503] }) }, { connectionsPerPool: 64 })
  const before = await metric('sallyport_upstream_overload_total', { backend: 'mpr', limit: 'max_parallel_retries' })
  const N = 10
  await Promise.all(Array.from({ length: N }, () => ask(gw.port)))
  t.ok(u.hits - N <= 4, `${u.hits - N} retries for ${N} concurrent requests with one retry at a time`)
  t.ok(await metric('sallyport_upstream_overload_total', { backend: 'mpr', limit: 'max_parallel_retries' }) > before, 'refusals counted')
})

/** Requests waiting for a connection of the cluster's pools, as the circuit breaker counts them. */
function waiting(gw: Gateway, backend: string): number {
  return gw.upstreams.stats().filter((s) => s.cluster === backend).reduce((n, s) => n + s.pending, 0)
}

t.test('maxConnections and maxPendingRequests over HTTP/1.1: one connection, one waiting, the rest 503', async (t) => {
  const held: http.ServerResponse[] = []
  let connections = 0
  const u = await upstream(t, 'held', (_req, res) => { held.push(res) })
  u.server.on('connection', () => { connections++ })
  const c = cluster('mc', u.port, { circuitBreaker: { ...NO_LIMITS, maxConnections: 1, maxPendingRequests: 1 } })
  const gw = await serve(t, [c])
  const first = ask(gw.port)
  t.ok(await until(() => held.length === 1))
  const second = ask(gw.port)
  t.ok(await until(() => waiting(gw, 'mc') === 1), 'the second request waits for the connection')
  const before = await metric('sallyport_upstream_overload_total', { backend: 'mc', limit: 'max_pending_requests' })
  const third = await ask(gw.port)
  t.equal(third.status, 503)
  t.equal(third.headers['x-sallyport-overloaded'], 'true')
  t.equal(await metric('sallyport_upstream_overload_total', { backend: 'mc', limit: 'max_pending_requests' }), before + 1)
  t.equal(connections, 1, 'maxConnections 1: the second request waits for the one connection')
  held.shift()?.end('one')
  t.ok(await until(() => held.length === 1), 'the waiting request goes out on the same connection')
  held.shift()?.end('two')
  t.same([(await first).body, (await second).body], ['one', 'two'])
  t.equal(connections, 1)
})

t.test('maxPendingRequests over HTTP/1.1: a waiting request the client gave up on no longer counts', async (t) => {
  const held: http.ServerResponse[] = []
  const u = await upstream(t, 'held', (_req, res) => { held.push(res) })
  const c = cluster('mp', u.port, { circuitBreaker: { ...NO_LIMITS, maxConnections: 1, maxPendingRequests: 1 } })
  const gw = await serve(t, [c])
  const first = ask(gw.port)
  t.ok(await until(() => held.length === 1))
  // The second waits for the one connection; its client gives up.
  const gaveUp = await ask(gw.port, { timeoutMs: 200 }).then(() => 'answered', (e: Error) => e.message)
  t.equal(gaveUp, 'client timeout')
  t.ok(await until(() => waiting(gw, 'mp') === 0), 'the request its client gave up on no longer waits')
  // The slot it held is free again: a third request waits (is not refused) and is served.
  const third = ask(gw.port)
  t.ok(await until(() => waiting(gw, 'mp') === 1), 'the third request waits')
  held.shift()?.end('one')
  t.ok(await until(() => held.length === 1), 'the third request goes out on the freed connection')
  held.shift()?.end('three')
  t.same([(await first).body, (await third).status, ], ['one', 200])
})

t.test('maxConnections caps HTTP/2 sessions too (h2c upstream allowing one stream per session)', async (t) => {
  const streams: http2.ServerHttp2Stream[] = []
  let sessions = 0
  const server = http2.createServer({ settings: { maxConcurrentStreams: 1 } })
  server.on('session', () => { sessions++ })
  server.on('stream', (stream) => { streams.push(stream) })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => { for (const s of streams) s.destroy(); server.close(() => r()) }))
  const port = (server.address() as AddressInfo).port
  const c = cluster('h2cap', port, { protocol: 'H2C', circuitBreaker: { ...NO_LIMITS, maxConnections: 1 } })
  const gw = await serve(t, [c])
  const a = ask(gw.port)
  const b = ask(gw.port)
  t.ok(await until(() => streams.length === 1))
  await sleep(150)
  t.equal(sessions, 1, 'the second request waits instead of opening a second session')
  t.equal(streams.length, 1)
  streams[0].respond({ ':status': 200 }); streams[0].end('one')
  t.ok(await until(() => streams.length === 2), 'then takes the freed stream')
  streams[1].respond({ ':status': 200 }); streams[1].end('two')
  t.same([(await a).body, (await b).body], ['one', 'two'])
  t.equal(sessions, 1)
})

t.test('request bodies: a small body is replayed intact, one over 64 KiB is not retried', async (t) => {
  let n = 0
  const u = await upstream(t, 'u', (_req, res) => { res.writeHead(++n % 2 === 1 ? 503 : 200).end('done') })
  const gw = await serve(t, [cluster('rb', u.port)], { retry: policy({ triggers: ['retriable-status-codes'], httpStatusCodes: [503] }) })
  const small = 'x'.repeat(1000) + 'END'
  const r = await ask(gw.port, { body: small })
  t.equal(r.status, 200)
  t.equal(u.hits, 2)
  t.same(u.bodies, [small, small], 'both attempts got the identical body')

  const big = Buffer.alloc(100 * 1024, 'y')
  const r2 = await ask(gw.port, { body: big })
  t.equal(r2.status, 503, 'over the replay bound: the 503 is answered')
  t.equal(u.hits, 3, 'the upstream saw one attempt')
  t.equal(u.bodies[2].length, big.length, 'which got the whole body')
})

t.test('client abort: never retried, never counted against the backend', async (t) => {
  const u = await upstream(t, 'hang', () => { /* holds */ })
  const c = cluster('ab', u.port, { healthCheck: { active: null, passive: { ...PASSIVE, consecutive5xxErrors: 1, consecutiveGatewayErrors: 1 } } })
  const gw = await serve(t, [c], { retry: policy({ triggers: ['reset', 'connect-failure', '5xx'] }) })
  const retries = await metric('sallyport_upstream_retries_total', { backend: 'ab' })
  for (let i = 1; i <= 3; i++) {
    const req = http.request({ host: '127.0.0.1', port: gw.port, path: '/', agent: false, headers: { host: 'x' } })
    req.on('error', () => {})
    req.end()
    t.ok(await until(() => u.hits === i), `request ${i} reached the upstream`)
    req.destroy()
    await sleep(100)
  }
  t.equal(u.hits, 3, 'no retries after the client left')
  t.equal(await metric('sallyport_upstream_retries_total', { backend: 'ab' }), retries)
  const health = gw.upstreams.resilience?.health().find((h) => h.backend === 'ab')
  const e = (health?.endpoints as Array<{ ejected: boolean; ejections: number }>)[0]
  t.same({ ejected: e.ejected, ejections: e.ejections }, { ejected: false, ejections: 0 }, 'no ejection')
  t.equal(health?.activeRequests, 0, 'nothing left in flight')
})

t.test('gateway-error trigger: 502/503/504 are retried, a 500 is not', async (t) => {
  let n = 0
  const u = await upstream(t, 'gw', (req, res) => {
    if (req.url === '/500') return void res.writeHead(500).end('no')
    res.writeHead(++n === 1 ? 502 : 200).end('ok')
  })
  const gw = await serve(t, [cluster('ge', u.port)], { retry: policy({ triggers: ['gateway-error'] }) })
  t.equal((await ask(gw.port)).status, 200)
  t.equal(u.hits, 2, '502, then the retry')
  t.equal((await ask(gw.port, { path: '/500' })).status, 500)
  t.equal(u.hits, 3, 'the 500 went out once')
})

t.test('Retry-After as an HTTP-date is honoured too', async (t) => {
  const at: number[] = []
  const u = await upstream(t, 'date', (_req, res) => {
    at.push(performance.now())
    if (at.length === 1) res.writeHead(503, { 'retry-after': new Date(Date.now() + 2000).toUTCString() }).end()
    else res.end('ok')
  })
  const gw = await serve(t, [cluster('rd', u.port)], { retry: policy({ triggers: ['retriable-status-codes'], httpStatusCodes: [503] }) })
  t.equal((await ask(gw.port)).status, 200)
  // An HTTP-date has whole seconds: 2 s ahead is at least 1 s away.
  t.ok(at[1] - at[0] >= 900, `waited ${Math.round(at[1] - at[0])} ms`)
})

t.test('refused-stream trigger: an HTTP/2 stream refused by the upstream is retried', async (t) => {
  let streams = 0
  const server = http2.createServer()
  server.on('stream', (stream) => {
    stream.on('error', () => {}) // the refusal is reported on our own side of the stream too
    if (++streams === 1) stream.close(http2.constants.NGHTTP2_REFUSED_STREAM)
    else { stream.respond({ ':status': 200 }); stream.end('ok') }
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const port = (server.address() as AddressInfo).port
  const before = await metric('sallyport_upstream_retries_total', { backend: 'rs', reason: 'refused_stream' })
  const gw = await serve(t, [cluster('rs', port, { protocol: 'H2C' })], { retry: policy({ triggers: ['refused-stream'] }) })
  const r = await ask(gw.port)
  t.equal(r.status, 200)
  t.equal(streams, 2)
  t.equal(await metric('sallyport_upstream_retries_total', { backend: 'rs', reason: 'refused_stream' }), before + 1)
})

t.test('refused-stream trigger: a stream reset with any other code (INTERNAL_ERROR after reading a POST) is not retried', async (t) => {
  // RFC 9113 §8.7: only REFUSED_STREAM says the request was not processed; INTERNAL_ERROR after the
  // body was read may follow a charge the upstream already made.
  const seen: string[] = []
  const server = http2.createServer()
  server.on('stream', (stream) => {
    stream.on('error', () => {})
    let body = ''
    stream.setEncoding('utf8').on('data', (s: string) => { body += s })
    stream.on('end', () => {
      seen.push(body)
      if (seen.length === 1) stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR)
      else { stream.respond({ ':status': 200 }); stream.end('second') }
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const port = (server.address() as AddressInfo).port
  const before = await metric('sallyport_upstream_retries_total', { backend: 'ie', reason: 'refused_stream' })
  const gw = await serve(t, [cluster('ie', port, { protocol: 'H2C' })], { retry: policy({ triggers: ['refused-stream'] }) })
  const r = await ask(gw.port, { method: 'POST', body: 'amount=100' })
  t.equal(r.status, 502, 'the reset answers 502')
  t.same(seen, ['amount=100'], 'the POST reached the upstream once')
  t.equal(await metric('sallyport_upstream_retries_total', { backend: 'ie', reason: 'refused_stream' }), before, 'no refused_stream retry counted')
})

t.test('5xx and gateway-error cover connect failures and resets, and reset covers a per-try timeout (Envoy\'s retry_on)', async (t) => {
  // Envoy retries any reset (a refused connection, a dropped one, a try cut by
  // its per-try timeout) under `reset`, `5xx` and `gateway-error` alike.
  const dead = await closedPort()
  for (const trigger of ['5xx', 'gateway-error']) {
    const id = `refuse-${trigger}`
    const gw = await serve(t, [cluster(id, dead)], { retry: policy({ numRetries: 2, triggers: [trigger] }) })
    const before = await metric('sallyport_upstream_retries_total', { backend: id, reason: 'connect' })
    t.equal((await ask(gw.port)).status, 503, `${trigger}: still refused in the end`)
    t.equal(await metric('sallyport_upstream_retries_total', { backend: id, reason: 'connect' }) - before, 2, `${trigger}: a refused connection is retried twice`)
  }

  let n = 0
  const u = await upstream(t, 'u', (req, res) => { if (++n === 1) req.socket.destroy(); else res.end('ok') })
  const gw = await serve(t, [cluster('reset-gw', u.port)], { retry: policy({ triggers: ['gateway-error'] }) })
  const r = await ask(gw.port)
  t.equal(r.status, 200, 'gateway-error: a reset is retried')
  t.equal(u.hits, 2)

  let m = 0
  const slow = await upstream(t, 'slow', (_req, res) => { if (++m > 1) res.end('second') })
  const gw2 = await serve(t, [cluster('pt-reset', slow.port)], { retry: policy({ numRetries: 1, perTryTimeout: 150, triggers: ['reset'] }) })
  const before = await metric('sallyport_upstream_retries_total', { backend: 'pt-reset', reason: 'timeout' })
  const r2 = await ask(gw2.port)
  t.equal(r2.status, 200, 'reset: a try cut by perRetry.timeout is retried')
  t.equal(r2.body, 'second')
  t.equal(await metric('sallyport_upstream_retries_total', { backend: 'pt-reset', reason: 'timeout' }) - before, 1)
})

t.test('retriable-4xx retries a 409 (Envoy\'s only retriable 4xx); reset-before-request retries a refused connection', async (t) => {
  let n = 0
  const u = await upstream(t, 'conflict', (req, res) => {
    if (req.url === '/404') return void res.writeHead(404).end('no')
    res.writeHead(++n === 1 ? 409 : 200).end('x')
  })
  const gw = await serve(t, [cluster('r4', u.port)], { retry: policy({ triggers: ['retriable-4xx'] }) })
  t.equal((await ask(gw.port)).status, 200, '409, then the retry')
  t.equal(u.hits, 2)
  t.equal((await ask(gw.port, { path: '/404' })).status, 404, 'a 404 is not retriable')
  t.equal(u.hits, 3)

  const dead = await closedPort()
  const gw2 = await serve(t, [cluster('rbr', dead)], { retry: policy({ numRetries: 2, triggers: ['reset-before-request'] }) })
  const before = await metric('sallyport_upstream_retries_total', { backend: 'rbr', reason: 'connect' })
  t.equal((await ask(gw2.port)).status, 503)
  t.equal(await metric('sallyport_upstream_retries_total', { backend: 'rbr', reason: 'connect' }) - before, 2, 'the refused connection is retried twice')
})
