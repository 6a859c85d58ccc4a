// Revocation against real TLS servers: CRLs checked for the whole chain
// (leaf and intermediate), stale CRLs (fail closed, or allowed), forged CRLs
// ignored, CRLs fetched from distribution points (cached, fail closed), and
// stapled OCSP (good / revoked / forged / delegated responder / must-staple).

import t, { type Test } from 'tap'
import http from 'node:http'
import https from 'node:https'
import tls from 'node:tls'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import type { Cluster, ClusterTls } from '../../lib/compile/table.ts'
import type { Upstreams } from '../../lib/upstream/types.ts'
import { cluster, clusterTls, endpoint, expectError, forward, listen, readBody, request } from './fixtures.ts'
import { createCa, createIntermediate, issue, makeCrl, makeCrlDer, ocspResponse, serverCert, type Leaf, type TestCa } from '../helpers/pki.ts'

const DAY = 86400_000
const root = createCa('revocation root')
const inter = createIntermediate(root, 'revocation intermediate')
const good = serverCert(inter, ['api.test'])
const revoked = serverCert(inter, ['api.test'])
const freshCrls = makeCrl(inter, { revoked: [revoked] }) + makeCrl(root)

async function tlsServer(t: Test, leaf: Leaf, staple: ((leaf: Leaf) => Buffer | null) | null = null): Promise<number> {
  const s = https.createServer({ key: leaf.keyPem, cert: leaf.fullChainPem }, (_req, res) => res.end('ok'))
  if (staple !== null) {
    // node:tls 'OCSPRequest': the server staples what the test PKI signed.
    s.on('OCSPRequest', (_cert: Buffer, _issuer: Buffer, cb: (err: Error | null, resp?: Buffer) => void) => {
      const r = staple(leaf)
      if (r === null) cb(null)
      else cb(null, r)
    })
  }
  const port = await listen(s)
  t.teardown(() => new Promise<void>((resolve) => { s.closeAllConnections(); s.close(() => resolve()) }))
  return port
}

function upstreams(t: Test): Upstreams {
  const up = createUpstreams()
  t.teardown(() => up.close())
  return up
}

function c(port: number, over: Partial<ClusterTls>): Cluster {
  return cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)], tls: clusterTls({ servername: 'api.test', verifyHostname: 'api.test', caPem: root.certPem, ...over }) })
}

async function outcome(up: Upstreams, cl: Cluster): Promise<string> {
  const o = await forward(up, request(cl))
  if (o.kind === 'response') { await readBody(o.res.body); return `ok ${o.res.status}` }
  const err = expectError(o)
  return err.detail ?? `${err.code} ${err.message}`
}

t.test('CRLs: a revoked leaf is refused, a good one passes', async (t) => {
  const up = upstreams(t)
  t.equal(await outcome(up, c(await tlsServer(t, good), { crlPem: freshCrls })), 'ok 200')
  t.equal(await outcome(up, c(await tlsServer(t, revoked), { crlPem: freshCrls })), 'revoked')
  t.equal(await outcome(up, c(await tlsServer(t, revoked), {})), 'ok 200', 'without CRLs nothing is known')
})

t.test('CRLs cover the whole chain: a revoked intermediate refuses its leaves', async (t) => {
  const up = upstreams(t)
  const port = await tlsServer(t, good)
  const crls = makeCrl(inter) + makeCrl(root, { revoked: [inter] })
  t.equal(await outcome(up, c(port, { crlPem: crls })), 'revoked', 'root CRL lists the intermediate')
  t.equal(await outcome(up, c(port, { crlPem: makeCrl(inter) })), 'ok 200', 'an issuer without a configured CRL is not checked (Node would say UNABLE_TO_GET_CRL)')
})

t.test('a CRL past nextUpdate fails closed unless crl-stale allows it', async (t) => {
  const up = upstreams(t)
  const port = await tlsServer(t, good)
  const stale = makeCrl(inter, { thisUpdate: new Date(Date.now() - 2 * DAY), nextUpdate: new Date(Date.now() - DAY) })
  t.equal(await outcome(up, c(port, { crlPem: stale })), 'crl_expired')
  t.equal(await outcome(up, c(port, { crlPem: stale, crlStale: 'allow' })), 'ok 200')
  const staleRevoking = makeCrl(inter, { revoked: [revoked], thisUpdate: new Date(Date.now() - 2 * DAY), nextUpdate: new Date(Date.now() - DAY) })
  t.equal(await outcome(up, c(await tlsServer(t, revoked), { crlPem: staleRevoking, crlStale: 'allow' })), 'revoked', 'an allowed stale CRL still revokes')
})

t.test('a stale CRL beside a current one of the same issuer (a bundle appended to at rotation) does not fail the connection', async (t) => {
  // OpenSSL prefers an issuer's current CRL to a stale one; the stale one
  // refused every connection however fresh the CRL next to it.
  const up = upstreams(t)
  const old = makeCrl(inter, { thisUpdate: new Date(Date.now() - 2 * DAY), nextUpdate: new Date(Date.now() - DAY) })
  const current = makeCrl(inter, { revoked: [revoked] })
  const port = await tlsServer(t, good)
  t.equal(await outcome(up, c(port, { crlPem: old + current })), 'ok 200', 'stale first, current second')
  t.equal(await outcome(up, c(port, { crlPem: current + old })), 'ok 200', 'current first, stale second')
  t.equal(await outcome(up, c(await tlsServer(t, revoked), { crlPem: old + current })), 'revoked', 'the current CRL still revokes')
  const oldRevoking = makeCrl(inter, { revoked: [revoked], thisUpdate: new Date(Date.now() - 2 * DAY), nextUpdate: new Date(Date.now() - DAY) })
  t.equal(await outcome(up, c(await tlsServer(t, revoked), { crlPem: oldRevoking + makeCrl(inter) })), 'revoked', 'a revocation is never undone by a later CRL leaving it out')
  t.equal(await outcome(up, c(port, { crlPem: old + makeCrl(root) })), 'crl_expired', 'an issuer with only a stale CRL still fails closed')
})

t.test('a CRL not signed by the issuer is ignored; a broken one refuses', async (t) => {
  const up = upstreams(t)
  const port = await tlsServer(t, revoked)
  const forged = makeCrl(inter, { revoked: [good], signer: createCa('forger') })
  t.equal(await outcome(up, c(port, { crlPem: forged })), 'ok 200', 'a forged CRL (same issuer name, other key) proves nothing')
  t.equal(await outcome(up, c(port, { crlPem: '-----BEGIN X509 CRL-----\nMIIBAAAA\n-----END X509 CRL-----\n' })), 'crl_invalid')
})

t.test('CRL fetching from distribution points (opt-in): cached, fails closed', async (t) => {
  let hits = 0
  let serve: Buffer | null = null
  const crlServer = http.createServer((req, res) => {
    hits++
    if (serve === null || req.url !== '/inter.crl') { res.statusCode = 404; res.end(); return }
    res.setHeader('content-type', 'application/pkix-crl')
    res.end(serve)
  })
  const crlPort = await listen(crlServer)
  t.teardown(() => new Promise<void>((resolve) => crlServer.close(() => resolve())))
  const url = `http://127.0.0.1:${crlPort}/inter.crl`
  const leafGood = serverCert(inter, ['api.test'], { crlUrls: [url] })
  const leafRevoked = serverCert(inter, ['api.test'], { crlUrls: [url] })
  const up = upstreams(t)
  const goodPort = await tlsServer(t, leafGood)
  const revokedPort = await tlsServer(t, leafRevoked)

  t.equal(await outcome(up, c(goodPort, { crlFetch: true })), 'crl_unavailable', 'the CRL cannot be fetched: refused')
  serve = makeCrlDer(inter, { revoked: [leafRevoked] })
  t.equal(await outcome(up, c(goodPort, { crlFetch: false })), 'ok 200', 'fetching is off by default')
  const before = hits
  t.equal(await outcome(up, c(goodPort, { crlFetch: true })), 'ok 200')
  t.equal(await outcome(up, c(revokedPort, { crlFetch: true })), 'revoked')
  t.equal(hits - before, 1, 'one fetch serves both connections (cached until nextUpdate)')
})

t.test('a distribution point that answers without end is read only up to the CRL bound', async (t) => {
  // No Content-Length, chunks for as long as the reader takes them (bounded here at
  // 512 MiB): the fetch stopped at its 5 s timeout, holding everything read so far.
  let written = 0
  let closed!: () => void
  const done = new Promise<void>((resolve) => { closed = resolve })
  const chunk = Buffer.alloc(64 * 1024, 0x30)
  const crlServer = http.createServer((_req, res) => {
    res.setHeader('content-type', 'application/pkix-crl')
    const pump = (): void => {
      while (written < 512 * 1024 * 1024 && !res.destroyed) {
        written += chunk.length
        if (!res.write(chunk)) { res.once('drain', pump); return }
      }
      res.end()
    }
    res.on('close', () => closed())
    pump()
  })
  const crlPort = await listen(crlServer)
  t.teardown(() => new Promise<void>((resolve) => { crlServer.closeAllConnections(); crlServer.close(() => resolve()) }))
  const leaf = serverCert(inter, ['api.test'], { crlUrls: [`http://127.0.0.1:${crlPort}/endless.crl`] })
  const up = upstreams(t)
  t.equal(await outcome(up, c(await tlsServer(t, leaf), { crlFetch: true })), 'crl_unavailable', 'refused: no CRL to check against')
  await done
  t.ok(written < 64 * 1024 * 1024, `the fetch was cut soon after 16 MiB (the server wrote ${written >> 20} MiB)`)
})

function stapling(status: 'good' | 'revoked' | 'unknown', issuer: TestCa = inter, extra: Parameters<typeof ocspResponse>[2] = {}) {
  return (leaf: Leaf): Buffer => ocspResponse(issuer, leaf, { status, ...extra })
}

t.test('stapled OCSP: verified against the issuer; revoked refuses', async (t) => {
  const up = upstreams(t)
  t.equal(await outcome(up, c(await tlsServer(t, good, stapling('good')), {})), 'ok 200', 'good staple')
  t.equal(await outcome(up, c(await tlsServer(t, good, stapling('revoked')), {})), 'revoked', 'revoked staple')
  t.equal(await outcome(up, c(await tlsServer(t, good, stapling('revoked')), { ocsp: 'off' })), 'ok 200', 'ocsp off: not requested, not checked')
  t.equal(await outcome(up, c(await tlsServer(t, good, stapling('good', inter, { forgeWith: createCa('forger') })), {})), 'ocsp_invalid', 'forged signature')
  t.equal(await outcome(up, c(await tlsServer(t, good, stapling('good', inter, { nextUpdate: new Date(Date.now() - DAY), thisUpdate: new Date(Date.now() - 2 * DAY) })), {})), 'ocsp_invalid', 'expired response')
  t.equal(await outcome(up, c(await tlsServer(t, good, stapling('good', root)), {})), 'ocsp_invalid', 'a response about another issuer does not answer for this certificate')
  const responder = issue(inter, { cn: 'ocsp responder', ocspSigning: true })
  t.equal(await outcome(up, c(await tlsServer(t, good, stapling('revoked', inter, { responder })), {})), 'revoked', 'delegated responder (id-kp-OCSPSigning)')
  const notResponder = issue(inter, { cn: 'not a responder' })
  t.equal(await outcome(up, c(await tlsServer(t, good, stapling('good', inter, { responder: notResponder })), {})), 'ocsp_invalid', 'a certificate without OCSPSigning cannot sign responses')
})

t.test('without a staple: must-staple certificates are refused by default; allow / require', async (t) => {
  const up = upstreams(t)
  const mustStaple = serverCert(inter, ['api.test'], { mustStaple: true })
  const bare = await tlsServer(t, mustStaple)
  t.equal(await outcome(up, c(bare, {})), 'ocsp_missing', 'must-staple without a staple (default)')
  t.equal(await outcome(up, c(bare, { ocsp: 'allow' })), 'ok 200', 'allow')
  t.equal(await outcome(up, c(await tlsServer(t, mustStaple, stapling('good')), {})), 'ok 200', 'must-staple with a good staple')
  t.equal(await outcome(up, c(await tlsServer(t, good), {})), 'ok 200', 'an ordinary certificate without a staple (default)')
  t.equal(await outcome(up, c(await tlsServer(t, good), { ocsp: 'require' })), 'ocsp_missing', 'require')
  t.equal(await outcome(up, c(await tlsServer(t, good, stapling('unknown')), { ocsp: 'require' })), 'ocsp_missing', 'status unknown is no staple')
})

t.test('the server sees the OCSP request only when asked', async (t) => {
  let asked = 0
  const s = tls.createServer({ key: good.keyPem, cert: good.fullChainPem }, (sock) => sock.end('HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n'))
  s.on('OCSPRequest', (_c: Buffer, _i: Buffer, cb: (err: Error | null) => void) => { asked++; cb(null) })
  const sockets = new Set<tls.TLSSocket>()
  s.on('secureConnection', (sock) => { sockets.add(sock); sock.on('close', () => sockets.delete(sock)) })
  const port = await listen(s)
  t.teardown(() => new Promise<void>((resolve) => { for (const sock of sockets) sock.destroy(); s.close(() => resolve()) }))
  const up = upstreams(t)
  t.equal(await outcome(up, c(port, { ocsp: 'off' })), 'ok 200')
  t.equal(asked, 0)
  t.equal(await outcome(up, c(port, {})), 'ok 200')
  t.equal(asked, 1)
})

// A resumed session skips the certificate exchange, so nothing about the chain
// can be checked on it: time-bound verdicts (a CRL's nextUpdate, a staple's)
// must end the session's reuse instead. `connection: close` makes every request
// a new TLS connection, which resumes when it can.
function resumingServer(t: Test, leaf: Leaf, version: 'TLSv1.2' | 'TLSv1.3', staple: ((leaf: Leaf) => Buffer) | null = null): Promise<number> {
  const s = https.createServer({ key: leaf.keyPem, cert: leaf.fullChainPem, maxVersion: version }, (req, res) => {
    res.setHeader('connection', 'close')
    res.end((req.socket as tls.TLSSocket).isSessionReused() ? 'resumed' : 'full')
  })
  if (staple !== null) s.on('OCSPRequest', (_c: Buffer, _i: Buffer, cb: (err: Error | null, resp?: Buffer) => void) => cb(null, staple(leaf)))
  t.teardown(() => new Promise<void>((resolve) => { s.closeAllConnections(); s.close(() => resolve()) }))
  return listen(s)
}

async function answer(up: Upstreams, cl: Cluster): Promise<string> {
  const o = await forward(up, request(cl))
  if (o.kind === 'response') return readBody(o.res.body)
  const err = expectError(o)
  return err.detail ?? `${err.code} ${err.message}`
}

/** Requests until the answer is `until` (or `deadline` passes); every answer in order. */
async function pollUntil(up: Upstreams, cl: Cluster, until: string, deadline: number): Promise<string[]> {
  const seen: string[] = []
  while (Date.now() < deadline) {
    const a = await answer(up, cl)
    seen.push(a)
    if (a === until) break
    await new Promise((r) => setTimeout(r, 100))
  }
  return seen
}

for (const version of ['TLSv1.2', 'TLSv1.3'] as const) {
  t.test(`${version}: a CRL that goes past nextUpdate fails closed on resumed sessions too`, async (t) => {
    const up = upstreams(t)
    const port = await resumingServer(t, good, version)
    // CRL times have whole seconds: three of them leave room to resume before it goes stale.
    const nextUpdate = new Date(Date.now() + 3000)
    const cl = c(port, { crlPem: makeCrl(inter, { nextUpdate }) + makeCrl(root) })
    const seen = await pollUntil(up, cl, 'crl_expired', nextUpdate.getTime() + 10_000)
    t.equal(seen[0], 'full', 'the first connection is a full handshake')
    t.ok(seen.includes('resumed'), `later ones resume while the CRL is fresh (${seen.join(',')})`)
    t.equal(seen[seen.length - 1], 'crl_expired', 'once it is stale, no connection is accepted')
    t.equal(await answer(up, cl), 'crl_expired', 'and stays refused: the failed handshake left no session to resume')
  })
}

t.test('a refused handshake leaves no session behind to resume', async (t) => {
  const up = upstreams(t)
  const port = await resumingServer(t, revoked, 'TLSv1.2')
  const cl = c(port, { crlPem: freshCrls })
  for (let i = 0; i < 3; i++) t.equal(await answer(up, cl), 'revoked', `connection ${i}`)
})

t.test('a stapled OCSP response that expires ends the reuse of its session', async (t) => {
  const up = upstreams(t)
  // checkStaple allows 5 minutes of clock skew past nextUpdate: this staple has 3 s of them left.
  const nextUpdate = new Date(Date.now() - 5 * 60_000 + 3000)
  const staple = ocspResponse(inter, good, { thisUpdate: new Date(Date.now() - DAY), nextUpdate })
  const port = await resumingServer(t, good, 'TLSv1.3', () => staple)
  const cl = c(port, {})
  const seen = await pollUntil(up, cl, 'ocsp_invalid', nextUpdate.getTime() + 5 * 60_000 + 10_000)
  t.equal(seen[0], 'full')
  t.ok(seen.includes('resumed'), `later ones resume while the staple is valid (${seen.join(',')})`)
  t.equal(seen[seen.length - 1], 'ocsp_invalid', 'an expired staple refuses the next full handshake')
})
