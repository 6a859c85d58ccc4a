// The real CLI: a request that filters or extensions left unsendable (here a
// Plugin setting a header value with CR LF in it) is answered 500
// SP_ERR_REQUEST_UNSENDABLE without reaching the upstream, and it does not
// count against the endpoint's health: with a passive health check that ejects
// after two failures, the next good request still gets through. An
// ExternalProcessor that sets such a header fails as an extension instead.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, metricSum, startCli, tempDir } from './harness.ts'
import { egressBackend, get, recorder, route, send } from './extensions-helpers.ts'

t.test('CLI: an unsendable request is a 500 of its own and leaves the endpoint healthy', async (t) => {
  const echo = await recorder(t)
  const callout = await recorder(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ setHeaders: { 'x-from-callout': 'a\r\nx-injected: 1' } }))
  })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const w = (file: string, text: string): void => fs.writeFileSync(path.join(dir, file), text)
  // A plugin that writes a CR LF into a header when the request asks for it.
  w('bad-header.mjs', `export default () => ({
  requestHeaders(req) { if (req.headers['x-make-bad'] === '1') req.headers['x-bad'] = 'a\\r\\nx-injected: 1' },
})
`)
  w('gateway.yaml', gatewayYaml(port))
  w('backends.yaml', [
    egressBackend('plugged', echo.port, `  - name: bad-header
    type: Plugin
    config: { path: ${JSON.stringify(path.join(dir, 'bad-header.mjs'))} }
`),
    egressBackend('called', echo.port, `  - name: bad-callout
    type: ExternalProcessor
    failOpen: false
    config: { url: "http://127.0.0.1:${callout.port}/" }
`),
  ].join('---\n'))
  w('routes.yaml', [route('plugged', 'plugged.example.test', 'plugged', echo.port), route('called', 'called.example.test', 'called', echo.port)].join('---\n'))
  w('policy.yaml', `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: eject-fast, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: plugged }]
  healthCheck:
    passive:
      consecutive5XxErrors: 2
      interval: 1s
      baseEjectionTime: 30s
      maxEjectionPercent: 100
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const bad: number[] = []
  let body = ''
  for (let i = 0; i < 4; i++) {
    const r = await send(port, { host: 'plugged.example.test', headers: { 'x-make-bad': '1' } })
    bad.push(r.status)
    body = r.body
  }
  t.same(bad, [500, 500, 500, 500], 'each unsendable request is answered 500')
  t.match(body, /request not sendable upstream/, 'with a body saying which')
  t.equal(echo.seen.filter((s) => s.headers['x-injected'] !== undefined || s.headers['x-bad'] !== undefined).length, 0, 'nothing of it reached the upstream')
  const good = await send(port, { host: 'plugged.example.test' })
  t.equal(good.status, 200, 'the next good request gets through')
  await cli.waitFor(/"code":"SP_ERR_REQUEST_UNSENDABLE"/, 5000)
  t.pass('the access log names the code')
  const m = (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body
  t.ok(metricSum(m, 'sallyport_downstream_requests_total', { code: '500' }) >= 4, 'counted as 500s')
  t.equal(metricSum(m, 'sallyport_upstream_endpoint_healthy', { backend: `Backend/default/plugged:${echo.port}` }), 1, 'the endpoint was not ejected')
  t.notMatch(cli.stdout() + cli.stderr(), /upstream endpoint ejected/, 'no ejection logged')

  const called = await send(port, { host: 'called.example.test' })
  t.equal(called.status, 500, 'a callout that sets an unwritable header fails (failOpen false)')
  t.match(called.body, /SP_ERR_EXTENSION_FAILED/)
  t.equal(echo.seen.filter((s) => s.headers['x-from-callout'] !== undefined).length, 0, 'the header went nowhere')
  await cli.waitFor(/bad-callout.*invalid header \\"x-from-callout\\"/, 5000)
  t.pass('the failure says which header')
})
