// `sallyport serve` with TCP and TLS listeners from YAML: a TCPRoute to a
// plain Backend, a TCPRoute to a Backend with TLS (origination verified by
// the upstream), and a TLSRoute in passthrough routed by a wildcard SNI, with
// the client verifying the upstream's own certificate through the gateway.

import t, { type Test } from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import tls from 'node:tls'
import { createCa, serverCert } from '../helpers/pki.ts'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'

function backend(name: string, port: number, tlsBlock = ''): string {
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
${tlsBlock}---
`
}

function l4Route(kind: 'TCPRoute' | 'TLSRoute', name: string, section: string, backendName: string, port: number, hostnames: readonly string[] = []): string {
  return `apiVersion: gateway.networking.k8s.io/v1alpha2
kind: ${kind}
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs:
    - name: egress
      sectionName: ${section}
${hostnames.length > 0 ? `  hostnames: [${hostnames.map((h) => `"${h}"`).join(', ')}]\n` : ''}  rules:
    - backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: ${backendName}
          port: ${port}
---
`
}

async function listen(t: Test, server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const sockets = new Set<net.Socket>()
  server.on('connection', (s: net.Socket) => { sockets.add(s); s.once('close', () => sockets.delete(s)) })
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  return (server.address() as net.AddressInfo).port
}

/** Sends `message`, half-closes, returns everything received until the gateway's FIN (bounded). */
function exchange(socket: net.Socket, message: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = ''
    const timer = setTimeout(() => { socket.destroy(); reject(new Error('exchange timed out')) }, 10_000)
    socket.setEncoding('utf8')
    socket.on('data', (s: string) => { out += s })
    socket.on('end', () => { clearTimeout(timer); socket.end(); resolve(out) })
    socket.on('error', (err) => { clearTimeout(timer); reject(err) })
    socket.end(message)
  })
}

t.test('serve: TCPRoute and TLSRoute from YAML', async (t) => {
  const ca = createCa('e2e l4 CA')
  // Plain TCP echo (answers on the client's FIN: half-close through the gateway).
  const echo = net.createServer({ allowHalfOpen: true }, (s) => {
    let got = ''
    s.on('error', () => {})
    s.on('data', (c: Buffer) => { got += c.toString() })
    s.on('end', () => s.end(`echo:${got}`))
  })
  const echoPort = await listen(t, echo)
  // TLS upstream for origination: a certificate for upstream.test.
  const originCert = serverCert(ca, ['upstream.test'])
  const origin = tls.createServer({ cert: originCert.certPem, key: originCert.keyPem, allowHalfOpen: true }, (s) => {
    s.on('error', () => {})
    s.on('data', (c: Buffer) => s.write(`origin:${c.toString()}`))
    s.on('end', () => s.end())
  })
  const originPort = await listen(t, origin)
  // TLS upstream for passthrough: its own certificate, which the client verifies.
  const passCert = serverCert(ca, ['*.example.com'])
  const pass = tls.createServer({ cert: passCert.certPem, key: passCert.keyPem, allowHalfOpen: true }, (s) => {
    s.on('error', () => {})
    s.on('data', (c: Buffer) => s.write(`pass(${s.servername}):${c.toString()}`))
    s.on('end', () => s.end())
  })
  const passPort = await listen(t, pass)

  const [httpPort, tcpPort, originListener, tlsPort, adminPort] = [await freePort(), await freePort(), await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, `    - name: tcp
      protocol: TCP
      port: ${tcpPort}
    - name: tcp-origin
      protocol: TCP
      port: ${originListener}
    - name: tls
      protocol: TLS
      port: ${tlsPort}
      tls:
        mode: Passthrough
`))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), [
    backend('echo', echoPort),
    backend('origin', originPort, `  tls:
    sni: upstream.test
    caCertificateRefs:
      - kind: ConfigMap
        name: origin-ca
`),
    backend('pass', passPort),
    `apiVersion: v1
kind: ConfigMap
metadata:
  name: origin-ca
  namespace: default
data:
  ca.crt: |
${ca.certPem.trim().split(/\r?\n/).map((l) => `    ${l}`).join('\n')}
---
`,
  ].join(''))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [
    l4Route('TCPRoute', 'plain', 'tcp', 'echo', echoPort),
    l4Route('TCPRoute', 'originate', 'tcp-origin', 'origin', originPort),
    l4Route('TLSRoute', 'passthrough', 'tls', 'pass', passPort, ['*.example.com']),
  ].join(''))

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'info', '--access-log', 'on', '--allow-destination-cidr', '127.0.0.0/8'])
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  const connect = (port: number): Promise<net.Socket> => new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true }, () => resolve(s))
    s.once('error', reject)
  })

  t.equal(await exchange(await connect(tcpPort), 'hello tcp'), 'echo:hello tcp', 'TCPRoute: bytes through, half-close honoured')
  t.equal(await exchange(await connect(originListener), 'hello origin'), 'origin:hello origin', 'TCPRoute to a TLS Backend: the upstream spoke TLS, verified against the CA')

  const secure = await new Promise<tls.TLSSocket>((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port: tlsPort, servername: 'db.example.com', ca: ca.certPem }, () => { s.allowHalfOpen = true; resolve(s) })
    s.once('error', reject)
  })
  t.equal(String(secure.getPeerCertificate().subject?.CN), '*.example.com', 'passthrough: the client verified the upstream certificate')
  t.equal(await exchange(secure, 'hello tls'), 'pass(db.example.com):hello tls', 'TLSRoute: routed by the wildcard SNI, never terminated')

  const m = await request(`${admin}/metrics`)
  t.match(m.body, /sallyport_l4_connections_total\{[^}]*route="default\/plain"[^}]*code="ok"\} 1/)
  t.match(m.body, /sallyport_l4_connections_total\{[^}]*route="default\/passthrough"[^}]*\} 1/)
  await cli.waitFor(/"msg":"connection"[^\n]*"protocol":"tls"|"protocol":"tls"[^\n]*"msg":"connection"/, 5000)
  t.pass('access log line per connection')
})
