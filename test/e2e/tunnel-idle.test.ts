// A WebSocket / extended-CONNECT tunnel has no deadline but an idle bound: the
// route's (BackendTrafficPolicy timeout.http.connectionIdleTimeout, else 5
// minutes) over bytes either way. A quiet tunnel is reset when it runs out; one
// that keeps talking lives on. Before, a tunnel had no bound at all: a peer
// gone without a word, or a half-closed tunnel whose other side never ended,
// held both connections for good.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from './harness.ts'
import { h1Tunnel, h1Upstream, h2Session, h2Tunnel, until, type UpstreamEnd } from './tunnel-helpers.ts'

t.test('CLI: a tunnel idle for longer than the route\'s bound is reset; a talking one is not', async (t) => {
  const ends = new Map<string, UpstreamEnd>()
  const up = await h1Upstream(t, (p, end) => { ends.set(p, end) })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(port), backendYaml('up', up), `${routeYaml('ws', 'ws.test', 'up', up)}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: quiet-bound, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: ws }]
  timeout:
    http: { connectionIdleTimeout: 1s }
`].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')

  const quiet = await h1Tunnel(t, port, 'ws.test', '/quiet')
  const session = await h2Session(t, port)
  const quietH2 = await h2Tunnel(session, 'ws.test', '/quiet-h2')
  const talking = await h1Tunnel(t, port, 'ws.test', '/talking')
  t.same([quiet.status, quietH2.status, talking.status], [101, 200, 101], 'three tunnels open')
  // Half-closed by the client, the upstream never ending its side: still idle.
  quiet.end()
  const started = Date.now()
  const timer = setInterval(() => talking.write('.'), 250)
  t.teardown(() => clearInterval(timer))
  await until(() => quiet.closed && quietH2.closed, 'both quiet tunnels closed', 8000)
  t.ok(Date.now() - started >= 900, 'not before the bound')
  t.ok(quiet.reset || !quiet.ended, 'the half-closed one was cut, not ended in order')
  t.notOk(talking.closed, 'the talking tunnel is still open')
  await new Promise((resolve) => setTimeout(resolve, 1500))
  t.notOk(talking.closed, 'and stays open while bytes move')
  clearInterval(timer)
  await until(() => talking.closed, 'the talking tunnel closed once it went quiet', 8000)
})
