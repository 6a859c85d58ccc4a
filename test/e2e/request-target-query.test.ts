// A query string never reaches the access log or a span, whatever the shape of
// the request target: an asterisk-form target with a query (refused 400), and
// an absolute-form URI whose query follows the authority with no path
// (`http://host?key=...`, RFC 3986 §3.2: the authority ends at '/', '?' or
// '#'), which is the request `GET /?key=...` to that host.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { backendYaml, eventually, freePort, gatewayYaml, rawExchange, request, routeYaml, settleLogs, startCli, tempDir } from './harness.ts'
import { startOtlpReceiver } from '../helpers/otlp-receiver.ts'

const SERVER = 2

t.test('the query of an asterisk-form or path-less absolute-form target stays out of access lines and spans', async (t) => {
  const seen: string[] = []
  const upstream = http.createServer((req, res) => { seen.push(`${req.headers.host} ${req.url}`); res.end('ok') })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { upstream.closeAllConnections(); upstream.close(() => resolve()) }))
  const up = (upstream.address() as AddressInfo).port
  const receiver = await startOtlpReceiver(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(port), backendYaml('api', up), routeYaml('api', 'api.example.test', 'api', up)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--otlp-endpoint', receiver.url, '--otlp-protocol', 'http/json'], {
    env: { OTEL_BSP_SCHEDULE_DELAY: '50' },
  })
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20_000, 'readyz')

  const star = await rawExchange(port, 'GET *?api_key=SECRET1 HTTP/1.1\r\nhost: api.example.test\r\n\r\n', { until: /\r\n\r\n[^]*\n/ })
  t.match(star, /^HTTP\/1\.1 400 /, 'asterisk-form with GET is refused')
  const absolute = await rawExchange(port, 'GET http://api.example.test?api_key=SECRET2 HTTP/1.1\r\nhost: api.example.test\r\n\r\n', { until: /\r\n\r\nok/ })
  t.match(absolute, /^HTTP\/1\.1 200 /, 'an absolute URI with no path is the path /')
  t.same(seen, ['api.example.test /?api_key=SECRET2'], 'the upstream gets the query, after the path /')

  const spans = await receiver.waitFor((s) => s.filter((x) => x.kind === SERVER).length >= 2, 15_000, 'two server spans')
  const servers = spans.filter((s) => s.kind === SERVER)
  t.same(servers.map((s) => [s.attributes['url.path'], s.attributes['server.address'], s.attributes['http.response.status_code']]),
    [['*', 'api.example.test', 400], ['/', 'api.example.test', 200]], 'url.path without the query, server.address the host')
  t.notMatch(JSON.stringify(spans.map((s) => [s.name, s.attributes, s.status])), /SECRET/, 'no span carries the query')

  await settleLogs()
  const lines = cli.stdout().split('\n').filter((l) => l.includes('"component":"access"'))
  t.equal(lines.length, 2, 'two access lines')
  t.same(lines.map((l) => { const r = JSON.parse(l) as { authority: string; path: string; status: number }; return [r.authority, r.path, r.status] }),
    [['api.example.test', '*', 400], ['api.example.test', '/', 200]])
  t.notMatch(cli.stdout(), /SECRET/, 'no log line carries the query')
})
