// The bound on interim (1xx) responses an upstream may send before its final
// one (lib/upstream/exchange.ts MAX_INFORMATIONAL, MAX_INFORMATIONAL_BYTES):
// past it the exchange fails as an upstream protocol error (502), whatever the
// protocol (sallyport's HTTP/1.1 client, undici's, HTTP/2), and an HTTP/1.1
// connection left in the middle of a response is closed, never reused.
// Before the bound, an upstream sending `100 Continue` or `103` heads without
// end kept the exchange (and its connection) busy until the idle bound.
import t, { type Test } from 'tap'
import http2 from 'node:http2'
import net from 'node:net'
import { createUpstreams, type UpstreamOptions } from '../../lib/upstream/registry.ts'
import { ErrorCode } from '../../lib/errors.ts'
import { MAX_INFORMATIONAL } from '../../lib/upstream/exchange.ts'
import type { Cluster } from '../../lib/compile/table.ts'
import type { Upstreams } from '../../lib/upstream/types.ts'
import type { SallyportError } from '../../lib/errors.ts'
import { cluster, endpoint, listen, readBody, request, table } from './fixtures.ts'

function noop(): void {}

interface Result { readonly interim: number[]; readonly status: number; readonly body: string; readonly err: SallyportError | null }

/** forward() that records the interim heads handed on before the outcome. */
function send(up: Upstreams, c: Cluster): Promise<Result> {
  return new Promise((resolve) => {
    const interim: number[] = []
    up.forward(request(c, { timeouts: { connectMs: null, headersMs: 5000, idleMs: 5000 } }), {
      onInformational: (status) => { interim.push(status) },
      onResponse: (res) => { readBody(res.body).then((body) => resolve({ interim, status: res.status, body, err: null }), noop) },
      onTunnel: () => resolve({ interim, status: 0, body: '', err: null }),
      onError: (err) => resolve({ interim, status: 0, body: '', err }),
    })
  })
}

/** A raw upstream answering every request head on a connection with `answer`; counts connections. */
async function rawUpstream(t: Test, answer: string): Promise<{ port: number, connections: () => number }> {
  let n = 0
  const sockets = new Set<net.Socket>()
  const server = net.createServer((sock) => {
    n++
    sockets.add(sock)
    sock.on('error', noop)
    sock.on('close', () => sockets.delete(sock))
    let buf = ''
    sock.setEncoding('latin1')
    sock.on('data', (d: string) => {
      buf += d
      for (let i = buf.indexOf('\r\n\r\n'); i !== -1; i = buf.indexOf('\r\n\r\n')) {
        buf = buf.slice(i + 4)
        sock.write(answer, 'latin1')
      }
    })
  })
  const port = await listen(server)
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  return { port, connections: () => n }
}

function upstreams(t: Test, port: number, over: Partial<Cluster> = {}, options: UpstreamOptions = {}): { up: Upstreams, c: Cluster } {
  const up = createUpstreams(options)
  t.teardown(() => up.close())
  const c = cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)], ...over })
  up.retain(table([c]))
  return { up, c }
}

const FINAL = 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok'
const HINT = 'HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n'

for (const client of ['sallyport', 'undici'] as const) {
  t.test(`HTTP/1.1 (${client}): up to ${MAX_INFORMATIONAL} interim heads, then the response`, async (t) => {
    const u = await rawUpstream(t, HINT.repeat(MAX_INFORMATIONAL) + FINAL)
    const { up, c } = upstreams(t, u.port, {}, { http1Client: client })
    const r = await send(up, c)
    t.equal(r.err, null)
    t.same([r.status, r.body], [200, 'ok'])
    t.equal(r.interim.length, MAX_INFORMATIONAL, 'each passed on')
  })

  t.test(`HTTP/1.1 (${client}): one interim head past the bound is a 502, the connection is not reused`, async (t) => {
    const u = await rawUpstream(t, HINT.repeat(MAX_INFORMATIONAL + 1) + FINAL)
    const { up, c } = upstreams(t, u.port, {}, { http1Client: client })
    const r = await send(up, c)
    t.equal(r.err?.code, ErrorCode.UPSTREAM_PROTOCOL, 'an upstream protocol error')
    t.equal(r.err?.status, 502)
    t.match(r.err?.message ?? '', /interim/, 'saying why')
    t.equal(r.interim.length, MAX_INFORMATIONAL, 'no more than the bound passed on')
    const again = await send(up, c)
    t.equal(again.err?.code, ErrorCode.UPSTREAM_PROTOCOL)
    t.equal(u.connections(), 2, 'a new connection for the next request')
  })
}

t.test('HTTP/1.1: 100 Continue without end (never passed on) is bounded too', async (t) => {
  const u = await rawUpstream(t, 'HTTP/1.1 100 Continue\r\n\r\n'.repeat(200) + FINAL)
  const { up, c } = upstreams(t, u.port)
  const r = await send(up, c)
  t.equal(r.err?.code, ErrorCode.UPSTREAM_PROTOCOL)
  t.same(r.interim, [], 'nothing passed on')
})

t.test('HTTP/1.1: a few large interim heads past the byte bound are a 502', async (t) => {
  const big = `HTTP/1.1 103 Early Hints\r\nlink: <${'a'.repeat(15 * 1024)}>\r\n\r\n`
  const u = await rawUpstream(t, big.repeat(5) + FINAL)
  const { up, c } = upstreams(t, u.port)
  const r = await send(up, c)
  t.equal(r.err?.code, ErrorCode.UPSTREAM_PROTOCOL)
  t.ok(r.interim.length < 5, `${r.interim.length} passed on before the bound`)
})

t.test('HTTP/2: interim heads past the bound are a 502', async (t) => {
  const server = http2.createServer()
  server.on('stream', (stream) => {
    stream.on('error', noop)
    for (let i = 0; i < 40; i++) stream.additionalHeaders({ ':status': 103, link: '</x>' })
    stream.respond({ ':status': 200 })
    stream.end('ok')
  })
  // Sessions still open at the end are destroyed so close() returns.
  server.on('session', (session) => { server.once('close', () => session.destroy()) })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await new Promise<void>((resolve) => server.close(() => resolve())) })
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  up.retain(table([c]))
  const r = await send(up, c)
  t.equal(r.err?.code, ErrorCode.UPSTREAM_PROTOCOL)
  t.equal(r.interim.length, MAX_INFORMATIONAL)
})
