// The real CLI and the bound on an upstream's silence: with no HTTPRoute
// timeouts a request has no overall deadline, and what ends a request whose
// upstream goes quiet is the idle bound (5 minutes by default; a
// BackendTrafficPolicy's timeout.http.connectionIdleTimeout sets it): a 504
// when no response head came, a cut body when the body stopped, and a slow
// but steady body passes whatever its length.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { backendYaml, curl, eventually, freePort, gatewayYaml, routeYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

t.test('CLI: connectionIdleTimeout bounds a silent upstream, not a slow one', async (t) => {
  const timers = new Set<NodeJS.Timeout>()
  const up = http.createServer((req, res) => {
    if (req.url === '/silent') return // never answers
    if (req.url === '/stops') {
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.write('first part\n') // then nothing
      return
    }
    // /steady: a chunk every 300 ms for 2.4 s, longer than the bound but never silent for it.
    res.writeHead(200, { 'content-type': 'text/plain' })
    let n = 0
    const tick = (): void => {
      res.write(`chunk ${n}\n`)
      if (++n === 8) { res.end(); return }
      const timer = setTimeout(tick, 300)
      timers.add(timer)
    }
    tick()
  })
  const upPort = await listenLoopback(up)
  t.teardown(() => { for (const timer of timers) clearTimeout(timer); up.closeAllConnections(); up.close() })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', upPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), `${routeYaml('api', 'api.example.test', 'api', upPort)}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: quiet-bound, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: api }]
  timeout:
    http: { connectionIdleTimeout: 1s }
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  const base = `http://127.0.0.1:${port}`
  const host = ['-H', 'Host: api.example.test']

  const silent = await curl([...host, '-w', '\n%{http_code}', `${base}/silent`])
  t.equal(silent.stdout, 'upstream timeout\n\n504', 'no response head within the bound: 504')
  await cli.waitFor(/"path":"\/silent","status":504[^\n]*"code":"SP_ERR_UPSTREAM_TIMEOUT"/, 5000)
  t.pass('logged as an upstream timeout')

  const stops = await curl([...host, `${base}/stops`])
  t.not(stops.code, 0, 'a body that stops is cut, not ended as if complete')
  t.equal(stops.stdout, 'first part\n', 'what came before the silence was passed on')

  const steady = await curl([...host, `${base}/steady`])
  t.equal(steady.code, 0, 'a slow body that never pauses for the bound passes')
  t.equal(steady.stdout, Array.from({ length: 8 }, (_, i) => `chunk ${i}\n`).join(''))
})

t.test('CLI: a policy on the Backend sets the bound for the routes that send only to it', async (t) => {
  const up = http.createServer((req) => { if (req.url === '/silent') return })
  const upPort = await listenLoopback(up)
  t.teardown(() => { up.closeAllConnections(); up.close() })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', upPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), `${routeYaml('api', 'api.example.test', 'api', upPort)}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: backend-bound, namespace: default }
spec:
  targetRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api }]
  timeout:
    http: { connectionIdleTimeout: 1s }
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  const silent = await curl(['-H', 'Host: api.example.test', '-m', '20', '-w', '\n%{http_code}', `http://127.0.0.1:${port}/silent`])
  t.equal(silent.stdout, 'upstream timeout\n\n504', 'the Backend policy\'s bound ended the silent request')
  await cli.waitFor(/"path":"\/silent","status":504/, 5000)
})
