// The real CLI: a deny an extension cannot have meant (a status outside
// 200–599, a header no client could be sent) fails the extension instead of
// reaching the client's connection: failOpen decides, the log says why, and
// the gateway keeps serving. A well-formed deny is answered as given.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, startCli, tempDir } from './harness.ts'
import { egressBackend, get, recorder, route, send } from './extensions-helpers.ts'

t.test('CLI: an extension deny with an impossible status or header fails the extension', async (t) => {
  const echo = await recorder(t)
  const callout = await recorder(t, (req, res) => {
    const status = req.url === '/huge' ? 1000 : req.url === '/text' ? '403' : 451
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ action: 'deny', status, reason: 'said no' }))
  })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const w = (file: string, text: string): void => fs.writeFileSync(path.join(dir, file), text)
  w('deny.mjs', `export default () => ({
  requestHeaders(req) {
    const how = req.headers['x-deny']
    if (how === 'low') return { deny: { status: 42, reason: 'too low' } }
    if (how === 'float') return { deny: { status: 403.5, reason: 'not an integer' } }
    if (how === 'header') return { deny: { status: 403, reason: 'bad header', headers: { 'x-why': 'a\\r\\nx-injected: 1' } } }
    if (how === 'name') return { deny: { status: 403, reason: 'bad name', headers: { 'bad name': 'v' } } }
    if (how === 'ok') return { deny: { status: 418, reason: 'teapot', headers: { 'x-why': 'because' } } }
  },
})
`)
  w('gateway.yaml', gatewayYaml(port))
  const callouts = ['valid', 'huge', 'text'].map((p) => egressBackend(`call-${p}`, echo.port, `  - name: callout-${p}
    type: ExternalProcessor
    failOpen: false
    config: { url: "http://127.0.0.1:${callout.port}/${p === 'valid' ? '' : p}" }
`))
  w('backends.yaml', [
    egressBackend('plugged', echo.port, `  - name: deny-plugin
    type: Plugin
    failOpen: false
    config: { path: ${JSON.stringify(path.join(dir, 'deny.mjs'))} }
`),
    egressBackend('open', echo.port, `  - name: deny-plugin-open
    type: Plugin
    failOpen: true
    config: { path: ${JSON.stringify(path.join(dir, 'deny.mjs'))} }
`),
    ...callouts,
  ].join('---\n'))
  w('routes.yaml', [
    route('plugged', 'plugged.example.test', 'plugged', echo.port),
    route('open', 'open.example.test', 'open', echo.port),
    ...['valid', 'huge', 'text'].map((p) => route(`call-${p}`, `${p}.example.test`, `call-${p}`, echo.port)),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const ok = await send(port, { host: 'plugged.example.test', headers: { 'x-deny': 'ok' } })
  t.equal(ok.status, 418, 'a well-formed plugin deny is answered with its status')
  t.equal(ok.headers['x-why'], 'because', 'and its headers')
  t.match(ok.body, /teapot/)

  for (const how of ['low', 'float', 'header', 'name']) {
    const r = await send(port, { host: 'plugged.example.test', headers: { 'x-deny': how } })
    t.equal(r.status, 500, `plugin deny '${how}': the extension failed (failOpen false)`)
    t.match(r.body, /SP_ERR_EXTENSION_FAILED/, `plugin deny '${how}': says which`)
    t.equal(r.headers['x-injected'], undefined, `plugin deny '${how}': nothing injected`)
  }
  const open = await send(port, { host: 'open.example.test', headers: { 'x-deny': 'low' } })
  t.equal(open.status, 200, 'failOpen true: an impossible deny lets the request through')

  const valid = await send(port, { host: 'valid.example.test' })
  t.equal(valid.status, 451, 'a callout deny with a valid status is answered with it')
  for (const p of ['huge', 'text']) {
    const r = await send(port, { host: `${p}.example.test` })
    t.equal(r.status, 500, `callout deny status '${p}': the extension failed`)
    t.match(r.body, /SP_ERR_EXTENSION_FAILED/)
  }
  await cli.waitFor(/callout-huge.*deny status 1000/, 5000)
  await cli.waitFor(/deny-plugin.*deny header \\"x-why\\"/, 5000)
  t.pass('the log says what was wrong with the deny')

  const after = await send(port, { host: 'plugged.example.test' })
  t.equal(after.status, 200, 'the gateway still serves')
  t.equal(cli.child.exitCode, null, 'the process is alive')
})
