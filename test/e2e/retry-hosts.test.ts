// Where a retry goes within one backend, through the real CLI: to an endpoint
// the request has not tried yet while one is available, whatever the
// load-balancing type (Envoy Gateway sets Envoy's previous_hosts retry
// predicate on every retry policy). A Backend of two endpoints, one always
// answering 500: with one retry on 5xx every request must succeed, and the
// failing endpoint sees each request at most once. Each access line says how
// many retries its request took (`retries`).
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { listenLoopback } from '../helpers/ports.ts'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'

const TYPES: ReadonlyArray<readonly [string, string]> = [
  ['roundrobin', '{ type: RoundRobin }'],
  ['random', '{ type: Random }'],
  ['leastrequest', '{ type: LeastRequest }'],
  ['consistenthash', '{ type: ConsistentHash, consistentHash: { type: Header, header: { name: x-key } } }'],
]

const REQUESTS = 24

t.test('a retry goes to an endpoint the request has not tried, for every load-balancing type', async (t) => {
  let badHits = 0
  let goodHits = 0
  const bad = http.createServer((_req, res) => { badHits++; res.writeHead(500).end('bad') })
  const good = http.createServer((_req, res) => { goodHits++; res.end('good') })
  const [badPort, goodPort] = [await listenLoopback(bad), await listenLoopback(good)]
  t.teardown(() => { for (const s of [bad, good]) { s.closeAllConnections(); s.close() } })

  const [port, adminPort] = [await freePort(), await freePort()]
  const docs = [gatewayYaml(port)]
  for (const [name, lb] of TYPES) {
    docs.push(`apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
  endpoints:
    - ip: { address: 127.0.0.1, port: ${badPort} }
    - ip: { address: 127.0.0.1, port: ${goodPort} }
`, `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [${name}.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${name}, port: ${badPort} }]
`, `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: ${name}, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: ${name} }]
  retry:
    numRetries: 1
    retryOn: { triggers: [5xx] }
    perRetry: { backOff: { baseInterval: 1ms, maxInterval: 2ms } }
  loadBalancer: ${lb}
`)
  }
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), docs.join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20_000, 'readyz')

  const badByType = new Map<string, number>()
  for (const [name] of TYPES) {
    const url = `http://127.0.0.1:${port}/`
    await eventually(() => request(url, { host: `${name}.example.test` }), (r) => r.status !== 404, 20_000, `route ${name} served`)
    badHits = 0
    goodHits = 0
    const statuses: number[] = []
    for (let i = 0; i < REQUESTS; i++) {
      const r = await new Promise<number>((resolve, reject) => {
        const req = http.get(url, { headers: { host: `${name}.example.test`, 'x-key': `key-${i}` }, agent: false }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode ?? 0)) })
        req.setTimeout(10_000, () => req.destroy(new Error('request timed out')))
        req.on('error', reject)
      })
      statuses.push(r)
    }
    t.same(statuses.filter((s) => s !== 200), [], `${name}: every request succeeds on its one retry`)
    t.ok(badHits <= REQUESTS, `${name}: the failing endpoint saw each request at most once (${badHits} for ${REQUESTS})`)
    t.equal(goodHits, REQUESTS, `${name}: the healthy endpoint answered every request`)
    badByType.set(name, badHits)
  }

  // The access line: `retries` counts the retries of its request (0 for one answered at once).
  const lines = await eventually(async () => cli.stdout().split('\n').filter((l) => l.includes('"component":"access"')).map((l) => JSON.parse(l) as { authority: string; retries?: number; upstream: string }),
    (ls) => ls.filter((l) => l.authority === 'roundrobin.example.test').length >= REQUESTS, 10_000, 'access lines')
  const rr = lines.filter((l) => l.authority === 'roundrobin.example.test').slice(-REQUESTS)
  t.ok(rr.every((l) => l.upstream === `127.0.0.1:${goodPort}`), 'each line names the endpoint that answered')
  t.ok(rr.every((l) => l.retries === 0 || l.retries === 1), 'a request answered at once says 0, one retried after the failing endpoint 1')
  t.equal(rr.reduce((n, l) => n + (l.retries ?? 0), 0), badByType.get('roundrobin'), 'one retry per request the failing endpoint answered')
})
