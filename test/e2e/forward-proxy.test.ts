// The real CLI in forward-proxy mode (issue 9): a workload configured with the
// gateway as its HTTP proxy sends an absolute-form request that gets a
// credential injected by the Backend's CredentialInjector, and opens a CONNECT
// tunnel the route allows; a destination no route allows gets 403.
import t from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { eventually, freePort, gatewayYaml, startCli, tempDir, curl } from './harness.ts'
import { egressBackend, get } from './extensions-helpers.ts'
import { startOtlpReceiver } from '../helpers/otlp-receiver.ts'

interface Echo { headers: Record<string, string>; path: string }

t.test('CLI: absolute-form with an injected credential, CONNECT allowed and refused', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'ai' })
  t.teardown(() => upstream.close())
  const raw = net.createServer((s) => { s.end('raw-tunnel-ok\n') })
  await new Promise<void>((resolve) => raw.listen(0, '127.0.0.1', resolve))
  t.teardown(() => raw.close())
  const rawPort = (raw.address() as net.AddressInfo).port
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'secret.yaml'), `apiVersion: v1
kind: Secret
metadata: { name: api-key, namespace: default }
stringData: { token: sk-forward-proxy-42 }
`)
  fs.writeFileSync(path.join(dir, 'backend.yaml'), egressBackend('ai', upstream.address.port, `  - name: inject
    type: CredentialInjector
    config:
      secretRef: { name: api-key }
`) + `---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: raw, namespace: default }
spec:
  endpoints:
    - ip: { address: 127.0.0.1, port: ${rawPort} }
`)
  fs.writeFileSync(path.join(dir, 'route.yaml'), `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ai, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [ai.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ai, port: ${upstream.address.port} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: raw
  namespace: default
  annotations: { sallyport.io/connect-ports: "443" }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [raw.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: raw, port: ${rawPort} }]
`)
  const otlp = await startOtlpReceiver(t)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'on', '--otlp-endpoint', otlp.url])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  const proxy = `http://127.0.0.1:${httpPort}`

  const abs = await curl(['--proxy', proxy, 'http://ai.example.test/v1/models'])
  const echo = JSON.parse(abs.stdout) as Echo
  t.equal(echo.headers.authorization, 'Bearer sk-forward-proxy-42', 'absolute-form request got the Backend credential')

  const tunnel = await curl(['--proxy', proxy, '--proxytunnel', 'telnet://raw.example.test:443'])
  t.equal(tunnel.stdout, 'raw-tunnel-ok\n', 'CONNECT tunnel to the route\'s Backend')

  const refused = await curl(['--proxy', proxy, '-v', 'https://elsewhere.example.test/'])
  t.match(refused.stderr, /< HTTP\/1.1 403/, 'CONNECT to a destination no route allows: 403')
  await cli.waitFor(/"protocol":"connect"[^\n]*"reason":"ok"/, 10000)
  t.pass('the tunnel has an access-log line')
  // Issue 10: a CONNECT tunnel is one span for the connection.
  const spans = await otlp.waitFor((all) => all.some((s) => s.name === 'connect tunnel'), 15000, 'a connect tunnel span')
  const span = spans.find((s) => s.name === 'connect tunnel')
  t.equal(span?.attributes['tls.server.name'], 'raw.example.test', 'the requested host')
  t.equal(span?.attributes['sallyport.route'], 'default/raw', 'the route that allowed it')
  const metrics = await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')
  t.match(metrics.body, /sallyport_forward_proxy_refusals_total\{reason="no_route"\} 1/, 'refusal counted')
})
