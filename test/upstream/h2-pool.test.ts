import t from 'tap'
import http2 from 'node:http2'
import net from 'node:net'
import { PassThrough, Readable } from 'node:stream'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { cluster, endpoint, expectError, expectResponse, forward, listen, readBody, request, table } from './fixtures.ts'

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

async function until(ok: () => boolean, ms: number): Promise<void> {
  for (const end = Date.now() + ms; !ok() && Date.now() < end;) await sleep(10)
}

async function closeServer(s: http2.Http2Server): Promise<void> {
  await new Promise<void>((resolve) => s.close(() => resolve()))
}

function h2cServer(onStream: (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void, settings: http2.Settings = {}): http2.Http2Server {
  const s = http2.createServer({ settings })
  s.on('stream', (stream, headers) => {
    stream.on('error', () => { /* resets are part of these tests */ })
    onStream(stream, headers)
  })
  // Tests end with sessions still open: destroy them so close() resolves.
  s.on('session', (session) => { s.once('close', () => session.destroy()) })
  return s
}

t.test('h2c: prior-knowledge HTTP/2 in cleartext, one session for many streams', async (t) => {
  const ports = new Set<number>()
  const s = h2cServer((stream, headers) => {
    ports.add(stream.session?.socket?.remotePort ?? 0)
    stream.respond({ ':status': 201, 'x-path': String(headers[':path']), 'x-te': String(headers.te ?? '') })
    stream.end(`authority=${headers[':authority']} method=${headers[':method']}`)
  })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  const results = await Promise.all([1, 2, 3, 4, 5].map((i) => forward(up, request(c, { path: `/p${i}`, authority: 'svc.local', headers: { te: 'trailers' } }))))
  for (const [i, o] of results.entries()) {
    const res = expectResponse(o)
    t.equal(res.status, 201)
    t.equal(res.protocol, 'h2c')
    t.equal(res.headers['x-path'], `/p${i + 1}`)
    t.equal(res.headers['x-te'], 'trailers')
    t.equal(await readBody(res.body), 'authority=svc.local method=GET')
  }
  t.equal(ports.size, 1, 'all streams on one session')
  t.match(up.stats()[0], { protocol: 'h2c', connected: 1 })
})

t.test('h2c: request body streams with backpressure', async (t) => {
  const total = 8 * 1024 * 1024
  const s = h2cServer((stream) => {
    let n = 0
    stream.on('data', (d: Buffer) => { n += d.length })
    stream.on('end', () => { stream.respond({ ':status': 200 }); stream.end(String(n)) })
  })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const chunk = Buffer.alloc(64 * 1024, 1)
  let produced = 0
  const body = new Readable({ read() { if (produced >= total) this.push(null); else { produced += chunk.length; this.push(chunk) } } })
  const res = expectResponse(await forward(up, request(cluster({ protocol: 'H2C', endpoints: [endpoint(port)] }), { method: 'PUT', body })))
  t.equal(await readBody(res.body), String(total))
})

t.test('RST_STREAM from the upstream → SP_ERR_UPSTREAM_RESET', async (t) => {
  const s = h2cServer((stream) => { stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR) })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const err = expectError(await forward(up, request(cluster({ protocol: 'H2C', endpoints: [endpoint(port)] }))))
  t.equal(err.code, 'SP_ERR_UPSTREAM_RESET')
})

t.test('RST_STREAM REFUSED_STREAM is told apart from other codes (only it says the request was not processed)', async (t) => {
  let code: number = http2.constants.NGHTTP2_REFUSED_STREAM
  const s = h2cServer((stream) => { stream.close(code) })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  const refused = expectError(await forward(up, request(c)))
  t.equal(refused.code, 'SP_ERR_UPSTREAM_RESET')
  t.equal((refused.cause as { code?: string }).code, 'SP_STREAM_REFUSED')
  for (code of [http2.constants.NGHTTP2_INTERNAL_ERROR, http2.constants.NGHTTP2_CANCEL, http2.constants.NGHTTP2_PROTOCOL_ERROR]) {
    const err = expectError(await forward(up, request(c)))
    t.equal(err.code, 'SP_ERR_UPSTREAM_RESET', `code ${code}`)
    t.not((err.cause as { code?: string }).code, 'SP_STREAM_REFUSED', `code ${code} is not a refusal`)
  }
})

t.test('the upstream connection lost mid-body: the body fails, it does not end (node emits "end" then)', async (t) => {
  // node's client stream emits 'end' when its session's socket closes under it (rstCode
  // NGHTTP2_CANCEL); taken for the end of the body, a cut response reached clients as whole.
  const s = h2cServer((stream, headers) => {
    stream.respond({ ':status': 200 })
    if (headers[':path'] === '/whole') {
      // Ended, then the connection goes at once: the body is whole.
      stream.end('all of it', () => setImmediate(() => stream.session?.socket?.destroy()))
      return
    }
    stream.write('part')
    setTimeout(() => stream.session?.socket?.destroy(), 20)
  })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  const cut = expectResponse(await forward(up, request(c, { path: '/cut' })))
  t.equal(cut.status, 200)
  await t.rejects(readBody(cut.body), { code: 'SP_ERR_UPSTREAM_RESET' }, 'the body fails as a reset')
  const whole = expectResponse(await forward(up, request(c, { path: '/whole' })))
  t.equal(await readBody(whole.body), 'all of it', 'a body that ended before the connection went is whole')
})

/**
 * A raw HTTP/2 peer that acknowledges SETTINGS and records, per stream, the frames it
 * receives ("HEADERS", "DATA", "DATA END_STREAM", "RST_STREAM 8"...): what went on the wire,
 * not what node's server makes of it (it emits 'end' on a RST_STREAM(CANCEL) too).
 */
function frameRecorder(): { server: net.Server, frames: Map<number, string[]> } {
  const frames = new Map<number, string[]>()
  const names: Record<number, string> = { 0: 'DATA', 1: 'HEADERS', 3: 'RST_STREAM', 8: 'WINDOW_UPDATE' }
  const server = net.createServer((sock) => {
    sock.on('error', () => {})
    sock.write(Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]))
    let buf = Buffer.alloc(0)
    let preface = false
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d])
      if (!preface) {
        if (buf.length < 24) return
        buf = buf.subarray(24)
        preface = true
      }
      while (buf.length >= 9) {
        const len = buf.readUIntBE(0, 3)
        if (buf.length < 9 + len) break
        const type = buf[3]!
        const flags = buf[4]!
        const id = buf.readUInt32BE(5) & 0x7fffffff
        if (type === 4 && (flags & 1) === 0) sock.write(Buffer.from([0, 0, 0, 4, 1, 0, 0, 0, 0]))
        if (id !== 0 && type !== 8) {
          let name = names[type] ?? String(type)
          if ((type === 0 || type === 1) && (flags & 1) !== 0) name += ' END_STREAM'
          if (type === 3) name += ` ${buf.readUInt32BE(9)}`
          const list = frames.get(id) ?? []
          if (list.at(-1) !== name) list.push(name)
          frames.set(id, list)
        }
        buf = buf.subarray(9 + len)
      }
    })
  })
  return { server, frames }
}

t.test('a request cancelled mid-upload resets its upstream stream with CANCEL, never ending it first', async (t) => {
  // The request body went to the stream through stream.pipeline(); closing the stream
  // then sent nothing at all: the upstream kept the stream open, the session its slot.
  // node's close(CANCEL) on a stream still sending its body flushes an END_STREAM
  // before the RST_STREAM (the upstream would see a whole body first), and destroy()
  // resets with INTERNAL_ERROR (a gRPC server reads a cancelled streaming call as
  // INTERNAL, not CANCELLED). The stream's abort signal resets it with CANCEL alone.
  const { server, frames } = frameRecorder()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const up = createUpstreams()
  t.teardown(async () => {
    await up.close()
    server.close()
  })
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint((server.address() as net.AddressInfo).port)] })
  for (const [i, cut] of ['abort', 'body-error'].entries()) {
    const id = 2 * i + 1
    const body = new PassThrough()
    const ac = new AbortController()
    const outcome = forward(up, request(c, { method: 'POST', body, signal: ac.signal }))
    body.write(Buffer.alloc(1000, 97))
    await until(() => frames.get(id)?.includes('DATA') === true, 2000)
    if (cut === 'abort') ac.abort(new Error('client gone'))
    else body.destroy(Object.assign(new Error('client gone'), { code: 'SP_CLIENT_GONE' }))
    t.equal(expectError(await outcome).code, 'SP_ERR_CLIENT_ABORTED', `${cut}: the client's failure`)
    await until(() => frames.get(id)?.at(-1)?.startsWith('RST_STREAM') === true, 2000)
    t.same(frames.get(id), ['HEADERS', 'DATA', `RST_STREAM ${http2.constants.NGHTTP2_CANCEL}`], `${cut}: the upstream stream is cancelled, never ended (a cut body is not a whole one)`)
  }
  await until(() => up.stats()[0]?.running === 0, 2000)
  t.match(up.stats()[0], { protocol: 'h2c', running: 0 }, 'no stream left counted on the session')
})

t.test('h2: headers timeout, and abort via signal resets the stream upstream', async (t) => {
  let upstreamStreamClosed!: (code: number) => void
  const streamClosed = new Promise<number>((resolve) => { upstreamStreamClosed = resolve })
  let arrived!: () => void
  const requestArrived = new Promise<void>((resolve) => { arrived = resolve })
  const s = h2cServer((stream, headers) => {
    if (headers[':path'] === '/abort') {
      stream.on('close', () => upstreamStreamClosed(stream.rstCode ?? -1))
      arrived()
    }
    // never answers
  })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  const timedOut = expectError(await forward(up, request(c, { timeouts: { connectMs: null, headersMs: 150, idleMs: null } })))
  t.equal(timedOut.code, 'SP_ERR_UPSTREAM_TIMEOUT')

  const ac = new AbortController()
  const pending = forward(up, request(c, { path: '/abort', signal: ac.signal }))
  await requestArrived
  ac.abort()
  t.equal(expectError(await pending).code, 'SP_ERR_CLIENT_ABORTED')
  t.equal(await streamClosed, http2.constants.NGHTTP2_CANCEL, 'upstream saw RST_STREAM(CANCEL)')
})

t.test('h2 extended CONNECT (RFC 8441) tunnel when the upstream advertises it', async (t) => {
  const s = h2cServer((stream, headers) => {
    if (headers[':method'] !== 'CONNECT' || headers[':protocol'] !== 'websocket') {
      stream.respond({ ':status': 400 })
      stream.end()
      return
    }
    stream.respond({ ':status': 200 })
    stream.pipe(stream)
  }, { enableConnectProtocol: true })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  const o = await forward(up, request(c, { upgrade: 'websocket', path: '/chat', headers: { 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', 'sec-websocket-version': '13' } }))
  if (o.kind !== 'tunnel') throw new Error(`expected tunnel, got ${o.kind}`)
  t.equal(o.tunnel.status, 200)
  t.equal(o.tunnel.headers['sec-websocket-accept'], 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=', 'accept computed for an HTTP/1.1 client (RFC 6455 example)')
  const echoed = new Promise<string>((resolve) => o.tunnel.stream.once('data', (d: Buffer) => resolve(d.toString())))
  o.tunnel.stream.write('ping')
  t.equal(await echoed, 'ping')
  o.tunnel.stream.destroy()
})

t.test('h2c: a second session opens when the first is at SETTINGS_MAX_CONCURRENT_STREAMS', async (t) => {
  const ports = new Set<number>()
  const held: http2.ServerHttp2Stream[] = []
  let release!: () => void
  const allHeld = new Promise<void>((resolve) => { release = resolve })
  const s = h2cServer((stream) => {
    ports.add(stream.session?.socket?.remotePort ?? 0)
    held.push(stream)
    if (held.length === 3) release()
  }, { maxConcurrentStreams: 1 })
  const port = await listen(s)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await closeServer(s) })
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  const pending = [1, 2, 3].map(() => forward(up, request(c)))
  await allHeld
  for (const stream of held) { stream.respond({ ':status': 200 }); stream.end('ok') }
  for (const o of await Promise.all(pending)) t.equal(await readBody(expectResponse(o).body), 'ok')
  t.equal(ports.size, 3, 'one session per concurrent stream')
})

t.test('h2c: a bad :status with DATA in the same read is a 502 at once, and frees its stream slot', async (t) => {
  // node closes a stream only once its readable side is consumed: a reset stream
  // whose DATA nobody read stayed open, its slot on the session taken for good.
  // nghttp2 takes any three digits for :status; node's server will not send 600, so the frames are hand-written.
  const frame = (type: number, flags: number, stream: number, payload: Buffer): Buffer => {
    const head = Buffer.alloc(9)
    head.writeUIntBE(payload.length, 0, 3)
    head[3] = type
    head[4] = flags
    head.writeUInt32BE(stream, 5)
    return Buffer.concat([head, payload])
  }
  const literal = (n: string, v: string): Buffer => Buffer.concat([Buffer.from([0, n.length]), Buffer.from(n, 'latin1'), Buffer.from([v.length]), Buffer.from(v, 'latin1')])
  const sockets = new Set<net.Socket>()
  const server = net.createServer((sock) => {
    sockets.add(sock)
    sock.on('error', () => {})
    sock.write(frame(4, 0, 0, Buffer.alloc(0)))
    let buf = Buffer.alloc(0)
    let preface = false
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d])
      if (!preface) {
        if (buf.length < 24) return
        buf = buf.subarray(24)
        preface = true
      }
      while (buf.length >= 9) {
        const length = buf.readUIntBE(0, 3)
        if (buf.length < 9 + length) return
        const [type, flags, stream] = [buf[3], buf[4], buf.readUInt32BE(5) & 0x7fffffff]
        buf = buf.subarray(9 + length)
        if (type === 4 && (flags & 1) === 0) sock.write(frame(4, 1, 0, Buffer.alloc(0)))
        if (type === 1) sock.write(Buffer.concat([frame(1, 4, stream, Buffer.concat([literal(':status', '600'), literal('content-length', '2')])), frame(0, 1, stream, Buffer.from('ok'))]))
      }
    })
  })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  up.retain(table([c]))
  // A client that gives up only so that the old failure ends (the request waited for good, past the idle bound).
  const err = expectError(await forward(up, request(c, { signal: AbortSignal.timeout(3000) })))
  t.equal(err.code, 'SP_ERR_UPSTREAM_PROTOCOL', 'a 502 at once (HEADERS and DATA in one read left the request waiting for good)')
  await until(() => up.stats()[0]?.running === 0, 2000)
  t.equal(up.stats()[0]?.running, 0, 'the reset stream no longer counts on its session')
  let closed = false
  const closing = up.close().then(() => { closed = true })
  await until(() => closed, 2000)
  t.ok(closed, 'the pool closes: its session has no stream left open')
  if (closed) await closing
})

t.test('h2c: a request right after nghttp2 tore a session down (DATA on a 204) goes on a new session, not the dead one', async (t) => {
  // A response nghttp2 finds malformed this way destroys the whole session, whose
  // 'close' comes a few ticks later: a request picked it in between and failed
  // (ERR_HTTP2_INVALID_SESSION, a 502) without a byte sent.
  const frame = (type: number, flags: number, stream: number, payload: Buffer): Buffer => {
    const head = Buffer.alloc(9)
    head.writeUIntBE(payload.length, 0, 3)
    head[3] = type
    head[4] = flags
    head.writeUInt32BE(stream, 5)
    return Buffer.concat([head, payload])
  }
  const literal = (n: string, v: string): Buffer => Buffer.concat([Buffer.from([0, n.length]), Buffer.from(n, 'latin1'), Buffer.from([v.length]), Buffer.from(v, 'latin1')])
  const sockets = new Set<net.Socket>()
  let answered = 0
  const server = net.createServer((sock) => {
    sockets.add(sock)
    sock.on('error', () => {})
    sock.write(frame(4, 0, 0, Buffer.alloc(0)))
    let buf = Buffer.alloc(0)
    let preface = false
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d])
      if (!preface) {
        if (buf.length < 24) return
        buf = buf.subarray(24)
        preface = true
      }
      while (buf.length >= 9) {
        const length = buf.readUIntBE(0, 3)
        if (buf.length < 9 + length) return
        const [type, flags, stream] = [buf[3], buf[4], buf.readUInt32BE(5) & 0x7fffffff]
        buf = buf.subarray(9 + length)
        if (type === 4 && (flags & 1) === 0) sock.write(frame(4, 1, 0, Buffer.alloc(0)))
        if (type === 1) sock.write(Buffer.concat([frame(1, 4, stream, literal(':status', answered++ === 0 ? '204' : '200')), frame(0, 1, stream, Buffer.from('ok'))]))
      }
    })
  })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { for (const s of sockets) s.destroy(); await up.close(); server.close() })
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  up.retain(table([c]))
  const first = expectResponse(await forward(up, request(c)))
  t.equal(first.status, 204)
  // The next request as soon as the first one's failure is known.
  const next = await new Promise<Awaited<ReturnType<typeof forward>>>((resolve) => {
    first.body.once('error', () => { resolve(forward(up, request(c))) })
    first.body.resume()
  })
  const res = expectResponse(next)
  t.equal(res.status, 200, 'answered on a new session')
  t.equal(await readBody(res.body), 'ok')
})
