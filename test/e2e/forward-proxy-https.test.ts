// CONNECT on an HTTPS listener that shares its port with another (GEP-3567):
// the TLS connection serves the listener its SNI selected, so a CONNECT to a
// host that selects another listener of the port is answered 421 Misdirected
// Request, as a request for that host would be — over HTTP/1.1 and HTTP/2.
// Without the check a client whose certificate (or whose lack of one) only the
// first listener accepts could tunnel to the other listener's destinations.
import t from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import tls from 'node:tls'
import { createCa, serverCert } from '../helpers/pki.ts'
import { eventually, freePort, gatewayYaml, metricSum, request, startCli, tempDir, tlsSecretYaml } from './harness.ts'

const ca = createCa('connect listener CA')

function httpsListener(name: string, port: number, hostname: string): string {
  return `    - name: ${name}
      protocol: HTTPS
      port: ${port}
      hostname: "${hostname}"
      tls:
        certificateRefs: [{ name: ${name} }]
`
}

function connectRoute(name: string, hostname: string, section: string, port: number): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
  annotations: { sallyport.io/connect-ports: "443" }
spec:
  parentRefs: [{ name: egress, sectionName: ${section} }]
  hostnames: [${hostname}]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: raw, port: ${port} }]
`
}

/** HTTP/1.1 CONNECT `authority` over TLS with SNI `servername`: the status line's code and what the tunnel then reads. */
function connectH1(port: number, servername: string, authority: string): Promise<{ status: number; rest: string }> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername, ca: ca.certPem, ALPNProtocols: ['http/1.1'] }, () => {
      socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`)
    })
    let text = ''
    socket.setEncoding('utf8')
    socket.on('data', (s: string) => { text += s })
    socket.on('end', () => socket.end())
    socket.on('close', () => {
      const m = /^HTTP\/1\.1 (\d{3})/.exec(text)
      resolve({ status: m === null ? 0 : Number(m[1]), rest: text.slice(text.indexOf('\r\n\r\n') + 4) })
    })
    socket.setTimeout(5000, () => socket.destroy())
    socket.on('error', reject)
  })
}

/** HTTP/2 CONNECT `authority` over TLS with SNI `servername`: the :status, and the tunnel's bytes. */
function connectH2(port: number, servername: string, authority: string): Promise<{ status: number; rest: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`https://127.0.0.1:${port}`, { servername, ca: ca.certPem })
    session.on('error', reject)
    const stream = session.request({ ':method': 'CONNECT', ':authority': authority })
    let status = 0
    let rest = ''
    stream.on('response', (h) => { status = Number(h[':status']) })
    stream.setEncoding('utf8')
    stream.on('data', (s: string) => { rest += s })
    stream.on('error', () => {})
    stream.on('close', () => { session.close(); resolve({ status, rest }) })
    stream.end()
    stream.setTimeout(5000, () => stream.close())
  })
}

t.test('CLI: a CONNECT on an HTTPS connection for another listener\'s host is 421; for its own it tunnels', async (t) => {
  const raw = net.createServer((s) => { s.end('raw-tunnel-ok\n') })
  await new Promise<void>((resolve) => raw.listen(0, '127.0.0.1', resolve))
  t.teardown(() => raw.close())
  const rawPort = (raw.address() as net.AddressInfo).port
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const a = serverCert(ca, ['a.example.test'])
  const b = serverCert(ca, ['b.example.test'])
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, httpsListener('a', httpsPort, 'a.example.test') + httpsListener('b', httpsPort, 'b.example.test')))
  fs.writeFileSync(path.join(dir, 'secrets.yaml'), `${tlsSecretYaml('a', a.certPem, a.keyPem)}---\n${tlsSecretYaml('b', b.certPem, b.keyPem)}`)
  fs.writeFileSync(path.join(dir, 'routes.yaml'), `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: raw, namespace: default }
spec:
  endpoints:
    - ip: { address: 127.0.0.1, port: ${rawPort} }
---
${connectRoute('a', 'a.example.test', 'a', rawPort)}---
${connectRoute('b', 'b.example.test', 'b', rawPort)}`)
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  t.same(await connectH1(httpsPort, 'a.example.test', 'a.example.test:443'), { status: 200, rest: 'raw-tunnel-ok\n' }, 'HTTP/1.1: its own listener\'s host tunnels')
  const h1 = await connectH1(httpsPort, 'a.example.test', 'b.example.test:443')
  t.equal(h1.status, 421, 'HTTP/1.1: another listener\'s host is 421 Misdirected Request')
  t.notMatch(h1.rest, /raw-tunnel-ok/, 'nothing was tunnelled')
  t.same(await connectH1(httpsPort, 'b.example.test', 'b.example.test:443'), { status: 200, rest: 'raw-tunnel-ok\n' }, 'the other listener, on a connection made for it')

  t.same(await connectH2(httpsPort, 'a.example.test', 'a.example.test:443'), { status: 200, rest: 'raw-tunnel-ok\n' }, 'HTTP/2: its own listener\'s host tunnels')
  const h2 = await connectH2(httpsPort, 'a.example.test', 'b.example.test:443')
  t.equal(h2.status, 421, 'HTTP/2: another listener\'s host is 421')
  t.notMatch(h2.rest, /raw-tunnel-ok/, 'nothing was tunnelled')

  const absolute = await new Promise<string>((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: httpsPort, servername: 'a.example.test', ca: ca.certPem, ALPNProtocols: ['http/1.1'] }, () => {
      socket.end('GET http://b.example.test/ HTTP/1.1\r\nHost: b.example.test\r\nConnection: close\r\n\r\n')
    })
    let text = ''
    socket.setEncoding('utf8')
    socket.on('data', (s: string) => { text += s })
    socket.on('close', () => resolve(text))
    socket.on('error', reject)
  })
  t.match(absolute, /^HTTP\/1\.1 421 /, 'an absolute-form request for another listener\'s host is 421 too')

  const metrics = await request(`http://127.0.0.1:${adminPort}/metrics`)
  t.equal(metricSum(metrics.body, 'sallyport_forward_proxy_refusals_total', { reason: 'misdirected' }), 2, 'counted as misdirected refusals')
})
