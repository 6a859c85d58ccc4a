// The real CLI with HTTPS listeners whose TLS material is broken: `validate`
// names file, object and field; `serve` keeps the port's other listeners
// serving and says why in status, /config_dump problems and the log.
import t from 'tap'
import fs from 'node:fs'
import { X509Certificate } from 'node:crypto'
import https from 'node:https'
import tls from 'node:tls'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { createCa, expiredCert, notYetValidCert, serverCert, serverCertWithKey } from '../helpers/pki.ts'
import { backendYaml, eventually, freePort, gatewayYaml, metricSum, request, routeYaml, runCli, startCli, tempDir, tlsSecretYaml } from './harness.ts'

const ca = createCa('listener CA')

function httpsListener(name: string, port: number, secret: string | readonly string[], hostname: string | null): string {
  return `    - name: ${name}
      protocol: HTTPS
      port: ${port}
${hostname === null ? '' : `      hostname: "${hostname}"\n`}      tls:
        certificateRefs:
${(typeof secret === 'string' ? [secret] : secret).map(s => `          - name: ${s}\n`).join('')}`
}

/** GET https://127.0.0.1:port/ with SNI and Host `servername`, the test CA trusted. */
function get(port: number, servername: string, tlsOptions: https.RequestOptions = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, servername, path: '/', headers: { host: servername }, ca: ca.certPem, agent: false, ...tlsOptions }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (s: string) => { body += s })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.setTimeout(5000, () => req.destroy(new Error('timed out')))
    req.on('error', reject)
    req.end()
  })
}

interface Dump {
  problems: Array<{ kind: string; namespace: string; name: string; field: string; line: string }>
  status: Array<{ kind: string; name: string; listeners: Array<{ name: string; conditions: Array<{ type: string; status: string; reason: string; message: string }> }> }>
}

t.test('a listener Secret whose key does not match: validate names it; serve keeps the port\'s other listener serving', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => upstream.close())
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const good = serverCert(ca, ['good.example.test'])
  const fallback = serverCert(ca, ['fallback.example.test'])
  // The listener without hostname holds the port's default certificate: its broken Secret once kept the whole port from binding.
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, httpsListener('any', httpsPort, 'bad', null) + httpsListener('good', httpsPort, 'good', 'good.example.test')))
  const secrets = path.join(dir, 'secrets.yaml')
  fs.writeFileSync(secrets, `${tlsSecretYaml('good', good.certPem, good.keyPem)}---\n${tlsSecretYaml('bad', fallback.certPem, good.keyPem)}`)
  fs.writeFileSync(path.join(dir, 'routes.yaml'), `${backendYaml('up', upstream.address.port)}---\n${routeYaml('r', 'good.example.test', 'up', upstream.address.port)}`)

  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 1, 'validate fails')
  t.match(v.stdout, `${secrets}:1: Secret default/bad: data[tls.key]: the private key does not match the certificate in tls.crt`)
  t.notMatch(v.stdout, /Secret default\/good/)

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'info'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const r = await get(httpsPort, 'good.example.test')
  t.equal(r.status, 200, 'the good listener of the port serves')

  const dump = await eventually(async () => JSON.parse((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body) as Dump,
    (d) => d.status.length > 0, 10000, 'status in /config_dump')
  const listener = (name: string) => dump.status.find(s => s.kind === 'Gateway')?.listeners.find(l => l.name === name)
  t.match(listener('any')?.conditions.find(c => c.type === 'ResolvedRefs'), { status: 'False', reason: 'InvalidCertificateRef', message: /^Secret default\/bad data\[tls\.key\]: the private key does not match/ })
  t.match(listener('any')?.conditions.find(c => c.type === 'Programmed'), { status: 'False' })
  t.match(listener('good')?.conditions.find(c => c.type === 'Programmed'), { status: 'True' })
  t.same(dump.problems.map(p => `${p.kind} ${p.namespace}/${p.name} ${p.field}`), ['Secret default/bad data[tls.key]'])
  await cli.waitFor(/"msg":"config problem: requests that need it fail"[^\n]*"kind":"Secret"|"kind":"Secret"[^\n]*"msg":"config problem: requests that need it fail"/)
  t.match(cli.stdout(), `"file":"${secrets}"`, 'the log line names the file')
})

t.test('a frontend client-CA bundle that does not parse: validate names the ConfigMap and its key', async (t) => {
  const dir = tempDir(t)
  const [httpPort, httpsPort] = [await freePort(), await freePort()]
  const cert = serverCert(ca, ['mtls.example.test'])
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), `${gatewayYaml(httpPort, httpsListener('mtls', httpsPort, 'cert', 'mtls.example.test'))}  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{ kind: ConfigMap, group: "", name: client-ca }]
`)
  const file = path.join(dir, 'tls.yaml')
  fs.writeFileSync(file, `${tlsSecretYaml('cert', cert.certPem, cert.keyPem)}---
apiVersion: v1
kind: ConfigMap
metadata: { name: client-ca, namespace: default }
data:
  ca.crt: |
    -----BEGIN CERTIFICATE-----
    bm90IGEgY2VydA==
    -----END CERTIFICATE-----
`)
  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 1, 'validate fails')
  t.match(v.stdout, `${file}:1: ConfigMap default/client-ca: data[ca.crt]: client CA bundle: a certificate cannot be parsed; not served: listener default/egress/mtls`)
})

t.test('listener tls.options sallyport.io/min-version: TLSv1.3 refuses TLS 1.2 clients of that listener only', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => upstream.close())
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const strict = serverCert(ca, ['strict.example.test'])
  const legacy = serverCert(ca, ['legacy.example.test'])
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, `${httpsListener('strict', httpsPort, 'strict', 'strict.example.test')}        options:
          sallyport.io/min-version: TLSv1.3
${httpsListener('legacy', httpsPort, 'legacy', 'legacy.example.test')}`))
  fs.writeFileSync(path.join(dir, 'secrets.yaml'), `${tlsSecretYaml('strict', strict.certPem, strict.keyPem)}---\n${tlsSecretYaml('legacy', legacy.certPem, legacy.keyPem)}`)
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', upstream.address.port), routeYaml('s', 'strict.example.test', 'up', upstream.address.port), routeYaml('l', 'legacy.example.test', 'up', upstream.address.port)].join('---\n'))
  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 0, 'valid, no warning')
  t.equal(v.stdout, '')

  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  t.equal((await get(httpsPort, 'strict.example.test', { minVersion: 'TLSv1.3' })).status, 200, 'TLS 1.3 to the strict listener')
  await t.rejects(get(httpsPort, 'strict.example.test', { maxVersion: 'TLSv1.2' }), 'TLS 1.2 to the strict listener: refused')
  t.equal((await get(httpsPort, 'legacy.example.test', { maxVersion: 'TLSv1.2' })).status, 200, 'TLS 1.2 to the other listener of the port')
  const metrics = await eventually(() => request(`http://127.0.0.1:${adminPort}/metrics`), (r) => metricSum(r.body, 'sallyport_downstream_tls_handshake_errors_total', { reason: 'protocol_version' }) === 1, 10000, 'counted')
  t.equal(metricSum(metrics.body, 'sallyport_downstream_tls_handshake_errors_total', { port: String(httpsPort), reason: 'protocol_version' }), 1, 'counted as protocol_version')

})

t.test('min-version TLSv1.3 beside a TLS 1.2 default listener: a client without a server name over TLS 1.2 gets 421 for the strict listener\'s hosts', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => upstream.close())
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const strict = serverCert(ca, ['strict.example.test'])
  const legacy = serverCert(ca, ['legacy.example.test'])
  // The legacy listener first: its certificate is the port's default, so a client without SNI gets through the handshake over TLS 1.2.
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, `${httpsListener('legacy', httpsPort, 'legacy', 'legacy.example.test')}${httpsListener('strict', httpsPort, 'strict', 'strict.example.test')}        options:
          sallyport.io/min-version: TLSv1.3
`))
  fs.writeFileSync(path.join(dir, 'secrets.yaml'), `${tlsSecretYaml('strict', strict.certPem, strict.keyPem)}---\n${tlsSecretYaml('legacy', legacy.certPem, legacy.keyPem)}`)
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', upstream.address.port), routeYaml('s', 'strict.example.test', 'up', upstream.address.port), routeYaml('l', 'legacy.example.test', 'up', upstream.address.port)].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  // Without a server name (a client of the gateway's address; node reports none for a resumed
  // TLS 1.2 session either) no handshake checked the strict listener's floor: its hosts are 421.
  const noName = (host: string, tls: https.RequestOptions): Promise<number> => new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port: httpsPort, servername: '', path: '/', headers: { host }, ca: ca.certPem, agent: false, checkServerIdentity: () => undefined, ...tls }, (res) => {
      res.resume().on('end', () => resolve(res.statusCode ?? 0))
    })
    req.setTimeout(5000, () => req.destroy(new Error('timed out')))
    req.on('error', reject)
    req.end()
  })
  t.equal(await noName('strict.example.test', { maxVersion: 'TLSv1.2' }), 421, 'no server name, TLS 1.2, the strict listener\'s host: 421')
  t.equal(await noName('legacy.example.test', { maxVersion: 'TLSv1.2' }), 200, 'the other listener\'s host: routed')
  t.equal(await noName('strict.example.test', { minVersion: 'TLSv1.3' }), 200, 'no server name over TLS 1.3: routed')
})

t.test('an IP address as the TLS server name is taken as no server name: the port\'s default certificate, routed by Host', async (t) => {
  // RFC 6066 §3 forbids literal addresses in server_name, yet some clients of the gateway's
  // address send one. It once selected no listener: a port without a listener for every
  // hostname refused the handshake (no_certificate), and on one with such a listener the
  // connection was pinned to it, so the Host of any other listener was a 421.
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => upstream.close())
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const a = serverCert(ca, ['a.example.test'])
  const b = serverCert(ca, ['b.example.test'])
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, httpsListener('a', httpsPort, 'a', 'a.example.test') + httpsListener('b', httpsPort, 'b', 'b.example.test')))
  fs.writeFileSync(path.join(dir, 'secrets.yaml'), `${tlsSecretYaml('a', a.certPem, a.keyPem)}---\n${tlsSecretYaml('b', b.certPem, b.keyPem)}`)
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', upstream.address.port), routeYaml('a', 'a.example.test', 'up', upstream.address.port), routeYaml('b', 'b.example.test', 'up', upstream.address.port)].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const viaAddress = (servername: string, host: string): Promise<{ status: number; cn: string }> => new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port: httpsPort, servername, path: '/', headers: { host }, ca: ca.certPem, agent: false, checkServerIdentity: () => undefined }, (res) => {
      const cn = String((res.socket as import('node:tls').TLSSocket).getPeerCertificate().subject?.CN ?? '')
      res.resume().on('end', () => resolve({ status: res.statusCode ?? 0, cn }))
    })
    req.setTimeout(5000, () => req.destroy(new Error('timed out')))
    req.on('error', reject)
    req.end()
  })
  for (const address of ['127.0.0.1', '::1']) {
    const r = await viaAddress(address, 'b.example.test')
    t.same(r, { status: 200, cn: 'a.example.test' }, `SNI ${address}: the default certificate, Host b.example.test routed`)
  }
})

t.test('an expired or not yet valid listener certificate: a warning in validate, /config_dump and the log; still served, and so is the rest of the port', async (t) => {
  // It was served without a word anywhere: only clients' handshakes failed. Served all the
  // same: a client that checks dates refuses it either way (another listener's certificate
  // would not name its host), and one not yet valid by a little clock skew becomes valid on
  // its own, which a refused listener would not until the next change of configuration.
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => upstream.close())
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const good = serverCert(ca, ['good.example.test'])
  const old = expiredCert(ca, ['old.example.test'])
  const early = notYetValidCert(ca, ['early.example.test'])
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, httpsListener('good', httpsPort, 'good', 'good.example.test') +
    httpsListener('old', httpsPort, 'old', 'old.example.test') + httpsListener('early', httpsPort, 'early', 'early.example.test')))
  const secrets = path.join(dir, 'secrets.yaml')
  fs.writeFileSync(secrets, [tlsSecretYaml('good', good.certPem, good.keyPem), tlsSecretYaml('old', old.certPem, old.keyPem), tlsSecretYaml('early', early.certPem, early.keyPem)].join('---\n'))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', upstream.address.port),
    ...['good', 'old', 'early'].map(n => routeYaml(n, `${n}.example.test`, 'up', upstream.address.port))].join('---\n'))

  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 0, 'warnings only')
  t.match(v.stdout, `${secrets}:1: Secret default/old: data[tls.crt]: the certificate expired at ${new Date(Date.parse(new X509Certificate(old.certPem).validTo)).toISOString()}; served all the same: listener default/egress/old`)
  t.match(v.stdout, `${secrets}:2: Secret default/early: data[tls.crt]: the certificate is not valid before ${new Date(Date.parse(new X509Certificate(early.certPem).validFrom)).toISOString()}; served all the same: listener default/egress/early`)
  t.notMatch(v.stdout, /Secret default\/good/)

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'info'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  t.equal((await get(httpsPort, 'good.example.test')).status, 200, 'the good listener serves')
  t.equal((await get(httpsPort, 'old.example.test', { rejectUnauthorized: false })).status, 200, 'the expired certificate is still served')
  await t.rejects(get(httpsPort, 'old.example.test'), /expired/, 'and a client that checks it refuses it')
  const dump = await eventually(async () => JSON.parse((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body) as Dump,
    (d) => d.problems.length > 0, 10000, 'problems in /config_dump')
  t.same(dump.problems.map(p => `${p.kind} ${p.namespace}/${p.name} ${p.field}`).sort(), ['Secret default/early data[tls.crt]', 'Secret default/old data[tls.crt]'])
  await cli.waitFor(/"msg":"config warning"[^\n]*"name":"old"|"name":"old"[^\n]*"msg":"config warning"/)
})

t.test('a client\'s request to renegotiate (TLS 1.2) is refused (a no_renegotiation alert), as Envoy does', async (t) => {
  // Node's servers took up to three per connection in ten minutes: a full handshake's work
  // each for one record of the client's, and a client certificate read once, at the first.
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => upstream.close())
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const a = serverCert(ca, ['a.example.test'])
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, httpsListener('a', httpsPort, 'a', 'a.example.test')))
  fs.writeFileSync(path.join(dir, 'secrets.yaml'), tlsSecretYaml('a', a.certPem, a.keyPem))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', upstream.address.port), routeYaml('a', 'a.example.test', 'up', upstream.address.port)].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const socket = tls.connect({ host: '127.0.0.1', port: httpsPort, servername: 'a.example.test', ca: ca.certPem, maxVersion: 'TLSv1.2' })
  t.teardown(() => { socket.destroy() })
  socket.on('error', () => {})
  await new Promise<void>((resolve, reject) => { socket.once('secureConnect', () => resolve()); socket.once('error', reject) })
  const renegotiated = await new Promise<Error | null>((resolve) => {
    const timer = setTimeout(() => resolve(new Error('no answer in 3 s')), 3000)
    const started = socket.renegotiate({}, (err) => { clearTimeout(timer); resolve(err) })
    if (!started) { clearTimeout(timer); resolve(new Error('not started')) }
  })
  t.not(renegotiated, null, 'refused')
  t.equal((await get(httpsPort, 'a.example.test')).status, 200, 'the listener serves new connections')
})

t.test('a listener\'s certificateRefs past the first are not served, and validate, /config_dump and the log say so', async (t) => {
  // Only the first was served and the others were ignored without a word: an ECDSA
  // certificate beside an RSA one looked configured, yet a client of ECDSA signatures only
  // got no handshake. (node's SNI callback puts one certificate of a context on the connection.)
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => upstream.close())
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const rsa = serverCert(ca, ['a.example.test'])
  const ec = serverCertWithKey(ca, ['a.example.test'], 'ec')
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, httpsListener('a', httpsPort, ['rsa', 'ec'], 'a.example.test')))
  const secrets = path.join(dir, 'secrets.yaml')
  fs.writeFileSync(secrets, [tlsSecretYaml('rsa', rsa.certPem, rsa.keyPem), tlsSecretYaml('ec', ec.certPem, ec.keyPem)].join('---\n'))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', upstream.address.port), routeYaml('a', 'a.example.test', 'up', upstream.address.port)].join('---\n'))

  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 0, 'a warning, not an error')
  t.match(v.stdout, `${secrets}:1: Secret default/ec: data[tls.crt]: certificateRefs[1]: only a listener's first certificateRef is served; not served: listener default/egress/a`)
  t.notMatch(v.stdout, /Secret default\/rsa/)

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'info'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const served = await new Promise<string>((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: httpsPort, servername: 'a.example.test', ca: ca.certPem }, () => {
      const raw = socket.getPeerX509Certificate()?.raw ?? Buffer.alloc(0)
      socket.destroy()
      resolve(new X509Certificate(raw).fingerprint256)
    })
    socket.on('error', reject)
  })
  t.equal(served, new X509Certificate(rsa.certPem).fingerprint256, 'the first certificateRef is served')
  t.equal((await get(httpsPort, 'a.example.test')).status, 200, 'requests are served')
  const dump = await eventually(async () => JSON.parse((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body) as Dump,
    (d) => d.problems.length > 0, 10000, 'problems in /config_dump')
  t.same(dump.problems.map(p => `${p.kind} ${p.namespace}/${p.name} ${p.field}`), ['Secret default/ec data[tls.crt]'])
  await cli.waitFor(/"msg":"config warning"[^\n]*"name":"ec"|"name":"ec"[^\n]*"msg":"config warning"/)
})

t.test('rotation in file mode: a new certificate serves new handshakes, established connections stay; an invalid one keeps the last valid serving, and says so', async (t) => {
  // A Secret rewritten with a key of another certificate took the listener down (no handshake
  // for its hostname) until someone fixed the file: a bad rotation was an outage.
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => upstream.close())
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const first = serverCert(ca, ['a.example.test'])
  const second = serverCert(ca, ['a.example.test'])
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, httpsListener('a', httpsPort, 'a', 'a.example.test')))
  const secrets = path.join(dir, 'secrets.yaml')
  fs.writeFileSync(secrets, tlsSecretYaml('a', first.certPem, first.keyPem))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', upstream.address.port), routeYaml('a', 'a.example.test', 'up', upstream.address.port)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'info'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const fingerprint = (pem: string): string => new X509Certificate(pem).fingerprint256
  const served = (): Promise<string> => new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: httpsPort, servername: 'a.example.test', ca: ca.certPem }, () => {
      const raw = socket.getPeerX509Certificate()?.raw ?? Buffer.alloc(0)
      socket.destroy()
      resolve(new X509Certificate(raw).fingerprint256)
    })
    socket.on('error', reject)
  })
  const version = async (): Promise<number> => Number(/"version":\s*(\d+)/.exec((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body)?.[1] ?? 0)
  t.equal(await served(), fingerprint(first.certPem))
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const viaAgent = (): Promise<number> => new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port: httpsPort, servername: 'a.example.test', path: '/', headers: { host: 'a.example.test' }, ca: ca.certPem, agent }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    })
    req.on('error', reject)
    req.end()
  })
  let connections = 0
  agent.on('free', () => {})
  const countConnections = (): void => { connections++ }
  // Every new TLS connection of the agent; one is expected for the whole test.
  const createConnection = agent.createConnection.bind(agent)
  agent.createConnection = ((...args: Parameters<typeof createConnection>) => { countConnections(); return createConnection(...args) }) as typeof agent.createConnection
  t.equal(await viaAgent(), 200, 'a keep-alive connection before the rotation')

  // Invalid: the key of another certificate.
  const before = await version()
  fs.writeFileSync(secrets, tlsSecretYaml('a', second.certPem, first.keyPem))
  await eventually(version, (v) => v > before, 10000, 'a reload')
  t.equal(await served(), fingerprint(first.certPem), 'an invalid update: the last valid certificate keeps serving')
  t.equal((await get(httpsPort, 'a.example.test')).status, 200, 'and the listener serves requests')
  await cli.waitFor(/"msg":"config warning"[^\n]*last valid version keeps serving|last valid version keeps serving[^\n]*"msg":"config warning"/)
  const dump = await eventually(async () => JSON.parse((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body) as Dump,
    (d) => d.problems.length > 0, 10000, 'problems in /config_dump')
  t.match(dump.problems, [{ kind: 'Secret', name: 'a', field: 'data[tls.key]', line: /the private key does not match the certificate in tls\.crt \(its first certificate\); the last valid version keeps serving/ }])
  t.match(dump.status.find(s => s.kind === 'Gateway')?.listeners.find(l => l.name === 'a')?.conditions.find(c => c.type === 'Programmed'), { status: 'True' })

  // Valid again, a new certificate: new handshakes get it, the established connection stays.
  const invalid = await version()
  fs.writeFileSync(secrets, tlsSecretYaml('a', second.certPem, second.keyPem))
  await eventually(version, (v) => v > invalid, 10000, 'a reload')
  t.equal(await served(), fingerprint(second.certPem), 'the new certificate serves new handshakes')
  t.equal(await viaAgent(), 200, 'the connection made before still serves')
  t.equal(connections, 1, 'on the same connection')
  await eventually(async () => JSON.parse((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body) as Dump,
    (d) => d.problems.length === 0, 10000, 'the problem gone from /config_dump')

  // Deleted: a deliberate removal is not papered over.
  const valid = await version()
  fs.writeFileSync(secrets, '')
  await eventually(version, (v) => v > valid, 10000, 'a reload')
  await t.rejects(served(), 'a deleted Secret is not served')
})

t.test('a listener certificate that does not name the listener\'s hostname is a warning; served all the same', async (t) => {
  // It was served without a word: only clients that check names failed, each with its own error.
  const dir = tempDir(t)
  const [httpPort, httpsPort] = [await freePort(), await freePort()]
  const other = serverCert(ca, ['other.example.test'])
  const wild = serverCert(ca, ['*.example.test'])
  const exact = serverCert(ca, ['a.example.test'])
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, httpsListener('wrong', httpsPort, 'other', 'a.example.test') +
    httpsListener('by-wildcard', httpsPort, 'wild', 'b.example.test') + httpsListener('wild-listener', httpsPort, 'exact', '*.x.example.test') +
    httpsListener('any', httpsPort, 'exact2', null)))
  const secrets = path.join(dir, 'secrets.yaml')
  fs.writeFileSync(secrets, [tlsSecretYaml('other', other.certPem, other.keyPem), tlsSecretYaml('wild', wild.certPem, wild.keyPem),
    tlsSecretYaml('exact', exact.certPem, exact.keyPem), tlsSecretYaml('exact2', exact.certPem, exact.keyPem)].join('---\n'))
  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 0, `warnings only: ${v.stdout}${v.stderr}`)
  t.match(v.stdout, `${secrets}:0: Secret default/other: data[tls.crt]: the certificate does not name the listener's hostname a.example.test; served all the same: listener default/egress/wrong`)
  t.match(v.stdout, `${secrets}:2: Secret default/exact: data[tls.crt]: the certificate does not name the listener's hostname *.x.example.test; served all the same: listener default/egress/wild-listener`)
  t.notMatch(v.stdout, /Secret default\/wild:/, 'a wildcard certificate names b.example.test')
  t.notMatch(v.stdout, /Secret default\/exact2/, 'a listener without hostname names nothing to check')
})

t.test('a reload that leaves a port\'s TLS as it was keeps its TLS sessions: clients resume instead of a full handshake', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => upstream.close())
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const a = serverCert(ca, ['a.example.test'])
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, httpsListener('a', httpsPort, 'a', null)))
  fs.writeFileSync(path.join(dir, 'secrets.yaml'), tlsSecretYaml('a', a.certPem, a.keyPem))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', upstream.address.port), routeYaml('a', 'a.example.test', 'up', upstream.address.port)].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  /** One request over a new TLS connection (offering `session`): its status, whether it resumed, and the session to offer next. */
  const once = (host: string, session: Buffer | null): Promise<{ status: number; reused: boolean; session: Buffer | null }> => new Promise((resolve, reject) => {
    let next: Buffer | null = null
    let reused = false
    const socket = tls.connect({ host: '127.0.0.1', port: httpsPort, servername: 'a.example.test', ca: ca.certPem, ALPNProtocols: ['http/1.1'], ...(session === null ? {} : { session }) }, () => {
      reused = socket.isSessionReused() // read while connected: null once the socket is gone
      socket.write(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`)
    })
    socket.on('session', (s: Buffer) => { next = s })
    let text = ''
    socket.setEncoding('utf8')
    socket.on('data', (d: string) => { text += d })
    socket.on('error', reject)
    socket.on('close', () => resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), reused, session: next }))
  })
  const first = await once('a.example.test', null)
  t.equal(first.status, 200)
  t.ok(first.session !== null, 'a session ticket')
  const again = await once('a.example.test', first.session)
  t.ok(again.reused, 'resumed before any reload')

  // A reload that changes routes only: a new host served.
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', upstream.address.port), routeYaml('a', 'a.example.test', 'up', upstream.address.port), routeYaml('b', 'b.example.test', 'up', upstream.address.port)].join('---\n'))
  await eventually(() => once('b.example.test', null), (r) => r.status === 200, 20000, 'the reload is served')
  const after = await once('a.example.test', again.session ?? first.session)
  t.equal(after.status, 200)
  t.ok(after.reused, 'the session made before the reload resumes after it')
})
