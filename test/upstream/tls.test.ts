import t from 'tap'
import https from 'node:https'
import http2 from 'node:http2'
import type { TLSSocket } from 'node:tls'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { buildClientTls, endpointServername } from '../../lib/upstream/tls.ts'
import { cluster, clusterTls, endpoint, expectError, expectResponse, forward, listen, readBody, request } from './fixtures.ts'
import { createCa, issue } from '../helpers/pki.ts'
import { startCorpProxy } from '../helpers/corp-proxy.ts'

const ca = createCa('sallyport test CA')
const otherCa = createCa('someone else')
const server = issue(ca, { cn: 'localhost', dns: ['localhost'], ips: ['127.0.0.1'] })
const client = issue(ca, { cn: 'gateway-client', client: true })

function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}

function h1TlsServer(options: https.ServerOptions = {}): https.Server {
  return https.createServer({ key: server.keyPem, cert: server.certPem, ALPNProtocols: ['http/1.1'], ...options }, (req, res) => {
    const socket = req.socket as TLSSocket
    const peer = socket.getPeerCertificate()
    res.setHeader('x-remote-port', String(socket.remotePort))
    res.setHeader('x-sni', String(socket.servername))
    res.end(`alpn=${socket.alpnProtocol} client=${peer?.subject?.CN ?? ''}`)
  })
}

async function closeServer(s: https.Server | http2.Http2SecureServer): Promise<void> {
  if ('closeAllConnections' in s) s.closeAllConnections()
  await new Promise<void>((resolve) => s.close(() => resolve()))
}

t.test('protocol HTTP over TLS: ALPN picks http/1.1, the probe connection is reused', async (t) => {
  const s = h1TlsServer()
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const c = cluster({ endpoints: [endpoint(port)], tls: clusterTls({ caPem: ca.certPem }) })
  const r1 = expectResponse(await forward(up, request(c)))
  t.equal(r1.protocol, 'h1')
  t.equal(await readBody(r1.body), 'alpn=http/1.1 client=')
  t.equal(r1.headers['x-sni'], 'localhost', 'SNI is the configured servername, not the IP')
  await turn()
  const r2 = expectResponse(await forward(up, request(c)))
  await readBody(r2.body)
  t.equal(r2.headers['x-remote-port'], r1.headers['x-remote-port'], 'the ALPN probe socket became the pooled connection')
  t.equal(up.stats()[0].protocol, 'h1')
})

t.test('protocol HTTP over TLS: ALPN picks h2; protocol HTTP2 speaks h2', async (t) => {
  const s = http2.createSecureServer({ key: server.keyPem, cert: server.certPem, allowHTTP1: true }, (req, res) => {
    res.setHeader('x-remote-port', String(req.socket.remotePort))
    res.end(`v=${req.httpVersion} authority=${req.headers[':authority']}`)
  })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const auto = cluster({ endpoints: [endpoint(port)], tls: clusterTls({ caPem: ca.certPem }) })
  const r1 = expectResponse(await forward(up, request(auto, { authority: 'api.example' })))
  t.equal(r1.protocol, 'h2')
  t.equal(await readBody(r1.body), 'v=2.0 authority=api.example')
  const r2 = expectResponse(await forward(up, request(auto)))
  await readBody(r2.body)
  t.equal(r2.headers['x-remote-port'], r1.headers['x-remote-port'], 'one session, many streams')

  const h2 = cluster({ protocol: 'HTTP2', endpoints: [endpoint(port)], tls: clusterTls({ caPem: ca.certPem }) })
  const r3 = expectResponse(await forward(up, request(h2)))
  t.equal(r3.protocol, 'h2')
  t.equal(await readBody(r3.body), 'v=2.0 authority=localhost')
})

t.test('verification failures → SP_ERR_UPSTREAM_TLS with the reason class', async (t) => {
  const s = h1TlsServer()
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })

  const wrongHost = cluster({ endpoints: [endpoint(port)], tls: clusterTls({ caPem: ca.certPem, servername: 'api.other.test', verifyHostname: 'api.other.test' }) })
  const e1 = expectError(await forward(up, request(wrongHost)))
  t.equal(e1.code, 'SP_ERR_UPSTREAM_TLS')
  t.equal(e1.status, 502)
  t.match(e1.message, /hostname_mismatch/)
  t.ok(e1.cause instanceof Error)

  const unknownCa = cluster({ endpoints: [endpoint(port)], tls: clusterTls({ caPem: otherCa.certPem }) })
  const e2 = expectError(await forward(up, request(unknownCa)))
  t.equal(e2.code, 'SP_ERR_UPSTREAM_TLS')
  t.match(e2.message, /unknown_ca/)

  const systemTrust = cluster({ endpoints: [endpoint(port)], tls: clusterTls({ caPem: null }) })
  t.equal(expectError(await forward(up, request(systemTrust))).code, 'SP_ERR_UPSTREAM_TLS', 'a private CA is not in the system store')

  const sans = cluster({ endpoints: [endpoint(port)], tls: clusterTls({ caPem: ca.certPem, verifyHostname: 'nope.test', subjectAltNames: [{ type: 'Hostname', value: 'localhost' }] }) })
  const ok = expectResponse(await forward(up, request(sans)))
  await readBody(ok.body)
  t.equal(ok.status, 200, 'subjectAltNames replace the hostname check')

  const skip = cluster({ endpoints: [endpoint(port)], tls: clusterTls({ caPem: otherCa.certPem, insecureSkipVerify: true }) })
  const skipped = expectResponse(await forward(up, request(skip)))
  await readBody(skipped.body)
  t.equal(skipped.status, 200, 'insecureSkipVerify connects anyway')

  const pinned = cluster({ endpoints: [endpoint(port)], tls: clusterTls({ caPem: ca.certPem, spkiPins: ['AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='] }) })
  const e3 = expectError(await forward(up, request(pinned)))
  t.equal(e3.code, 'SP_ERR_UPSTREAM_TLS')
  t.match(e3.message, /pin_mismatch/)
})

t.test('mTLS: the upstream sees the client certificate', async (t) => {
  const s = h1TlsServer({ requestCert: true, rejectUnauthorized: true, ca: ca.certPem })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const c = cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)], tls: clusterTls({ caPem: ca.certPem, certPem: client.certPem, keyPem: client.keyPem }) })
  const res = expectResponse(await forward(up, request(c)))
  t.equal(await readBody(res.body), 'alpn=http/1.1 client=gateway-client')

  const anonymous = cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)], tls: clusterTls({ caPem: ca.certPem }) })
  const err = expectError(await forward(up, request(anonymous)))
  t.ok(err.code === 'SP_ERR_UPSTREAM_TLS' || err.code === 'SP_ERR_UPSTREAM_RESET', `no client cert refused (${err.code})`)
})

t.test('a server that asks to renegotiate (TLS 1.2) is refused: the chain and name are checked once, after the first handshake', async (t) => {
  // Envoy's default (allow_renegotiation: false). Node verifies the peer after the first
  // handshake only; a renegotiation could bring a certificate nobody checked.
  const s = https.createServer({ key: server.keyPem, cert: server.certPem, maxVersion: 'TLSv1.2' }, (req, res) => {
    (req.socket as TLSSocket).renegotiate({ rejectUnauthorized: false }, (err) => { if (err === null) res.end('renegotiated') })
  })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const c = cluster({ endpoints: [endpoint(port)], tls: clusterTls({ caPem: ca.certPem }) })
  // Refused with a no_renegotiation alert, the server ends the connection: the request fails
  // as a TLS failure. Before, it was answered over the renegotiated, unchecked session.
  const out = await forward(up, request(c))
  t.equal(out.kind, 'error', `no answer over a renegotiated session`)
  if (out.kind === 'error') t.equal(out.err.code, 'SP_ERR_UPSTREAM_TLS')
})

t.test('TLS material OpenSSL refuses (a key that is not its certificate\'s) fails each connection as a TLS failure, never an exception out of the pool', async (t) => {
  const s = h1TlsServer()
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const mismatched = clusterTls({ caPem: ca.certPem, certPem: client.certPem, keyPem: server.keyPem })
  for (let i = 0; i < 2; i++) {
    const err = expectError(await forward(up, request(cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)], tls: mismatched }))))
    t.equal(err.code, 'SP_ERR_UPSTREAM_TLS', `connection ${i + 1}: refused as a TLS failure`)
  }
})

t.test('TLS material is made into one SecureContext per cluster, not parsed again by each connection', async (t) => {
  const made = buildClientTls(clusterTls({ caPem: ca.certPem, certPem: client.certPem, keyPem: client.keyPem }))
  t.ok(made.options.secureContext !== undefined, 'one context, given to every connection')
  t.equal(made.options.ca, undefined, 'no PEM left for tls.connect to parse again')
  t.equal(made.options.key, undefined)
  t.equal(made.clientCert, true)
  t.equal(buildClientTls(clusterTls({ caPem: ca.certPem })).clientCert, false)
  const mismatched = buildClientTls(clusterTls({ caPem: ca.certPem, certPem: client.certPem, keyPem: server.keyPem }))
  t.equal(mismatched.options.secureContext, undefined, 'material OpenSSL refuses: no context, each connection fails (test above)')
})

t.test('through an upstream proxy, a backend named by its IP is verified against that IP, not against the proxy\'s name', async (t) => {
  // Node checks the name of tls.connect({ socket }) against the socket's own
  // host when no servername is sent: the tunnel's, i.e. the proxy's. A backend
  // reached by IP (no SNI may be sent) then passed with a certificate for the
  // proxy's name, and failed with one for its own address.
  const corp = await startCorpProxy(t)
  const proxy = { host: 'localhost', port: corp.port, authorization: null }
  const forProxyName = issue(ca, { cn: 'localhost', dns: ['localhost'] })
  const forAddress = issue(ca, { cn: '127.0.0.1', ips: ['127.0.0.1'] })
  const up = createUpstreams()
  t.teardown(() => up.close())
  const byIp = clusterTls({ caPem: ca.certPem, servername: null, verifyHostname: null })
  for (const [leaf, expected] of [[forProxyName, 'refused'], [forAddress, 'accepted']] as const) {
    const s = https.createServer({ key: leaf.keyPem, cert: leaf.certPem }, (_req, res) => res.end('ok'))
    const port = await listen(s)
    t.teardown(() => closeServer(s))
    const out = await forward(up, request(cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)], tls: byIp, upstreamProxy: proxy })))
    if (expected === 'refused') {
      t.equal(out.kind, 'error', 'a certificate for the proxy\'s name does not pass for 127.0.0.1')
      if (out.kind === 'error') t.match(out.err.message, /hostname_mismatch/)
    } else {
      t.equal(out.kind, 'response', `a certificate for 127.0.0.1 passes (${out.kind === 'error' ? out.err.message : ''})`)
      if (out.kind === 'response') t.equal(await readBody(out.res.body), 'ok')
    }
  }
  t.same(corp.tunnels.map((target) => target.split(':')[0]), ['127.0.0.1', '127.0.0.1'], 'both went through the proxy')
})

t.test('an endpoint\'s own name is its TLS server name only when the cluster names none', async (t) => {
  // A Backend with several fqdn endpoints compiles to TLS without a name (no
  // single Backend hostname); each endpoint's connections send and verify its own.
  const unnamed = clusterTls({ servername: null, verifyHostname: null })
  const resolved = { host: '127.0.0.1', port: 443, kind: 'ip' as const, weight: 1, zone: null, name: 'A.example.test' }
  const named = { host: 'b.example.test', port: 443, kind: 'hostname' as const, weight: 1, zone: null }
  t.equal(endpointServername(unnamed, resolved), 'a.example.test', 'an address keeps the name it was resolved from')
  t.equal(endpointServername(unnamed, named), 'b.example.test', 'a name the connector (or an upstream proxy) resolves')
  t.equal(endpointServername(unnamed, { ...named, host: '10.0.0.1' }), null, 'an address in a name\'s place is never SNI')
  t.equal(endpointServername(unnamed, endpoint(443)), null, 'a static address has no name')
  t.equal(endpointServername(clusterTls({ servername: 'api.test', verifyHostname: 'api.test' }), resolved), null, 'sni / validation.hostname wins for every endpoint')
  t.equal(endpointServername(clusterTls({ servername: null, verifyHostname: '10.0.0.1' }), resolved), null, 'an IP validation.hostname wins too')
  t.equal(endpointServername(clusterTls({ servername: null, verifyHostname: null, verifyName: false }), resolved), null, 'mesh TLS sends no name')
  t.equal(endpointServername(null, resolved), null)
  const made = buildClientTls(unnamed, 'a.example.test')
  t.equal(made.servername, 'a.example.test', 'sent as SNI')
  t.equal(buildClientTls(clusterTls({ servername: 'api.test' }), 'a.example.test').servername, 'api.test', 'the cluster\'s own name first')
  t.equal(buildClientTls(unnamed).servername, undefined, 'no name: no SNI, as before')
})
