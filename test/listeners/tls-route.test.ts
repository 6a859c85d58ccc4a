// TLS listeners with TLSRoutes, end to end over loopback: passthrough routing
// by SNI (exact before wildcard, fallback, no SNI) with the client verifying
// the upstream's own certificate through the gateway; the ClientHello split
// across TCP segments and forwarded byte for byte; malformed and slow hellos;
// Terminate mode forwarding the decrypted stream (and re-encrypting to a TLS
// backend); `openssl s_client` with stdin piped.

import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import tls from 'node:tls'
import { fileURLToPath } from 'node:url'
import { configureLogger } from '../../lib/observe/log.ts'
import { ANY_HOST } from '../../lib/hostname-index.ts'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { clientCert, createCa, serverCert, type TestCa } from '../helpers/pki.ts'
import type { PortEntry, ServerTls } from '../../lib/compile/table.ts'
import { serverTls } from '../helpers/table-builder.ts'
import {
  clusterTls, collect, connect, echoServer, freePort, l4Cluster, l4Route, listenOn, metricValue, recordingServer,
  silentProxy, sniIndex, startPlane, table, tlsConnect, tlsPort, until, within,
} from './tcp-fixtures.ts'

configureLogger({ level: 'silent' })

const CORPUS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'fixtures', 'regression', 'client-hello')

/** A TLS upstream answering `<name>:<data>` on every chunk, with a certificate for `names`. */
async function tlsUpstream(t: Test, ca: TestCa, name: string, names: readonly string[]): Promise<number> {
  const cert = serverCert(ca, names)
  const server = tls.createServer({ cert: cert.certPem, key: cert.keyPem, allowHalfOpen: true }, (s) => {
    s.on('error', () => {})
    s.on('data', (c: Buffer) => s.write(`${name}:${c.toString()}`))
    s.on('end', () => s.end())
  })
  server.on('tlsClientError', () => {})
  return listenOn(t, server)
}

async function ask(port: number, options: tls.ConnectionOptions, message = 'hi'): Promise<{ reply: string; cn: string }> {
  const s = await tlsConnect(port, options)
  const cn = String(s.getPeerCertificate().subject?.CN ?? '')
  const r = collect(s)
  s.end(message)
  return { reply: (await r).data.toString(), cn }
}

t.test('passthrough: SNI routing, exact before wildcard, fallback; the client verifies the upstream certificate', async (t) => {
  const ca = createCa('passthrough CA')
  const exact = await tlsUpstream(t, ca, 'exact', ['db.example.com'])
  const wild = await tlsUpstream(t, ca, 'wild', ['*.example.com', 'a.b.example.com'])
  const fallback = await tlsUpstream(t, ca, 'fallback', ['other.test'])
  const port = await freePort()
  const routes = {
    'db.example.com': l4Route('tls-exact', [{ cluster: 'exact' }]),
    '*.example.com': l4Route('tls-wild', [{ cluster: 'wild' }]),
  }
  await startPlane(t, table([tlsPort(port, sniIndex(routes))], [
    // Passthrough never originates TLS, even to a cluster that has it.
    l4Cluster('exact', [exact], { tls: clusterTls({ caPem: 'not used' }) }), l4Cluster('wild', [wild]), l4Cluster('fallback', [fallback]),
  ]))

  const a = await ask(port, { servername: 'db.example.com', ca: ca.certPem })
  t.same(a, { reply: 'exact:hi', cn: 'db.example.com' }, 'exact name → its upstream, certificate verified by the client')
  const b = await ask(port, { servername: 'api.example.com', ca: ca.certPem })
  t.same(b, { reply: 'wild:hi', cn: '*.example.com' }, 'wildcard')
  const c = await ask(port, { servername: 'a.b.example.com', ca: ca.certPem })
  t.equal(c.reply, 'wild:hi', 'a wildcard matches several labels')

  // The apex is not covered by the wildcard, and there is no fallback: closed.
  await t.rejects(tlsConnect(port, { servername: 'example.com', ca: ca.certPem }), 'no route for the apex: closed before a handshake')
  await t.rejects(tlsConnect(port, { ca: ca.certPem, checkServerIdentity: () => undefined }), 'no SNI and no fallback: closed')
  t.ok(await metricValue('sallyport_l4_errors_total', { reason: 'no_route' }) >= 2)

  // With a route without hostnames, clients without SNI (or unknown names) get it.
  const port2 = await freePort()
  await startPlane(t, table([tlsPort(port2, sniIndex({ ...routes, '*': l4Route('tls-any', [{ cluster: 'fallback' }]) }))], [
    l4Cluster('exact', [exact]), l4Cluster('wild', [wild]), l4Cluster('fallback', [fallback]),
  ]))
  const d = await ask(port2, { ca: ca.certPem, checkServerIdentity: () => undefined })
  t.same(d, { reply: 'fallback:hi', cn: 'other.test' }, 'no SNI → the fallback route')
  const e = await ask(port2, { servername: 'other.test', ca: ca.certPem })
  t.equal(e.reply, 'fallback:hi', 'unknown name → the fallback route')
})

t.test('passthrough: a ClientHello split across TCP segments and records reaches the upstream byte for byte', async (t) => {
  const rec = await recordingServer(t)
  const port = await freePort()
  await startPlane(t, table([tlsPort(port, sniIndex({ 'db.example.com': l4Route('tls-rec', [{ cluster: 'rec' }]) }))], [l4Cluster('rec', [rec.port])]))
  for (const file of ['node-sni.bin', 'split-records.bin']) {
    const hello = readFileSync(path.join(CORPUS, file))
    const s = await connect(port)
    const tail = Buffer.from('after the hello')
    // One byte, then 4, then odd slices with pauses: every header boundary is crossed mid-read.
    const cuts = [1, 5, 9, 60, 300]
    let off = 0
    for (const cut of cuts) {
      s.write(hello.subarray(off, cut))
      off = cut
      await new Promise((r) => setTimeout(r, 15))
    }
    s.write(hello.subarray(off))
    s.write(tail)
    const want = Buffer.concat([hello, tail])
    await until(() => rec.received.some((b) => b.equals(want)), 5000, `${file} forwarded`)
    t.pass(`${file}: forwarded unchanged`)
    s.destroy()
  }
})

t.test('passthrough: malformed hellos are closed, slow ones time out', async (t) => {
  const echo = await echoServer(t)
  const port = await freePort()
  await startPlane(t, table([tlsPort(port, sniIndex({ '*': l4Route('tls-any2', [{ cluster: 'e' }]) }))], [l4Cluster('e', [echo.port])]),
    { l4Limits: { clientHelloTimeoutMs: 300 } })
  for (const file of ['bad-not-tls-http.bin', 'bad-duplicate-sni-extension.bin', 'bad-too-large.bin']) {
    const s = await connect(port)
    const r = collect(s, 5000)
    s.write(readFileSync(path.join(CORPUS, file)))
    const got = await r
    t.equal(got.data.length, 0, `${file}: nothing forwarded`)
    t.not(got.how, 'timeout', `${file}: closed`)
  }
  t.equal(echo.connections(), 0, 'no upstream connection was opened')
  t.ok(await metricValue('sallyport_l4_errors_total', { reason: 'client_hello_invalid' }) >= 2)
  t.ok(await metricValue('sallyport_l4_errors_total', { reason: 'client_hello_too_large' }) >= 1, 'a hello over the bound says so')

  const slow = await connect(port)
  const r = collect(slow, 5000)
  slow.write(readFileSync(path.join(CORPUS, 'incomplete-first-segment.bin')))
  const got = await r
  t.not(got.how, 'timeout', 'an incomplete hello is closed after the hello timeout')
  t.ok(await metricValue('sallyport_l4_errors_total', { reason: 'client_hello_timeout' }) >= 1)
})

t.test('several listeners on one TLS port: a connection is counted under the listener its SNI selects', async (t) => {
  // Gateway API: listeners sharing a port are told apart by hostname. Every
  // connection was counted (metrics, access line) under the port's first one.
  const ca = createCa('listeners CA')
  const up = await tlsUpstream(t, ca, 'b', ['x.b.example.com', 'a.example.com'])
  const listeners = [
    { gateway: 'test/gw', name: 'la', hostname: 'a.example.com' },
    { gateway: 'test/gw', name: 'lb', hostname: '*.b.example.com' },
  ]
  const passthrough = await freePort()
  const terminate = await freePort()
  const cert = serverCert(ca, ['a.example.com', 'x.b.example.com'])
  const conf = serverTls([{ hostname: null, certPem: cert.certPem, keyPem: cert.keyPem, id: cert.id }])
  await startPlane(t, table([
    { ...tlsPort(passthrough, sniIndex({ 'a.example.com': l4Route('tls-la', [{ cluster: 'up' }]), '*.b.example.com': l4Route('tls-lb', [{ cluster: 'up' }]) })), listeners },
    { ...tlsPort(terminate, sniIndex({ 'a.example.com': l4Route('tls-ta', [{ cluster: 'plain' }]), '*.b.example.com': l4Route('tls-tb', [{ cluster: 'plain' }]) }, 'Terminate'), { ...conf, alpn: [] }), listeners },
  ], [l4Cluster('up', [up]), l4Cluster('plain', [(await echoServer(t)).port])]))
  for (const [port, route] of [[passthrough, 'test/tls-lb'], [terminate, 'test/tls-tb']] as const) {
    t.equal((await ask(port, { servername: 'x.b.example.com', ca: ca.certPem }, 'hi')).reply.endsWith('hi'), true, `${route}: served`)
    await until(async () => await metricValue('sallyport_l4_connections_total', { route }) === 1, 5000, `${route} counted`)
    t.equal(await metricValue('sallyport_l4_connections_total', { route, listener: 'lb' }), 1, `${route}: counted under the listener its SNI selects`)
    t.equal(await metricValue('sallyport_l4_active_connections', { listener: 'la' }), 0, `${route}: nothing left open under the other`)
  }
})

t.test('terminate: the listener certificate terminates, the decrypted stream goes to the backend (plain or re-encrypted)', async (t) => {
  const ca = createCa('terminate CA')
  const listenerCert = serverCert(ca, ['*.gw.test'])
  const plain = await echoServer(t)
  const originCa = createCa('origin CA')
  const origin = await tlsUpstream(t, originCa, 'origin', ['upstream.test'])
  const port = await freePort()
  const tlsConf = serverTls([{ hostname: '*.gw.test', certPem: listenerCert.certPem, keyPem: listenerCert.keyPem, id: listenerCert.id }])
  await startPlane(t, table([tlsPort(port, sniIndex({
    'plain.gw.test': l4Route('tls-plain', [{ cluster: 'plain' }]),
    'origin.gw.test': l4Route('tls-origin', [{ cluster: 'origin' }]),
  }, 'Terminate'), { ...tlsConf, alpn: [] })], [
    l4Cluster('plain', [plain.port]),
    l4Cluster('origin', [origin], { tls: clusterTls({ caPem: originCa.certPem }) }),
  ]))
  const a = await ask(port, { servername: 'plain.gw.test', ca: ca.certPem }, 'decrypted?')
  t.same(a, { reply: 'decrypted?', cn: '*.gw.test' }, 'the gateway certificate; the plain upstream got plaintext')
  const b = await ask(port, { servername: 'origin.gw.test', ca: ca.certPem }, 'again')
  t.same(b, { reply: 'origin:again', cn: '*.gw.test' }, 're-encrypted to a TLS backend')
  await t.rejects(ask(port, { servername: 'nothing.gw.test', ca: ca.certPem }).then((r) => { if (r.reply === '') throw new Error('closed') }), 'no route for the name: closed')
})

t.test('terminate: a default certificate TLS refuses (compile lets none through) costs its own name only', async (t) => {
  const ca = createCa('terminate CA')
  const good = serverCert(ca, ['good.gw.test'])
  const other = serverCert(ca, ['other.gw.test'])
  const plain = await echoServer(t)
  const port = await freePort()
  const tlsConf = serverTls([
    { hostname: null, certPem: other.certPem, keyPem: good.keyPem, id: 'mismatched' }, // the port's default: key and certificate differ
    { hostname: 'good.gw.test', certPem: good.certPem, keyPem: good.keyPem, id: good.id },
  ])
  await startPlane(t, table([tlsPort(port, sniIndex({ 'good.gw.test': l4Route('tls-good', [{ cluster: 'plain' }]) }, 'Terminate'), { ...tlsConf, alpn: [] })], [
    l4Cluster('plain', [plain.port]),
  ]))
  t.same(await ask(port, { servername: 'good.gw.test', ca: ca.certPem }, 'still here'), { reply: 'still here', cn: 'good.gw.test' }, 'the good name is served')
  await t.rejects(ask(port, { servername: 'other.gw.test', ca: ca.certPem }), 'the refused one gets no handshake')
})

t.test('terminate: failed client handshakes are counted by port and reason', async (t) => {
  const ca = createCa('terminate CA')
  const cert = serverCert(ca, ['db.gw.test'])
  const plain = await echoServer(t)
  const port = await freePort()
  const tlsConf = serverTls([{ hostname: 'db.gw.test', certPem: cert.certPem, keyPem: cert.keyPem, id: cert.id }])
  await startPlane(t, table([tlsPort(port, sniIndex({ 'db.gw.test': l4Route('tls-db', [{ cluster: 'plain' }]) }, 'Terminate'), { ...tlsConf, alpn: [] })], [
    l4Cluster('plain', [plain.port]),
  ]), { l4Limits: { handshakeTimeoutMs: 100 } })
  const metric = 'sallyport_downstream_tls_handshake_errors_total'
  await t.rejects(ask(port, { servername: 'nobody.gw.test', ca: ca.certPem }), 'no certificate for the name')
  await until(async () => await metricValue(metric, { port: String(port), reason: 'no_certificate' }) === 1, 5000, 'no_certificate counted')
  const silent = await connect(port)
  t.teardown(() => silent.destroy())
  await until(async () => await metricValue(metric, { port: String(port), reason: 'timeout' }) === 1, 5000, 'timeout counted')
  t.pass('counted')
})

t.test('terminate: a client that ends its connection mid-handshake is closed at once, counted client_closed', async (t) => {
  // A FIN before the handshake completed left the connection open until the
  // handshake timeout (10 s by default), then counted it as a 'timeout'.
  const ca = createCa('terminate CA')
  const cert = serverCert(ca, ['db.gw.test'])
  const plain = await echoServer(t)
  const port = await freePort()
  const tlsConf = serverTls([{ hostname: 'db.gw.test', certPem: cert.certPem, keyPem: cert.keyPem, id: cert.id }])
  await startPlane(t, table([tlsPort(port, sniIndex({ 'db.gw.test': l4Route('tls-fin', [{ cluster: 'plain' }]) }, 'Terminate'), { ...tlsConf, alpn: [] })], [
    l4Cluster('plain', [plain.port]),
  ]), { l4Limits: { handshakeTimeoutMs: 60_000 } })
  const s = await connect(port)
  const r = collect(s, 5000)
  s.end(readFileSync(path.join(CORPUS, 'node-sni.bin')).subarray(0, 50))
  t.not((await r).how, 'timeout', 'closed without waiting for the handshake timeout')
  await until(async () => await metricValue('sallyport_downstream_tls_handshake_errors_total', { port: String(port), reason: 'client_closed' }) === 1, 5000, 'client_closed counted')
  await until(async () => await metricValue('sallyport_l4_connections_total', { route: '', code: 'client_tls_failed', listener: 'tls' }) >= 1, 5000, 'the connection accounted')
  t.equal(plain.connections(), 0, 'no upstream connection')
})

interface Resumed { readonly reused: boolean; readonly reply: string; readonly session: Buffer | null }

/**
 * One connection that sends `hi` once its handshake is done and reads the echo
 * (bounded): whether it resumed `options.session`, and the session it was
 * issued. A handshake refused rejects; one the server refuses after the
 * client's side is done (TLS 1.3 client certificates) is an empty reply.
 */
function resumable(port: number, options: tls.ConnectionOptions): Promise<Resumed> {
  return new Promise((resolve, reject) => {
    let session: Buffer | null = null
    const s = tls.connect({ host: '127.0.0.1', port, ...options })
    s.on('session', (b: Buffer) => { session = b })
    s.once('error', reject)
    s.once('secureConnect', () => {
      const reused = s.isSessionReused()
      const r = collect(s, 5000)
      s.end('hi')
      r.then((c) => resolve({ reused, reply: c.data.toString(), session }), reject)
    })
  })
}

t.test('terminate with client-certificate validation: a client resumes its TLS session; a session never skips a validation it did not pass', async (t) => {
  // Every resumption attempt on a Terminate listener that validates client
  // certificates failed the handshake with an internal_error alert (OpenSSL's
  // "session id context uninitialized"): clients that keep sessions (Go, Java,
  // node's https.Agent, browsers) had every reconnection refused.
  const ca = createCa('terminate CA')
  const cert = serverCert(ca, ['db.gw.test'])
  const clientCa = createCa('client CA')
  const workload = clientCert(clientCa, 'workload')
  const plain = await echoServer(t)
  const [port, fallbackPort] = [await freePort(), await freePort()]
  const conf = (required: boolean): ServerTls => ({ ...serverTls([{ hostname: 'db.gw.test', certPem: cert.certPem, keyPem: cert.keyPem, id: cert.id }], { caPem: clientCa.certPem, required }), alpn: [] })
  const ports = (fallbackRequired: boolean): PortEntry[] => [
    tlsPort(port, sniIndex({ 'db.gw.test': l4Route('tls-valid-only', [{ cluster: 'plain' }]) }, 'Terminate'), conf(true)),
    tlsPort(fallbackPort, sniIndex({ 'db.gw.test': l4Route('tls-fallback', [{ cluster: 'plain' }]) }, 'Terminate'), conf(fallbackRequired)),
  ]
  const { plane } = await startPlane(t, table(ports(false), [l4Cluster('plain', [plain.port])]))
  const base = { servername: 'db.gw.test', ca: ca.certPem }
  for (const maxVersion of ['TLSv1.2', 'TLSv1.3'] as const) {
    const withCert = { ...base, maxVersion, cert: workload.certPem, key: workload.keyPem }
    const first = await resumable(port, withCert)
    t.same({ reused: first.reused, reply: first.reply }, { reused: false, reply: 'hi' }, `${maxVersion}: a full handshake with a valid certificate`)
    t.ok(first.session !== null, `${maxVersion}: a session issued`)
    const again = await resumable(port, { ...base, maxVersion, session: first.session ?? undefined })
    t.same({ reused: again.reused, reply: again.reply }, { reused: true, reply: 'hi' }, `${maxVersion}: the session resumes (its certificate was validated)`)

    // AllowInsecureFallback on another port, same certificate and CA: a session without a certificate.
    const anonymous = await resumable(fallbackPort, { ...base, maxVersion })
    t.same({ reused: anonymous.reused, reply: anonymous.reply }, { reused: false, reply: 'hi' }, `${maxVersion}: AllowInsecureFallback takes a client without certificate`)
    const back = await resumable(fallbackPort, { ...base, maxVersion, session: anonymous.session ?? undefined })
    t.same({ reused: back.reused, reply: back.reply }, { reused: true, reply: 'hi' }, `${maxVersion}: and resumes its session there`)
    const crossed = await resumable(port, { ...base, maxVersion, session: anonymous.session ?? undefined }).catch(() => null)
    t.ok(crossed === null || (!crossed.reused && crossed.reply === ''), `${maxVersion}: that session does not resume on the AllowValidOnly port: refused without certificate`)
  }
  // The same port turned AllowValidOnly (same CA): a session from before, without certificate, is refused.
  const anonymous = await resumable(fallbackPort, { ...base, maxVersion: 'TLSv1.3' })
  await plane.apply(table(ports(true), [l4Cluster('plain', [plain.port])], 2))
  const after = await resumable(fallbackPort, { ...base, maxVersion: 'TLSv1.3', session: anonymous.session ?? undefined }).catch(() => null)
  t.ok(after === null || (!after.reused && after.reply === ''), 'a session from before the port required certificates does not skip it')
})

t.test('terminate: a resumed session is routed by the server name its ClientHello sent, TLS 1.2 included', async (t) => {
  // On a resumed TLS 1.2 session node reports no server name (OpenSSL gives the
  // session's, which node never stores): the connection went to the route
  // without hostnames (another backend) or, without one, was closed.
  const ca = createCa('terminate CA')
  const cert = serverCert(ca, ['*.gw.test'])
  const [a, b, fallback] = [await echoServer(t, 'A:'), await echoServer(t, 'B:'), await echoServer(t, 'F:')]
  const port = await freePort()
  const tlsConf = serverTls([{ hostname: '*.gw.test', certPem: cert.certPem, keyPem: cert.keyPem, id: cert.id }])
  await startPlane(t, table([tlsPort(port, sniIndex({
    'a.gw.test': l4Route('tls-a', [{ cluster: 'a' }]),
    'b.gw.test': l4Route('tls-b', [{ cluster: 'b' }]),
    [ANY_HOST]: l4Route('tls-any', [{ cluster: 'fallback' }]),
  }, 'Terminate'), { ...tlsConf, alpn: [] })], [l4Cluster('a', [a.port]), l4Cluster('b', [b.port]), l4Cluster('fallback', [fallback.port])]))
  for (const maxVersion of ['TLSv1.2', 'TLSv1.3'] as const) {
    const base = { ca: ca.certPem, maxVersion }
    const first = await resumable(port, { ...base, servername: 'a.gw.test' })
    t.same({ reused: first.reused, reply: first.reply }, { reused: false, reply: 'A:hi' }, `${maxVersion}: a full handshake for a.gw.test reaches a`)
    const again = await resumable(port, { ...base, servername: 'a.gw.test', session: first.session ?? undefined })
    t.same({ reused: again.reused, reply: again.reply }, { reused: true, reply: 'A:hi' }, `${maxVersion}: resumed, it still reaches a`)
    const other = await resumable(port, { ...base, servername: 'b.gw.test', session: first.session ?? undefined })
    t.equal(other.reply, 'B:hi', `${maxVersion}: a.gw.test's session offered for b.gw.test reaches b (resumed or not)`)
    const none = await resumable(port, { ...base, session: first.session ?? undefined })
    t.equal(none.reply, 'F:hi', `${maxVersion}: offered without a server name, the route without hostnames`)
  }
})

t.test('openssl s_client with stdin piped, through passthrough and terminate', async (t) => {
  const ca = createCa('openssl CA')
  const upstream = await tlsUpstream(t, ca, 'upstream', ['svc.example.com'])
  const listenerCert = serverCert(ca, ['term.example.com'])
  const plain = await echoServer(t)
  const pass = await freePort()
  const term = await freePort()
  await startPlane(t, table([
    tlsPort(pass, sniIndex({ '*.example.com': l4Route('tls-openssl', [{ cluster: 'up' }]) })),
    tlsPort(term, sniIndex({ 'term.example.com': l4Route('tls-openssl-term', [{ cluster: 'plain' }]) }, 'Terminate'),
      { ...serverTls([{ hostname: 'term.example.com', certPem: listenerCert.certPem, keyPem: listenerCert.keyPem, id: listenerCert.id }]), alpn: [] }),
  ], [l4Cluster('up', [upstream]), l4Cluster('plain', [plain.port])]))
  const caFile = path.join(t.testdirName, 'ca.pem')
  const { mkdirSync, writeFileSync } = await import('node:fs')
  mkdirSync(t.testdirName, { recursive: true })
  writeFileSync(caFile, ca.certPem)

  // stdin stays open until the answer is seen (openssl quits at stdin EOF), then closes.
  const run = (port: number, name: string, input: string, expect: string): Promise<{ out: string; code: number | null }> => new Promise((resolve) => {
    const p = spawn('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-servername', name, '-CAfile', caFile, '-verify_return_error', '-quiet', '-no_ign_eof'], { stdio: ['pipe', 'pipe', 'pipe'] })
    let out = ''
    p.stdout.on('data', (c: Buffer) => {
      out += c.toString()
      if (out.includes(expect)) p.stdin.end()
    })
    p.stderr.on('data', () => {})
    const timer = setTimeout(() => p.kill('SIGKILL'), 10_000)
    p.on('close', (code) => { clearTimeout(timer); resolve({ out, code }) })
    p.stdin.write(input)
  })
  const a = await within(run(pass, 'svc.example.com', 'hello through passthrough\n', 'upstream:hello'), 15_000, 'openssl passthrough')
  t.equal(a.code, 0, 'openssl exited cleanly (certificate verified)')
  t.match(a.out, 'upstream:hello through passthrough', 'passthrough: openssl verified the upstream and got its answer')
  const b = await within(run(term, 'term.example.com', 'hello through terminate\n', 'hello through terminate'), 15_000, 'openssl terminate')
  t.match(b.out, 'hello through terminate', 'terminate: the plain echo answered through the gateway TLS')
})

for (const mode of ['Passthrough', 'Terminate'] as const) {
  t.test(`${mode.toLowerCase()}: a client that resets while its backend is dialled stops the dial`, async (t) => {
    // The backend is reached through an upstream CONNECT proxy that accepts and never answers.
    const { port: proxyPort, accepted } = await silentProxy(t)
    const ca = createCa('reset during dial CA')
    const cert = serverCert(ca, ['db.example.com'])
    const terminate = mode === 'Terminate' ? { ...serverTls([{ hostname: 'db.example.com', certPem: cert.certPem, keyPem: cert.keyPem, id: cert.id }]), alpn: [] } : null
    const route = `tls-stuck-${mode.toLowerCase()}`
    const port = await freePort()
    await startPlane(t, table([tlsPort(port, sniIndex({ 'db.example.com': l4Route(route, [{ cluster: 'stuck' }]) }, mode), terminate)], [
      l4Cluster('stuck', [443], { upstreamProxy: { host: '127.0.0.1', port: proxyPort, authorization: null } }),
    ]), { upstreams: createUpstreams({ connectTimeoutMs: 60_000 }) })
    const raw = await connect(port)
    raw.on('error', () => {})
    // Passthrough: the ClientHello alone starts the dial (no answer comes); Terminate: the gateway's handshake, then the dial.
    const client = tls.connect({ socket: raw, servername: 'db.example.com', ca: ca.certPem })
    client.on('error', () => {})
    await until(() => accepted.length === 1, 5000, 'the dial through the proxy')
    const dialClosed = new Promise<void>((resolve) => accepted[0].once('close', () => resolve()))
    raw.resetAndDestroy()
    await within(dialClosed, 10_000, 'the abandoned dial closing')
    t.pass('the dial stopped with the client that reset')
    await until(async () => (await metricValue('sallyport_l4_connections_total', { route: `test/${route}`, code: 'client_reset' })) === 1, 5000, 'client_reset counted')
  })
}
