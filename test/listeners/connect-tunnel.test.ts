// Forward-proxy mode (issue 9) through the real pipeline (YAML → compile →
// data plane) with real clients: curl --proxy and HTTPS_PROXY, undici
// ProxyAgent and node:http2 CONNECT to a route that allows CONNECT on 443
// (the client verifies the destination's certificate through the tunnel),
// refusals (403 with the reason, counted), the SNI check, absolute-form
// requests, and a Backend reached through an upstream CONNECT proxy that
// records the tunnels it opened and checks Proxy-Authorization.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import https from 'node:https'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import tls from 'node:tls'
import { ProxyAgent, fetch } from 'undici'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { compile } from '../../lib/compile/compile.ts'
import { dumpTable } from '../../lib/compile/print.ts'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { createCa, serverCert } from '../helpers/pki.ts'
import { freePort, metricValue, silentProxy, startPlane, until, within } from './tcp-fixtures.ts'
import { startCorpProxy } from '../helpers/corp-proxy.ts'
import { curl, gatewayYaml } from '../e2e/harness.ts'

const ca = createCa('forward-proxy test CA')
const leaf = serverCert(ca, ['api.example.test', 'other.example.test'])

function indent(pem: string, n: number): string {
  return pem.trim().split(/\r?\n/).map((l) => ' '.repeat(n) + l).join('\n')
}

function manifests(gwPort: number, tlsPort: number, proxyPort: number): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: egress
  namespace: default
  annotations:
    sallyport.io/allow-destination-cidrs: 127.0.0.0/8
    sallyport.io/destination-denylist: denied.example.test
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: http, protocol: HTTP, port: ${gwPort} }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: api, namespace: default }
spec:
  endpoints:
    - ip: { address: 127.0.0.1, port: ${tlsPort} }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: denied, namespace: default }
spec:
  endpoints:
    - fqdn: { hostname: denied.example.test, port: ${tlsPort} }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: test-ca, namespace: default }
data:
  ca.crt: |
${indent(ca.certPem, 4)}
---
apiVersion: v1
kind: Secret
metadata: { name: corp-proxy, namespace: default }
stringData: { username: egress, password: s3cret-proxy-pw }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: proxied
  namespace: default
  annotations:
    sallyport.io/upstream-proxy: http://127.0.0.1:${proxyPort}
    sallyport.io/upstream-proxy-secret: corp-proxy
spec:
  endpoints:
    - fqdn: { hostname: api.example.test, port: ${tlsPort} }
  tls:
    sni: api.example.test
    caCertificateRefs:
      - { kind: ConfigMap, name: test-ca }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: api
  namespace: default
  annotations:
    sallyport.io/connect-ports: "443"
spec:
  parentRefs: [{ name: egress }]
  hostnames: [api.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: ${tlsPort} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: sni-checked
  namespace: default
  annotations:
    sallyport.io/connect-ports: "443"
    sallyport.io/connect-verify-sni: "true"
spec:
  parentRefs: [{ name: egress }]
  hostnames: [checked.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: ${tlsPort} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: no-connect
  namespace: default
spec:
  parentRefs: [{ name: egress }]
  hostnames: [plain.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: ${tlsPort} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: denied
  namespace: default
  annotations:
    sallyport.io/connect-ports: "443"
spec:
  parentRefs: [{ name: egress }]
  hostnames: [denied.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: denied, port: ${tlsPort} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: proxied
  namespace: default
spec:
  parentRefs: [{ name: egress }]
  hostnames: [proxied.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: proxied, port: ${tlsPort} }]
`
}

interface Setup { gwPort: number; tlsPort: number; tunnels: string[]; auths: Array<string | undefined>; cafile: string }

async function setup(t: Test): Promise<Setup> {
  // The destination: HTTPS answering with the SNI it saw and the path.
  const server = https.createServer({ cert: leaf.certPem, key: leaf.keyPem }, (req, res) => {
    res.end(`tls-ok ${(req.socket as tls.TLSSocket).servername} ${req.url}`)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const tlsPort = (server.address() as net.AddressInfo).port

  // The corporate proxy: records CONNECT targets and Proxy-Authorization, tunnels to loopback.
  const { port: proxyPort, tunnels, auths } = await startCorpProxy(t, 'egress:s3cret-proxy-pw')

  const gwPort = await freePort()
  const parsed = parseManifests('fp.yaml', manifests(gwPort, tlsPort, proxyPort))
  const { table } = compile(buildSnapshot(parsed.docs, parsed.problems), { now: 1, version: 1, gatewayClass: 'sallyport' })
  await startPlane(t, table, { upstreams: createUpstreams({ resolve: async () => ['127.0.0.1'] }) })
  const cafile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'sp-fp-')), 'ca.pem')
  fs.writeFileSync(cafile, ca.certPem)
  t.teardown(() => fs.rmSync(path.dirname(cafile), { recursive: true, force: true }))
  const dump = JSON.stringify(dumpTable(table))
  t.notMatch(dump, /s3cret-proxy-pw|ZWdyZXNz/, 'proxy credentials are not in the dump')
  return { gwPort, tlsPort, tunnels, auths, cafile }
}

t.test('CONNECT with real clients, refusals, SNI check, absolute-form, upstream proxy', async (t) => {
  const s = await setup(t)
  const proxyUrl = `http://127.0.0.1:${s.gwPort}`

  const ok = await curl(['--proxy', proxyUrl, '--cacert', s.cafile, 'https://api.example.test/hello'])
  t.equal(ok.stdout, 'tls-ok api.example.test /hello', 'curl --proxy: CONNECT tunnel, TLS verified end to end by the client')

  const env = await curl(['--cacert', s.cafile, 'https://api.example.test/env'], { HTTPS_PROXY: proxyUrl })
  t.equal(env.stdout, 'tls-ok api.example.test /env', 'curl with HTTPS_PROXY')

  const before = await metricValue('sallyport_forward_proxy_refusals_total', { reason: 'no_route' })
  const refused = await curl(['--proxy', proxyUrl, '--cacert', s.cafile, '-v', 'https://nowhere.example.test/'])
  t.not(refused.code, 0, 'no route: the tunnel is refused')
  t.match(refused.stderr, /< HTTP\/1.1 403/, '403 to the CONNECT')
  t.equal(await metricValue('sallyport_forward_proxy_refusals_total', { reason: 'no_route' }), before + 1, 'counted as no_route')

  const noConnect = await curl(['--proxy', proxyUrl, '--cacert', s.cafile, '-v', 'https://plain.example.test/'])
  t.match(noConnect.stderr, /< HTTP\/1.1 403/, 'a route without sallyport.io/connect-ports refuses CONNECT')
  const port = await curl(['--proxy', proxyUrl, '--cacert', s.cafile, '-v', 'https://api.example.test:8443/'])
  t.match(port.stderr, /< HTTP\/1.1 403/, 'a port not in connect-ports is refused')
  const denied = await curl(['--proxy', proxyUrl, '--cacert', s.cafile, '-v', 'https://denied.example.test/'])
  t.match(denied.stderr, /< HTTP\/1.1 403/, 'a destination on the Gateway deny-list is refused')
  t.ok(await metricValue('sallyport_forward_proxy_refusals_total', { reason: 'destination_denied' }) >= 1, 'counted as destination_denied')

  // Raw CONNECT: the reason is the body.
  const raw = await new Promise<string>((resolve, reject) => {
    const sock = net.connect(s.gwPort, '127.0.0.1', () => sock.write('CONNECT plain.example.test:443 HTTP/1.1\r\nhost: plain.example.test:443\r\n\r\n'))
    let text = ''
    sock.setEncoding('utf8').on('data', (d: string) => { text += d }).on('end', () => resolve(text)).on('error', reject)
    sock.setTimeout(5000, () => sock.destroy(new Error('timeout')))
  })
  t.match(raw, /^HTTP\/1.1 403[^]*CONNECT not allowed by the route/, '403 names the reason')

  // SNI check: the ClientHello must name the requested host.
  const sniOk = await curl(['--proxy', proxyUrl, '--cacert', s.cafile, '--connect-to', 'checked.example.test:443:api.example.test:443', '-k', 'https://checked.example.test/x'])
  t.equal(sniOk.stdout, 'tls-ok checked.example.test /x', 'SNI equal to the CONNECT host passes')
  const sniBad = await new Promise<string>((resolve) => {
    const sock = net.connect(s.gwPort, '127.0.0.1', () => sock.write('CONNECT checked.example.test:443 HTTP/1.1\r\nhost: checked.example.test:443\r\n\r\n'))
    sock.once('data', () => {
      const tlsSock = tls.connect({ socket: sock, servername: 'api.example.test', ca: ca.certPem })
      tlsSock.on('error', (e) => resolve(`error ${e.message}`))
      tlsSock.on('secureConnect', () => resolve('connected'))
    })
    sock.on('error', (e) => resolve(`error ${e.message}`))
  })
  t.match(sniBad, /^error/, 'a ClientHello naming another host closes the tunnel')

  // undici ProxyAgent.
  const agent = new ProxyAgent({ uri: proxyUrl, requestTls: { ca: ca.certPem } })
  t.teardown(() => agent.close())
  const viaUndici = await fetch('https://api.example.test/undici', { dispatcher: agent })
  t.equal(await viaUndici.text(), 'tls-ok api.example.test /undici', 'undici ProxyAgent through the tunnel')

  // node:http2 CONNECT (RFC 9113 §8.5) on the h2c port, TLS inside the stream.
  const session = http2.connect(`http://127.0.0.1:${s.gwPort}`)
  t.teardown(() => session.close())
  const stream = session.request({ ':method': 'CONNECT', ':authority': 'api.example.test:443' })
  const status = await new Promise<number>((resolve) => stream.once('response', (h) => resolve(Number(h[':status']))))
  t.equal(status, 200, 'HTTP/2 CONNECT answered 200')
  const h2Body = await new Promise<string>((resolve, reject) => {
    const inner = tls.connect({ socket: stream as unknown as net.Socket, servername: 'api.example.test', ca: ca.certPem }, () => {
      inner.write('GET /h2 HTTP/1.1\r\nhost: api.example.test\r\nconnection: close\r\n\r\n')
    })
    let text = ''
    inner.setEncoding('utf8').on('data', (d: string) => { text += d }).on('end', () => resolve(text)).on('error', reject)
  })
  t.match(h2Body, /tls-ok api\.example\.test \/h2$/, 'HTTP/2 CONNECT tunnel, TLS verified end to end')
  const h2Refused = session.request({ ':method': 'CONNECT', ':authority': 'nowhere.example.test:443' })
  const refusedStatus = await new Promise<number>((resolve) => h2Refused.once('response', (h) => resolve(Number(h[':status']))))
  t.equal(refusedStatus, 403, 'HTTP/2 CONNECT to an unrouted destination: 403')
  h2Refused.resume()

  // Absolute-form through the normal pipeline, to a Backend behind the corporate proxy (TLS inside its tunnel).
  const abs = await curl(['--proxy', proxyUrl, 'http://proxied.example.test/via-corp'])
  t.equal(abs.stdout, 'tls-ok api.example.test /via-corp', 'absolute-form request; the gateway originates verified TLS through the upstream proxy')
  t.same(s.tunnels, [`api.example.test:${s.tlsPort}`], 'the upstream proxy opened one tunnel, to the Backend hostname')
  t.equal(s.auths[0], 'Basic ' + Buffer.from('egress:s3cret-proxy-pw').toString('base64'), 'Proxy-Authorization from the Secret')

  t.ok(await metricValue('sallyport_l4_bytes_total', { route: 'default/api', direction: 'out' }) > 0, 'tunnel bytes counted')
})

/** A gateway whose route's Backend is behind an upstream proxy that accepts and never answers (a dial waits 60 s). */
async function stuckGateway(t: Test): Promise<{ gwPort: number; accepted: net.Socket[] }> {
  const { port: proxyPort, accepted } = await silentProxy(t)
  const gwPort = await freePort()
  const parsed = parseManifests('stuck.yaml', `${gatewayYaml(gwPort)}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: stuck
  namespace: default
  annotations: { sallyport.io/upstream-proxy: "http://127.0.0.1:${proxyPort}" }
spec:
  endpoints: [{ fqdn: { hostname: stuck.example.test, port: 443 } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: stuck
  namespace: default
  annotations: { sallyport.io/connect-ports: "443" }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [stuck.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: stuck, port: 443 }]
`)
  const { table } = compile(buildSnapshot(parsed.docs, parsed.problems), { now: 1, version: 1, gatewayClass: 'sallyport' })
  await startPlane(t, table, { upstreams: createUpstreams({ connectTimeoutMs: 60_000 }) })
  return { gwPort, accepted }
}

t.test('an HTTP/2 CONNECT cancelled while its destination is dialled stops the dial', async (t) => {
  const { gwPort, accepted } = await stuckGateway(t)
  const session = http2.connect(`http://127.0.0.1:${gwPort}`)
  t.teardown(() => session.destroy())
  const stream = session.request({ ':method': 'CONNECT', ':authority': 'stuck.example.test:443' })
  stream.on('error', () => {})
  await until(() => accepted.length === 1, 5000, 'the dial through the upstream proxy')
  const closed = new Promise<boolean>((resolve) => accepted[0].once('close', () => resolve(true)))
  stream.close(http2.constants.NGHTTP2_CANCEL)
  const stopped = await within(closed, 10_000, 'the abandoned dial closing')
  t.ok(stopped, 'the connection to the upstream proxy closed with the cancelled stream')
  t.equal(accepted.length, 1, 'and no other was opened')
  t.equal(await metricValue('sallyport_l4_connections_total', { route: 'default/stuck', code: 'client_reset' }), 1, 'counted as a reset by the client')
})

t.test('an HTTP/1.1 CONNECT whose client resets while its destination is dialled stops the dial', async (t) => {
  const { gwPort, accepted } = await stuckGateway(t)
  const client = net.connect(gwPort, '127.0.0.1')
  client.on('error', () => {})
  client.write('CONNECT stuck.example.test:443 HTTP/1.1\r\nhost: stuck.example.test:443\r\n\r\n')
  await until(() => accepted.length === 1, 5000, 'the dial through the upstream proxy')
  const closed = new Promise<boolean>((resolve) => accepted[0].once('close', () => resolve(true)))
  client.resetAndDestroy()
  const stopped = await within(closed, 10_000, 'the abandoned dial closing')
  t.ok(stopped, 'the connection to the upstream proxy closed with the client')
  t.equal(accepted.length, 1, 'and no other was opened')
  t.equal(await metricValue('sallyport_l4_connections_total', { route: 'default/stuck', code: 'client_reset' }), 2, 'counted as a reset by the client (the HTTP/2 test counted the first)')
})
