// HTTPS listeners at the gateway's front, through the CLI: a client verified by
// frontend validation (GEP-91) is attributed by its certificate's SPIFFE ID on
// HTTP/1.1 and HTTP/2 alike (access line and request metrics), a client that
// went away mid-request included; listeners sharing a port are kept apart by
// the TLS server name (GEP-3567: 421 Misdirected Request, OverlappingTLSConfig).
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import https from 'node:https'
import tls from 'node:tls'
import path from 'node:path'
import { createCa, clientCert, serverCert, type Leaf, type TestCa } from '../helpers/pki.ts'
import { backendYaml, caConfigMapYaml, eventually, freePort, metricSum, startCli, tempDir, tlsSecretYaml, type Cli } from './harness.ts'
import { get, recorder } from './extensions-helpers.ts'

const tlsSecret = (name: string, leaf: Leaf): string => tlsSecretYaml(name, leaf.certPem, leaf.keyPem)
const caConfigMap = (name: string, ca: TestCa): string => caConfigMapYaml(name, ca.certPem)

function httpRoute(name: string, gateway: string, hostname: string, backend: string, port: number, sectionName = ''): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: default }
spec:
  parentRefs: [{ name: ${gateway}${sectionName === '' ? '' : `, sectionName: ${sectionName}`} }]
  hostnames: [${hostname}]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${backend}, port: ${port} }]
`
}

const CLASS = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
`

interface Answer { readonly status: number; readonly body: string }

/** One HTTP/1.1 request over TLS on a fresh connection. */
function h1(port: number, servername: string, ca: string, host: string, reqPath: string, client: Leaf | null = null): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request({
      host: '127.0.0.1', port, path: reqPath, servername, ca, agent: false, headers: { host },
      ...(client === null ? {} : { cert: client.certPem, key: client.keyPem }),
    }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (s: string) => { body += s }).on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.setTimeout(10000, () => req.destroy(new Error('timeout')))
    req.on('error', reject)
    req.end()
  })
}

/** An HTTP/2 session over TLS, connected. */
async function h2Session(t: Test, port: number, servername: string, ca: string, client: Leaf | null = null): Promise<http2.ClientHttp2Session> {
  const session = http2.connect(`https://127.0.0.1:${port}`, { servername, ca, ...(client === null ? {} : { cert: client.certPem, key: client.keyPem }) })
  session.on('error', () => {})
  t.teardown(() => { session.destroy() })
  await new Promise<void>((resolve, reject) => { session.once('connect', () => resolve()); session.once('error', reject) })
  return session
}

function h2(session: http2.ClientHttp2Session, authority: string, reqPath: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const s = session.request({ ':path': reqPath, ':authority': authority })
    let status = 0
    let body = ''
    s.setEncoding('utf8')
    s.on('response', (h) => { status = Number(h[':status']) })
    s.on('data', (c: string) => { body += c })
    s.on('error', reject)
    s.on('close', () => resolve({ status, body }))
  })
}

/** The access line of the request to `reqPath` (one JSON object), parsed. */
async function lineFor(cli: Cli, reqPath: string): Promise<Record<string, unknown>> {
  const escaped = reqPath.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  const text = await cli.waitFor(new RegExp(`\\{[^\\n]*"component":"access"[^\\n]*"path":"${escaped}"[^\\n]*\\}`), 5000)
  return JSON.parse(text) as Record<string, unknown>
}

const serverCa = createCa('gateway CA')
const clientCa = createCa('workload CA')
const workload = clientCert(clientCa, 'app', { uris: ['spiffe://td/ns/team-a/sa/app'] })

t.test('CLI: a verified client certificate\'s SPIFFE ID attributes requests on HTTP/1.1 and HTTP/2', async (t) => {
  // On HTTP/2 the access line and the metrics had clientNamespace / clientServiceAccount null
  // (namespace=""): the identity was read from the stream's session once the stream had closed,
  // when node no longer links the two. Routes with an Authorization or RateLimit extension got it
  // (read while the stream was open); a route without any is what this checks.
  const up = await recorder(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), [CLASS, tlsSecret('gw-cert', serverCert(serverCa, ['plain.example.test'])), caConfigMap('client-ca', clientCa), `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: egress
  namespace: default
  annotations: { sallyport.io/allow-destination-cidrs: 127.0.0.0/8 }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: https, protocol: HTTPS, port: ${port}, tls: { certificateRefs: [{ name: gw-cert }] } }
  tls:
    frontend:
      default:
        validation: { caCertificateRefs: [{ group: "", kind: ConfigMap, name: client-ca }], mode: AllowValidOnly }
`].join('---\n'))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', up.port), httpRoute('plain', 'egress', 'plain.example.test', 'up', up.port)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  t.equal((await h1(port, 'plain.example.test', serverCa.certPem, 'plain.example.test', '/via-h1', workload)).status, 200)
  t.match(await lineFor(cli, '/via-h1'), { protocol: 'h1', status: 200, clientNamespace: 'team-a', clientServiceAccount: 'app' }, 'HTTP/1.1: attributed')

  const session = await h2Session(t, port, 'plain.example.test', serverCa.certPem, workload)
  t.equal((await h2(session, 'plain.example.test', '/via-h2')).status, 200)
  t.equal((await h2(session, 'plain.example.test', '/via-h2-again')).status, 200)
  session.close()
  t.match(await lineFor(cli, '/via-h2'), { protocol: 'h2', status: 200, clientNamespace: 'team-a', clientServiceAccount: 'app' }, 'HTTP/2: attributed')
  t.match(await lineFor(cli, '/via-h2-again'), { protocol: 'h2', clientNamespace: 'team-a', clientServiceAccount: 'app' }, 'and every stream of the session')

  const metrics = (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body
  t.equal(metricSum(metrics, 'sallyport_downstream_requests_total', { route: 'default/plain', namespace: 'team-a', service_account: 'app' }), 3, 'the metrics count all three under the client')
  t.equal(metricSum(metrics, 'sallyport_downstream_requests_total', { route: 'default/plain', namespace: '' }), 0, 'none unattributed')

  // A client that goes away mid-request: its line is written once its connection is gone.
  // On HTTP/1.1 the certificate was read from the socket only then, and a closed TLS socket
  // has none to give (getPeerCertificate() is null): the recording threw.
  up.handler = (req, res) => { if (!req.url.startsWith('/hang')) res.end('{}') }
  for (const protocol of ['h1', 'h2'] as const) {
    const seen = up.seen.length
    const hangPath = `/hang-${protocol}`
    if (protocol === 'h1') {
      const socket = tls.connect({ host: '127.0.0.1', port, servername: 'plain.example.test', ca: serverCa.certPem, cert: workload.certPem, key: workload.keyPem, ALPNProtocols: ['http/1.1'] })
      socket.on('error', () => {})
      await new Promise<void>((resolve) => socket.once('secureConnect', () => resolve()))
      socket.write(`GET ${hangPath} HTTP/1.1\r\nHost: plain.example.test\r\n\r\n`)
      await eventually(async () => up.seen.length, (n) => n > seen, 5000, 'the upstream has the request')
      socket.destroy()
    } else {
      const gone = await h2Session(t, port, 'plain.example.test', serverCa.certPem, workload)
      gone.request({ ':path': hangPath, ':authority': 'plain.example.test' }).on('error', () => {})
      await eventually(async () => up.seen.length, (n) => n > seen, 5000, 'the upstream has the request')
      gone.destroy()
    }
    t.match(await lineFor(cli, hangPath), { protocol, status: 499, code: 'SP_ERR_CLIENT_ABORTED', clientNamespace: 'team-a', clientServiceAccount: 'app' }, `${protocol}: a client gone mid-request is attributed too`)
  }
  t.equal((await h1(port, 'plain.example.test', serverCa.certPem, 'plain.example.test', '/after', workload)).status, 200, 'and the gateway serves on')

  // An Upgrade (WebSocket) request is attributed as any other (it had no identity at all, so an
  // Authorization rule by namespace or SPIFFE ID refused it). This upstream takes no upgrade: a 502.
  const ws = tls.connect({ host: '127.0.0.1', port, servername: 'plain.example.test', ca: serverCa.certPem, cert: workload.certPem, key: workload.keyPem, ALPNProtocols: ['http/1.1'] })
  ws.on('error', () => {})
  t.teardown(() => ws.destroy())
  await new Promise<void>((resolve) => ws.once('secureConnect', () => resolve()))
  let answer = ''
  ws.setEncoding('latin1').on('data', (d: string) => { answer += d })
  ws.write('GET /ws HTTP/1.1\r\nHost: plain.example.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n')
  await eventually(async () => answer, (a) => a.includes('\r\n\r\n'), 5000, 'an answer to the upgrade')
  ws.destroy()
  t.match(await lineFor(cli, '/ws'), { protocol: 'h1', clientNamespace: 'team-a', clientServiceAccount: 'app' }, 'an Upgrade request: attributed')
})

t.test('CLI: a request on an HTTPS connection for a host of another listener than its SNI selected gets 421 Misdirected Request', async (t) => {
  // GEP-3567: a client may reuse a connection for every name its certificate covers (HTTP/2
  // coalescing), and any client can send any Host. The listener the TLS server name selected
  // is the only one the connection serves; another listener's host is answered 421, and the
  // client opens a connection with that name. Before, Host / :authority routed to any listener
  // of the port: the wildcard listener's connection served the exact listener's routes.
  const up = await recorder(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const gateway = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: egress
  namespace: default
  annotations: { sallyport.io/allow-destination-cidrs: 127.0.0.0/8 }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: a, protocol: HTTPS, port: ${port}, hostname: a.example.test, tls: { certificateRefs: [{ name: cert-ab }] } }
    - { name: b, protocol: HTTPS, port: ${port}, hostname: b.example.test, tls: { certificateRefs: [{ name: cert-b }] } }
    - { name: wild, protocol: HTTPS, port: ${port}, hostname: "*.example.test", tls: { certificateRefs: [{ name: cert-wild }] } }
    - { name: other, protocol: HTTPS, port: ${port}, hostname: other.test, tls: { certificateRefs: [{ name: cert-other }] } }
`
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), [
    CLASS, gateway,
    // The certificate of listener a also covers b: what lets a client coalesce.
    tlsSecret('cert-ab', serverCert(serverCa, ['a.example.test', 'b.example.test'])),
    tlsSecret('cert-b', serverCert(serverCa, ['b.example.test'])),
    tlsSecret('cert-wild', serverCert(serverCa, ['*.example.test'])),
    tlsSecret('cert-other', serverCert(serverCa, ['other.test'])),
  ].join('---\n'))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [
    backendYaml('up', up.port),
    httpRoute('ra', 'egress', 'a.example.test', 'up', up.port, 'a'),
    httpRoute('rb', 'egress', 'b.example.test', 'up', up.port, 'b'),
    httpRoute('rwild', 'egress', '"*.example.test"', 'up', up.port, 'wild'),
    httpRoute('rother', 'egress', 'other.test', 'up', up.port, 'other'),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  const ca = serverCa.certPem

  // HTTP/2, one connection made for a.example.test.
  const viaA = await h2Session(t, port, 'a.example.test', ca)
  t.equal((await h2(viaA, 'a.example.test', '/h2-a-a')).status, 200, 'its own listener\'s host')
  const coalesced = await h2(viaA, 'b.example.test', '/h2-a-b')
  t.equal(coalesced.status, 421, 'listener b\'s host on a\'s connection: 421')
  t.match(coalesced.body, /misdirected request/)
  t.match(await lineFor(cli, '/h2-a-b'), { status: 421, code: 'SP_ERR_MISDIRECTED', protocol: 'h2', authority: 'b.example.test', route: '' }, 'an access line with its code')
  t.equal((await h2(viaA, 'other.test', '/h2-a-other')).status, 421, 'another listener\'s host, whatever the certificate covers')
  t.equal((await h2(viaA, 'a.example.test', '/h2-a-a2')).status, 200, 'and the connection serves its own on')
  t.equal((await h2(viaA, 'nobody.test', '/h2-a-none')).status, 404, 'a host no listener takes: no route, as before')
  // A new connection made for b.example.test is served.
  const viaB = await h2Session(t, port, 'b.example.test', ca)
  t.equal((await h2(viaB, 'b.example.test', '/h2-b-b')).status, 200)
  t.match(await lineFor(cli, '/h2-b-b'), { status: 200, route: 'httproute/default/rb/rule/0' })

  // The wildcard listener's connection: its own names, not the exact listener's.
  const viaWild = await h2Session(t, port, 'c.example.test', ca)
  t.equal((await h2(viaWild, 'c.example.test', '/h2-w-c')).status, 200)
  t.equal((await h2(viaWild, 'd.example.test', '/h2-w-d')).status, 200, 'another name of the same listener')
  t.equal((await h2(viaWild, 'b.example.test', '/h2-w-b')).status, 421, 'the exact listener\'s host: 421')
  for (const s of [viaA, viaB, viaWild]) s.close()

  // HTTP/1.1: the TLS server name and the Host field.
  t.equal((await h1(port, 'a.example.test', ca, 'a.example.test', '/h1-a-a')).status, 200)
  const h1Mis = await h1(port, 'a.example.test', ca, 'b.example.test', '/h1-a-b')
  t.equal(h1Mis.status, 421, 'HTTP/1.1: Host of another listener than the SNI\'s: 421')
  t.match(await lineFor(cli, '/h1-a-b'), { status: 421, code: 'SP_ERR_MISDIRECTED', protocol: 'h1' })
  t.equal((await h1(port, 'c.example.test', ca, 'B.Example.Test:443', '/h1-w-b')).status, 421, 'case and port aside')

  // No SNI (a client of the gateway's IP address): nothing to tell the listener by, Host routes.
  const noSni = await new Promise<Answer>((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, path: '/h1-nosni-b', ca, agent: false, headers: { host: 'b.example.test' } }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (s: string) => { body += s }).on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on('error', reject)
    req.end()
  })
  t.equal(noSni.status, 200, 'no SNI: routed by Host')
  t.match(await lineFor(cli, '/h1-nosni-b'), { status: 200, route: 'httproute/default/rb/rule/0' })

  const metrics = (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body
  t.equal(metricSum(metrics, 'sallyport_downstream_requests_total', { code: '421' }), 5, 'the 421s count in the request metrics')

  // Status: the wildcard overlaps a and b; other.test overlaps nothing.
  const dump = JSON.parse((await get(`http://127.0.0.1:${adminPort}/config_dump`, 'x')).body) as { status: Array<{ kind: string; name: string; listeners: Array<{ name: string; conditions: Array<{ type: string; status: string; reason: string }> }> }> }
  const listeners = dump.status.find(s => s.kind === 'Gateway' && s.name === 'egress')?.listeners ?? []
  const overlapping = (name: string): string | undefined => {
    const c = listeners.find(l => l.name === name)?.conditions.find(x => x.type === 'OverlappingTLSConfig')
    return c === undefined ? undefined : `${c.status}/${c.reason}`
  }
  t.same(['a', 'b', 'wild', 'other'].map(overlapping), ['True/OverlappingHostnames', 'True/OverlappingHostnames', 'True/OverlappingHostnames', undefined])
})
