// Resilience through the real CLI (issue 6): an HTTPRoute with two backends at
// priorities 0/1 (sallyport.io/backend-priority) and a BackendTrafficPolicy
// (retry on 5xx and connect failures, passive health check) on the route —
// the primary answers 503s, then refuses connections, and recovers each time:
// traffic fails over and fails back. Then parent mode: two sallyport
// processes chained (A's Backend is B, marked sallyport.io/parent-gateway, and
// B routes back to A) — the loop is refused with 508 without a retry storm, a
// connection failure to the parent is retried, a 503 from it is not.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { backendYaml, eventually, failoverRouteYaml, freePort, gatewayYaml, metricSum, request, routeYaml, runCli, startCli, tempDir } from './harness.ts'

interface Upstream { server: http.Server; port: number; hits: number; mode: 'ok' | '503' }

async function upstream(t: Test, name: string, port = 0): Promise<Upstream> {
  const u: Upstream = { server: http.createServer(), port, hits: 0, mode: 'ok' }
  u.server.on('request', (_req, res) => {
    u.hits++
    if (u.mode === '503') res.writeHead(503).end(`${name} busy`)
    else res.end(name)
  })
  await new Promise<void>((resolve, reject) => { u.server.once('error', reject); u.server.listen(port, '127.0.0.1', resolve) })
  u.port = (u.server.address() as AddressInfo).port
  t.teardown(() => new Promise<void>((resolve) => { u.server.closeAllConnections(); u.server.close(() => resolve()) }))
  return u
}

function stop(u: Upstream): Promise<void> {
  return new Promise((resolve) => { u.server.closeAllConnections(); u.server.close(() => resolve()) })
}

/** Sum of a metric's samples (Prometheus text) whose labels contain every `key="value"` given. */
function serve(t: Test, dir: string, adminPort: number): ReturnType<typeof startCli> {
  return startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--log-level', 'warn'])
}

async function ready(adminPort: number): Promise<void> {
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20_000, 'readyz')
}

t.test('failover to the secondary when the primary fails (503s, refused), fail-back when it recovers', async (t) => {
  const primary = await upstream(t, 'primary')
  const secondary = await upstream(t, 'secondary')
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), `${backendYaml('primary', primary.port)}---\n${backendYaml('secondary', secondary.port)}`)
  fs.writeFileSync(path.join(dir, 'route.yaml'), `${failoverRouteYaml('llm', 'llm.example.test', [{ name: 'primary', port: primary.port }, { name: 'secondary', port: secondary.port }])}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: llm-resilience
  namespace: default
spec:
  targetRefs:
    - { group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm }
  retry:
    numRetries: 1
    perRetry:
      backOff: { baseInterval: 10ms, maxInterval: 50ms }
    retryOn:
      triggers: [5xx, connect-failure]
  healthCheck:
    passive:
      consecutive5XxErrors: 2
      interval: 1s
      baseEjectionTime: 1s
      maxEjectionPercent: 100
`)
  const cli = serve(t, dir, adminPort)
  await ready(adminPort)
  const url = `http://127.0.0.1:${port}/v1/chat`
  const host = 'llm.example.test'
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(url, { host }), (r) => r.status !== 404, 20_000, 'route served')

  for (let i = 0; i < 5; i++) t.equal((await request(url, { host })).body, 'primary', 'healthy primary takes the traffic')
  t.equal(secondary.hits, 0)

  // The primary answers 503: each request is retried on the secondary; after two 503s the primary is ejected.
  primary.mode = '503'
  const before503 = primary.hits
  for (let i = 0; i < 10; i++) {
    const r = await request(url, { host })
    t.same([r.status, r.body], [200, 'secondary'], `503 from primary → secondary (${i})`)
  }
  t.ok(primary.hits - before503 <= 3, `the primary saw ${primary.hits - before503} of 10 requests before its ejection`)
  const dump = JSON.parse((await request(`${admin}/config_dump`)).body) as { upstreamHealth: Array<{ backend: string; endpoints: Array<{ ejected: boolean; ejections: number }> }> }
  const p = dump.upstreamHealth.find((h) => h.backend.includes('primary'))
  t.ok(p !== undefined && p.endpoints[0].ejections >= 1, '/config_dump shows the ejection')
  const metrics = (await request(`${admin}/metrics`)).body
  t.ok(metricSum(metrics, 'sallyport_upstream_retries_total', { reason: 'status_5xx' }) >= 1, 'retries counted')
  t.ok(metricSum(metrics, 'sallyport_upstream_failover_total', { route: 'default/llm', from_priority: '0', to_priority: '1' }) >= 10, 'failovers counted')
  t.ok(metricSum(metrics, 'sallyport_upstream_ejections_total') >= 1, 'ejection counted')

  // Recovery: after baseEjectionTime the primary is back.
  primary.mode = 'ok'
  await eventually(() => request(url, { host }), (r) => r.body === 'primary', 10_000, 'fail-back to the primary')
  for (let i = 0; i < 5; i++) t.equal((await request(url, { host })).body, 'primary', 'failed back')

  // The primary refuses connections: the connect failure is retried on the secondary.
  await stop(primary)
  for (let i = 0; i < 6; i++) {
    const r = await request(url, { host })
    t.same([r.status, r.body], [200, 'secondary'], `refused → secondary (${i})`)
  }
  const m2 = (await request(`${admin}/metrics`)).body
  t.ok(metricSum(m2, 'sallyport_upstream_connect_errors_total') >= 1, 'connect failures counted')

  // It comes back on the same port: traffic returns once its ejection is over.
  const revived = await upstream(t, 'primary', primary.port)
  await eventually(() => request(url, { host }), (r) => r.body === 'primary', 15_000, 'fail-back after the restart')
  t.ok(revived.hits >= 1)
  t.equal(cli.child.exitCode, null, 'still running')
})

t.test('circuitBreaker.maxRequestsPerConnection: the backend sees a new connection every N requests', async (t) => {
  const sockets: number[] = []
  const server = http.createServer((req, res) => { sockets.push(req.socket.remotePort ?? 0); res.end('ok') })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const upPort = (server.address() as AddressInfo).port
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), backendYaml('api', upPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), `${routeYaml('api', 'api.example.test', 'api', upPort)}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: api-connections
  namespace: default
spec:
  targetRefs:
    - { group: gateway.networking.k8s.io, kind: HTTPRoute, name: api }
  circuitBreaker:
    maxRequestsPerConnection: 2
`)
  serve(t, dir, adminPort)
  await ready(adminPort)
  const url = `http://127.0.0.1:${port}/`
  await eventually(() => request(url, { host: 'api.example.test' }), (r) => r.status === 200, 20_000, 'route served')
  sockets.length = 0
  for (let i = 0; i < 5; i++) t.equal((await request(url, { host: 'api.example.test' })).status, 200)
  const runs: number[] = []
  for (let i = 0; i < sockets.length; i++) {
    if (i > 0 && sockets[i] === sockets[i - 1]) runs[runs.length - 1]++
    else runs.push(1)
  }
  t.ok(runs.every((n) => n <= 2), `no upstream connection carried more than 2 requests (${runs.join(',')})`)
  t.ok(new Set(sockets).size >= 3, 'five requests used at least three connections')
})

t.test('circuit-breaker refusals mark the primary overloaded: after three, traffic stays on the secondary', async (t) => {
  const held: http.ServerResponse[] = []
  const primary = http.createServer((req, res) => { if (req.url === '/slow') held.push(res); else res.end('primary') })
  await new Promise<void>((resolve) => primary.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { primary.closeAllConnections(); primary.close(() => resolve()) }))
  const pp = (primary.address() as AddressInfo).port
  const secondary = await upstream(t, 'secondary')
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), `${backendYaml('primary', pp)}---\n${backendYaml('secondary', secondary.port)}`)
  fs.writeFileSync(path.join(dir, 'route.yaml'), `${failoverRouteYaml('api', 'api.example.test', [{ name: 'primary', port: pp }, { name: 'secondary', port: secondary.port }])}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: api-limits, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: api }]
  circuitBreaker: { maxParallelRequests: 1 }
`)
  serve(t, dir, adminPort)
  await ready(adminPort)
  const url = `http://127.0.0.1:${port}`
  const host = 'api.example.test'
  await eventually(() => request(`${url}/`, { host }), (r) => r.body === 'primary', 20_000, 'route served by the primary')

  // One slow request holds the primary's only slot: the next three are refused by its breaker.
  const slow = request(`${url}/slow`, { host })
  await eventually(async () => held.length, (n) => n === 1, 5000, 'slow request at the primary')
  for (let i = 0; i < 3; i++) t.equal((await request(`${url}/`, { host })).body, 'secondary', `breaker refusal → secondary (${i})`)
  held[0].end('primary')
  t.equal((await slow).body, 'primary')
  const dump = JSON.parse((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body) as { upstreamHealth: Array<{ backend: string; overloaded: boolean }> }
  t.equal(dump.upstreamHealth.find((h) => h.backend.includes('primary'))?.overloaded, true, '/config_dump: the primary is overloaded')
  // Overloaded for 5 s: the freed slot does not bring the traffic back at once.
  for (let i = 0; i < 3; i++) t.equal((await request(`${url}/`, { host })).body, 'secondary', `overloaded primary → secondary (${i})`)
  await eventually(() => request(`${url}/`, { host }), (r) => r.body === 'primary', 15_000, 'fail-back once the overload time is over')
})

t.test('a BackendTrafficPolicy targeting a Backend validates, and its circuit limits and passive health check apply to that Backend', async (t) => {
  const failing = await upstream(t, 'failing')
  failing.mode = '503'
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), backendYaml('flaky', failing.port))
  fs.writeFileSync(path.join(dir, 'route.yaml'), `${routeYaml('flaky', 'flaky.example.test', 'flaky', failing.port)}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: flaky-backend, namespace: default }
spec:
  targetRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: flaky }]
  circuitBreaker: { maxParallelRequests: 7 }
  healthCheck:
    passive: { consecutive5XxErrors: 2, interval: 10s, baseEjectionTime: 30s, maxEjectionPercent: 100 }
`)
  const validate = await runCli(t, ['validate', dir])
  t.equal(validate.code, 0, `sallyport validate accepts it: ${validate.stdout}${validate.stderr}`)
  serve(t, dir, adminPort)
  await ready(adminPort)
  const url = `http://127.0.0.1:${port}/`
  const host = 'flaky.example.test'
  await eventually(() => request(url, { host }), (r) => r.status !== 404, 20_000, 'route served')
  for (let i = 0; i < 3; i++) await request(url, { host })
  const dump = JSON.parse((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body) as {
    upstreamHealth: Array<{ backend: string; outlierDetection: boolean; circuitLimits: { maxParallelRequests: number } | null; endpoints: Array<{ ejections: number }> }>
  }
  const h = dump.upstreamHealth.find((x) => x.backend.includes('flaky'))
  t.equal(h?.circuitLimits?.maxParallelRequests, 7, 'the policy\'s circuitBreaker is the Backend\'s')
  t.equal(h?.outlierDetection, true, 'its passive health check runs')
  t.ok((h?.endpoints[0]?.ejections ?? 0) >= 1, 'two 503s in a row ejected the endpoint')
  t.ok(metricSum((await request(`http://127.0.0.1:${adminPort}/metrics`)).body, 'sallyport_upstream_ejections_total') >= 1, 'ejection counted')
})

t.test('parent mode: a loop through two gateways is refused with 508, connect failures to the parent are retried, its 503 is not', async (t) => {
  const busy = await upstream(t, 'busy')
  busy.mode = '503'
  const [portA, portB, adminA, adminB, deadPort] = [await freePort(), await freePort(), await freePort(), await freePort(), await freePort()]
  const route = (name: string, host: string, backend: string, port: number): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [${host}]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${backend}, port: ${port} }]
`
  const parentBackend = (name: string, ports: number[]): string => `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
  annotations:
    sallyport.io/parent-gateway: "true"
spec:
  endpoints:
${ports.map((p) => `    - ip: { address: 127.0.0.1, port: ${p} }`).join('\n')}
`
  // Gateway A: everything goes to the parent B; the retry policy would retry 5xx — not for a parent.
  const dirA = tempDir(t)
  fs.writeFileSync(path.join(dirA, 'gateway.yaml'), gatewayYaml(portA))
  fs.writeFileSync(path.join(dirA, 'backends.yaml'), `${parentBackend('parent', [portB])}---\n${parentBackend('flaky-parent', [deadPort, portB])}`)
  fs.writeFileSync(path.join(dirA, 'routes.yaml'), [
    route('loop', 'loop.test', 'parent', portB), route('busy', 'busy.test', 'parent', portB), route('flaky', 'flaky.test', 'flaky-parent', portB),
    `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: retry-5xx, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: busy }]
  retry:
    numRetries: 3
    retryOn: { triggers: [5xx, connect-failure] }
`].join('---\n'))
  // Gateway B: loop.test goes back to A (a misconfiguration), busy.test to an upstream answering 503.
  const dirB = tempDir(t)
  fs.writeFileSync(path.join(dirB, 'gateway.yaml'), gatewayYaml(portB))
  fs.writeFileSync(path.join(dirB, 'backends.yaml'), `${backendYaml('back-to-a', portA)}---\n${backendYaml('busy', busy.port)}`)
  fs.writeFileSync(path.join(dirB, 'routes.yaml'), [route('loop', 'loop.test', 'back-to-a', portA), route('busy', 'busy.test', 'busy', busy.port)].join('---\n'))
  serve(t, dirB, adminB)
  serve(t, dirA, adminA)
  await ready(adminB)
  await ready(adminA)
  await eventually(() => request(`http://127.0.0.1:${portB}/`, { host: 'busy.test' }), (r) => r.status === 503, 20_000, 'B serves busy.test')
  await eventually(() => request(`http://127.0.0.1:${portA}/`, { host: 'flaky.test' }), (r) => r.status === 404 && r.body.includes('no route'), 20_000, 'A serves flaky.test (B has no such route)')
  busy.hits = 0

  const requestsOf = async (admin: number): Promise<number> =>
    metricSum((await request(`http://127.0.0.1:${admin}/metrics`)).body, 'sallyport_downstream_requests_total')
  const [a0, b0] = [await requestsOf(adminA), await requestsOf(adminB)]
  const loop = await request(`http://127.0.0.1:${portA}/`, { host: 'loop.test' })
  t.equal(loop.status, 508, 'A → B → A: refused with 508 Loop Detected')
  t.equal(await requestsOf(adminA) - a0, 2, 'A handled the request and its one looped copy')
  t.equal(await requestsOf(adminB) - b0, 1, 'B handled it once: no retry storm')

  const retriesBefore = metricSum((await request(`http://127.0.0.1:${adminA}/metrics`)).body, 'sallyport_upstream_retries_total')
  const r = await request(`http://127.0.0.1:${portA}/`, { host: 'busy.test' })
  t.equal(r.status, 503, 'the parent\'s 503 goes back')
  t.equal(busy.hits, 1, 'not retried by A (parent mode), though A\'s policy retries 5xx')
  const mA = (await request(`http://127.0.0.1:${adminA}/metrics`)).body
  t.equal(metricSum(mA, 'sallyport_upstream_retries_total'), retriesBefore, 'A made no retry')

  // flaky-parent: one endpoint refuses connections, the other is B. Connect failures are retried.
  for (let i = 0; i < 4; i++) t.equal((await request(`http://127.0.0.1:${portA}/`, { host: 'flaky.test' })).status, 404, 'B answers (no route for flaky.test there)')
  const mA2 = (await request(`http://127.0.0.1:${adminA}/metrics`)).body
  t.ok(metricSum(mA2, 'sallyport_upstream_retries_total', { reason: 'connect' }) >= 1, 'connection failures to the parent were retried')
  t.ok(metricSum(mA2, 'sallyport_upstream_connect_errors_total') >= 1)
})
