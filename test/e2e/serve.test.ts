// `sallyport serve` as a child process: traffic, hot reload, broken files,
// admin endpoints, secrets kept out of the dump, draining on SIGTERM.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { generateKeyPairSync } from 'node:crypto'
import forge from 'node-forge'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, settleLogs, startCli, tempDir } from './harness.ts'

interface Echo { upstream: string; method: string; path: string; headers: Record<string, string> }

/** A self-signed certificate for `localhost` with a fresh key (never committed). */
function selfSigned(): { certPem: string; keyPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const keyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()
  const cert = forge.pki.createCertificate()
  cert.publicKey = forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }).toString())
  cert.serialNumber = '01'
  cert.validity.notBefore = new Date(Date.now() - 60_000)
  cert.validity.notAfter = new Date(Date.now() + 86_400_000)
  const attrs = [{ name: 'commonName', value: 'localhost' }]
  cert.setSubject(attrs)
  cert.setIssuer(attrs)
  cert.setExtensions([{ name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }] }])
  cert.sign(forge.pki.privateKeyFromPem(keyPem), forge.md.sha256.create())
  return { certPem: forge.pki.certificateToPem(cert), keyPem }
}

t.test('serve: routes, hot reload, broken file, admin, secrets, drain', async (t) => {
  const upstreamA = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'a' })
  const upstreamB = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'b' })
  t.teardown(() => Promise.all([upstreamA.close(), upstreamB.close()]))
  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const { certPem, keyPem } = selfSigned()
  const keyB64 = Buffer.from(keyPem).toString('base64')
  const keyBody = keyPem.split('\n')[1] as string // a line of the key's base64 body

  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, `    - name: https
      protocol: HTTPS
      port: ${httpsPort}
      hostname: localhost
      tls:
        certificateRefs:
          - name: server-cert
`))
  fs.writeFileSync(path.join(dir, 'secret.yaml'), `apiVersion: v1
kind: Secret
metadata:
  name: server-cert
  namespace: default
type: kubernetes.io/tls
data:
  tls.crt: ${Buffer.from(certPem).toString('base64')}
  tls.key: ${keyB64}
`)
  fs.writeFileSync(path.join(dir, 'backends.yaml'), `${backendYaml('a', upstreamA.address.port)}---\n${backendYaml('b', upstreamB.address.port)}`)
  fs.writeFileSync(path.join(dir, 'routes.yaml'), routeYaml('one', 'one.example.test', 'a', upstreamA.address.port))

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '10', '--log-level', 'info'])
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  await t.test('requests reach the upstream through the route', async (t) => {
    const r = await request(`http://127.0.0.1:${httpPort}/hello?x=1`, { host: 'one.example.test' })
    t.equal(r.status, 200)
    const echo = JSON.parse(r.body) as Echo
    t.equal(echo.upstream, 'a')
    t.equal(echo.path, '/hello?x=1')
    const miss = await request(`http://127.0.0.1:${httpPort}/`, { host: 'nobody.example.test' })
    t.equal(miss.status, 404)
  })

  await t.test('admin: healthz, readyz, metrics', async (t) => {
    const h = await request(`${admin}/healthz`)
    t.equal(h.status, 200)
    t.equal(h.body.trim(), 'ok')
    t.equal((await request(`${admin}/readyz`)).status, 200)
    const m = await request(`${admin}/metrics`)
    t.equal(m.status, 200)
    t.match(m.body, /^sallyport_config_reloads_total\{source="file"\} 1$/m)
    t.match(m.body, /^sallyport_route_table_version \d+$/m)
    t.equal((await request(`${admin}/nope`)).status, 404)
  })

  await t.test('/config_dump shows the table and never Secret data', async (t) => {
    const r = await request(`${admin}/config_dump`)
    t.equal(r.status, 200)
    const dump = JSON.parse(r.body) as { version: number; table: unknown; status: unknown[]; problems: unknown[]; upstreams: unknown[] }
    t.ok(dump.version >= 1)
    t.ok(dump.table !== null)
    t.ok(Array.isArray(dump.status))
    t.match(r.body, /one\.example\.test/)
    t.match(r.body, new RegExp(`"${httpsPort}": \{`), 'the HTTPS listener (with the Secret) is in the table')
    t.notOk(r.body.includes(keyB64), 'no base64 key')
    t.notOk(r.body.includes(keyBody), 'no PEM key body')
    t.notOk(r.body.includes('PRIVATE KEY'), 'no PEM key')
    await settleLogs()
    t.notOk(cli.stdout().includes(keyBody), 'not in the logs either')
  })

  await t.test('editing a file swaps the table without a restart', async (t) => {
    const pid = cli.child.pid
    fs.writeFileSync(path.join(dir, 'routes.yaml'), `${routeYaml('one', 'one.example.test', 'a', upstreamA.address.port)}---\n${routeYaml('two', 'two.example.test', 'b', upstreamB.address.port)}`)
    const r = await eventually(() => request(`http://127.0.0.1:${httpPort}/`, { host: 'two.example.test' }), (r) => r.status === 200, 15000, 'new route answering')
    t.equal((JSON.parse(r.body) as Echo).upstream, 'b')
    // Issue 11: the unchanged route 'one' is reused from the previous compile; only 'two' is compiled.
    await cli.waitFor(/"msg":"route table applied".*"routesReused":1,"routesCompiled":1|"routesReused":1,"routesCompiled":1.*"msg":"route table applied"/)
    t.equal(cli.child.pid, pid)
    t.equal(cli.child.exitCode, null)
  })

  await t.test('a broken YAML keeps the old table; the log names file and line', async (t) => {
    const broken = path.join(dir, 'routes.yaml')
    fs.writeFileSync(broken, 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: one\n  labels: a: b\n')
    await cli.waitFor(new RegExp(`${broken.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}:0: HTTPRoute one: line 5\\b`))
    const r = await request(`http://127.0.0.1:${httpPort}/`, { host: 'two.example.test' })
    t.equal(r.status, 200, 'old table still serves')
    const m = await request(`${admin}/metrics`)
    t.match(m.body, /sallyport_config_reload_failures_total\{source="file",reason="parse"\} 1/)
    t.equal((await request(`${admin}/readyz`)).status, 200)
    // /config_dump says the files on disk are not what serves (it used to show the old table, no problem at all).
    const dump = JSON.parse((await request(`${admin}/config_dump`)).body) as { reloadRejected: { line: string }[]; problems: unknown[] }
    t.equal(dump.reloadRejected.length, 1, '/config_dump: the rejected reload')
    t.match(dump.reloadRejected[0]?.line, /routes\.yaml:0: HTTPRoute one: line 5\b/, 'naming file and line')
  })

  await t.test('undoing the broken save clears the rejected reload', async (t) => {
    fs.writeFileSync(path.join(dir, 'routes.yaml'), `${routeYaml('one', 'one.example.test', 'a', upstreamA.address.port)}---\n${routeYaml('two', 'two.example.test', 'b', upstreamB.address.port)}`)
    await eventually(async () => (JSON.parse((await request(`${admin}/config_dump`)).body) as { reloadRejected: unknown[] }).reloadRejected.length, (n) => n === 0, 15000, 'rejected reload cleared')
    const r = await request(`http://127.0.0.1:${httpPort}/`, { host: 'two.example.test' })
    t.equal((JSON.parse(r.body) as Echo).upstream, 'b', 'the table serving is the one on disk again')
  })

  await t.test('SIGTERM drains an in-flight request and exits 0', async (t) => {
    const slow = request(`http://127.0.0.1:${httpPort}/slow?delay=1500`, { host: 'one.example.test' })
    await eventually(async () => upstreamA.requests(), (n) => n >= 2, 5000, 'slow request reached the upstream')
    cli.child.kill('SIGTERM')
    const r = await slow
    t.equal(r.status, 200)
    t.equal((JSON.parse(r.body) as Echo).path, '/slow?delay=1500')
    t.equal(await cli.exited, 0)
    // Its access line was written before the exit (lines are recorded after a loop turn's I/O, and batched).
    const drained = cli.stdout().split('\n').filter((l) => l.includes('"component":"access"') && l.includes('"path":"/slow"'))
    t.equal(drained.length, 1, 'the drained request has its access line')
    t.match(drained[0] ?? '', /"status":200/)
  })
})
