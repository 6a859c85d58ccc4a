// `sallyport serve` to upstreams that share no ALPN protocol with the Backend:
// the upstream's no_application_protocol alert is a 502 naming that reason,
// counted under it (as the downstream metric names it), not a generic peer_alert.

import t from 'tap'
import fs from 'node:fs'
import https from 'node:https'
import http2 from 'node:http2'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { caConfigMapYaml, eventually, freePort, gatewayYaml, metricSum, request, routeYaml, startCli, tempDir } from './harness.ts'
import { createCa, serverCert } from '../helpers/pki.ts'

const root = createCa('e2e alpn root')
const leaf = serverCert(root, ['api.test'])

function backend(name: string, port: number, alpn: string): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${port} } }]
  tls:
    sni: api.test
    caCertificateRefs: [{ kind: ConfigMap, name: root-ca }]
    alpnProtocols: [${alpn}]
---
`
}

t.test('serve: no shared ALPN protocol is a 502 no_application_protocol, either way round', async (t) => {
  const h1 = https.createServer({ key: leaf.keyPem, cert: leaf.certPem, ALPNProtocols: ['http/1.1'] }, (_req, res) => res.end('h1'))
  const h2 = http2.createSecureServer({ key: leaf.keyPem, cert: leaf.certPem, allowHTTP1: false }, (_req, res) => res.end('h2'))
  for (const s of [h1, h2]) {
    await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))
    t.teardown(() => new Promise<void>((resolve) => s.close(() => resolve())))
  }
  const h1Port = (h1.address() as AddressInfo).port
  const h2Port = (h2.address() as AddressInfo).port
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'all.yaml'), gatewayYaml(httpPort) + '---\n' + caConfigMapYaml('root-ca', root.certPem) + '---\n' +
    backend('wants-h2', h1Port, 'h2') + backend('wants-h1', h2Port, 'http/1.1') +
    routeYaml('wants-h2', 'wants-h2.test', 'wants-h2', h1Port) + '---\n' + routeYaml('wants-h1', 'wants-h1.test', 'wants-h1', h2Port))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'warn', '--allow-destination-cidr', '127.0.0.0/8'])
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  for (const host of ['wants-h2.test', 'wants-h1.test']) {
    const r = await request(`http://127.0.0.1:${httpPort}/`, { host })
    t.equal(r.status, 502, host)
    t.match(r.body, /upstream tls handshake failed: no_application_protocol/, host)
  }
  const metrics = (await request(`${admin}/metrics`)).body
  t.equal(metricSum(metrics, 'sallyport_upstream_tls_handshake_errors_total', { reason: 'no_application_protocol' }), 2)
})
