// HTTPS listeners: SNI certificate selection, ALPN h2 / http/1.1, frontend
// client-certificate validation. Test PKI minted at run time.

import t from 'tap'
import http2 from 'node:http2'
import tls from 'node:tls'
import { buildTable, cluster, freePort, serverTls } from '../helpers/table-builder.ts'
import { clientCert, createCa, serverCert } from '../helpers/pki.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { echoH1, h1s, h2On, startPlane } from './fixtures.ts'

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
