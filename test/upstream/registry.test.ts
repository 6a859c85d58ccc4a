import t from 'tap'
import http from 'node:http'
import { Readable } from 'node:stream'
import type { Socket } from 'node:net'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { registry } from '../../lib/observe/metrics.ts'
import { cluster, deadPort, endpoint, expectError, expectResponse, forward, listen, readBody, request, table } from './fixtures.ts'

function echoPortServer(): http.Server {
  return http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.setHeader('connection', 'keep-alive')
      res.setHeader('keep-alive', 'timeout=30')
      res.setHeader('x-remote-port', String(req.socket.remotePort))
      res.end(`${req.method} ${req.url} host=${req.headers.host} te=${req.headers['transfer-encoding'] ?? ''} x=${req.headers['x-test'] ?? ''}`)
    })
  })
}

function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}

async function close(server: http.Server): Promise<void> {
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))
}

t.test('HTTP/1.1 keep-alive: the pooled connection is reused', async (t) => {
  const server = echoPortServer()
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const c = cluster({ endpoints: [endpoint(port)] })

  const first = expectResponse(await forward(up, request(c, { path: '/a?q=1', authority: 'api.example', headers: { 'x-test': 'v', connection: 'close' } })))
  t.equal(first.status, 200)
  t.equal(first.protocol, 'h1')
  t.equal(first.endpoint, `127.0.0.1:${port}`)
  t.equal(await readBody(first.body), 'GET /a?q=1 host=api.example te= x=v')
  t.notOk('connection' in first.headers, 'hop-by-hop stripped from the response')
  t.notOk('keep-alive' in first.headers)
  // undici hands a pipelining-1 socket back to the pool one event-loop turn after the response ends.
  await turn()

  const second = expectResponse(await forward(up, request(c)))
  await readBody(second.body)
  t.equal(second.headers['x-remote-port'], first.headers['x-remote-port'], 'same upstream connection')
  const stats = up.stats()
  t.equal(stats.length, 1)
  t.match(stats[0], { cluster: c.id, protocol: 'h1', connected: 1 })

  const text = await registry.metrics()
  t.match(text, `sallyport_upstream_request_duration_seconds_count{backend="${c.id}",code="200"} 2`)
  t.match(text, `sallyport_upstream_pool_connections{backend="${c.id}",protocol="h1"} 1`)
  t.match(text, `sallyport_upstream_active_requests{backend="${c.id}"} 0`)
})

t.test('no endpoints → SP_ERR_NO_HEALTHY_UPSTREAM', async (t) => {
  const up = createUpstreams()
  t.teardown(() => up.close())
  const err = expectError(await forward(up, request(cluster())))
  t.equal(err.code, 'SP_ERR_NO_HEALTHY_UPSTREAM')
  t.equal(err.status, 503)
})

t.test('connect refused → next endpoint; all refused → SP_ERR_UPSTREAM_CONNECT', async (t) => {
  const server = echoPortServer()
  const port = await listen(server)
  const dead = await deadPort()
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })

  const c = cluster({ endpoints: [endpoint(dead), endpoint(port)] })
  for (let i = 0; i < 4; i++) {
    const res = expectResponse(await forward(up, request(c)))
    t.equal(res.endpoint, `127.0.0.1:${port}`, `request ${i} answered by the live endpoint`)
    await readBody(res.body)
  }

  const only = cluster({ endpoints: [endpoint(dead)] })
  const err = expectError(await forward(up, request(only)))
  t.equal(err.code, 'SP_ERR_UPSTREAM_CONNECT')
  t.equal((err.cause as NodeJS.ErrnoException).code, 'ECONNREFUSED')
  t.match(await registry.metrics(), `sallyport_upstream_connect_errors_total{backend="${only.id}",reason="refused"} 1`)
})

t.test('hostname endpoints resolve through options.resolve; a DNS failure is SP_ERR_UPSTREAM_DNS (503)', async (t) => {
  const server = echoPortServer()
  const port = await listen(server)
  const asked: string[] = []
  const up = createUpstreams({
    // The destination guard refuses loopback for Backend names unless allowed (issue 5).
    guard: { allowCidrs: ['127.0.0.0/8'] },
    resolve: async (name) => {
      asked.push(name)
      if (name === 'missing.test') throw Object.assign(new Error('nope'), { code: 'ENOTFOUND' })
      return ['127.0.0.1']
    },
  })
  t.teardown(async () => { await up.close(); await close(server) })
  const c = cluster({ endpoints: [endpoint(port, 'svc.test')] })
  const res = expectResponse(await forward(up, request(c, { authority: 'svc.test' })))
  t.match(await readBody(res.body), /host=svc.test/)
  t.same(asked, ['svc.test'])
  const err = expectError(await forward(up, request(cluster({ endpoints: [endpoint(port, 'missing.test')] }))))
  t.equal(err.code, 'SP_ERR_UPSTREAM_DNS')
  t.equal(err.status, 503)
  t.match(err.message, /DNS/)
})

t.test('a 32 MiB request body streams through without being buffered', async (t) => {
  const total = 32 * 1024 * 1024
  const chunk = Buffer.alloc(64 * 1024, 97)
  let produced = 0
  let producedAtFirstByte = -1
  const body = new Readable({
    read() {
      if (produced >= total) { this.push(null); return }
      produced += chunk.length
      this.push(chunk)
    },
  })
  const server = http.createServer((req, res) => {
    let received = 0
    req.on('data', (d: Buffer) => {
      if (producedAtFirstByte === -1) producedAtFirstByte = produced
      received += d.length
    })
    req.on('end', () => res.end(String(received)))
  })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const c = cluster({ endpoints: [endpoint(port)] })
  const res = expectResponse(await forward(up, request(c, { method: 'POST', body })))
  t.equal(await readBody(res.body), String(total))
  t.ok(producedAtFirstByte > 0 && producedAtFirstByte < total / 4, `upstream saw bytes after ${producedAtFirstByte} produced`)
})

t.test('a large response body honours backpressure', async (t) => {
  const total = 16 * 1024 * 1024
  const server = http.createServer((_req, res) => {
    const chunk = Buffer.alloc(64 * 1024, 98)
    let sent = 0
    const write = (): void => {
      while (sent < total) {
        sent += chunk.length
        if (!res.write(chunk)) { res.once('drain', write); return }
      }
      res.end()
    }
    write()
  })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const res = expectResponse(await forward(up, request(cluster({ endpoints: [endpoint(port)] }))))
  // Do not read for a while: the Readable must stay near its highWaterMark.
  await new Promise((r) => setTimeout(r, 100))
  t.ok(res.body.readableLength < 4 * 1024 * 1024, `buffered ${res.body.readableLength} bytes while paused`)
  let n = 0
  for await (const c of res.body) n += (c as Buffer).length
  t.equal(n, total)
})

t.test('abort via the request signal reaches the upstream', async (t) => {
  let upstreamClosed!: () => void
  const closed = new Promise<void>((resolve) => { upstreamClosed = resolve })
  let gotRequest!: () => void
  const arrived = new Promise<void>((resolve) => { gotRequest = resolve })
  const server = http.createServer((req) => {
    req.socket.on('close', () => upstreamClosed())
    gotRequest()
  })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const ac = new AbortController()
  const pending = forward(up, request(cluster({ endpoints: [endpoint(port)] }), { signal: ac.signal }))
  await arrived
  ac.abort()
  const err = expectError(await pending)
  t.equal(err.code, 'SP_ERR_CLIENT_ABORTED')
  await closed
  t.pass('upstream connection closed')
})

t.test('abort while the response body streams destroys the body and the upstream exchange', async (t) => {
  let upstreamClosed!: () => void
  const closed = new Promise<void>((resolve) => { upstreamClosed = resolve })
  const server = http.createServer((_req, res) => {
    res.socket?.on('close', () => upstreamClosed())
    res.write('partial')
  })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const ac = new AbortController()
  const res = expectResponse(await forward(up, request(cluster({ endpoints: [endpoint(port)] }), { signal: ac.signal })))
  const bodyError = new Promise<Error>((resolve) => res.body.on('error', resolve))
  res.body.resume()
  ac.abort()
  t.match(await bodyError, { code: 'SP_ERR_CLIENT_ABORTED' })
  await closed
})

t.test('upstream reset → SP_ERR_UPSTREAM_RESET', async (t) => {
  const server = http.createServer((req) => { req.socket.destroy() })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const err = expectError(await forward(up, request(cluster({ endpoints: [endpoint(port)] }))))
  t.equal(err.code, 'SP_ERR_UPSTREAM_RESET')
  t.equal(err.status, 502)
})

t.test('response headers timeout → SP_ERR_UPSTREAM_TIMEOUT', async (t) => {
  const server = http.createServer(() => { /* never answers */ })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const err = expectError(await forward(up, request(cluster({ endpoints: [endpoint(port)] }), {
    timeouts: { connectMs: null, headersMs: 200, idleMs: null },
  })))
  t.equal(err.code, 'SP_ERR_UPSTREAM_TIMEOUT')
  t.equal(err.status, 504)
})

t.test('response headers timeout with a request body (a stalled upload counts too) → SP_ERR_UPSTREAM_TIMEOUT', async (t) => {
  const server = http.createServer((req) => { req.resume() /* reads everything, never answers */ })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const err = expectError(await forward(up, request(cluster({ endpoints: [endpoint(port)] }), {
    method: 'POST', body: Readable.from([Buffer.from('payload')]),
    timeouts: { connectMs: null, headersMs: 200, idleMs: null },
  })))
  t.equal(err.code, 'SP_ERR_UPSTREAM_TIMEOUT')
})

t.test('a response body silent for longer than idleMs fails with SP_ERR_UPSTREAM_TIMEOUT; the connection is not reused', async (t) => {
  const sockets = new Set<Socket>()
  const server = http.createServer((req, res) => {
    sockets.add(req.socket)
    res.writeHead(200, { 'content-length': '100' })
    res.write('first part') // ...and the other 90 bytes never come
  })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const c = cluster({ endpoints: [endpoint(port)] })
  const res = expectResponse(await forward(up, request(c, { timeouts: { connectMs: null, headersMs: null, idleMs: 200 } })))
  const bodyError = new Promise<Error>((resolve) => res.body.on('error', resolve))
  res.body.resume()
  const err = await bodyError
  t.match(err, { code: 'SP_ERR_UPSTREAM_TIMEOUT' })
  t.notMatch(err.message, /HEADERS/, 'reported as an idle body, not as missing headers')
  const again = expectResponse(await forward(up, request(c, { timeouts: { connectMs: null, headersMs: null, idleMs: 200 } })))
  again.body.on('error', () => {})
  again.body.resume()
  t.equal(sockets.size, 2, 'the timed-out connection was not reused')
})

t.test('a slow but steady response body is not an idle timeout: each chunk restarts the clock', async (t) => {
  const server = http.createServer((_req, res) => {
    res.writeHead(200)
    let n = 0
    const timer = setInterval(() => {
      res.write(`chunk ${n}\n`)
      if (++n === 6) { clearInterval(timer); res.end() }
    }, 80)
  })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  // Headers come at once, the body takes ~480 ms in all: longer than idleMs, never silent for it.
  const res = expectResponse(await forward(up, request(cluster({ endpoints: [endpoint(port)] }), {
    timeouts: { connectMs: null, headersMs: null, idleMs: 250 },
  })))
  t.equal((await readBody(res.body)).split('\n').length, 7)
})

t.test('retain() keeps referenced pools warm and closes the rest', async (t) => {
  const a = echoPortServer()
  const b = echoPortServer()
  const portA = await listen(a)
  const portB = await listen(b)
  let bClosed!: () => void
  const bConnectionClosed = new Promise<void>((resolve) => { bClosed = resolve })
  b.on('connection', (s: Socket) => s.on('close', () => bClosed()))
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(a); await close(b) })

  const ca = cluster({ endpoints: [endpoint(portA)] })
  const cb = cluster({ endpoints: [endpoint(portB)] })
  const r1 = expectResponse(await forward(up, request(ca)))
  await readBody(r1.body)
  await readBody(expectResponse(await forward(up, request(cb))).body)
  t.equal(up.stats().length, 2)

  // The next table has a *new* Cluster object for A (same endpoint, protocol, identity) and no B.
  const ca2 = cluster({ id: ca.id, endpoints: [endpoint(portA)] })
  await turn()
  up.retain(table([ca2]))
  t.same(up.stats().map((s) => s.key), [`127.0.0.1:${portA}|HTTP|plain`])
  await bConnectionClosed
  t.pass('unreferenced pool closed its connection')

  const r2 = expectResponse(await forward(up, request(ca2)))
  await readBody(r2.body)
  t.equal(r2.headers['x-remote-port'], r1.headers['x-remote-port'], 'warm connection reused across retain')
})

t.test('retain(): a pool kept for another cluster stops naming the backend that made it once that one is gone', async (t) => {
  // Before, the pool gauge (and the connector's TLS failures) kept naming the removed backend for as
  // long as the shared pool lived: a series of configuration that is gone, for good.
  const server = echoPortServer()
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const a = cluster({ endpoints: [endpoint(port)] })
  const b = cluster({ endpoints: [endpoint(port)] })
  up.retain(table([a]))
  await readBody(expectResponse(await forward(up, request(a))).body)
  t.match(up.stats(), [{ cluster: a.id, connected: 1 }])

  up.retain(table([a, b]))
  t.match(up.stats(), [{ cluster: a.id }], 'the one that made it, while it is configured')
  up.retain(table([b]))
  t.match(up.stats(), [{ cluster: b.id, connected: 1 }], 'the same pool, now under the backend still configured')
  const text = await registry.metrics()
  t.match(text, `sallyport_upstream_pool_connections{backend="${b.id}",protocol="h1"} 1`)
  t.notMatch(text, `sallyport_upstream_pool_connections{backend="${a.id}"`)
})

t.test('HTTP/1.1 Upgrade tunnel echoes bytes; a non-101 answer is a response', async (t) => {
  const server = http.createServer((_req, res) => { res.statusCode = 426; res.end('upgrade required') })
  server.on('upgrade', (req, socket: Socket, head: Buffer) => {
    if (req.headers['sec-websocket-key'] === 'refuse') {
      socket.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 2\r\n\r\nno')
      return
    }
    socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-accept: abc\r\n\r\n')
    if (head.length > 0) socket.write(head)
    socket.pipe(socket)
  })
  const port = await listen(server)
  const up = createUpstreams()
  t.teardown(async () => { await up.close(); await close(server) })
  const c = cluster({ endpoints: [endpoint(port)] })
  const o = await forward(up, request(c, { upgrade: 'websocket', headers: { 'sec-websocket-key': 'k', 'sec-websocket-version': '13' } }))
  if (o.kind !== 'tunnel') throw new Error(`expected tunnel, got ${o.kind}`)
  t.equal(o.tunnel.status, 101)
  t.equal(o.tunnel.headers['sec-websocket-accept'], 'abc')
  t.equal(o.tunnel.headers.upgrade, 'websocket')
  t.notOk('connection' in o.tunnel.headers)
  const stream = o.tunnel.stream
  const echoed = new Promise<string>((resolve) => stream.once('data', (d: Buffer) => resolve(d.toString())))
  stream.write('hello')
  t.equal(await echoed, 'hello')
  stream.destroy()

  const refused = expectResponse(await forward(up, request(c, { upgrade: 'websocket', headers: { 'sec-websocket-key': 'refuse' } })))
  t.equal(refused.status, 403)
  t.equal(await readBody(refused.body), 'no')
})
