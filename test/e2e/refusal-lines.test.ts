// Requests a listener refuses before routing get an access line and count in
// the request metrics like any other: two Host fields, a transfer coding other
// than chunked (501), a head node cannot parse or over the size limit (431),
// on HTTP/2 a Host naming another host than :authority and a header list over
// the size or field limits. Before, they were answered and logged at debug
// only, so a client sending them was invisible to whoever read the logs.
import t from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, metricSum, rawExchange, routeYaml, settleLogs, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'

/** One HTTP/2 request; its status, or the reset code. */
function h2(port: number, headers: http2.OutgoingHttpHeaders): Promise<string> {
  return new Promise((resolve) => {
    const session = http2.connect(`http://127.0.0.1:${port}`)
    session.on('error', () => {})
    const s = session.request({ ':path': '/', ':authority': 'api.example.test', ...headers })
    let status = ''
    s.on('response', (h) => { status = String(h[':status']) })
    s.on('error', () => {})
    s.resume()
    s.on('close', () => { session.close(); resolve(status !== '' ? status : `rst ${s.rstCode}`) })
  })
}

/** The access line with this reason (one JSON object), parsed. */
async function lineWith(cli: ReturnType<typeof startCli>, reason: string): Promise<Record<string, unknown>> {
  const escaped = reason.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  const text = await cli.waitFor(new RegExp(`\\{[^\\n]*"component":"access"[^\\n]*"reason":"${escaped}"[^\\n]*\\}`), 5000)
  return JSON.parse(text) as Record<string, unknown>
}

t.test('CLI: refusals before routing have access lines and metrics', async (t) => {
  const [port, adminPort, upPort, port2] = [await freePort(), await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  // A second Gateway whose listener has the same name: its requests count under its own name.
  fs.writeFileSync(path.join(dir, 'gateway2.yaml'), gatewayYaml(port2).split('---\n')[1].replace('name: egress', 'name: other'))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', upPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', upPort))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  t.match(await rawExchange(port, 'GET /two?secret=1 HTTP/1.1\r\nHost: api.example.test\r\nHost: other.test\r\n\r\n'), /^HTTP\/1\.1 400 /)
  t.match(await lineWith(cli, 'bad request: more than one Host field'), {
    method: 'GET', authority: 'api.example.test', path: '/two', status: 400, protocol: 'h1', client: '127.0.0.1',
    route: '', backend: '', upstream: '', upstreamMs: null, code: 'SP_ERR_BAD_REQUEST',
  }, 'two Host fields: a line, its path without the query')

  t.match(await rawExchange(port, 'POST /coded HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n'), /^HTTP\/1\.1 501 /)
  t.match(await lineWith(cli, 'not implemented: a transfer coding other than chunked'), { method: 'POST', path: '/coded', status: 501, code: 'SP_ERR_NOT_IMPLEMENTED' },
    'a transfer coding other than chunked: 501, SP_ERR_NOT_IMPLEMENTED')

  t.match(await rawExchange(port, 'GET /x HTTP/1.1\r\nHost: api.example.test\r\nbad header line\r\n\r\n'), /^HTTP\/1\.1 400 /)
  t.match(await lineWith(cli, 'malformed request head (HPE_INVALID_HEADER_TOKEN)'), { method: '', path: '', status: 400, code: 'SP_ERR_BAD_REQUEST', client: '127.0.0.1' },
    'a head node cannot parse: a line naming the parser\'s error')

  t.match(await rawExchange(port, `GET /big HTTP/1.1\r\nHost: api.example.test\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n`), /^HTTP\/1\.1 431 /)
  t.match(await lineWith(cli, 'request head over the size or field limit'), { status: 431, code: 'SP_ERR_HEADERS_TOO_LARGE' }, 'a head over the size limit: 431')

  t.equal(await h2(port, { host: 'other.test' }), '400')
  t.match(await lineWith(cli, 'bad request: Host differs from :authority'), { method: 'GET', authority: 'api.example.test', path: '/', status: 400, protocol: 'h2', code: 'SP_ERR_BAD_REQUEST' },
    'HTTP/2: a Host naming another host than :authority')

  t.equal(await h2(port, { 'x-big': 'a'.repeat(20000) }), '431')
  t.match(await lineWith(cli, 'request header list over the size limit'), { protocol: 'h2', status: 431, code: 'SP_ERR_HEADERS_TOO_LARGE' }, 'HTTP/2: a header list over the size limit')

  const fields: http2.OutgoingHttpHeaders = {}
  for (let i = 0; i < 120; i++) fields[`x-f${i}`] = '1'
  t.equal(await h2(port, fields), `rst ${http2.constants.NGHTTP2_ENHANCE_YOUR_CALM}`)
  t.match(await lineWith(cli, 'request header list over the field limit: stream reset ENHANCE_YOUR_CALM'), { protocol: 'h2', status: 431, code: 'SP_ERR_HEADERS_TOO_LARGE' },
    'HTTP/2: a header list over the field limit (reset)')

  const metrics = (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body
  t.equal(metricSum(metrics, 'sallyport_downstream_requests_total', { gateway: 'default/egress', listener: 'http', code: '400' }), 3, 'the 400s count in the request metrics, under their Gateway')
  t.equal(metricSum(metrics, 'sallyport_downstream_requests_total', { gateway: 'default/egress', listener: 'http', code: '431' }), 3, 'and the 431s')
  t.equal(metricSum(metrics, 'sallyport_downstream_requests_total', { gateway: 'default/egress', listener: 'http', code: '501' }), 1, 'and the 501')

  // No route on either Gateway (two listeners named alike): each 404 under its own Gateway.
  t.match(await rawExchange(port, 'GET / HTTP/1.1\r\nHost: nowhere.test\r\nConnection: close\r\n\r\n'), /^HTTP\/1\.1 404 /)
  t.match(await rawExchange(port2, 'GET / HTTP/1.1\r\nHost: nowhere.test\r\nConnection: close\r\n\r\n'), /^HTTP\/1\.1 404 /)
  await lineWith(cli, 'no route')
  const after = await eventually(async () => (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body,
    (m) => metricSum(m, 'sallyport_downstream_requests_total', { code: '404' }) === 2, 5000, 'two 404s counted')
  t.equal(metricSum(after, 'sallyport_downstream_requests_total', { gateway: 'default/egress', code: '404' }), 1, 'one 404 under default/egress')
  t.equal(metricSum(after, 'sallyport_downstream_requests_total', { gateway: 'default/other', code: '404' }), 1, 'and one under default/other, not both under the first')
})

// An absolute-form target may carry userinfo (`http://user:password@host/`, what a client
// configured with a proxy URL sends). A routed request's line shows only its path; a refused
// one showed the target as sent, password included, breaking the access log's promise of no
// userinfo (and a target no scheme of ours takes did the same on the routed path, span too).
t.test('CLI: the access line of a refused absolute-form request carries no userinfo', async (t) => {
  const [port, adminPort, upPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', upPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', upPort))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  t.match(await rawExchange(port, 'GET http://user:s3cret-one@api.example.test/two?k=v HTTP/1.1\r\nHost: api.example.test\r\nHost: other.test\r\n\r\n'), /^HTTP\/1\.1 400 /)
  t.match(await lineWith(cli, 'bad request: more than one Host field'), { path: 'http://api.example.test/two', status: 400 }, 'two Host fields: the target without its userinfo')

  t.match(await rawExchange(port, 'POST HTTP://user:s3cret-two@api.example.test/coded HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n'), /^HTTP\/1\.1 501 /)
  t.match(await lineWith(cli, 'not implemented: a transfer coding other than chunked'), { path: 'HTTP://api.example.test/coded', status: 501 }, 'a 501: the same')

  t.match(await rawExchange(port, 'GET ftp://user:s3cret-three@api.example.test/f HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n'), /^HTTP\/1\.1 400 /)
  t.match(await lineWith(cli, 'bad request: the request target is neither a path (/...) nor an absolute URI'), { path: 'ftp://api.example.test/f', status: 400 },
    'a target of another scheme, refused by the router: the same')

  await settleLogs()
  t.notMatch(cli.stdout() + cli.stderr(), /s3cret/, 'no password anywhere in the output')
})
