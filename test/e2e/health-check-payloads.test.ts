// Active health checks' payloads through the CLI (Envoy Gateway's
// ActiveHealthCheckPayload): an HTTP check's `expectedResponse` must be in the
// body of an expected status, a TCP check's `receive` in what its `send` gets
// back. An endpoint answering 200 "degraded", or accepting connections while
// it answers every command with an error, is taken out of rotation.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'

interface Dump { upstreamHealth: Array<{ backend: string; endpoints: Array<{ endpoint: string; activeCheckHealthy: boolean }> }> }

t.test('CLI: expectedResponse and TCP send/receive decide an endpoint\'s health', async (t) => {
  let status = 'ok'
  const web = http.createServer((req, res) => { res.end(req.url === '/status' ? `{"status":"${status}"}` : 'web') })
  await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', resolve))
  let ready = true
  const sockets = new Set<net.Socket>()
  const kv = net.createServer((sock) => {
    sockets.add(sock)
    sock.on('close', () => sockets.delete(sock)).on('error', () => {})
    sock.on('data', () => sock.write(ready ? '+PONG\r\n' : '-LOADING\r\n'))
  })
  await new Promise<void>((resolve) => kv.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { web.closeAllConnections(); web.close(); for (const s of sockets) s.destroy(); kv.close() })
  const webPort = (web.address() as AddressInfo).port
  const kvPort = (kv.address() as AddressInfo).port
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const backend = (name: string, up: number): string => `---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${up} } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [${name}.example.test]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${name}, port: ${up} }] }]
`
  fs.writeFileSync(path.join(dir, 'all.yaml'), gatewayYaml(port) + backend('web', webPort) + backend('kv', kvPort) + `---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: web-hc, namespace: default }
spec:
  targetRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: web }]
  healthCheck:
    active:
      type: HTTP
      interval: 100ms
      unhealthyThreshold: 1
      http: { path: /status, expectedResponse: { type: Text, text: '"status":"ok"' } }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: kv-hc, namespace: default }
spec:
  targetRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: kv }]
  healthCheck:
    active:
      type: TCP
      interval: 100ms
      unhealthyThreshold: 1
      tcp:
        send: { type: Binary, binary: ${Buffer.from('PING\r\n').toString('base64')} }
        receive: { type: Text, text: '+PONG' }
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20_000, '/readyz 200')
  const healthOf = async (name: string): Promise<boolean | undefined> => {
    const dump = JSON.parse((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body) as Dump
    return dump.upstreamHealth.find((b) => b.backend.includes(name))?.endpoints[0]?.activeCheckHealthy
  }
  await eventually(async () => [await healthOf('web'), await healthOf('kv')], (h) => h[0] === true && h[1] === true, 10_000, 'both healthy')
  t.equal((await request(`http://127.0.0.1:${port}/`, { host: 'web.example.test' })).status, 200)
  status = 'degraded'
  ready = false
  await eventually(async () => [await healthOf('web'), await healthOf('kv')], (h) => h[0] === false && h[1] === false, 10_000, 'a 200 "degraded" and a -LOADING answer: both unhealthy')
  status = 'ok'
  ready = true
  await eventually(async () => [await healthOf('web'), await healthOf('kv')], (h) => h[0] === true && h[1] === true, 10_000, 'healthy again')
  t.notMatch(cli.stdout(), /unknown field/, 'no warning about the fields')
})
