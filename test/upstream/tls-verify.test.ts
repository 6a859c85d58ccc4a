// Upstream TLS verification against real node:tls / https / http2 servers:
// every failure reason class, trust (pinned bundles replace system trust,
// intermediates served by the upstream), SANs (hostname, SPIFFE URI), SPKI
// pins, mTLS as seen by the upstream, minimum version, session resumption.

import t, { type Test } from 'tap'
import https from 'node:https'
import http2 from 'node:http2'
import type { TLSSocket } from 'node:tls'
import { createHash, X509Certificate } from 'node:crypto'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { upstreamTlsHandshakeErrors } from '../../lib/observe/upstream-metrics.ts'
import type { Cluster, ClusterTls } from '../../lib/compile/table.ts'
import type { Upstreams } from '../../lib/upstream/types.ts'
import { cluster, clusterTls, endpoint, expectError, expectResponse, forward, listen, readBody, request } from './fixtures.ts'
import {
  clientCert, createCa, createIntermediate, expiredCert, issue, notYetValidCert, serverCert, serverCertWithKey, spkiPin,
  type KeyedLeaf, type Leaf,
} from '../helpers/pki.ts'

const root = createCa('verify root')
const inter = createIntermediate(root, 'verify intermediate')
const other = createCa('someone else')
const good = serverCert(inter, ['api.test'], { uris: ['spiffe://cluster.local/ns/pay/sa/api'] })
const gatewayClient = clientCert(inter, 'gateway-client')
const strangerClient = clientCert(other, 'stranger')

function server(leaf: Leaf | KeyedLeaf, options: https.ServerOptions = {}, cert = leaf.fullChainPem): https.Server {
  return https.createServer({ key: leaf.keyPem, cert, ALPNProtocols: ['http/1.1'], ...options }, (req, res) => {
    const socket = req.socket as TLSSocket
    const peer = socket.getPeerCertificate()
    res.setHeader('x-resumed', String(socket.isSessionReused()))
    res.setHeader('x-tls', String(socket.getProtocol()))
    res.end(`client=${peer?.subject?.CN ?? ''}`)
  })
}

const h2Sessions = new WeakMap<http2.Http2SecureServer, Set<http2.ServerHttp2Session>>()

function track(s: http2.Http2SecureServer): http2.Http2SecureServer {
  const sessions = new Set<http2.ServerHttp2Session>()
  h2Sessions.set(s, sessions)
  s.on('session', (session) => { sessions.add(session); session.on('close', () => sessions.delete(session)) })
  return s
}

async function close(s: https.Server | http2.Http2SecureServer): Promise<void> {
  if ('closeAllConnections' in s) s.closeAllConnections()
  else for (const session of h2Sessions.get(s) ?? []) session.destroy()
  await new Promise<void>((resolve) => s.close(() => resolve()))
}

interface Setup { readonly up: Upstreams; readonly port: number }

async function setup(t: Test, s: https.Server | http2.Http2SecureServer): Promise<Setup> {
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(s) })
  return { up, port }
}

function tlsCluster(port: number, over: Partial<ClusterTls>, protocol: Cluster['protocol'] = 'HTTP11'): Cluster {
  return cluster({ protocol, endpoints: [endpoint(port)], tls: clusterTls({ servername: 'api.test', verifyHostname: 'api.test', caPem: root.certPem, ...over }) })
}

async function ok(t: Test, up: Upstreams, c: Cluster, what: string): Promise<string> {
  const o = await forward(up, request(c))
  if (o.kind !== 'response') { t.fail(`${what}: ${o.kind === 'error' ? o.err.message : o.kind}`); return '' }
  const body = await readBody(o.res.body)
  t.equal(o.res.status, 200, what)
  return body
}

async function reason(up: Upstreams, c: Cluster): Promise<string | null> {
  const err = expectError(await forward(up, request(c)))
  if (err.code !== 'SP_ERR_UPSTREAM_TLS') return `${err.code}: ${err.message}`
  return err.detail
}

async function counted(backend: string, why: string): Promise<number> {
  const m = await upstreamTlsHandshakeErrors.get()
  return m.values.find((v) => v.labels.backend === backend && v.labels.reason === why)?.value ?? 0
}

t.test('a chain served with its intermediate verifies against the pinned root only', async (t) => {
  const { up, port } = await setup(t, server(good))
  t.equal(await ok(t, up, tlsCluster(port, {}), 'leaf + intermediate served, root pinned'), 'client=')
  t.equal(await reason(up, tlsCluster(port, { caPem: other.certPem })), 'unknown_ca', 'a bundle that is not the issuer: unknown_ca')
  t.equal(await reason(up, tlsCluster(port, { caPem: null })), 'unknown_ca', 'system trust does not know a private CA: no fallback')
  t.equal(await reason(up, tlsCluster(port, { caPem: inter.certPem })), 'unknown_ca', 'an intermediate alone is not a trust anchor (no partial chains)')
})

t.test('a server that omits its intermediate fails unknown_ca', async (t) => {
  const { up, port } = await setup(t, server(good, {}, good.certPem))
  t.equal(await reason(up, tlsCluster(port, {})), 'unknown_ca')
})

t.test('failure reasons: hostname, expired, not yet valid, pins', async (t) => {
  const expired = expiredCert(inter, ['api.test'])
  const early = notYetValidCert(inter, ['api.test'])
  const a = await setup(t, server(good))
  const b = await setup(t, server(expired))
  const c = await setup(t, server(early))

  const wrongHost = tlsCluster(a.port, { servername: 'other.test', verifyHostname: 'other.test' })
  t.equal(await reason(a.up, wrongHost), 'hostname_mismatch')
  t.equal(await counted(wrongHost.id, 'hostname_mismatch'), 1, 'counted once per handshake, by backend and reason')
  t.equal(await reason(b.up, tlsCluster(b.port, {})), 'expired')
  t.equal(await reason(c.up, tlsCluster(c.port, {})), 'not_yet_valid')

  const pins = [spkiPin(other.certPem), spkiPin(good.certPem)]
  await ok(t, a.up, tlsCluster(a.port, { spkiPins: pins }), 'one of several pins matches (rotation)')
  await ok(t, a.up, tlsCluster(a.port, { spkiPins: [`sha256/${spkiPin(good.certPem)}`] }), 'sha256/ prefix accepted')
  const pinned = tlsCluster(a.port, { spkiPins: [spkiPin(other.certPem)] })
  t.equal(await reason(a.up, pinned), 'pin_mismatch')
  t.equal(await reason(a.up, tlsCluster(a.port, { caPem: other.certPem, spkiPins: [spkiPin(good.certPem)] })), 'unknown_ca', 'a pin never replaces chain verification')
})

t.test('SPKI pins match RSA, EC P-256 and Ed25519 keys: the sha256 of the DER SubjectPublicKeyInfo', async (t) => {
  const rsaPin = createHash('sha256').update(new X509Certificate(good.certPem).publicKey.export({ type: 'spki', format: 'der' })).digest('base64')
  t.equal(spkiPin(good.certPem), rsaPin, 'the helper pins what openssl x509 -pubkey | openssl pkey -pubin -outform der hashes')
  for (const type of ['ec', 'ed25519'] as const) {
    const leaf = serverCertWithKey(inter, ['api.test'], type)
    const { up, port } = await setup(t, server(leaf))
    await ok(t, up, tlsCluster(port, {}), `${type}: the certificate verifies without pins`)
    await ok(t, up, tlsCluster(port, { spkiPins: [spkiPin(leaf.certPem)] }), `${type}: its own SPKI pin matches`)
    await ok(t, up, tlsCluster(port, { spkiPins: [`sha256/${spkiPin(leaf.certPem)}`, spkiPin(other.certPem)] }), `${type}: among others, with the sha256/ prefix`)
    t.equal(await reason(up, tlsCluster(port, { spkiPins: [spkiPin(good.certPem)] })), 'pin_mismatch', `${type}: another key's pin does not`)
  }
})

t.test('a DNS name is never matched against the subject CN (RFC 9525 §6.3): no subjectAltName, no match', async (t) => {
  const cnOnly = issue(inter, { cn: 'api.test' })
  const { up, port } = await setup(t, server(cnOnly))
  t.equal(await reason(up, tlsCluster(port, {})), 'hostname_mismatch', 'hostname api.test against CN=api.test without SANs')
  t.equal(await reason(up, tlsCluster(port, { subjectAltNames: [{ type: 'Hostname', value: 'api.test' }] })), 'hostname_mismatch', 'nor a configured Hostname subjectAltName')
  const uriOnly = issue(inter, { cn: 'api.test', uris: ['spiffe://cluster.local/ns/pay/sa/api'] })
  const u = await setup(t, server(uriOnly))
  t.equal(await reason(u.up, tlsCluster(u.port, {})), 'hostname_mismatch', 'a URI SAN is no DNS name either')
  await ok(t, u.up, tlsCluster(u.port, { subjectAltNames: [{ type: 'URI', value: 'spiffe://cluster.local/ns/pay/sa/api' }] }), 'the URI SAN itself still matches')
})

t.test('a wildcard matches only as the whole left-most label, one label deep (RFC 9525 §6.3, as Envoy and Go)', async (t) => {
  // Node's checkServerIdentity also takes partial-label wildcards (RFC 6125's
  // `f*.example.com`, `*i.example.com`), which RFC 9525 dropped and Envoy never matched.
  const wild = await setup(t, server(serverCert(inter, ['*.wild.test'])))
  await ok(t, wild.up, tlsCluster(wild.port, { servername: 'api.wild.test', verifyHostname: 'api.wild.test' }), '*.wild.test names api.wild.test')
  await ok(t, wild.up, tlsCluster(wild.port, { servername: 'api.wild.test', verifyHostname: 'API.Wild.Test' }), 'whatever the case')
  t.equal(await reason(wild.up, tlsCluster(wild.port, { servername: 'a.b.wild.test', verifyHostname: 'a.b.wild.test' })), 'hostname_mismatch', 'not two labels deep')
  t.equal(await reason(wild.up, tlsCluster(wild.port, { servername: 'wild.test', verifyHostname: 'wild.test' })), 'hostname_mismatch', 'not the bare parent')
  const partial = await setup(t, server(serverCert(inter, ['a*.p.test', '*i.p.test', 'b*d.p.test'])))
  for (const name of ['api.p.test', 'pi.p.test', 'bad.p.test']) {
    t.equal(await reason(partial.up, tlsCluster(partial.port, { servername: name, verifyHostname: name })), 'hostname_mismatch', `${name}: a partial-label wildcard names nothing`)
    t.equal(await reason(partial.up, tlsCluster(partial.port, { subjectAltNames: [{ type: 'Hostname', value: name }] })), 'hostname_mismatch', `${name}: nor as a configured subjectAltName`)
  }
  const mixed = await setup(t, server(serverCert(inter, ['a*.p.test', 'api.test'])))
  await ok(t, mixed.up, tlsCluster(mixed.port, {}), 'the exact name beside a partial wildcard still matches')
})

t.test('subjectAltNames: Hostname and URI (SPIFFE ID) replace the hostname check', async (t) => {
  const { up, port } = await setup(t, server(good))
  await ok(t, up, tlsCluster(port, { verifyHostname: 'nope.test', subjectAltNames: [{ type: 'URI', value: 'spiffe://cluster.local/ns/pay/sa/api' }] }), 'SPIFFE URI SAN matches')
  await ok(t, up, tlsCluster(port, { verifyHostname: 'nope.test', subjectAltNames: [{ type: 'Hostname', value: 'nope.test' }, { type: 'Hostname', value: 'api.test' }] }), 'any listed hostname matches')
  t.equal(await reason(up, tlsCluster(port, { subjectAltNames: [{ type: 'URI', value: 'spiffe://cluster.local/ns/pay/sa/other' }] })), 'hostname_mismatch', 'a different SPIFFE ID is refused')
  t.equal(await reason(up, tlsCluster(port, { subjectAltNames: [{ type: 'URI', value: 'spiffe://cluster.local/ns/pay/sa/ap' }] })), 'hostname_mismatch', 'URI SANs compare exactly, not by prefix')
})

t.test('insecureSkipVerify connects to anything, and only then', async (t) => {
  const { up, port } = await setup(t, server(serverCert(other, ['x.test'])))
  await ok(t, up, tlsCluster(port, { insecureSkipVerify: true }), 'verification off')
  t.equal(await reason(up, tlsCluster(port, {})), 'unknown_ca')
})

t.test('mTLS: the upstream sees our client certificate (h1 and h2); refusals are client_cert_rejected', async (t) => {
  const mtls = { requestCert: true, rejectUnauthorized: true, ca: root.certPem }
  const h1 = await setup(t, server(good, mtls))
  const body = await ok(t, h1.up, tlsCluster(h1.port, { certPem: gatewayClient.fullChainPem, keyPem: gatewayClient.keyPem }), 'client cert (with its intermediate) accepted')
  t.equal(body, 'client=gateway-client', 'the upstream saw the gateway certificate')
  // Node servers judge client certificates after the handshake and then just close: with a
  // certificate of ours we wait for the TLS 1.3 verdict (ticket or close) and call a close
  // client_cert_rejected; without one we do not wait, and the refusal is a reset of the request.
  // (OpenSSL-style servers refuse in the handshake: see tls-openssl.test.ts.)
  const anonymous = expectError(await forward(h1.up, request(tlsCluster(h1.port, {}))))
  t.ok(anonymous.code === 'SP_ERR_UPSTREAM_RESET' || anonymous.detail === 'client_cert_rejected', `no client certificate refused (${anonymous.code})`)
  t.equal(await reason(h1.up, tlsCluster(h1.port, { certPem: strangerClient.certPem, keyPem: strangerClient.keyPem })), 'client_cert_rejected', 'a client certificate the upstream does not trust')

  const s2 = track(http2.createSecureServer({ key: good.keyPem, cert: good.fullChainPem, ...mtls }, (req, res) => {
    const peer = (req.socket as TLSSocket).getPeerCertificate()
    res.end(`h2 client=${peer?.subject?.CN ?? ''}`)
  }))
  const h2 = await setup(t, s2)
  t.equal(await ok(t, h2.up, tlsCluster(h2.port, { certPem: gatewayClient.fullChainPem, keyPem: gatewayClient.keyPem }, 'HTTP2'), 'h2 mTLS'), 'h2 client=gateway-client')
  t.equal(await reason(h2.up, tlsCluster(h2.port, { certPem: strangerClient.certPem, keyPem: strangerClient.keyPem }, 'HTTP2')), 'client_cert_rejected', 'h2 with an untrusted client certificate')
})

t.test('minimum TLS version: 1.2 by default, 1.3 when asked', async (t) => {
  const { up, port } = await setup(t, server(good, { maxVersion: 'TLSv1.2' }))
  const o = expectResponse(await forward(up, request(tlsCluster(port, {}))))
  await readBody(o.body)
  t.equal(o.headers['x-tls'], 'TLSv1.2')
  t.equal(await reason(up, tlsCluster(port, { minVersion: 'TLSv1.3' })), 'protocol_version')
})

t.test('session resumption: a new connection of the same pool resumes the session', async (t) => {
  // `connection: close` forces a new TLS connection per request.
  for (const version of ['TLSv1.2', 'TLSv1.3'] as const) {
    const s = https.createServer({ key: good.keyPem, cert: good.fullChainPem, maxVersion: version }, (req, res) => {
      res.setHeader('connection', 'close')
      res.end(String((req.socket as TLSSocket).isSessionReused()))
    })
    const { up, port } = await setup(t, s)
    const c = cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)], tls: clusterTls({ servername: 'api.test', verifyHostname: 'api.test', caPem: root.certPem }) })
    const seen: string[] = []
    for (let i = 0; i < 3; i++) {
      seen.push(await ok(t, up, c, `request ${i}`))
      await new Promise((r) => setTimeout(r, 20))
    }
    t.equal(seen[0], 'false', `${version}: first connection is a full handshake`)
    t.ok(seen.slice(1).includes('true'), `${version}: later connections resume (${seen.join(',')})`)
  }
})

t.test('mesh mTLS (verifyName false): chain against the mesh bundle only, our identity presented, no SNI', async (t) => {
  const meshRoot = createCa('mesh root')
  const workload = issue(meshRoot, { cn: 'workload', uris: ['spiffe://cluster.local/ns/shop/sa/web'], ips: ['10.9.9.9'] })
  const identity = clientCert(meshRoot, 'sallyport-gateway')
  const s = https.createServer({ key: workload.keyPem, cert: workload.certPem, requestCert: true, rejectUnauthorized: true, ca: meshRoot.certPem }, (req, res) => {
    const socket = req.socket as TLSSocket
    res.end(`client=${socket.getPeerCertificate()?.subject?.CN ?? ''} sni=${String(socket.servername)} alpn=${String(socket.alpnProtocol)}`)
  })
  const { up, port } = await setup(t, s)
  const mesh = (over: Partial<ClusterTls>): Cluster => cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)], tls: clusterTls({
    servername: null, verifyHostname: null, caPem: meshRoot.certPem, certPem: identity.certPem, keyPem: identity.keyPem, verifyName: false, ocsp: 'off', alpn: ['http/1.1'], ...over,
  }) })
  t.equal(await ok(t, up, mesh({}), 'a workload certificate without any DNS name is accepted'), 'client=sallyport-gateway sni=false alpn=http/1.1')
  t.equal(await reason(up, mesh({ caPem: root.certPem })), 'unknown_ca', 'a workload outside the mesh trust bundle is refused')
})
