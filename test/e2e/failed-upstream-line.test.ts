// The real CLI: a request that failed at an upstream before any answer (the
// connect refused, the connection reset before the response head) names in
// its access line the endpoint it was failing at, as Envoy's UPSTREAM_HOST
// does; `upstreamMs` stays null (no upstream answered). A request that never
// got to an endpoint names none.
import t from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from './harness.ts'

t.test('serve: a connect refused and a reset before the head name the endpoint in the access line', async (t) => {
  // Accepts, reads the request, resets the connection without a byte of answer.
  const resetting = net.createServer((s) => { s.once('data', () => s.resetAndDestroy()); s.on('error', () => {}) })
  await new Promise<void>((r) => resetting.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => resetting.close(() => r())))
  const resetPort = (resetting.address() as net.AddressInfo).port
  const closedPort = await freePort()
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(httpPort),
    backendYaml('refused', closedPort), routeYaml('refused', 'refused.example.test', 'refused', closedPort),
    backendYaml('reset', resetPort), routeYaml('reset', 'reset.example.test', 'reset', resetPort),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '0'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')
  const url = `http://127.0.0.1:${httpPort}/`

  t.equal((await request(url, { host: 'refused.example.test' })).status, 503)
  const refused = await cli.waitFor(/\{[^\n]*"authority":"refused\.example\.test"[^\n]*/, 5000)
  t.match(JSON.parse(refused), { status: 503, upstream: `127.0.0.1:${closedPort}`, upstreamMs: null, code: 'SP_ERR_UPSTREAM_CONNECT' }, 'the refusing endpoint is named')

  t.equal((await request(url, { host: 'reset.example.test' })).status, 502)
  const reset = await cli.waitFor(/\{[^\n]*"authority":"reset\.example\.test"[^\n]*/, 5000)
  t.match(JSON.parse(reset), { status: 502, upstream: `127.0.0.1:${resetPort}`, upstreamMs: null, code: 'SP_ERR_UPSTREAM_RESET' }, 'the resetting endpoint is named')

  t.equal((await request(url, { host: 'nowhere.example.test' })).status, 404)
  const unrouted = await cli.waitFor(/\{[^\n]*"authority":"nowhere\.example\.test"[^\n]*/, 5000)
  t.match(JSON.parse(unrouted), { status: 404, upstream: '' }, 'no endpoint for a request that got to none')
})
