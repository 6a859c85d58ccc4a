// `sallyport serve` with Backends that originate TLS to local upstreams:
// a good chain passes and the upstream sees the gateway's client certificate;
// a wrong CA answers 502 naming the reason (and is counted); editing the
// Secret / ConfigMap files rotates the client certificate and the trusted CA
// for new connections without a restart; insecureSkipVerify is logged at every load.

import t from 'tap'
import fs from 'node:fs'
import https from 'node:https'
import path from 'node:path'
import type { TLSSocket } from 'node:tls'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'
import { clientCert, createCa, createIntermediate, issue, serverCert } from '../helpers/pki.ts'

const root = createCa('e2e root')
const inter = createIntermediate(root, 'e2e intermediate')
const root2 = createCa('e2e rotated root')
const other = createCa('e2e other CA')
const served = serverCert(inter, ['api.test'])
const served2 = serverCert(root2, ['api.test'])
const client1 = clientCert(inter, 'gateway-client')
const client2 = clientCert(inter, 'gateway-client-2')

function b64(s: string): string {
  return Buffer.from(s).toString('base64')
}

function backend(name: string, port: number, caConfigMap: string | null, extra = ''): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
spec:
  endpoints:
    - ip:
        address: 127.0.0.1
        port: ${port}
  tls:
    sni: api.test
${caConfigMap === null ? '' : `    caCertificateRefs:\n      - kind: ConfigMap\n        name: ${caConfigMap}\n`}${extra}---
`
}

function route(name: string, hostname: string, backendName: string, port: number): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs:
    - name: egress
  hostnames: [${hostname}]
  rules:
    - backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: ${backendName}
          port: ${port}
---
`
}

function caConfigMap(name: string, pem: string): string {
  return `apiVersion: v1
kind: ConfigMap
metadata:
  name: ${name}
  namespace: default
data:
  ca.crt: |
${pem.trim().split(/\r?\n/).map((l) => `    ${l}`).join('\n')}
---
`
}

function clientSecret(c: { certPem: string; keyPem: string }): string {
  return `apiVersion: v1
kind: Secret
metadata:
  name: gateway-client
  namespace: default
type: kubernetes.io/tls
data:
  tls.crt: ${b64(c.certPem)}
  tls.key: ${b64(c.keyPem)}
`
}

t.test('serve: Backend TLS origination, failure reasons, mTLS, rotation by editing files', async (t) => {
  // The upstream: asks for a client certificate (does not require it) and says whose it saw.
  const upstream = https.createServer({ key: served.keyPem, cert: served.fullChainPem, requestCert: true, rejectUnauthorized: false }, (req, res) => {
    const peer = (req.socket as TLSSocket).getPeerCertificate()
    res.end(`client=${peer?.subject?.CN ?? 'none'}`)
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  const upPort = (upstream.address() as { port: number }).port
  t.teardown(() => new Promise<void>((resolve) => { upstream.closeAllConnections(); upstream.close(() => resolve()) }))

  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const write = (file: string, text: string): void => {
    // Write then rename, as editors and ConfigMap volume updates do.
    fs.writeFileSync(path.join(dir, `.${file}.tmp`), text)
    fs.renameSync(path.join(dir, `.${file}.tmp`), path.join(dir, file))
  }
  write('gateway.yaml', gatewayYaml(httpPort))
  write('cas.yaml', caConfigMap('upstream-ca', root.certPem) + caConfigMap('other-ca', other.certPem))
  write('client.yaml', clientSecret(client1))
  write('backends.yaml',
    backend('good', upPort, 'upstream-ca', '    clientCertificateRef:\n      name: gateway-client\n') +
    backend('wrong-ca', upPort, 'other-ca') +
    backend('loose', upPort, null, '    insecureSkipVerify: true\n'))
  write('routes.yaml', route('good', 'good.test', 'good', upPort) + route('wrong', 'wrong.test', 'wrong-ca', upPort) + route('loose', 'loose.test', 'loose', upPort))

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'info', '--allow-destination-cidr', '127.0.0.0/8'])
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const get = (host: string) => request(`http://127.0.0.1:${httpPort}/`, { host })

  await t.test('a good chain passes; the upstream sees the gateway client certificate', async (t) => {
    const r = await get('good.test')
    t.equal(r.status, 200, r.body)
    t.equal(r.body, 'client=gateway-client')
  })

  await t.test('a wrong CA: 502 with the reason class, counted by backend and reason', async (t) => {
    const r = await get('wrong.test')
    t.equal(r.status, 502)
    t.match(r.body, /upstream tls handshake failed: unknown_ca/)
    const m = await request(`${admin}/metrics`)
    t.match(m.body, /sallyport_upstream_tls_handshake_errors_total\{[^}]*backend="Backend\/default\/wrong-ca:\d+"[^}]*reason="unknown_ca"[^}]*\} 1/)
    await cli.waitFor(/upstream TLS handshake failed/, 5000)
    t.pass('logged with the backend')
  })

  await t.test('insecureSkipVerify: connects, and is logged at every load', async (t) => {
    const r = await get('loose.test')
    t.equal(r.status, 200)
    await cli.waitFor(/verification disabled by configuration/, 5000)
    t.pass('warned')
  })

  await t.test('rotation: a new client certificate in the Secret file is used by new connections', async (t) => {
    const warnings = (): number => ((cli.stdout() + cli.stderr()).match(/verification disabled by configuration/g) ?? []).length
    const before = warnings()
    write('client.yaml', clientSecret(client2))
    const r = await eventually(() => get('good.test'), (x) => x.body === 'client=gateway-client-2', 20000, 'the rotated client certificate')
    t.equal(r.status, 200)
    await eventually(async () => warnings(), (n) => n > before, 10000, 'the insecureSkipVerify warning again after the reload')
    t.pass('warned again on reload')
  })

  await t.test('rotation: the upstream moves to a new CA; editing the CA ConfigMap follows it', async (t) => {
    upstream.setSecureContext({ key: served2.keyPem, cert: served2.certPem })
    upstream.closeAllConnections() // pooled connections still speak the old chain
    const stale = await eventually(() => get('good.test'), (x) => x.status === 502, 10000, 'old trust refuses the new chain')
    t.match(stale.body, /unknown_ca/)
    write('cas.yaml', caConfigMap('upstream-ca', root2.certPem) + caConfigMap('other-ca', other.certPem))
    const r = await eventually(() => get('good.test'), (x) => x.status === 200, 20000, 'the new CA is trusted')
    t.equal(r.body, 'client=gateway-client-2')
  })
})

t.test('serve: a meshed route (GEP-3792) reaches the workload with bare mTLS: gateway identity, mesh trust bundle', async (t) => {
  const meshRoot = createCa('e2e mesh root')
  const workload = issue(meshRoot, { cn: 'web-workload', uris: ['spiffe://cluster.local/ns/default/sa/web'], ips: ['127.0.0.1'] })
  const identity = clientCert(meshRoot, 'sallyport-gateway')
  const upstream = https.createServer({ key: workload.keyPem, cert: workload.certPem, requestCert: true, rejectUnauthorized: true, ca: meshRoot.certPem }, (req, res) => {
    const socket = req.socket as TLSSocket
    res.end(`client=${socket.getPeerCertificate()?.subject?.CN ?? 'none'} sni=${String(socket.servername)}`)
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  const upPort = (upstream.address() as { port: number }).port
  t.teardown(() => new Promise<void>((resolve) => { upstream.closeAllConnections(); upstream.close(() => resolve()) }))

  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'all.yaml'), `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec:
  controllerName: sallyport.io/gateway-controller
  parametersRef: { group: "", kind: Secret, namespace: default, name: gateway-identity }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: egress, namespace: default }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: http, protocol: HTTP, port: ${httpPort} }
  mesh:
    trustBundle: { kind: Secret, name: mesh-ca }
---
apiVersion: v1
kind: Secret
metadata: { name: gateway-identity, namespace: default }
type: kubernetes.io/tls
data: { tls.crt: ${b64(identity.certPem)}, tls.key: ${b64(identity.keyPem)} }
---
apiVersion: v1
kind: Secret
metadata: { name: mesh-ca, namespace: default }
data: { ca.crt: ${b64(meshRoot.certPem)} }
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: default }
spec:
  ports: [{ name: http, port: 80 }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: { kubernetes.io/service-name: web }
addressType: IPv4
ports: [{ name: http, port: ${upPort} }]
endpoints:
  - addresses: [127.0.0.1]
    conditions: { ready: true }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: web, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [web.test]
  rules:
    - backendRefs: [{ name: web, port: 80 }]
`)
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'warn', '--allow-destination-cidr', '127.0.0.0/8'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const r = await request(`http://127.0.0.1:${httpPort}/`, { host: 'web.test' })
  t.equal(r.status, 200, r.body)
  t.equal(r.body, 'client=sallyport-gateway sni=false', 'the workload saw the gateway identity, and no SNI')
})
