// Fault injection with real upstreams (node:http on 127.0.0.1): retries
// counted on the upstream side, priority failover and fail-back, circuit
// breaker overload answers. The real data plane and registry.
import t, { type Test } from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Cluster, RetryPolicy, RouteRule, RouteTable } from '../../lib/compile/table.ts'
import { backoffDelay, retryPlanOf } from '../../lib/router/attempts.ts'
import { createDataPlane } from '../../lib/listeners/data-plane.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'

configureLogger({ level: 'silent' })

interface Upstream { port: number; hits: number; handler: (req: http.IncomingMessage, res: http.ServerResponse) => void }

async function upstream(t: Test, handler: Upstream['handler']): Promise<Upstream> {
  const u: Upstream = { port: 0, hits: 0, handler }
  const server = http.createServer((req, res) => { u.hits++; u.handler(req, res) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  u.port = (server.address() as AddressInfo).port
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return u
}

async function gateway(t: Test, table: RouteTable): Promise<number> {
  const upstreams = createUpstreams({ connectTimeoutMs: 1000 })
  upstreams.retain(table)
  const p = createDataPlane({ bind: '127.0.0.1', upstreams, accessLog: false, gatewayId: 'gw-test' })
  await p.apply(table)
  t.teardown(async () => { await p.drain(100); await upstreams.close() })
  return table.ports.keys().next().value as number
}

function get(port: number, path = '/'): Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, agent: false, headers: { host: 'x' } }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (s: string) => { body += s }).on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }))
    })
    req.setTimeout(5000, () => req.destroy(new Error('timeout')))
    req.on('error', reject)
    req.end()
  })
}

const retry503 = { attempts: 2, codes: [503], backoffMs: 1, policy: null }

t.test('HTTPRoute retry: a 503 is retried up to `attempts` times (upstream counts), then answered', async (t) => {
  const u = await upstream(t, (_req, res) => { res.writeHead(503).end('busy') })
  const port = await freePort()
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry: retry503, backends: [{ cluster: 'a' }] }] }] } }, [cluster('a', u.port)]))
  const r = await get(gw)
  t.equal(r.status, 503)
  t.equal(u.hits, 3, 'first try + 2 retries')
})

t.test('a retry that succeeds answers the client; a 508 loop answer is never retried', async (t) => {
  let n = 0
  const u = await upstream(t, (req, res) => {
    if (req.url === '/loop') return void res.writeHead(508).end()
    res.writeHead(++n === 1 ? 503 : 200).end('ok')
  })
  const port = await freePort()
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry: { ...retry503, codes: [503, 508] }, backends: [{ cluster: 'a' }] }] }] } }, [cluster('a', u.port)]))
  t.equal((await get(gw)).status, 200)
  t.equal(u.hits, 2)
  t.equal((await get(gw, '/loop')).status, 508)
  t.equal(u.hits, 3, 'the 508 went out once')
})

t.test('HTTPRoute retry.backoff is the minimum wait: no retry reaches the upstream before it (Gateway API HTTPRouteRetry)', async (t) => {
  const at: number[] = []
  const u = await upstream(t, (_req, res) => {
    at.push(performance.now())
    res.writeHead(at.length < 3 ? 503 : 200).end('x')
  })
  const port = await freePort()
  const retry = { attempts: 2, codes: [503], backoffMs: 200, policy: null }
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry, backends: [{ cluster: 'a' }] }] }] } }, [cluster('a', u.port)]))
  t.equal((await get(gw)).status, 200)
  t.equal(at.length, 3, '503, 503, then 200')
  // Each gap also holds the 503's way back to the gateway, so it can only be longer than the
  // backoff; 1 ms of slack for timers on libuv's millisecond clock.
  for (let i = 1; i < at.length; i++) t.ok(at[i] - at[i - 1] >= 199, `retry ${i} came ${Math.round(at[i] - at[i - 1])} ms after the try before (backoff 200 ms)`)
})

t.test('backoffDelay: an HTTPRoute backoff is a floor that grows; a BackendTrafficPolicy backOff keeps full jitter', (t) => {
  const rule = (retry: RouteRule['retry']): RouteRule => ({ retry } as RouteRule)
  const route = retryPlanOf(rule({ attempts: 3, codes: [503], backoffMs: 200, policy: null }))
  for (const rnd of [0, 0.5, 0.999]) {
    t.ok(backoffDelay(route, 0, rnd) >= 200, `first retry, rnd ${rnd}: ${backoffDelay(route, 0, rnd)} ms`)
    t.ok(backoffDelay(route, 1, rnd) >= 400, `second retry, rnd ${rnd}: ${backoffDelay(route, 1, rnd)} ms`)
    t.ok(backoffDelay(route, 9, rnd) >= 2000 && backoffDelay(route, 9, rnd) <= 3000, 'capped at 10 × backoff, plus at most half of it')
  }
  // A BackendTrafficPolicy's maxInterval below the route's backoff does not undercut the minimum.
  const policy: RetryPolicy = { numRetries: 2, perTryTimeout: null, backoffBase: 10, backoffMax: 50, triggers: [], httpStatusCodes: [] }
  const both = retryPlanOf(rule({ attempts: 2, codes: [], backoffMs: 200, policy }))
  t.ok(backoffDelay(both, 0, 0) >= 200 && backoffDelay(both, 3, 0) >= 200)
  // BackendTrafficPolicy perRetry.backOff alone: full jitter, random(0, min(max, base × 2ⁿ)) (Envoy's).
  const btp = retryPlanOf(rule({ attempts: 2, codes: [], backoffMs: null, policy }))
  t.equal(backoffDelay(btp, 0, 0), 0)
  t.ok(backoffDelay(btp, 0, 0.999) < 10)
  t.ok(backoffDelay(btp, 5, 0.999) < 50)
  t.end()
})

t.test('failover: primary refuses connections → secondary answers; Retry-After overload spills; fail-back', async (t) => {
  const secondary = await upstream(t, (_req, res) => { res.writeHead(200).end('secondary') })
  let primaryMode: 'overloaded' | 'ok' = 'overloaded'
  const primary = await upstream(t, (_req, res) => {
    if (primaryMode === 'overloaded') res.writeHead(429, { 'retry-after': '1' }).end('slow down')
    else res.writeHead(200).end('primary')
  })
  const deadPort = await freePort()
  const port = await freePort()
  const table = buildTable({ [port]: { routes: [
    { name: 'dead', hostnames: ['dead'], rules: [{ backends: [{ cluster: 'dead', priority: 0 }, { cluster: 'b', priority: 1 }] }] },
    { name: 'r', rules: [{ backends: [{ cluster: 'p', priority: 0 }, { cluster: 'b', priority: 1 }] }] },
  ] } }, [cluster('dead', deadPort), cluster('p', primary.port), cluster('b', secondary.port)])
  const gw = await gateway(t, table)
  const dead = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    http.request({ host: '127.0.0.1', port: gw, path: '/', agent: false, headers: { host: 'dead' } }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (s: string) => { body += s }).on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    }).on('error', reject).end()
  })
  t.same(dead, { status: 200, body: 'secondary' }, 'connection refused on priority 0 fails over to priority 1')

  const first = await get(gw)
  t.equal(first.status, 429, 'no retry policy: the overload answer itself goes back')
  const spilled = await get(gw)
  t.equal(spilled.body, 'secondary', 'Retry-After marks the primary overloaded: traffic spills to priority 1')
  t.equal(primary.hits, 1)
  primaryMode = 'ok'
  await new Promise((r) => setTimeout(r, 1100))
  t.equal((await get(gw)).body, 'primary', 'fail-back once the Retry-After time is over')
})

t.test('circuit breaker: requests beyond maxParallelRequests get 503 marked overloaded', async (t) => {
  const held: http.ServerResponse[] = []
  const u = await upstream(t, (_req, res) => { held.push(res) })
  const port = await freePort()
  const c: Cluster = cluster('a', u.port, { circuitBreaker: { maxConnections: null, maxPendingRequests: null, maxParallelRequests: 2, maxParallelRetries: null, maxRequestsPerConnection: null } })
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'a' }] }] }] } }, [c]))
  const inflight = [get(gw), get(gw)]
  for (let i = 0; i < 100 && held.length < 2; i++) await new Promise((r) => setTimeout(r, 10))
  const over = await get(gw)
  t.equal(over.status, 503)
  t.equal(over.headers['x-sallyport-overloaded'], 'true')
  for (const res of held) res.writeHead(200).end('ok')
  const done = await Promise.all(inflight)
  t.same(done.map((r) => r.status), [200, 200])
})

t.test('circuit-breaker refusals mark the primary overloaded: after three, traffic stays on priority 1 once the slot frees', async (t) => {
  const held: http.ServerResponse[] = []
  // The first request is held (it takes the one slot); any later one is answered at once.
  const primary = await upstream(t, (_req, res) => { if (held.length === 0) held.push(res); else res.end('primary') })
  const secondary = await upstream(t, (_req, res) => { res.writeHead(200).end('secondary') })
  const port = await freePort()
  const p: Cluster = cluster('p', primary.port, { circuitBreaker: { maxConnections: null, maxPendingRequests: null, maxParallelRequests: 1, maxParallelRetries: null, maxRequestsPerConnection: null } })
  const table = buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'p', priority: 0 }, { cluster: 'b', priority: 1 }] }] }] } }, [p, cluster('b', secondary.port)])
  const gw = await gateway(t, table)
  const slow = get(gw)
  for (let i = 0; i < 100 && held.length < 1; i++) await new Promise((r) => setTimeout(r, 10))
  // The primary's one slot is taken: each request is refused by its breaker and goes to priority 1.
  for (let i = 0; i < 3; i++) t.equal((await get(gw)).body, 'secondary', `refused by the breaker → secondary (${i})`)
  held[0].writeHead(200).end('primary')
  t.equal((await slow).body, 'primary')
  // README: overloaded for 5 s after 3 consecutive 429/503 answers, breaker refusals included.
  for (let i = 0; i < 3; i++) t.equal((await get(gw)).body, 'secondary', `the primary is overloaded: still secondary (${i})`)
  t.equal(primary.hits, 1, 'only the slow request reached the primary')
})

t.test('passive outlier detection ejects a failing endpoint, the healthy one takes the traffic', async (t) => {
  const bad = await upstream(t, (_req, res) => { res.writeHead(500).end() })
  const good = await upstream(t, (_req, res) => { res.writeHead(200).end() })
  const port = await freePort()
  const c: Cluster = cluster('a', bad.port, {
    endpoints: [{ host: '127.0.0.1', port: bad.port, kind: 'ip', weight: 1, zone: null }, { host: '127.0.0.1', port: good.port, kind: 'ip', weight: 1, zone: null }],
    healthCheck: { active: null, passive: { consecutive5xxErrors: 2, consecutiveGatewayErrors: 0, consecutiveLocalOriginFailures: 5, splitExternalLocalOriginErrors: false, intervalMs: 1000, baseEjectionTimeMs: 60_000, maxEjectionPercent: 50 } },
  })
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'a' }] }] }] } }, [c]))
  for (let i = 0; i < 4; i++) await get(gw)
  const before = bad.hits
  t.equal(before, 2, 'round robin until two 500s in a row eject it')
  for (let i = 0; i < 6; i++) t.equal((await get(gw)).status, 200)
  t.equal(bad.hits, before, 'ejected: no more traffic')
})
