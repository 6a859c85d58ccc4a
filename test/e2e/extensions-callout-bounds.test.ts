// The real CLI with callouts that answer too much: an ExternalProcessor answer
// over twice maxBodyBytes plus 64 KiB, an OAuth2 token answer over 64 KiB.
// Each is a failed extension — 500 SP_ERR_EXTENSION_FAILED, or with failOpen
// the request continues — counted in sallyport_extension_failures_total.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, startCli, tempDir } from './harness.ts'
import { egressBackend, get, recorder, route, sample, send } from './extensions-helpers.ts'

t.test('CLI: callout answers over their bound fail the extension', async (t) => {
  const api = await recorder(t)
  // 3 MiB of valid JSON, sent at once: over the default bound (2 MiB + 64 KiB).
  const callout = await recorder(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ setHeaders: { 'x-from-callout': 'yes' }, padding: 'x'.repeat(3 * 1024 * 1024) }))
  })
  const tokens = await recorder(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ access_token: 'tok', token_type: 'Bearer', expires_in: 3600, padding: 'x'.repeat(100 * 1024) }))
  })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const w = (file: string, text: string): void => fs.writeFileSync(path.join(dir, file), text)
  w('gateway.yaml', gatewayYaml(port))
  w('secret.yaml', `apiVersion: v1
kind: Secret
metadata: { name: oauth-client, namespace: default }
stringData: { client_id: gateway-client, client_secret: s3cr3t }
`)
  w('backends.yaml', [
    egressBackend('xp-closed', api.port, `  - name: big-closed
    type: ExternalProcessor
    config: { url: "http://127.0.0.1:${callout.port}/" }
`),
    egressBackend('xp-open', api.port, `  - name: big-open
    type: ExternalProcessor
    failOpen: true
    config: { url: "http://127.0.0.1:${callout.port}/" }
`),
    egressBackend('oauth', api.port, `  - name: big-token
    type: OAuth2ClientCredentials
    config: { tokenUrl: "http://127.0.0.1:${tokens.port}/token", secretRef: { name: oauth-client } }
`),
  ].join('---\n'))
  w('routes.yaml', [
    route('xp-closed', 'closed.example.test', 'xp-closed', api.port),
    route('xp-open', 'open.example.test', 'xp-open', api.port),
    route('oauth', 'oauth.example.test', 'oauth', api.port),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off'])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const closed = await send(port, { host: 'closed.example.test' })
  t.equal(closed.status, 500, 'ExternalProcessor answer over the bound: the extension failed')
  t.match(closed.body, /SP_ERR_EXTENSION_FAILED/)
  const open = await send(port, { host: 'open.example.test' })
  t.equal(open.status, 200, 'failOpen: the request continues')
  t.equal(api.seen.at(-1)?.headers['x-from-callout'], undefined, 'nothing of the answer applied')
  const oauth = await send(port, { host: 'oauth.example.test' })
  t.equal(oauth.status, 500, 'token answer over 64 KiB: the extension failed')
  t.match(oauth.body, /SP_ERR_EXTENSION_FAILED/)
  t.equal(api.seen.filter((s) => s.headers.authorization !== undefined).length, 0, 'never sent without the credential')

  const m = (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body
  t.equal(sample(m, 'sallyport_extension_failures_total', { extension: 'big-closed', outcome: 'closed' }), 1)
  t.equal(sample(m, 'sallyport_extension_failures_total', { extension: 'big-open', outcome: 'open' }), 1)
  t.equal(sample(m, 'sallyport_extension_failures_total', { extension: 'big-token', outcome: 'closed' }), 1)
  await cli.waitFor(/big-closed.*external processor answered more than 2162688 bytes/, 5000)
  await cli.waitFor(/token endpoint answered more than 65536 bytes/, 5000)
  t.pass('the log says why')
})
