// The real CLI with a RequestMirror filter on a route whose Backend injects a
// credential: the mirror gets the request as the client sent it (before any
// backend's extension chain), with or without a body; the primary gets the key.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'
import { egressBackend, pod, recorder, route, send } from './extensions-helpers.ts'

const KEY = 'PROVIDER-SECRET-KEY'

t.test('CLI: a mirrored request never carries the credential injected for the primary backend', async (t) => {
  const primary = await recorder(t)
  const shadow = await recorder(t)
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'secret.yaml'), `apiVersion: v1
kind: Secret
metadata:
  name: provider-key
  namespace: default
stringData:
  token: ${KEY}
`)
  fs.writeFileSync(path.join(dir, 'backends.yaml'), `${egressBackend('provider', primary.port, `  - name: inject
    type: CredentialInjector
    config:
      secretRef:
        name: provider-key
`)}---
${backendYaml('shadow', shadow.port)}`)
  fs.writeFileSync(path.join(dir, 'route.yaml'), route('api', 'api.example.test', 'provider', primary.port, `        - type: RequestMirror
          requestMirror:
            backendRef:
              group: gateway.envoyproxy.io
              kind: Backend
              name: shadow
              port: ${shadow.port}`))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  const get = await send(httpPort, { host: 'api.example.test', path: '/get-no-body' })
  t.equal(get.status, 200)
  const post = await send(httpPort, { host: 'api.example.test', path: '/post-with-body', headers: { 'content-type': 'application/json' }, body: '{"q":1}' })
  t.equal(post.status, 200)

  t.same(primary.seen.map((s) => [s.url, s.headers.authorization]), [['/get-no-body', `Bearer ${KEY}`], ['/post-with-body', `Bearer ${KEY}`]],
    'the primary backend gets the credential both times')
  await eventually(async () => shadow.seen.length, (n) => n === 2, 10000, 'both requests mirrored')
  const mirrored = shadow.seen.slice().sort((a, b) => a.url.localeCompare(b.url))
  t.same(mirrored.map((s) => [s.method, s.url, s.headers.authorization]), [['GET', '/get-no-body', undefined], ['POST', '/post-with-body', undefined]],
    'the mirror never sees the credential, with or without a body')
  t.equal(mirrored[1]?.body, '{"q":1}', 'the mirror got the body')
})

// A request the Backend's extension chain refuses never reaches the mirror: an
// Authorization 403, a RateLimit 429, a PayloadProcessor deny of a body it read
// (the refused body never leaves), a failing callout's 500. What the chain lets
// through is mirrored once, as the client sent it, whatever retries and failover
// to a backend with another chain follow.
t.test('CLI: a request the extension chain refuses is never mirrored; one it lets through is, once', async (t) => {
  const primary = await recorder(t)
  const flaky = await recorder(t, (_s, res) => { res.writeHead(503).end('busy') })
  const shadow = await recorder(t)
  const [httpPort, adminPort, closed] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const mirror = `        - type: RequestMirror
          requestMirror:
            backendRef: { group: gateway.envoyproxy.io, kind: Backend, name: shadow, port: ${shadow.port} }`
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'pods.yaml'), pod('team-a', 'a-1', 'app', '127.0.0.2'))
  fs.writeFileSync(path.join(dir, 'secrets.yaml'), ['a', 'b'].map((k) => `apiVersion: v1
kind: Secret
metadata: { name: key-${k}, namespace: default }
stringData: { token: sk-${k} }
`).join('---\n'))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), [
    backendYaml('shadow', shadow.port),
    egressBackend('authz', primary.port, `  - name: only-team-a
    type: Authorization
    config: { allow: [{ namespace: team-a }] }
`),
    egressBackend('limited', primary.port, `  - name: tight
    type: RateLimit
    config: { requests: 1, unit: Hour, key: [route] }
`),
    egressBackend('guarded', primary.port, `  - name: no-cards
    type: PayloadProcessor
    config: { request: { deny: [{ patterns: [card], reason: card numbers may not leave }] } }
`),
    egressBackend('broken', primary.port, `  - name: callout
    type: ExternalProcessor
    config: { url: "http://127.0.0.1:${closed}/", timeoutMs: 2000 }
`),
    egressBackend('provider-a', flaky.port, `  - name: key
    type: CredentialInjector
    config: { header: x-api-key, secretRef: { name: key-a } }
`),
    egressBackend('provider-b', primary.port, `  - name: key
    type: CredentialInjector
    config: { secretRef: { name: key-b } }
`),
  ].join('---\n'))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [
    route('authz', 'authz.example.test', 'authz', primary.port, mirror),
    route('limited', 'limited.example.test', 'limited', primary.port, mirror),
    route('guarded', 'guarded.example.test', 'guarded', primary.port, mirror),
    route('broken', 'broken.example.test', 'broken', primary.port, mirror),
    `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: failover
  namespace: default
  annotations: { sallyport.io/backend-priority: "provider-a=0,provider-b=1" }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [failover.example.test]
  rules:
    - filters:
${mirror}
      backendRefs:
        - { group: gateway.envoyproxy.io, kind: Backend, name: provider-a, port: ${flaky.port} }
        - { group: gateway.envoyproxy.io, kind: Backend, name: provider-b, port: ${primary.port} }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: failover-retry, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: failover }]
  retry:
    numRetries: 1
    perRetry: { backOff: { baseInterval: 10ms, maxInterval: 20ms } }
    retryOn: { triggers: [5xx] }
`,
  ].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off', '--log-level', 'error'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  const json = { 'content-type': 'application/json' }
  t.equal((await send(httpPort, { host: 'authz.example.test', path: '/authz-refused' })).status, 403, 'Authorization refuses an unknown client')
  t.equal((await send(httpPort, { host: 'authz.example.test', path: '/authz-refused', method: 'POST', headers: json, body: '{"a":1}' })).status, 403, 'with a body too')
  t.equal((await send(httpPort, { host: 'authz.example.test', path: '/authz-allowed', from: '127.0.0.2' })).status, 200, 'team-a may')
  t.equal((await send(httpPort, { host: 'limited.example.test', path: '/limit-allowed' })).status, 200, 'the first request of the hour')
  for (let i = 0; i < 2; i++) t.equal((await send(httpPort, { host: 'limited.example.test', path: '/limit-refused' })).status, 429, `RateLimit refuses (${i})`)
  t.equal((await send(httpPort, { host: 'guarded.example.test', path: '/payload-refused', headers: json, body: '{"card":"4111 1111 1111 1111"}' })).status, 403,
    'PayloadProcessor refuses a card number')
  t.equal((await send(httpPort, { host: 'guarded.example.test', path: '/payload-allowed', headers: json, body: '{"q":"hello"}' })).status, 200, 'and lets the rest through')
  t.equal((await send(httpPort, { host: 'broken.example.test', path: '/callout-failed', headers: json, body: '{"q":1}' })).status, 500, 'a failed callout (failOpen false): 500')
  const failover = await send(httpPort, { host: 'failover.example.test', path: '/failover', headers: json, body: '{"f":1}' })
  t.equal(failover.status, 200, 'A answers 503, the retry goes to B')
  t.equal(flaky.seen.length, 1, 'A was tried')
  t.equal((await send(httpPort, { host: 'guarded.example.test', path: '/last' })).status, 200)

  await eventually(async () => shadow.seen.map((s) => s.url), (urls) => urls.includes('/last'), 10000, 'the last request mirrored')
  const mirrored = shadow.seen.map((s) => s.url).sort()
  t.same(mirrored, ['/authz-allowed', '/failover', '/last', '/limit-allowed', '/payload-allowed'], 'only what the chain let through was mirrored, each once')
  t.notOk(shadow.seen.some((s) => s.body.includes('4111')), 'the refused card number never reached the mirror')
  const byUrl = new Map(shadow.seen.map((s) => [s.url, s]))
  t.equal(byUrl.get('/payload-allowed')?.body, '{"q":"hello"}', 'a body read by a request-body extension is mirrored whole')
  t.equal(byUrl.get('/failover')?.body, '{"f":1}')
  t.same([byUrl.get('/failover')?.headers['x-api-key'], byUrl.get('/failover')?.headers.authorization], [undefined, undefined], 'no credential of either chain')
  t.equal(primary.seen.find((s) => s.url === '/failover')?.headers.authorization, 'Bearer sk-b', 'B got its own key')
})
