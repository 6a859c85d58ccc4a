// Backend-scope extensions on failover, through the real CLI (issue 7 × issue
// 6): two providers behind one route at priorities 0/1, each Backend with its
// own CredentialInjector (A: x-api-key, B: Authorization). When A answers 503
// or refuses connections, the retry to B carries B's key and never A's — the
// chain of B runs on the request as the client sent it, not on the one A's
// chain changed. A Route-scope RateLimit in both chains takes one token per
// request, not one per attempt.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { eventually, freePort, gatewayYaml, startCli, tempDir } from './harness.ts'
import { egressBackend, send } from './extensions-helpers.ts'

interface Seen { headers: http.IncomingHttpHeaders; body: string }
interface Provider { server: http.Server; port: number; seen: Seen[]; mode: 'ok' | '503' }

async function provider(t: Test, name: string): Promise<Provider> {
  const p: Provider = { server: http.createServer(), port: 0, seen: [], mode: 'ok' }
  p.server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (s: string) => { body += s })
    req.on('end', () => {
      p.seen.push({ headers: req.headers, body })
      if (p.mode === '503') res.writeHead(503).end(`${name} busy`)
      else res.end(name)
    })
  })
  await new Promise<void>((resolve) => p.server.listen(0, '127.0.0.1', resolve))
  p.port = (p.server.address() as AddressInfo).port
  t.teardown(() => stop(p))
  return p
}

function stop(p: Provider): Promise<void> {
  return new Promise((resolve) => { p.server.closeAllConnections(); p.server.close(() => resolve()) })
}

function manifests(a: number, b: number): string {
  return `apiVersion: v1
kind: Secret
metadata: { name: provider-a-key, namespace: default }
stringData: { token: sk-provider-a }
---
apiVersion: v1
kind: Secret
metadata: { name: provider-b-key, namespace: default }
stringData: { token: sk-provider-b }
---
${egressBackend('provider-a', a, `  - name: key
    type: CredentialInjector
    config: { header: x-api-key, secretRef: { name: provider-a-key } }
`)}---
${egressBackend('provider-b', b, `  - name: key
    type: CredentialInjector
    config: { secretRef: { name: provider-b-key } }
`)}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: llm
  namespace: default
  annotations:
    sallyport.io/backend-priority: "provider-a=0,provider-b=1"
spec:
  parentRefs: [{ name: egress }]
  hostnames: [llm.example.test]
  rules:
    - backendRefs:
        - { group: gateway.envoyproxy.io, kind: Backend, name: provider-a, port: ${a} }
        - { group: gateway.envoyproxy.io, kind: Backend, name: provider-b, port: ${b} }
---
apiVersion: sallyport.io/v1alpha1
kind: EgressExtension
metadata: { name: llm-limit, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm }]
  extensions:
  - name: per-route
    type: RateLimit
    config: { requests: 12, unit: Hour, key: [route] }
${RETRY_POLICY}`
}


const RETRY_POLICY = `---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: llm-retry, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm }]
  retry:
    numRetries: 1
    perRetry: { backOff: { baseInterval: 10ms, maxInterval: 20ms } }
    retryOn: { triggers: [5xx, connect-failure] }
`

/** The CLI serving `llm` (an HTTPRoute for llm.example.test) once ready; the request every test sends. */
async function serveLlm(t: Test, llm: string): Promise<{ port: number; ask: { host: string; path: string; headers: Record<string, string>; body: string } }> {
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'llm.yaml'), llm)
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--log-level', 'warn'])
  await eventually(() => send(adminPort, { host: 'x', path: '/readyz' }), (r) => r.status === 200, 20_000, 'readyz')
  const host = 'llm.example.test'
  await eventually(() => send(port, { host, path: '/' }), (r) => r.status !== 404, 20_000, 'route served')
  return { port, ask: { host, path: '/v1/chat/completions', headers: { 'content-type': 'application/json', authorization: 'Bearer client-own' }, body: '{"model":"m","messages":[]}' } }
}

t.test('CLI: failover from provider A to B sends B\'s credential, never A\'s (503 and refused connections)', async (t) => {
  const a = await provider(t, 'provider-a')
  const b = await provider(t, 'provider-b')
  const { port, ask } = await serveLlm(t, manifests(a.port, b.port))
  const used = a.seen.length // the probe above went to A and took one token

  // Healthy A: A's key in x-api-key; the client's own Authorization passes (A's chain does not set it).
  let r = await send(port, ask)
  t.same([r.status, r.body], [200, 'provider-a'])
  t.equal(a.seen.at(-1)?.headers['x-api-key'], 'sk-provider-a', 'A gets its key')
  t.equal(r.headers.ratelimit, `"per-route";r=${12 - used - 1};t=${(used + 1) * 300}`, 'one token per request')

  // A answers 503: the retry to B runs B's chain on the request as the client sent it.
  a.mode = '503'
  for (let i = 0; i < 3; i++) {
    const before = a.seen.length
    r = await send(port, ask)
    t.same([r.status, r.body], [200, 'provider-b'], `503 from A → B (${i})`)
    t.equal(a.seen.length, before + 1, 'A was tried first')
    const atB = b.seen.at(-1) as Seen
    t.equal(atB.headers.authorization, 'Bearer sk-provider-b', 'B gets B\'s key in Authorization')
    t.equal(atB.headers['x-api-key'], undefined, 'A\'s key never reaches B')
    t.equal(atB.body, ask.body, 'the body is replayed whole')
    t.equal(a.seen.at(-1)?.headers['x-api-key'], 'sk-provider-a', 'the attempt to A carried A\'s key')
    t.equal(a.seen.at(-1)?.headers.authorization, 'Bearer client-own', 'and not B\'s')
    // The Route-scope RateLimit is in both chains: charged once per request, its fields kept.
    t.equal(r.headers.ratelimit, `"per-route";r=${12 - used - 2 - i};t=${(used + 2 + i) * 300}`, 'one token per request, not per attempt')
  }

  // A refuses connections: the connect failure fails over to B with B's key.
  await stop(a)
  for (let i = 0; i < 3; i++) {
    r = await send(port, ask)
    t.same([r.status, r.body], [200, 'provider-b'], `refused by A → B (${i})`)
    const atB = b.seen.at(-1) as Seen
    t.equal(atB.headers.authorization, 'Bearer sk-provider-b')
    t.equal(atB.headers['x-api-key'], undefined)
    t.equal(atB.body, ask.body)
  }
  for (const s of b.seen) t.notOk(JSON.stringify(s.headers).includes('sk-provider-a'), 'no request to B ever held A\'s key')
})

function fallbackManifests(a: number, b: number): string {
  return `apiVersion: v1
kind: Secret
metadata: { name: provider-b-key, namespace: default }
stringData: { token: sk-provider-b }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: primary, namespace: default }
spec:
  endpoints:
    - ip: { address: 127.0.0.1, port: ${a} }
---
${egressBackend('fallback', b, `  - name: key
    type: CredentialInjector
    config: { secretRef: { name: provider-b-key } }
`)}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: llm
  namespace: default
  annotations:
    sallyport.io/backend-priority: "primary=0,fallback=1"
spec:
  parentRefs: [{ name: egress }]
  hostnames: [llm.example.test]
  rules:
    - backendRefs:
        - { group: gateway.envoyproxy.io, kind: Backend, name: primary, port: ${a} }
        - { group: gateway.envoyproxy.io, kind: Backend, name: fallback, port: ${b} }
${RETRY_POLICY}`
}

t.test('CLI: a primary without extensions fails over to a fallback with a CredentialInjector, which adds its credential (503 and refused connections)', async (t) => {
  const a = await provider(t, 'primary')
  const b = await provider(t, 'fallback')
  const { port, ask } = await serveLlm(t, fallbackManifests(a.port, b.port))

  let r = await send(port, ask)
  t.same([r.status, r.body], [200, 'primary'])
  t.equal(a.seen.at(-1)?.headers.authorization, 'Bearer client-own', 'the primary has no chain: the client\'s own field passes')

  a.mode = '503'
  for (let i = 0; i < 2; i++) {
    const before = a.seen.length
    r = await send(port, ask)
    t.same([r.status, r.body], [200, 'fallback'], `503 from the primary → fallback (${i})`)
    t.equal(a.seen.length, before + 1, 'the primary was tried first')
    t.equal(b.seen.at(-1)?.headers.authorization, 'Bearer sk-provider-b', 'the fallback gets its credential')
    t.equal(b.seen.at(-1)?.body, ask.body, 'the body is replayed whole')
  }

  await stop(a)
  for (let i = 0; i < 2; i++) {
    r = await send(port, ask)
    t.same([r.status, r.body], [200, 'fallback'], `refused by the primary → fallback (${i})`)
    t.equal(b.seen.at(-1)?.headers.authorization, 'Bearer sk-provider-b')
    t.equal(b.seen.at(-1)?.body, ask.body)
  }
})
