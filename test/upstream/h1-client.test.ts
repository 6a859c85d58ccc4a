// sallyport's own HTTP/1.1 upstream client (lib/upstream/h1-client.ts, h1-pool.ts)
// over real sockets: keep-alive reuse, the connection limit, replay on a stale
// connection, the upstream's Keep-Alive hint, maxRequestsPerConnection, bytes
// after a response, request body framing, early responses, timeouts, invalid
// headers, cancellation in the queue, response framing.
import t, { type Test } from 'tap'
import http from 'node:http'
import net from 'node:net'
import { createHash, randomBytes } from 'node:crypto'
import { Readable } from 'node:stream'
import { finished } from 'node:stream/promises'
import { createUpstreams, type UpstreamOptions } from '../../lib/upstream/registry.ts'
import { ErrorCode } from '../../lib/errors.ts'
import type { Cluster } from '../../lib/compile/table.ts'
import type { UpstreamRequest, UpstreamResponse, Upstreams } from '../../lib/upstream/types.ts'
import { cluster, clusterTls, endpoint, expectError, expectResponse, forward, listen, readBody, request, table, type Outcome } from './fixtures.ts'

const NO_LIMITS = { maxConnections: null, maxPendingRequests: null, maxParallelRequests: null, maxParallelRetries: null, maxRequestsPerConnection: null }

function noop(): void {}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** Waits (polling) until `cond` holds: for events a test cannot await directly. */
async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await sleep(5)
}

interface Upstream { readonly port: number; readonly connections: () => number }

/** A node:http upstream; counts the connections it accepted. */
async function httpServer(t: Test, handler: http.RequestListener): Promise<Upstream> {
  const server = http.createServer(handler)
  let n = 0
  server.on('connection', () => { n++ })
  const port = await listen(server)
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { port, connections: () => n }
}

/** A raw TCP upstream: `onConn` gets each socket and its index (0 for the first connection). */
async function rawServer(t: Test, onConn: (sock: net.Socket, index: number) => void): Promise<Upstream> {
  let n = 0
  const sockets = new Set<net.Socket>()
  const server = net.createServer((sock) => {
    sockets.add(sock)
    sock.on('error', noop)
    sock.on('close', () => sockets.delete(sock))
    onConn(sock, n++)
  })
  const port = await listen(server)
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  return { port, connections: () => n }
}

/** Calls `onHead` with each request head read on `sock` (bodiless requests) and its index on the connection. */
function onHeads(sock: net.Socket, onHead: (head: string, n: number) => void): void {
  let buf = ''
  let n = 0
  sock.setEncoding('latin1')
  sock.on('data', (d: string) => {
    buf += d
    for (let i = buf.indexOf('\r\n\r\n'); i !== -1; i = buf.indexOf('\r\n\r\n')) {
      const head = buf.slice(0, i)
      buf = buf.slice(i + 4)
      onHead(head, n++)
    }
  })
}

function ok(body: string, extra = ''): string {
  return `HTTP/1.1 200 OK\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`
}

function upstreams(t: Test, port: number, over: Partial<Cluster> = {}, options: UpstreamOptions = {}): { up: Upstreams, c: Cluster } {
  const up = createUpstreams(options)
  t.teardown(() => up.close())
  const c = cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)], ...over })
  up.retain(table([c]))
  return { up, c }
}

async function get(up: Upstreams, c: Cluster, over: Partial<UpstreamRequest> = {}): Promise<{ status: number, body: string, res: UpstreamResponse }> {
  const res = expectResponse(await forward(up, request(c, over)))
  return { status: res.status, body: await readBody(res.body), res }
}

t.test('keep-alive: sequential requests share one connection; host and connection headers', async (t) => {
  const seen: Array<{ host: string | undefined, connection: string | undefined }> = []
  const u = await httpServer(t, (req, res) => {
    seen.push({ host: req.headers.host, connection: req.headers.connection })
    res.end(req.url)
  })
  const { up, c } = upstreams(t, u.port)
  for (const path of ['/a', '/b', '/c']) {
    const r = await get(up, c, { path, authority: 'api.example.test:8443' })
    t.equal(r.body, path)
  }
  t.equal(u.connections(), 1, 'one upstream connection')
  t.same(seen, Array(3).fill({ host: 'api.example.test:8443', connection: 'keep-alive' }))
})

t.test('connectionsPerPool = 2: six concurrent requests, never more than two connections', async (t) => {
  const held: http.ServerResponse[] = []
  const arrivals: string[] = []
  let maxOpen = 0
  const u = await httpServer(t, (req, res) => { arrivals.push(req.url ?? ''); held.push(res) })
  const { up, c } = upstreams(t, u.port, {}, { connectionsPerPool: 2 })
  const done: string[] = []
  const all = ['/0', '/1', '/2', '/3', '/4', '/5'].map(async (path) => {
    const r = await get(up, c, { path })
    done.push(r.body)
    return r
  })
  for (let round = 0; round < 3; round++) {
    await until(() => held.length === 2)
    const s = up.stats()[0]
    maxOpen = Math.max(maxOpen, s.connected)
    t.equal(s.pending, 4 - 2 * round, `round ${round}: the rest wait in the queue`)
    for (const res of held.splice(0)) res.end(res.req.url)
  }
  const results = await Promise.all(all)
  t.same(results.map((r) => [r.status, r.body]), ['/0', '/1', '/2', '/3', '/4', '/5'].map((p) => [200, p]))
  t.ok(maxOpen <= 2, `stats: at most 2 connected (${maxOpen})`)
  t.equal(u.connections(), 2, 'the server saw two connections')
  const pairs = (list: string[]): string[][] => [0, 2, 4].map((i) => list.slice(i, i + 2).sort())
  t.same(pairs(arrivals), [['/0', '/1'], ['/2', '/3'], ['/4', '/5']], 'queued in order')
  t.same(pairs(done), pairs(arrivals), 'completed in that order')
  t.equal(up.stats()[0].pending, 0)
})

t.test('a stale keep-alive connection: a GET is sent again, a POST with a body is not', async (t) => {
  // Every connection answers its first request, then dies on the next one's bytes.
  const heads: string[] = []
  const u = await rawServer(t, (sock, index) => {
    let answered = false
    sock.on('data', (d: Buffer) => {
      heads.push(d.toString('latin1').split('\r\n')[0])
      if (answered) { sock.destroy(); return }
      answered = true
      sock.write(ok(`conn ${index}`, 'connection: keep-alive\r\n'))
    })
  })
  const { up, c } = upstreams(t, u.port)
  t.equal((await get(up, c, { path: '/1' })).body, 'conn 0')
  t.equal((await get(up, c, { path: '/2' })).body, 'conn 1', 'replayed on a fresh connection')
  const post = await forward(up, request(c, { method: 'POST', path: '/3', body: Readable.from([Buffer.from('payload')]) }))
  t.equal(expectError(post).code, ErrorCode.UPSTREAM_RESET, 'a POST with a body fails')
  await sleep(20)
  t.equal(u.connections(), 2, 'the POST was not sent again')
  t.same(heads, ['GET /1 HTTP/1.1', 'GET /2 HTTP/1.1', 'GET /2 HTTP/1.1', 'POST /3 HTTP/1.1'])
})

t.test("the upstream's Keep-Alive timeout: 1 s is too short to reuse, 30 s is reused", async (t) => {
  for (const [timeout, connections] of [[1, 2], [30, 1]] as const) {
    const u = await rawServer(t, (sock) => onHeads(sock, () => sock.write(ok('hi', `keep-alive: timeout=${timeout}\r\n`))))
    const { up, c } = upstreams(t, u.port)
    t.equal((await get(up, c)).body, 'hi')
    t.equal((await get(up, c)).body, 'hi')
    t.equal(u.connections(), connections, `timeout=${timeout}: ${connections} connection(s)`)
  }
})

t.test('maxRequestsPerConnection = 2: the 2nd request says close, the 3rd opens a new connection', async (t) => {
  const seen: Array<[number, string | undefined]> = []
  let conns = 0
  const ids = new WeakMap<net.Socket, number>()
  const u = await httpServer(t, (req, res) => {
    if (!ids.has(req.socket)) ids.set(req.socket, conns++)
    seen.push([ids.get(req.socket) ?? -1, req.headers.connection])
    res.end('ok')
  })
  const { up, c } = upstreams(t, u.port, { circuitBreaker: { ...NO_LIMITS, maxRequestsPerConnection: 2 } })
  for (let i = 0; i < 3; i++) t.equal((await get(up, c)).body, 'ok')
  t.same(seen, [[0, 'keep-alive'], [0, 'close'], [1, 'keep-alive']])
  t.equal(u.connections(), 2)
})

t.test('bytes after a complete response are never the next response', async (t) => {
  const u = await rawServer(t, (sock, index) => onHeads(sock, () => {
    if (index === 0) sock.write(ok('first') + ok('smuggled'))
    else sock.write(ok(`own ${index}`))
  }))
  const { up, c } = upstreams(t, u.port)
  t.equal((await get(up, c)).body, 'first')
  t.equal((await get(up, c)).body, 'own 1', 'the next request gets its own answer')
  t.equal(u.connections(), 2, 'on a new connection')
})

t.test('request bodies: chunked without a length, as declared with one, 1 MiB intact', async (t) => {
  const u = await httpServer(t, (req, res) => {
    const hash = createHash('sha256')
    let size = 0
    req.on('data', (d: Buffer) => { hash.update(d); size += d.length })
    req.on('end', () => res.end(JSON.stringify({ te: req.headers['transfer-encoding'] ?? null, cl: req.headers['content-length'] ?? null, size, sha: hash.digest('hex') })))
  })
  const { up, c } = upstreams(t, u.port)
  const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex')
  const send = async (body: Buffer[], headers: Record<string, string>): Promise<unknown> =>
    JSON.parse((await get(up, c, { method: 'POST', headers, body: Readable.from(body) })).body)
  const hello = Buffer.from('hello')
  t.same(await send([Buffer.from('hel'), Buffer.from('lo')], {}), { te: 'chunked', cl: null, size: 5, sha: sha(hello) })
  t.same(await send([hello], { 'content-length': '5' }), { te: null, cl: '5', size: 5, sha: sha(hello) })
  const big = randomBytes(1024 * 1024)
  const parts: Buffer[] = []
  for (let i = 0; i < big.length; i += 65536) parts.push(big.subarray(i, i + 65536))
  t.same(await send(parts, {}), { te: 'chunked', cl: null, size: big.length, sha: sha(big) }, '1 MiB chunked')
  t.same(await send(parts, { 'content-length': String(big.length) }), { te: null, cl: String(big.length), size: big.length, sha: sha(big) }, '1 MiB with its length')
})

t.test('an early 413 during a large upload reaches the client; the next request succeeds', async (t) => {
  const u = await rawServer(t, (sock, index) => {
    if (index > 0) { onHeads(sock, () => sock.write(ok('next'))); return }
    let head = ''
    const read = (d: Buffer): void => {
      head += d.toString('latin1')
      if (!head.includes('\r\n\r\n')) return
      sock.removeListener('data', read)
      sock.pause() // reads no more of the body
      sock.write('HTTP/1.1 413 Content Too Large\r\ncontent-length: 8\r\n\r\ntoo big!')
    }
    sock.on('data', read)
  })
  const { up, c } = upstreams(t, u.port)
  const chunk = Buffer.alloc(64 * 1024, 0x78)
  const upload = Readable.from((function* () { for (let i = 0; i < 128; i++) yield chunk })())
  const r = await get(up, c, { method: 'POST', headers: { 'content-length': String(8 * 1024 * 1024) }, body: upload })
  t.same([r.status, r.body], [413, 'too big!'])
  await finished(upload)
  t.pass('the rest of the upload was consumed, not left hanging')
  t.equal((await get(up, c)).body, 'next')
  t.equal(u.connections(), 2, 'the half-sent connection was not reused')
})

t.test('headers timeout: an upstream that never answers', async (t) => {
  const u = await rawServer(t, (sock) => sock.resume())
  const { up, c } = upstreams(t, u.port)
  const err = expectError(await forward(up, request(c, { timeouts: { connectMs: null, headersMs: 200, idleMs: null } })))
  t.equal(err.code, ErrorCode.UPSTREAM_TIMEOUT)
})

t.test('an invalid header value fails that request only', async (t) => {
  const heads: string[] = []
  const u = await rawServer(t, (sock) => onHeads(sock, (head) => { heads.push(head); sock.write(ok('fine')) }))
  const { up, c } = upstreams(t, u.port)
  t.equal((await get(up, c)).body, 'fine')
  const err = expectError(await forward(up, request(c, { headers: { 'x-bad': 'a\r\nx-injected: 1' } })))
  t.match(err.code, /^SP_ERR_/, `a coded error (${err.code})`)
  t.equal((await get(up, c)).body, 'fine', 'the next request is answered')
  t.equal(u.connections(), 1, 'on the same connection')
  t.equal(heads.length, 2)
  t.notOk(heads.some((h) => h.includes('x-injected')), 'nothing of the bad request was sent')
})

t.test('a request cancelled while queued is never sent', async (t) => {
  const urls: string[] = []
  let slow: http.ServerResponse | null = null
  const u = await httpServer(t, (req, res) => {
    urls.push(req.url ?? '')
    if (req.url === '/slow') slow = res
    else res.end('quick')
  })
  const { up, c } = upstreams(t, u.port, {}, { connectionsPerPool: 1 })
  const first = get(up, c, { path: '/slow' })
  await until(() => slow !== null)
  const abort = new AbortController()
  const second = forward(up, request(c, { path: '/cancelled', signal: abort.signal }))
  t.equal(up.stats()[0].pending, 1, 'queued')
  abort.abort(new Error('client gone'))
  t.equal(expectError(await second).code, ErrorCode.CLIENT_ABORTED)
  t.equal(up.stats()[0].pending, 0, 'no longer pending')
  ;(slow as http.ServerResponse | null)?.end('slow')
  t.equal((await first).body, 'slow')
  t.equal((await get(up, c, { path: '/after' })).body, 'quick')
  t.same(urls, ['/slow', '/after'])
  t.equal(up.stats()[0].pending, 0)
})

t.test('one connection opened per request waiting, not per upgrade waiting in undici or per cancelled request', async (t) => {
  // TLS to a server that never answers the handshake: every connection stays connecting.
  const held: net.Socket[] = []
  const u = await rawServer(t, (sock) => { held.push(sock) })
  const { up, c } = upstreams(t, u.port, { tls: clusterTls() }, { connectionsPerPool: 10 })
  const gone = new AbortController()
  const pending = [
    forward(up, request(c, { path: '/ws', upgrade: 'websocket', headers: { connection: 'upgrade', upgrade: 'websocket' }, signal: gone.signal })),
    forward(up, request(c, { path: '/a', signal: gone.signal })),
  ]
  await until(() => u.connections() >= 2)
  await sleep(50)
  t.equal(u.connections(), 2, "the upgrade's connection (undici's) and one for /a")
  const cancelled = new AbortController()
  pending.push(forward(up, request(c, { path: '/cancelled', signal: cancelled.signal })))
  await until(() => u.connections() >= 3)
  cancelled.abort(new Error('client gone'))
  pending.push(forward(up, request(c, { path: '/b', signal: gone.signal })))
  await sleep(100)
  t.equal(u.connections(), 3, '/b waits for the connection /cancelled no longer needs')
  t.equal(up.stats()[0].pending, 3, 'the upgrade, /a and /b wait')
  gone.abort(new Error('client gone'))
  await Promise.all(pending)
  for (const sock of held) sock.destroy() // the pool's close waits for connections still connecting
})

t.test('response framing: trailers, HEAD, 204, read until close', async (t) => {
  const u = await httpServer(t, (req, res) => {
    if (req.url === '/trailers') {
      res.writeHead(200, { trailer: 'x-sum' })
      res.write('chunked ')
      res.write('body')
      res.addTrailers({ 'x-sum': '42' })
      res.end()
    } else if (req.url === '/empty') {
      res.writeHead(204)
      res.end()
    } else {
      res.writeHead(200, { 'content-length': '5' })
      res.end('hello')
    }
  })
  const { up, c } = upstreams(t, u.port)
  const tr = await get(up, c, { path: '/trailers' })
  t.equal(tr.body, 'chunked body')
  t.same(tr.res.trailers?.(), { 'x-sum': '42' })
  const head = await get(up, c, { method: 'HEAD', path: '/hello' })
  t.same([head.status, head.res.headers['content-length'], head.body], [200, '5', ''], 'HEAD: a length, no body')
  const empty = await get(up, c, { path: '/empty' })
  t.same([empty.status, empty.body], [204, ''])
  t.equal((await get(up, c, { path: '/hello' })).body, 'hello', 'the connection still frames correctly')
  t.equal(u.connections(), 1)

  const raw = await rawServer(t, (sock) => onHeads(sock, () => {
    sock.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\npart one, ')
    setImmediate(() => sock.end('part two'))
  }))
  const r2 = upstreams(t, raw.port)
  t.equal((await get(r2.up, r2.c)).body, 'part one, part two', 'a body read until close is whole')
  t.equal((await get(r2.up, r2.c)).body, 'part one, part two', 'and the next request opens a new connection')
  t.equal(raw.connections(), 2)
})

t.test('closing the pool: a request still queued is answered or failed, never dropped', async (t) => {
  let slow: http.ServerResponse | null = null
  const u = await httpServer(t, (req, res) => { if (req.url === '/slow') slow = res; else res.end('queued') })
  const { up, c } = upstreams(t, u.port, {}, { connectionsPerPool: 1 })
  const first = get(up, c, { path: '/slow' })
  await until(() => slow !== null)
  let queued: Outcome | null = null
  void forward(up, request(c, { path: '/queued' })).then((o) => { queued = o })
  const closing = up.close()
  ;(slow as http.ServerResponse | null)?.end('slow')
  t.equal((await first).body, 'slow', 'the request in flight finishes')
  await closing
  t.not(queued, null, 'the queued request was settled before close() resolved')
  if (queued !== null) t.equal(await readBody(expectResponse(queued).body), 'queued', 'served on the connection freed after close()')
})

t.test('a body longer than its declared content-length never reaches the upstream as another request', async (t) => {
  const seen: string[] = []
  const u = await httpServer(t, (req, res) => { seen.push(`${req.method} ${req.url}`); req.resume(); req.on('end', () => res.end('ok')) })
  const { up, c } = upstreams(t, u.port)
  const body = Readable.from([Buffer.from('hello'), Buffer.from('GET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n')])
  await forward(up, request(c, { method: 'POST', path: '/upload', headers: { 'content-length': '5' }, body }))
  await sleep(50)
  t.same(seen, ['POST /upload'], 'only the declared bytes are sent')
})

t.test('backendRequest timeout 0 (no headers timeout) keeps the idle timeout of the body', async (t) => {
  const u = await rawServer(t, (sock) => onHeads(sock, () => sock.write('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial')))
  const { up, c } = upstreams(t, u.port)
  for (const headersMs of [null, 0]) {
    const res = expectResponse(await forward(up, request(c, { timeouts: { connectMs: null, headersMs, idleMs: 100 } })))
    const outcome = await Promise.race([
      readBody(res.body).then(() => 'ended', (err: unknown) => (err as { code?: string }).code ?? 'error'),
      sleep(1000).then(() => 'still waiting after 1 s'),
    ])
    res.body.destroy()
    t.equal(outcome, ErrorCode.UPSTREAM_TIMEOUT, `headersMs ${String(headersMs)}: a stalled body times out`)
  }
})

t.test('an idle connection past its keep-alive deadline is not reused', async (t) => {
  const u = await rawServer(t, (sock) => onHeads(sock, () => sock.write(ok('hi'))))
  const { up, c } = upstreams(t, u.port, {}, { keepAliveTimeoutMs: 200 })
  t.equal((await get(up, c)).body, 'hi')
  await sleep(500)
  t.equal((await get(up, c)).body, 'hi')
  t.equal(u.connections(), 2, 'a new connection after 500 ms idle (deadline 200 ms)')
})

t.test('a pool closed while connecting stops the connects no request waits for (every protocol)', async (t) => {
  for (const protocol of ['HTTP11', 'HTTP2', 'HTTP'] as const) {
    await t.test(protocol, async (t) => {
      // A TLS upstream that accepts and never answers: the handshake would wait out the 60 s connect timeout.
      const accepted: net.Socket[] = []
      const raw = await rawServer(t, (sock) => { accepted.push(sock); sock.resume() })
      const { up, c } = upstreams(t, raw.port, { protocol, tls: clusterTls() }, { connectTimeoutMs: 60_000 })
      const abort = new AbortController()
      const outcome = forward(up, request(c, { signal: abort.signal }))
      await until(() => accepted.length === 1)
      abort.abort()
      expectError(await outcome)
      // The configuration no longer references the backend: its pool closes.
      up.retain(table([]))
      const closed = await Promise.race([
        new Promise<boolean>((resolve) => accepted[0].once('close', () => resolve(true))),
        sleep(10_000).then(() => false),
      ])
      t.ok(closed, 'the half-open connection is closed, not left to the connect timeout')
      t.same(up.stats(), [], 'no pool left')
    })
  }
})

t.test('a closing HTTP/1.1 pool keeps connecting for a request that waits, and stops when it gives up', async (t) => {
  const accepted: net.Socket[] = []
  const raw = await rawServer(t, (sock) => { accepted.push(sock); sock.resume() })
  const { up, c } = upstreams(t, raw.port, { tls: clusterTls() }, { connectTimeoutMs: 60_000 })
  const abort = new AbortController()
  const outcome = forward(up, request(c, { signal: abort.signal }))
  await until(() => accepted.length === 1)
  up.retain(table([]))
  let closed = false
  accepted[0].once('close', () => { closed = true })
  await sleep(50)
  t.notOk(closed, 'the connection a request still waits for stays')
  abort.abort()
  expectError(await outcome)
  const stopped = await Promise.race([until(() => closed).then(() => true), sleep(10_000).then(() => false)])
  t.ok(stopped, 'given up on: the connect stops')
})
