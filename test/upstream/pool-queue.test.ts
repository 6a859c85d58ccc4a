// The queue of an upstream pool (requests waiting for an HTTP/1.1 connection or
// an HTTP/2 stream) has bounds by default, with no circuitBreaker policy: at
// most 1024 waiting per backend (Envoy's max_pending_requests), each for at
// most the connect timeout (HAProxy's `timeout queue`), and 1024 connections
// per endpoint before anyone waits. A probe held every connection of a backend
// with one client's stalled requests while everyone else waited, unanswered.
import t, { type Test } from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import { createUpstreams, type UpstreamOptions } from '../../lib/upstream/registry.ts'
import { ErrorCode } from '../../lib/errors.ts'
import type { Cluster } from '../../lib/compile/table.ts'
import type { Upstreams } from '../../lib/upstream/types.ts'
import { metricValue } from '../helpers/metrics.ts'
import { cluster, endpoint, expectError, forward, listen, request, table, type Outcome } from './fixtures.ts'

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** Polls `ok` up to `ms`; whether it became true. */
async function until(ok: () => boolean, ms = 5000): Promise<boolean> {
  for (const end = Date.now() + ms; !ok() && Date.now() < end;) await sleep(10)
  return ok()
}

/** The outcome, or 'still waiting' when none came within `ms` (a bound for the test, not a measurement). */
function within(p: Promise<Outcome>, ms: number): Promise<Outcome | 'still waiting'> {
  let timer: NodeJS.Timeout | undefined
  const bound = new Promise<'still waiting'>((resolve) => { timer = setTimeout(resolve, ms, 'still waiting') })
  return Promise.race([p, bound]).finally(() => clearTimeout(timer))
}

/** An HTTP/1.1 upstream holding every request until the test ends; counts connections. */
async function holdingH1(t: Test): Promise<{ port: number; held: http.ServerResponse[]; connections: () => number }> {
  const held: http.ServerResponse[] = []
  let n = 0
  const server = http.createServer((_req, res) => { held.push(res) })
  server.on('connection', () => { n++ })
  const port = await listen(server)
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { port, held, connections: () => n }
}

function upstreamsFor(t: Test, c: Cluster, options: UpstreamOptions): Upstreams {
  const up = createUpstreams(options)
  up.retain(table([c]))
  t.teardown(() => up.close())
  return up
}

function waiting(up: Upstreams): number {
  return up.stats().reduce((n, s) => n + s.pending, 0)
}

t.test('HTTP/1.1: a request waiting for a connection gets a 503 (overloaded) after the connect timeout, counted', async (t) => {
  const u = await holdingH1(t)
  const c = cluster({ protocol: 'HTTP11', endpoints: [endpoint(u.port)] })
  const up = upstreamsFor(t, c, { connectionsPerPool: 1, connectTimeoutMs: 200 })
  const gone = new AbortController()
  t.teardown(() => gone.abort(new Error('test over')))
  void forward(up, request(c, { path: '/held', signal: gone.signal }))
  t.ok(await until(() => u.held.length === 1), 'the one connection is held')
  const before = await metricValue('sallyport_upstream_overload_total', { backend: c.id, limit: 'queue_timeout' })
  const queued = forward(up, request(c, { path: '/queued', signal: gone.signal }))
  t.ok(await until(() => waiting(up) === 1), 'the second request waits')
  const o = await within(queued, 5000)
  t.not(o, 'still waiting', 'answered')
  if (o === 'still waiting') return
  const err = expectError(o)
  t.equal(err.code, ErrorCode.OVERLOADED)
  t.equal(err.status, 503)
  t.equal(waiting(up), 0, 'no longer waiting')
  t.equal(await metricValue('sallyport_upstream_overload_total', { backend: c.id, limit: 'queue_timeout' }), before + 1)
  t.equal(u.held.length, 1, 'it never reached the upstream')
  t.equal(u.connections(), 1)
})

t.test('HTTP/2: a request waiting for a stream gets a 503 (overloaded) after the connect timeout', async (t) => {
  const streams: http2.ServerHttp2Stream[] = []
  const server = http2.createServer({ settings: { maxConcurrentStreams: 1 } })
  server.on('stream', (stream) => { stream.on('error', () => {}); streams.push(stream) })
  server.on('session', (session) => { server.once('close', () => session.destroy()) })
  const port = await listen(server)
  t.teardown(() => new Promise<void>((resolve) => { for (const s of streams) s.destroy(); server.close(() => resolve()) }))
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  const up = upstreamsFor(t, c, { connectionsPerPool: 1, connectTimeoutMs: 200 })
  const gone = new AbortController()
  t.teardown(() => gone.abort(new Error('test over')))
  void forward(up, request(c, { path: '/held', signal: gone.signal }))
  t.ok(await until(() => streams.length === 1), 'the one stream is held')
  const queued = forward(up, request(c, { path: '/queued', signal: gone.signal }))
  t.ok(await until(() => waiting(up) === 1), 'the second request waits')
  const o = await within(queued, 5000)
  t.not(o, 'still waiting', 'answered')
  if (o === 'still waiting') return
  t.equal(expectError(o).code, ErrorCode.OVERLOADED)
  t.equal(waiting(up), 0)
  t.equal(streams.length, 1, 'it never reached the upstream')
})

t.test('without a circuitBreaker, at most 1024 requests wait per backend; the next is refused at once', async (t) => {
  const u = await holdingH1(t)
  const c = cluster({ protocol: 'HTTP11', endpoints: [endpoint(u.port)] })
  // A long connect timeout: here nobody waits long enough for it.
  const up = upstreamsFor(t, c, { connectionsPerPool: 1, connectTimeoutMs: 60_000 })
  const gone = new AbortController()
  t.teardown(() => gone.abort(new Error('test over')))
  void forward(up, request(c, { signal: gone.signal }))
  t.ok(await until(() => u.held.length === 1))
  for (let i = 0; i < 1024; i++) void forward(up, request(c, { signal: gone.signal }))
  t.equal(waiting(up), 1024)
  const before = await metricValue('sallyport_upstream_overload_total', { backend: c.id, limit: 'max_pending_requests' })
  const o = await within(forward(up, request(c, { signal: gone.signal })), 2000)
  t.not(o, 'still waiting', 'answered at once')
  if (o === 'still waiting') return
  t.equal(expectError(o).code, ErrorCode.OVERLOADED)
  t.equal(await metricValue('sallyport_upstream_overload_total', { backend: c.id, limit: 'max_pending_requests' }), before + 1)
  t.equal(waiting(up), 1024)
})

t.test('by default an endpoint takes 1024 connections: 200 held requests do not make a 201st wait', async (t) => {
  const u = await holdingH1(t)
  const c = cluster({ protocol: 'HTTP11', endpoints: [endpoint(u.port)] })
  const up = upstreamsFor(t, c, {})
  const gone = new AbortController()
  t.teardown(() => gone.abort(new Error('test over')))
  for (let i = 0; i < 200; i++) void forward(up, request(c, { signal: gone.signal }))
  await until(() => u.held.length === 200)
  t.equal(u.held.length, 200, 'each on a connection of its own')
  void forward(up, request(c, { path: '/next', signal: gone.signal }))
  t.ok(await until(() => u.held.length === 201), 'the next one too')
  t.equal(waiting(up), 0, 'nobody waits')
})
