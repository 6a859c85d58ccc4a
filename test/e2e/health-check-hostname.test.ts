// An active HTTP health check's `http.hostname` (Envoy Gateway's
// HTTPActiveHealthChecker field) is the Host its probes ask for: an endpoint
// given by address behind a virtual-hosted server (a CDN, a shared ingress)
// answers its health path only for its name, and a probe asking for the
// address took a healthy endpoint out. It was an unknown field, ignored.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'

t.test('CLI: an active HTTP health check asks for http.hostname', async (t) => {
  const probedHosts: string[] = []
  const server = http.createServer((req, res) => {
    if (req.headers['user-agent'] === 'sallyport-health-check') probedHosts.push(String(req.headers.host))
    // A virtual-hosted server: only its own name is served.
    res.writeHead(req.headers.host === 'health.example.test' ? 200 : 404).end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const up = (server.address() as AddressInfo).port
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'all.yaml'), gatewayYaml(port) + `---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: vhost, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${up} } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: r, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [health.example.test]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: vhost, port: ${up} }] }]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: hc, namespace: default }
spec:
  targetRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: vhost }]
  healthCheck:
    active:
      type: HTTP
      interval: 100ms
      unhealthyThreshold: 1
      http: { path: /healthz, hostname: health.example.test }
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20_000, '/readyz 200')
  await eventually(async () => probedHosts.length, (n) => n >= 3, 10_000, 'three probes')
  t.same([...new Set(probedHosts)], ['health.example.test'], 'every probe asked for http.hostname')
  const dump = JSON.parse((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body) as { upstreamHealth: Array<{ backend: string; endpoints: Array<{ healthy: boolean }> }> }
  t.equal(dump.upstreamHealth.find((b) => b.backend.includes('vhost'))?.endpoints[0]?.healthy, true, 'the endpoint stays healthy')
  t.notMatch(cli.stdout(), /unknown field/, 'no warning about the field')
})
