// HTTPS listeners: SNI certificate selection, ALPN h2 / http/1.1, frontend
// client-certificate validation. Test PKI minted at run time.

import t from 'tap'
import { createHash } from 'node:crypto'
import http from 'node:http'
import http2 from 'node:http2'
import type https from 'node:https'
import tls from 'node:tls'
import { buildTable, cluster, freePort, serverTls } from '../helpers/table-builder.ts'
import { clientCert, createCa, serverCert } from '../helpers/pki.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { echoH1, h1s, h2On, startPlane } from './fixtures.ts'
import { pattern } from '../helpers/pattern.ts'
import { metricValue } from '../helpers/metrics.ts'
import net from 'node:net'
import { issue } from '../helpers/pki.ts'

configureLogger({ level: 'silent' })

const ca = createCa()
const certA = serverCert(ca, ['a.example.com'])
const certWild = serverCert(ca, ['*.b.example.com'])
const certAny = serverCert(ca, ['fallback.example'])

t.test('SNI picks exact, wildcard, fallback; ALPN serves HTTP/1.1 and h2 on one port', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  const conf = serverTls([
    { hostname: 'a.example.com', ...certA }, { hostname: '*.b.example.com', ...certWild }, { hostname: null, ...certAny },
  ])
  await startPlane(t, buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))

  const a = await h1s(port, ca.certPem, 'a.example.com')
  t.equal(a.status, 200)
  t.equal(a.cn, 'a.example.com')
  t.equal(JSON.parse(a.body).headers['x-forwarded-proto'], 'https')
  const w = await h1s(port, ca.certPem, 'x.b.example.com')
  t.equal(w.cn, '*.b.example.com')
  const f = await h1s(port, ca.certPem, 'fallback.example')
  t.equal(f.cn, 'fallback.example')

  const session = http2.connect(`https://127.0.0.1:${port}`, { ca: ca.certPem, servername: 'a.example.com' })
  session.on('error', () => {})
  t.teardown(() => session.close())
  await new Promise<void>((resolve, reject) => { session.once('connect', () => resolve()); session.once('error', reject) })
  t.equal((session.socket as tls.TLSSocket).alpnProtocol, 'h2')
  const viaH2 = await h2On(session, { host: 'a.example.com', path: '/h2' })
  t.equal(viaH2.status, 200)
  t.equal(JSON.parse(viaH2.body).url, '/h2')
})

t.test('a trailing dot (a fully qualified name) is the same name: in SNI, in Host and in an absolute-form target', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  const conf = serverTls([{ hostname: 'a.example.com', ...certA }, { hostname: '*.b.example.com', ...certWild }, { hostname: null, ...certAny }])
  await startPlane(t, buildTable({
    [port]: {
      protocol: 'HTTPS', tls: conf, routes: [
        { name: 'a', hostnames: ['a.example.com'], rules: [{ backends: [{ cluster: 'c' }] }] },
        { name: 'w', hostnames: ['*.b.example.com'], rules: [{ backends: [{ cluster: 'c' }] }] },
      ],
    },
  }, [cluster('c', up.port)]))
  // Workloads write FQDNs (`api.example.com.`: one DNS query under ndots:5); clients send them as written.
  const a = await h1s(port, ca.certPem, 'a.example.com.')
  t.equal(a.cn, 'a.example.com', 'SNI a.example.com. selects a.example.com\'s certificate')
  t.equal(a.status, 200, 'Host a.example.com. routes as a.example.com (not a 421 or 404)')
  t.equal(JSON.parse(a.body).headers.host, 'a.example.com.', 'the Host is forwarded as the client wrote it')
  const w = await h1s(port, ca.certPem, 'x.b.example.com.', { host: 'X.B.example.com.:' + port })
  t.equal(w.cn, '*.b.example.com')
  t.equal(w.status, 200, 'a wildcard listener and route, case and port aside')
  const abs = await h1s(port, ca.certPem, 'a.example.com', { path: 'https://a.example.com./x' })
  t.equal(abs.status, 200, 'absolute-form with a trailing dot')
  t.equal(JSON.parse(abs.body).url, '/x')
  t.equal((await h1s(port, ca.certPem, 'a.example.com', { host: 'a.example.com..' })).status, 404, 'one dot is stripped, not two')
})

t.test('frontend client validation: required rejects clients without a certificate', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  const clientCa = createCa('client CA')
  const good = clientCert(clientCa, 'workload')
  const conf = serverTls([{ hostname: 'a.example.com', ...certA }], { caPem: clientCa.certPem, required: true })
  await startPlane(t, buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const ok = await h1s(port, ca.certPem, 'a.example.com', {}, { cert: good.certPem, key: good.keyPem })
  t.equal(ok.status, 200)
  await t.rejects(h1s(port, ca.certPem, 'a.example.com'), 'no client certificate: handshake refused')
  const stranger = clientCert(createCa('other'), 'stranger')
  await t.rejects(h1s(port, ca.certPem, 'a.example.com', {}, { cert: stranger.certPem, key: stranger.keyPem }), 'untrusted client certificate refused')
})

t.test('one TLS connection: plain requests, a split request body, then a WebSocket upgrade with bytes both ways', async (t) => {
  // From its first request on, a TLS connection on the fast path reads its
  // decrypted records into the shared read buffer; node's server takes over
  // at the body, and the tunnel reads it as a stream after the upgrade.
  const up = await echoH1(t)
  up.server.on('upgrade', (_req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n')
    if (head.length > 0) socket.write(head)
    socket.pipe(socket)
    socket.on('error', () => {})
  })
  const port = await freePort()
  const conf = serverTls([{ hostname: 'a.example.com', ...certA }])
  await startPlane(t, buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const socket = tls.connect({ port, host: '127.0.0.1', servername: 'a.example.com', ca: ca.certPem, ALPNProtocols: ['http/1.1'] })
  socket.on('error', () => {})
  t.teardown(() => socket.destroy())
  await new Promise<void>((r) => socket.once('secureConnect', () => r()))
  const chunks: Buffer[] = []
  socket.on('data', (c: Buffer) => { chunks.push(c) })
  const data = (): string => Buffer.concat(chunks).toString('latin1')
  const until = (what: string, ok: () => boolean): Promise<void> => new Promise((resolve, reject) => {
    const timer = setTimeout(() => { clearInterval(poll); reject(new Error(`timed out waiting for ${what}`)) }, 10_000)
    const poll = setInterval(() => { if (ok()) { clearTimeout(timer); clearInterval(poll); resolve() } }, 5)
  })
  const responses = (): number => (data().match(/^HTTP\/1\.1 200/gm) ?? []).length
  const host = 'Host: a.example.com\r\n'
  socket.write(`GET /one HTTP/1.1\r\n${host}\r\n`)
  await until('response 1', () => responses() === 1)
  socket.write(`GET /two HTTP/1.1\r\n${host}\r\n`)
  await until('response 2', () => responses() === 2)
  socket.write(`POST /three HTTP/1.1\r\n${host}Content-Length: 11\r\n\r\nhello`)
  await new Promise((r) => setTimeout(r, 30))
  socket.write(' world')
  await until('response 3', () => responses() === 3)
  t.match(data(), /"url":"\/one"[^]*"url":"\/two"[^]*"method":"POST","url":"\/three"[^]*"bytes":11/, 'answered in order; the body arrived whole')
  const before = Buffer.concat(chunks).length
  socket.write(`GET /chat HTTP/1.1\r\n${host}Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`)
  await until('101', () => Buffer.concat(chunks).indexOf('\r\n\r\n', before) !== -1)
  const all = Buffer.concat(chunks)
  const headEnd = all.indexOf('\r\n\r\n', before) + 4
  t.match(all.toString('latin1', before, headEnd), /^HTTP\/1.1 101/)
  const sent = createHash('sha256')
  const total = 1024 * 1024
  for (let i = 0; i * 65536 < total; i++) {
    const chunk = pattern(i, 65536)
    sent.update(chunk)
    if (!socket.write(chunk)) await new Promise((r) => socket.once('drain', r))
  }
  await until('the echo', () => Buffer.concat(chunks).length - headEnd >= total)
  const echoed = Buffer.concat(chunks).subarray(headEnd)
  t.equal(echoed.length, total, 'every byte echoed')
  t.equal(createHash('sha256').update(echoed).digest('hex'), sent.digest('hex'), 'byte-exact')
})

t.test('a TLS handshake that stalls is closed at the handshake bound (a silent client, half a record)', async (t) => {
  // node reports the timeout as a tlsClientError and, once the server listens
  // for those, leaves the socket to it: both kinds stayed open for good.
  const up = await echoH1(t)
  const port = await freePort()
  const conf = serverTls([{ hostname: 'a.example.com', ...certA }])
  await startPlane(t, buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]), { limits: { headersTimeoutMs: 300 } })
  const { connect } = await import('node:net')
  const closed = (first: Buffer | null) => new Promise<string>((resolve) => {
    const s = connect(port, '127.0.0.1', () => { if (first !== null) s.write(first) })
    s.on('error', () => {})
    s.on('close', () => resolve('closed'))
    setTimeout(() => { s.destroy(); resolve('still open after 10 s') }, 10_000).unref()
  })
  const [silent, partial] = await Promise.all([closed(null), closed(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00]))])
  t.equal(silent, 'closed', 'a client that sends nothing')
  t.equal(partial, 'closed', 'a client that sends half a ClientHello record')
  t.equal(await counted(port, 'timeout', 2), 2, 'both counted as timeout in sallyport_downstream_tls_handshake_errors_total')
  const ok = await h1s(port, ca.certPem, 'a.example.com')
  t.equal(ok.status, 200, 'the port serves on')
})

t.test('a certificate TLS refuses (compile lets none through) never takes the port\'s other certificates down, at bind or at a swap', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  const mismatched = { hostname: null, certPem: certAny.certPem, keyPem: certA.keyPem, id: 'mismatched' } // the port's default certificate
  const routes = [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }]
  const conf = serverTls([mismatched, { hostname: 'a.example.com', ...certA }])
  const { plane } = await startPlane(t, buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes } }, [cluster('c', up.port)]))
  t.equal((await h1s(port, ca.certPem, 'a.example.com')).status, 200, 'bound, and the good certificate serves')
  await t.rejects(h1s(port, ca.certPem, 'fallback.example'), 'the refused one gets no handshake')

  // A swap to a table whose default certificate TLS refuses: the port keeps serving the rest.
  const good = serverTls([{ hostname: 'a.example.com', ...certA }, { hostname: null, ...certAny }])
  await plane.apply(buildTable({ [port]: { protocol: 'HTTPS', tls: good, routes } }, [cluster('c', up.port)], 2))
  t.equal((await h1s(port, ca.certPem, 'fallback.example')).status, 200, 'a good default certificate serves again')
  const result = await plane.apply(buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes } }, [cluster('c', up.port)], 3))
  t.same(result.failed, [], 'the swap applies')
  t.equal((await h1s(port, ca.certPem, 'a.example.com')).status, 200, 'and the good certificate still serves')
})

/** A TLS handshake with the listener that settles either way (connected or refused), bounded. */
function handshake(port: number, options: tls.ConnectionOptions): Promise<void> {
  return new Promise((resolve) => {
    const socket = tls.connect({ port, host: '127.0.0.1', ...options })
    const done = (): void => { clearTimeout(timer); socket.destroy(); resolve() }
    const timer = setTimeout(done, 5000)
    socket.on('secureConnect', () => socket.end())
    socket.on('data', () => {})
    socket.on('error', done)
    socket.on('close', done)
  })
}

/** Waits until the listener has counted `want` handshake failures with `reason` (its error event can come after the client saw the close). */
async function counted(port: number, reason: string, want: number): Promise<number> {
  const labels = { port: String(port), reason }
  for (let i = 0; i < 100; i++) {
    const n = await metricValue('sallyport_downstream_tls_handshake_errors_total', labels)
    if (n >= want) return n
    await new Promise((r) => setTimeout(r, 20))
  }
  return metricValue('sallyport_downstream_tls_handshake_errors_total', labels)
}

t.test('failed handshakes are counted by port and reason: client certificates refused, protocol, ALPN, no certificate, not TLS', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  const clientCa = createCa('client CA')
  const good = clientCert(clientCa, 'workload')
  const stranger = clientCert(createCa('other'), 'stranger')
  const expired = issue(clientCa, { cn: 'expired', client: true, notBefore: new Date(Date.now() - 2 * 86_400_000), notAfter: new Date(Date.now() - 86_400_000) })
  const conf = serverTls([{ hostname: 'a.example.com', ...certA }], { caPem: clientCa.certPem, required: true })
  await startPlane(t, buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const base = { servername: 'a.example.com', ca: ca.certPem }
  const cases: Array<{ reason: string; options: tls.ConnectionOptions }> = [
    { reason: 'client_cert_missing', options: { ...base, maxVersion: 'TLSv1.2' } },
    { reason: 'client_cert_unknown_ca', options: { ...base, cert: stranger.certPem, key: stranger.keyPem } },
    { reason: 'client_cert_expired', options: { ...base, cert: expired.certPem, key: expired.keyPem } },
    { reason: 'no_application_protocol', options: { ...base, cert: good.certPem, key: good.keyPem, ALPNProtocols: ['spdy/3'] } },
    { reason: 'no_certificate', options: { ...base, servername: 'nobody.example.com', cert: good.certPem, key: good.keyPem } },
    { reason: 'protocol_version', options: { ...base, cert: good.certPem, key: good.keyPem, minVersion: 'TLSv1', maxVersion: 'TLSv1.1', ciphers: 'DEFAULT@SECLEVEL=0' } },
    // TLS 1.3: no signature algorithm of the client's for the (RSA) certificate; TLS 1.2 says no_shared_cipher itself.
    { reason: 'no_shared_cipher', options: { ...base, cert: good.certPem, key: good.keyPem, sigalgs: 'ECDSA+SHA256', minVersion: 'TLSv1.3' } },
  ]
  for (const c of cases) {
    await handshake(port, c.options)
    t.equal(await counted(port, c.reason, 1), 1, c.reason)
  }
  // Plain HTTP to the TLS port.
  await new Promise<void>((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => s.write('GET / HTTP/1.1\r\nhost: a.example.com\r\n\r\n'))
    s.on('error', () => {})
    s.on('close', () => resolve())
    s.resume()
  })
  t.equal(await counted(port, 'not_tls', 1), 1, 'not_tls')
  t.equal((await h1s(port, ca.certPem, 'a.example.com', {}, { cert: good.certPem, key: good.keyPem })).status, 200, 'a good client is served')
  t.equal(await metricValue('sallyport_downstream_tls_handshake_errors_total', { port: String(port) }), cases.length + 1, 'and not counted')
})

t.test('a handshake that does not complete in time is counted as timeout', async (t) => {
  const port = await freePort()
  const conf = serverTls([{ hostname: 'a.example.com', ...certA }])
  await startPlane(t, buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes: [] } }, []), { limits: { headersTimeoutMs: 100 } })
  const silent = net.connect(port, '127.0.0.1')
  silent.on('error', () => {})
  t.teardown(() => silent.destroy())
  t.equal(await counted(port, 'timeout', 1), 1, 'timeout')
})

t.test('TLS versions: the port negotiates its range; a listener with a higher floor closes a connection below it before any request', async (t) => {
  const up = await echoH1(t)
  const [port, capped] = [await freePort(), await freePort()]
  const routes = [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }]
  const strict = { ...serverTls([{ hostname: 'a.example.com', ...certA }, { hostname: null, ...certAny }]) }
  const shared = { ...strict, exact: new Map([['a.example.com', { ...(strict.exact.get('a.example.com') as NonNullable<ReturnType<typeof strict.exact.get>>), minVersion: 'TLSv1.3' as const }]]) }
  const cap = { ...serverTls([{ hostname: 'a.example.com', ...certA }]), maxVersion: 'TLSv1.2' as const }
  await startPlane(t, buildTable({
    [port]: { protocol: 'HTTPS', tls: shared, routes },
    [capped]: { protocol: 'HTTPS', tls: cap, routes },
  }, [cluster('c', up.port)]))
  const protocolOf = (p: number, servername: string, options: tls.ConnectionOptions): Promise<string> => new Promise((resolve, reject) => {
    const s = tls.connect({ port: p, host: '127.0.0.1', servername, ca: ca.certPem, ...options }, () => { resolve(s.getProtocol() ?? ''); s.end() })
    s.on('error', reject)
  })
  t.equal((await h1s(port, ca.certPem, 'a.example.com', {}, { minVersion: 'TLSv1.3' })).status, 200, 'TLS 1.3 to the strict listener')
  t.equal((await h1s(port, ca.certPem, 'fallback.example', {}, { maxVersion: 'TLSv1.2' })).status, 200, 'TLS 1.2 to the lenient one of the same port')
  await t.rejects(h1s(port, ca.certPem, 'a.example.com', {}, { maxVersion: 'TLSv1.2' }), 'TLS 1.2 to the strict listener: closed')
  t.equal(await counted(port, 'protocol_version', 1), 1, 'counted as protocol_version')
  t.equal(await protocolOf(capped, 'a.example.com', {}), 'TLSv1.2', 'a capped port negotiates TLS 1.2 with a TLS 1.3 client')
  await t.rejects(protocolOf(capped, 'a.example.com', { minVersion: 'TLSv1.3' }), 'and refuses a client that wants TLS 1.3 only')
})

t.test('TLS 1.2 clients get ECDHE with an AEAD cipher or no handshake (RFC 9113 §9.2.2 keeps the rest from HTTP/2)', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  const conf = serverTls([{ hostname: 'a.example.com', ...certA }])
  await startPlane(t, buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const cipherOf = (options: tls.ConnectionOptions): Promise<string> => new Promise((resolve, reject) => {
    const s = tls.connect({ port, host: '127.0.0.1', servername: 'a.example.com', ca: ca.certPem, maxVersion: 'TLSv1.2', ...options }, () => { resolve(s.getCipher().name); s.end() })
    s.on('error', reject)
  })
  t.equal(await cipherOf({ ALPNProtocols: ['h2'] }), 'ECDHE-RSA-AES128-GCM-SHA256', 'h2 over TLS 1.2 with an AEAD suite')
  t.equal(await cipherOf({ ciphers: 'ECDHE-RSA-CHACHA20-POLY1305' }), 'ECDHE-RSA-CHACHA20-POLY1305')
  await t.rejects(cipherOf({ ciphers: 'ECDHE-RSA-AES128-SHA:AES128-SHA' }), 'CBC suites only: refused')
  t.equal(await counted(port, 'no_shared_cipher', 1), 1, 'counted as no_shared_cipher')
  await t.rejects(cipherOf({ ciphers: 'AES128-GCM-SHA256' }), 'RSA key exchange only: refused')
})

t.test('plain HTTP sent to an HTTPS port is answered 400 in plain text (as nginx does), not a silent close; other bytes are closed', async (t) => {
  // The client (curl http://gateway:443/) got "Empty reply from server" and nothing to tell
  // it why; counted as not_tls all the same.
  const port = await freePort()
  const conf = serverTls([{ hostname: 'a.example.com', ...certA }])
  await startPlane(t, buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes: [] } }, []))
  const exchange = (bytes: string): Promise<string> => new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => s.write(bytes))
    let got = ''
    s.setEncoding('latin1')
    s.on('data', (d: string) => { got += d })
    s.on('error', () => {})
    s.on('close', () => resolve(got))
  })
  const plain = await exchange('GET / HTTP/1.1\r\nhost: a.example.com\r\n\r\n')
  t.match(plain, /^HTTP\/1\.1 400 Bad Request\r\n/, 'a 400')
  t.match(plain, /\r\nconnection: close\r\n/i)
  t.match(plain, /\r\n\r\nplain HTTP request sent to an HTTPS port: use https:\/\/\n$/, 'saying why')
  t.equal(await counted(port, 'not_tls', 1), 1, 'counted as not_tls')
  const proxy = await exchange('CONNECT a.example.com:443 HTTP/1.1\r\nhost: a.example.com:443\r\n\r\n')
  t.match(proxy, /^HTTP\/1\.1 400 Bad Request\r\n/, 'a plain CONNECT too')
  t.equal(await exchange('\x00\x01garbage that is no TLS record at all\r\n\r\n'), '', 'other bytes: closed without an answer')
  t.equal((await h1s(port, ca.certPem, 'a.example.com')).status, 404, 'TLS clients are served')
})

t.test('a TLS client that negotiates no ALPN protocol and speaks HTTP/2 (prior knowledge) is served HTTP/2, as on a plain port and by Envoy', async (t) => {
  // Its connection preface went to the HTTP/1.1 parser: a 400 and a protocol error, where the
  // plain port (and Envoy's codec detection) served it.
  const up = await echoH1(t)
  const port = await freePort()
  const conf = serverTls([{ hostname: 'a.example.com', ...certA }])
  await startPlane(t, buildTable({ [port]: { protocol: 'HTTPS', tls: conf, routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const session = http2.connect(`https://a.example.com:${port}`, {
    createConnection: () => tls.connect({ host: '127.0.0.1', port, servername: 'a.example.com', ca: ca.certPem, ALPNProtocols: [] }),
  })
  session.on('error', () => {})
  t.teardown(() => { session.destroy() })
  const r = await h2On(session, { host: 'a.example.com', path: '/prior' })
  t.equal(r.status, 200, 'HTTP/2 without ALPN')
  t.equal(JSON.parse(r.body).url, '/prior')
  const h1 = await h1s(port, ca.certPem, 'a.example.com', {}, { ALPNProtocols: [] } as https.RequestOptions)
  t.equal(h1.status, 200, 'and HTTP/1.1 without ALPN as before')
})
