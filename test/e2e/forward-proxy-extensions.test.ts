// A CONNECT tunnel to a route's Backend runs that Backend's extension chain
// before it is dialled: an Authorization refuses a client it does not allow
// (403, its reason as body, never dialled), a RateLimit counts tunnels (429).
// CONNECT used to skip the chain, so a Backend restricted to one team was
// reachable by every client through a route that allowed CONNECT.
import t from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, metricSum, rawExchange, startCli, tempDir } from './harness.ts'
import { egressBackend, get, pod } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

/** CONNECT from `from`: the response head and what the tunnel then carried (bounded). */
const connect = (port: number, from: string, target: string): Promise<string> =>
  rawExchange(port, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`, { from, until: /hello\n$/ })

t.test('CLI: a CONNECT tunnel runs its Backend\'s extension chain', async (t) => {
  let dialled = 0
  const raw = net.createServer((s) => { dialled++; s.on('error', () => {}); s.end('hello\n') })
  const rawPort = await listenLoopback(raw)
  t.teardown(() => new Promise<void>((resolve) => raw.close(() => resolve())))
  const [port, adminPort, port2] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  // A second Gateway the db route is attached to as well: its tunnels carry its name.
  fs.writeFileSync(path.join(dir, 'gateway2.yaml'), gatewayYaml(port2).split('---\n')[1].replace('name: egress', 'name: other'))
  fs.writeFileSync(path.join(dir, 'pods.yaml'), [pod('team-a', 'a-1', 'app', '127.0.0.2'), pod('team-b', 'b-1', 'app', '127.0.0.3')].join('---\n'))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), [
    egressBackend('db', rawPort, `    - name: team-a-only
      type: Authorization
      config: { allow: [{ namespace: team-a }] }
`),
    egressBackend('limited', rawPort, `    - name: one-a-minute
      type: RateLimit
      config: { requests: 1, unit: Minute }
`),
  ].join('---\n'))
  const route = (name: string, host: string): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
  annotations: { sallyport.io/connect-ports: "443" }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [${host}]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${name}, port: ${rawPort} }]
`
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [
    route('db', 'db.example.test').replace('parentRefs: [{ name: egress }]', 'parentRefs: [{ name: egress }, { name: other }]'),
    route('limited', 'limited.example.test'),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const refused = await connect(port, '127.0.0.3', 'db.example.test:443')
  t.match(refused, /^HTTP\/1\.1 403 Forbidden\r\n[^]*\r\n\r\nclient team-b\/app may not use this route\n$/, 'team-b: 403 with the Authorization\'s reason')
  t.equal(dialled, 0, 'and the destination was never dialled')
  t.match(await connect(port, '127.0.0.2', 'db.example.test:443'), /^HTTP\/1\.1 200 [^]*\r\n\r\nhello\n$/, 'team-a: the tunnel')
  t.equal(dialled, 1)

  t.match(await connect(port, '127.0.0.2', 'limited.example.test:443'), /^HTTP\/1\.1 200 /, 'RateLimit: the first tunnel of the minute')
  t.match(await connect(port, '127.0.0.2', 'limited.example.test:443'), /^HTTP\/1\.1 429 Too Many Requests\r\n/, 'the second: 429')
  t.equal(dialled, 2, 'the refused one never dialled')

  await cli.waitFor(/"protocol":"connect"[^\n]*"reason":"extension_denied"/, 5000)
  // Through the second Gateway: the refusal is logged under it.
  t.match(await connect(port2, '127.0.0.3', 'db.example.test:443'), /^HTTP\/1\.1 403 /, 'team-b through the other Gateway: 403')
  await cli.waitFor(/"gateway":"default\/other"[^\n]*"reason":"extension_denied"[^\n]*"msg":"CONNECT refused"/, 5000)
  t.pass('logged under the Gateway it came through')
  const m = (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body
  t.equal(metricSum(m, 'sallyport_forward_proxy_refusals_total', { reason: 'extension_denied' }), 3, 'the refusals counted as extension_denied')
})
