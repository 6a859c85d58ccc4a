// The request path against a scripted Upstreams (test-only): what the router
// hands upstream/, how it relays trailers, metrics, and drain. The real
// registry is exercised in test/listeners.
import t, { type Test } from 'tap'
import http2 from 'node:http2'
import { PassThrough } from 'node:stream'
import type { RouteTable } from '../../lib/compile/table.ts'
import { ErrorCode, SallyportError } from '../../lib/errors.ts'
import { createDataPlane } from '../../lib/listeners/data-plane.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { registry } from '../../lib/observe/metrics.ts'
import type { UpstreamHandler, UpstreamRequest, Upstreams } from '../../lib/upstream/types.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { h1, h2 } from '../listeners/fixtures.ts'

configureLogger({ level: 'silent' })

class Scripted implements Upstreams {
  readonly requests: UpstreamRequest[] = []
  script: (req: UpstreamRequest, handler: UpstreamHandler) => void = () => {}
  forward(req: UpstreamRequest, handler: UpstreamHandler): void {
    this.requests.push(req)
    this.script(req, handler)
  }
  retain(_table: RouteTable): void {}
  dialL4() { return { cancel() {} } }
  stats() { return [] }
  async close(): Promise<void> {}
}

async function plane(t: Test, table: RouteTable, up: Upstreams) {
  const p = createDataPlane({ bind: '127.0.0.1', upstreams: up, accessLog: false, gatewayId: 'me' })
  await p.apply(table)
  t.teardown(() => p.drain(100))
  return p
}

const timeouts = { requestMs: null, backendRequestMs: 1234, connectMs: 55, idleMs: 777 }

t.test('UpstreamRequest: path, authority, timeouts, client address; abort on client close', async (t) => {
  const up = new Scripted()
  const port = await freePort()
  await plane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ timeouts, backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', 9, { hostname: 'api.example' })]), up)
  let aborted: (reason: unknown) => void = () => {}
  const abortSeen = new Promise((resolve) => { aborted = resolve })
  up.script = (req) => { req.signal.addEventListener('abort', { handleEvent: () => aborted(req.signal.reason) }) }
  const client = http2.connect(`http://127.0.0.1:${port}`)
  client.on('error', () => {})
  t.teardown(() => client.close())
  const stream = client.request({ ':path': '/a/b?c=d', ':authority': 'Example.com:8080' })
  stream.on('error', () => {})
  while (up.requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 10))
  const req = up.requests[0]
  t.equal(req.path, '/a/b?c=d')
  t.equal(req.authority, 'api.example')
  t.same(req.timeouts, { connectMs: 55, headersMs: null, deadlineMs: 1234, idleMs: 777 }, 'backendRequest is the deadline of each try, to the last byte of its response')
  t.equal(req.clientAddress, '127.0.0.1')
  t.equal(req.body, null, 'END_STREAM on HEADERS: no body')
  t.equal(req.upgrade, null)
  stream.close(http2.constants.NGHTTP2_CANCEL)
  const reason = await abortSeen
  t.equal((reason as SallyportError).code, ErrorCode.CLIENT_ABORTED)
})

t.test('trailers relayed to HTTP/2 clients that accept them; errors after headers reset the stream', async (t) => {
  const up = new Scripted()
  const port = await freePort()
  await plane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', 9)]), up)
  up.script = (req, handler) => {
    const body = new PassThrough()
    handler.onResponse({ status: 200, headers: { 'content-type': 'application/grpc' }, body, endpoint: 'x:1', protocol: 'h2', trailers: () => ({ 'grpc-status': '0', 'grpc-message': 'ok' }) })
    if (req.path === '/cut') { body.write('partial'); setTimeout(() => body.destroy(new Error('upstream reset')), 20) } else body.end('data')
  }
  const client = http2.connect(`http://127.0.0.1:${port}`)
  client.on('error', () => {})
  t.teardown(() => client.close())
  const got = await new Promise<{ trailers: http2.IncomingHttpHeaders; body: string }>((resolve, reject) => {
    const s = client.request({ ':path': '/ok', ':authority': 'x', te: 'trailers' })
    let body = ''
    s.on('data', (c: Buffer) => { body += c.toString() })
    s.on('trailers', (trailers) => s.on('end', () => resolve({ trailers, body })))
    s.on('error', reject)
  })
  t.equal(got.body, 'data')
  t.equal(got.trailers['grpc-status'], '0')
  const cut = await new Promise<string>((resolve) => {
    const s = client.request({ ':path': '/cut', ':authority': 'x' })
    s.on('data', () => {})
    s.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'))
    s.on('end', () => resolve('clean end'))
  })
  t.equal(cut, 'ERR_HTTP2_STREAM_ERROR', 'RST_STREAM, not a clean end')
})

t.test('upstream errors map to status and reason; metrics count requests by route/backend/code', async (t) => {
  const up = new Scripted()
  const port = await freePort()
  await plane(t, buildTable({ [port]: { routes: [{ name: 'metered', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', 9)]), up)
  const cases: Array<[ErrorCode, number, RegExp]> = [
    [ErrorCode.UPSTREAM_CONNECT, 503, /upstream connect failed/],
    [ErrorCode.UPSTREAM_DNS, 503, /upstream DNS lookup failed/],
    [ErrorCode.UPSTREAM_TIMEOUT, 504, /upstream timeout/],
    [ErrorCode.UPSTREAM_TLS, 502, /tls/],
    [ErrorCode.NO_HEALTHY_UPSTREAM, 503, /no endpoint available/],
  ]
  for (const [code, status, reason] of cases) {
    up.script = (_req, handler) => setImmediate(() => handler.onError(new SallyportError(code, 'x')))
    const r = await h1(port)
    t.equal(r.status, status, code)
    t.match(r.body, reason)
  }
  // A request is counted after the I/O of the loop turn it ended in (record in forward.ts).
  await new Promise((resolve) => setImmediate(resolve))
  const text = await registry.metrics()
  t.match(text, /sallyport_downstream_requests_total\{gateway="test\/gw",listener="l\d+",route="test\/metered",backend="c",namespace="",service_account="",code="503"\} 3/)
  t.match(text, /sallyport_downstream_request_duration_seconds_count\{gateway="test\/gw",route="test\/metered",backend="c",code="503"\} 3/, 'the duration histogram by code too')
  t.match(text, /sallyport_downstream_request_duration_seconds_count\{gateway="test\/gw",route="test\/metered",backend="c",code="504"\} 1/)
  t.match(text, /sallyport_downstream_active_connections\{port="\d+"\}/)
  t.match(text, /sallyport_downstream_active_streams 0/)
})

t.test('drain lets an in-flight request finish, then the port is closed', async (t) => {
  const up = new Scripted()
  const port = await freePort()
  const p = createDataPlane({ bind: '127.0.0.1', upstreams: up, accessLog: false })
  await p.apply(buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', 9)]))
  up.script = (_req, handler) => setTimeout(() => handler.onResponse({ status: 200, headers: {}, body: PassThrough.from(['late but fine']), endpoint: 'x:1', protocol: 'h1' }), 200)
  const pending = h1(port)
  await new Promise((resolve) => setTimeout(resolve, 50))
  const drained = p.drain(5000)
  const r = await pending
  t.equal(r.status, 200)
  t.equal(r.body, 'late but fine')
  await drained
  await t.rejects(h1(port), { code: 'ECONNREFUSED' })
  t.same(p.listening(), [])
})

t.test('h2 response without a body, HEAD, and absolute-form targets', async (t) => {
  const up = new Scripted()
  const port = await freePort()
  await plane(t, buildTable({ [port]: { routes: [{ name: 'r', hostnames: ['abs.example'], rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', 9)]), up)
  up.script = (req, handler) => handler.onResponse({ status: 204, headers: { 'x-path': req.path }, body: PassThrough.from([]), endpoint: 'x:1', protocol: 'h1' })
  const abs = await h1(port, { path: 'http://abs.example/p?q=1', host: 'ignored.example' })
  t.equal(abs.status, 204)
  t.equal(abs.headers['x-path'], '/p?q=1')
  const viaH2 = await h2(port, { host: 'abs.example', path: '/x' })
  t.equal(viaH2.status, 204)
})
