// sallyport's own HTTP/1.1 upstream connections: one request at a time per
// connection (no pipelining), kept alive and reused newest-first, at most
// connectionsPerPool per pool, requests beyond that queued in order.
//
// Why not undici for this: per small request undici's client allocated about
// 7 KiB (a Request object with its own header list, the parsed header object,
// timers and the wasm parser's header Buffers) and ran its resume loop, its
// own stream of events and a nextTick or two; the gateway already holds the
// exchange state, so most of that was bookkeeping twice. Upgrades (WebSocket)
// still go through undici (h1-pool.ts): they leave the pool anyway.
//
// What it keeps from a full client: request bodies streamed with backpressure
// (Content-Length as declared, chunked otherwise), response bodies streamed
// with backpressure (the socket is paused while the reader is full), trailers,
// interim responses skipped, the upstream's Keep-Alive timeout honoured, a
// request on a kept-alive connection the upstream had just closed sent again
// on a fresh one when that is safe (no body, idempotent method, not one byte
// of response seen), the last request of a connection sent with
// `Connection: close` (maxRequestsPerConnection), headers and idle clocks,
// cancellation at any point.

import type { Socket } from 'node:net'
import type { Readable } from 'node:stream'
import type { Connector, PendingConnect } from './connect.ts'
import type { Attempt, Exchange, ResponseBody } from './exchange.ts'
import { ExchangeClock, type ClockOwner } from './clock.ts'
import { CONTENT_LENGTH, H1ResponseParser, INVALID_VALUE, TOKEN, type H1ResponseHandler, type RawHeaders } from './h1-parser.ts'
import { isHopByHop, responseHeaders, trailerFields } from './headers.ts'
import { localError } from './normalize-error.ts'
import { idleMsOf, type PoolSettings } from './pool.ts'
import { markReleasableChunks, releaseWrittenChunks } from './release.ts'
import { own, readShared } from './socket-read.ts'
import { head as HEAD } from './head-buffer.ts'

const HTTP11: readonly string[] = ['http/1.1']
/** request-target: visible ASCII and obs-text only (no spaces, no controls). */
const BAD_TARGET = /[^\x21-\x7e\x80-\xff]/
/** Methods whose requests carry a meaning for content: sent with `content-length: 0` when they have none (RFC 9110 §8.6). */
const CONTENT_METHODS: ReadonlySet<string> = new Set(['POST', 'PUT', 'PATCH'])
/** Safe to send twice (RFC 9110 §9.2.2) when it never reached the upstream's application. */
const REPLAYABLE: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE'])
/** Margin under the upstream's advertised Keep-Alive timeout: a connection it is about to close is not reused. */
const KEEP_ALIVE_MARGIN_MS = 1000
/** How often idle connections are checked against their keep-alive deadline. */
const SWEEP_MS = 1000

/** The pool side a connection and a request report to (h1-pool.ts). */
export interface H1Host {
  readonly settings: PoolSettings
  /** A connection is free (or gone): give it the next request, or open one. */
  connectionFree(conn: H1Connection): void
  connectionGone(conn: H1Connection): void
  /** A request that left the queue: started, failed or cancelled. */
  left(): void
  /** Queue `req` again (a replay after a stale keep-alive connection). */
  requeue(req: H1Request): void
}

/** One forwarded request: the Attempt the exchange can cancel and resume. */
export class H1Request implements Attempt {
  readonly ex: Exchange
  readonly #host: H1Host
  #conn: H1Connection | null = null
  /** Counted in the pool's pending() until it starts or is given up on. */
  #waiting = true
  cancelled = false
  replayed = false
  /** Response body, once the head arrived. */
  body: ResponseBody | null = null
  #done = false

  constructor(ex: Exchange, host: H1Host) {
    this.ex = ex
    this.#host = host
  }

  get done(): boolean {
    return this.#done
  }

  stopWaiting(): void {
    if (!this.#waiting) return
    this.#waiting = false
    this.#host.left()
  }

  /** Back in the queue for a replay: waiting again. */
  rewait(): void {
    this.#waiting = true
    this.#conn = null
  }

  attach(conn: H1Connection): void {
    this.stopWaiting()
    this.#conn = conn
    // From here on the body may be read: never retried on another endpoint.
    this.ex.sent = true
  }

  /** Ends the request with `err` (before or after the response head). */
  fail(err: Error): void {
    if (this.#done) return
    this.#done = true
    this.stopWaiting()
    if (this.body === null) this.ex.fail(err)
    else this.ex.failBody(err)
  }

  finish(): void {
    this.#done = true
  }

  cancel(reason: Error): void {
    if (this.cancelled || this.#done) return
    this.cancelled = true
    this.stopWaiting() // still queued, maybe, but nobody waits for it any more
    const conn = this.#conn
    if (conn !== null) conn.abort(this, reason)
  }

  resume(): void {
    const conn = this.#conn
    if (conn !== null) conn.resumeBody(this)
  }
}

/**
 * One upstream connection. Its socket comes from the Connector (or is a
 * socket the ALPN probe parked); it reads with a response parser of its own.
 */
export class H1Connection implements H1ResponseHandler, ClockOwner {
  readonly #host: H1Host
  readonly #parser: H1ResponseParser
  socket: Socket | null = null
  #req: H1Request | null = null
  /** Requests started on this connection. */
  requests = 0
  /** No more requests after the current one (Connection: close either way, or an error). */
  #last = false
  /** Keep-alive deadline while idle (performance-free: Date.now()), and the upstream's own limit. */
  idleSince = 0
  keepAliveMs: number
  /** Bytes of the current response seen (a replay is safe only before the first). */
  #responding = false
  #keepAlive = true
  /** The request body still being sent (null: none, or all of it sent). */
  #reqBody: Readable | null = null
  #chunked = false
  /** Declared request body length (Content-Length), -1 when chunked; and bytes sent so far. */
  #declared = -1
  #sentBytes = 0
  #draining = false
  #paused = false
  readonly #clock: ExchangeClock = new ExchangeClock(this)
  #gone = false
  /** The connect in progress, until it ends (closing the connection stops it). */
  opening: PendingConnect | null = null
  /** Inside the parser: a free connection is handed on only after it returns (bytes after a response are an error, never the next response). */
  #reading = false
  #freeAfterRead = false

  constructor(host: H1Host) {
    this.#host = host
    this.#parser = new H1ResponseParser(this)
    this.keepAliveMs = host.settings.keepAliveTimeoutMs
  }

  get busy(): boolean {
    return this.#req !== null
  }

  get gone(): boolean {
    return this.#gone
  }

  /** The socket is connected: reading starts; the connection is free. */
  connected(socket: Socket): void {
    this.socket = socket
    // The socket (TCP or TLS) reads into the shared read buffer (socket-read.ts):
    // response bodies are copied out of it (onBody); the parser copies what it keeps.
    if (!readShared(socket, this.#onData)) socket.on('data', this.#onData)
    socket.on('end', this.#onEnd)
    socket.on('error', this.#onError)
    socket.on('close', this.#onClose)
    // A socket handed over paused (a CONNECT tunnel through a proxy, the ALPN probe's) flows from here.
    socket.resume()
  }

  // hot path
  /** Sends `req` on this (free) connection. */
  start(req: H1Request): void {
    const socket = this.socket
    if (socket === null) return
    const ex = req.ex
    const r = ex.req
    this.#req = req
    this.requests++
    this.#responding = false
    this.#paused = false
    req.attach(this)
    const settings = this.#host.settings
    const max = settings.maxRequestsPerConnection
    if (max !== null && this.requests >= max) this.#last = true
    const head = requestHead(r.method, r.path, r.authority, r.headers, r.body !== null, this.#last)
    if (head instanceof Error) {
      // Nothing was written: the connection stays good for the next request.
      this.#req = null
      this.requests--
      req.fail(head)
      this.#release(true)
      return
    }
    const declared = r.headers['content-length']
    this.#chunked = r.body !== null && declared === undefined
    this.#declared = typeof declared === 'string' ? Number(declared) : -1
    this.#sentBytes = 0
    this.#parser.expect(r.method)
    const idleMs = idleMsOf(ex, settings)
    this.#clock.start(r.timeouts.headersMs ?? idleMs, idleMs)
    const body = r.body
    socket.write(head)
    if (body === null) return
    this.#reqBody = body
    markReleasableChunks(body)
    body.on('data', this.#onBodyData)
    body.once('end', this.#onBodyEnd)
    body.once('error', this.#onBodyError)
    if (body.readableEnded) this.#onBodyEnd()
  }

  // ── request body ──

  #onBodyData = (chunk: Buffer | string): void => {
    const socket = this.socket
    if (socket === null || this.#reqBody === null) return
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    if (bytes.length === 0) return
    this.#sentBytes += bytes.length
    if (this.#declared >= 0 && this.#sentBytes > this.#declared) {
      // Bytes past the declared length would reach the upstream as the start of another request.
      this.#onBodyError(localError('SP_H1_BODY_LENGTH', 'request body longer than its Content-Length'))
      return
    }
    if (!this.#responding) this.#clock.touch() // upload progress restarts the headers clock
    let ok: boolean
    if (this.#chunked) {
      socket.cork()
      socket.write(bytes.length.toString(16) + '\r\n', 'latin1')
      socket.write(bytes)
      ok = socket.write('\r\n', 'latin1')
      socket.uncork()
    } else ok = socket.write(bytes)
    if (ok || this.#draining) return
    this.#draining = true
    this.#reqBody.pause()
    socket.once('drain', this.#onDrain)
  }

  #onDrain = (): void => {
    this.#draining = false
    const body = this.#reqBody
    if (body !== null && !body.destroyed) body.resume()
  }

  #onBodyEnd = (): void => {
    const body = this.#reqBody
    if (body === null) return
    if (this.#declared >= 0 && this.#sentBytes !== this.#declared) {
      this.#onBodyError(localError('SP_H1_BODY_LENGTH', 'request body shorter than its Content-Length'))
      return
    }
    this.#detachBody(body)
    if (this.#chunked && this.socket !== null) this.socket.write('0\r\n\r\n', 'latin1')
  }

  #onBodyError = (err: Error): void => {
    const req = this.#req
    if (req === null) return
    this.#destroy()
    req.fail(err)
  }

  #detachBody(body: Readable): void {
    this.#reqBody = null
    body.removeListener('data', this.#onBodyData)
    body.removeListener('end', this.#onBodyEnd)
    body.removeListener('error', this.#onBodyError)
    if (this.#draining) {
      this.#draining = false
      this.socket?.removeListener('drain', this.#onDrain)
    }
  }

  // ── response ──

  #onData = (data: Buffer): void => {
    if (this.#req !== null) this.#responding = true
    this.#reading = true
    const err = this.#parser.execute(data)
    this.#reading = false
    if (err !== null) { this.#freeAfterRead = false; this.#failAndClose(err, false); return }
    if (this.#freeAfterRead) {
      this.#freeAfterRead = false
      if (!this.#gone) this.#host.connectionFree(this)
    }
  }

  onInterim(status: number, raw: RawHeaders): void {
    const req = this.#req
    if (req !== null) req.ex.informational(status, raw)
  }

  onHead(status: number, raw: RawHeaders, keepAlive: boolean): void {
    const req = this.#req
    if (req === null) return
    if (!keepAlive) this.#last = true
    else {
      const hint = raw['keep-alive']
      if (typeof hint === 'string') this.#applyKeepAliveHint(hint)
    }
    this.#keepAlive = keepAlive
    this.#clock.responded()
    const body = req.ex.respond(status, responseHeaders(raw, null), req, 'h1')
    if (body === null) { this.abort(req, localError('SP_ANSWERED', 'answered')); return }
    req.body = body
  }

  onBody(chunk: Buffer): void {
    const req = this.#req
    if (req === null || req.body === null) return
    this.#clock.touch()
    if (!req.body.push(own(chunk)) && !this.#paused && this.socket !== null) {
      this.#paused = true
      this.socket.pause()
    }
  }

  onEnd(trailers: RawHeaders | null): void {
    const req = this.#req
    if (req === null) return
    this.#clock.stop()
    const body = req.body
    req.finish()
    if (body !== null) {
      if (trailers !== null) body.trailers = trailerFields(trailers)
      body.push(null)
    }
    const rest = this.#reqBody
    if (rest !== null) {
      // The upstream answered before the request body was all sent: the
      // connection cannot carry another request; the rest is read and dropped.
      this.#detachBody(rest)
      rest.on('error', noop)
      rest.resume()
      this.#last = true
    }
    this.#afterResponse()
  }

  /** Response complete and request body sent: the connection is free again, or closes. */
  #afterResponse(): void {
    if (this.#req === null) return
    this.#req = null
    const socket = this.socket
    if (this.#paused && socket !== null) {
      this.#paused = false
      socket.resume()
    }
    this.#release(this.#keepAlive && !this.#last)
  }

  #release(reuse: boolean): void {
    this.#req = null
    if (!reuse || this.#gone) { this.#destroy(); return }
    this.idleSince = Date.now()
    if (this.#reading) this.#freeAfterRead = true
    else this.#host.connectionFree(this)
  }

  resumeBody(req: H1Request): void {
    if (req !== this.#req) return
    this.#clock.touch() // as undici's parser does on resume
    if (this.#paused && this.socket !== null) {
      this.#paused = false
      this.socket.resume()
    }
  }

  #applyKeepAliveHint(hint: string): void {
    const m = /(?:^|,)\s*timeout\s*=\s*(\d+)/i.exec(hint)
    if (m === null) return
    const ms = Number(m[1]) * 1000 - KEEP_ALIVE_MARGIN_MS
    if (ms <= 0) this.#last = true
    else if (ms < this.keepAliveMs) this.keepAliveMs = ms
  }

  // ── failure and end ──

  timedOut(afterHead: boolean): void {
    const req = this.#req
    if (req === null) return
    const err = afterHead
      ? localError('SP_IDLE_TIMEOUT', 'upstream exchange idle for too long')
      : localError('SP_HEADERS_TIMEOUT', 'upstream response headers did not arrive in time')
    this.#failAndClose(err, false)
  }

  /** The request is cancelled (client gone, route timeout, body destroyed): the connection cannot be reused. */
  abort(req: H1Request, reason: Error): void {
    if (req !== this.#req) return
    this.#req = null
    this.#destroy()
    req.fail(reason)
  }

  #onEnd = (): void => {
    // The upstream closed its side: a body read until close ends here; a
    // request in the middle of anything else fails (or is sent again).
    const err = this.#parser.finish()
    if (err !== null) this.#failAndClose(err, true)
    else this.#destroy()
  }

  #onError = (err: Error): void => {
    this.#failAndClose(err, true)
  }

  #onClose = (): void => {
    if (this.#req !== null) this.#failAndClose(localError('ECONNRESET', 'upstream connection closed'), true)
    else this.#destroy()
  }

  /** `closed`: the upstream closed or reset the connection (the only failure that may replay a request). */
  #failAndClose(err: Error, closed: boolean): void {
    const req = this.#req
    this.#req = null
    this.#destroy()
    if (req === null || req.done) return
    // A kept-alive connection the upstream closed as we reused it: the request
    // never reached it (not one byte came back), so a replayable one goes again.
    if (closed && !this.#responding && this.requests > 1 && !req.replayed && !req.cancelled &&
      req.ex.req.body === null && REPLAYABLE.has(req.ex.req.method)) {
      req.replayed = true
      req.rewait()
      this.#host.requeue(req)
      return
    }
    req.fail(err)
  }

  /** Closes the connection for good (idempotent). */
  close(): void {
    this.#destroy()
  }

  #destroy(): void {
    const opening = this.opening
    if (opening !== null) { this.opening = null; opening.cancel() }
    this.#clock.stop()
    const body = this.#reqBody
    if (body !== null) this.#detachBody(body)
    if (this.#gone) return
    this.#gone = true
    const socket = this.socket
    if (socket !== null) {
      socket.removeListener('data', this.#onData)
      socket.removeListener('end', this.#onEnd)
      socket.removeListener('close', this.#onClose)
      // 'error' stays handled: a reset can still be reported after destroy().
      socket.destroy()
    }
    this.#host.connectionGone(this)
  }
}

/**
 * The request head, or the error that makes it unsendable. Host first, the
 * end-to-end fields as given, then the framing and connection fields, which
 * are ours: a body goes with its declared Content-Length or chunked.
 */
// hot path
export function requestHead(method: string, path: string, authority: string, headers: Record<string, string | string[]>, hasBody: boolean, last: boolean): Buffer | Error {
  if (!TOKEN.test(method)) return localError('SP_H1_BAD_REQUEST', 'invalid request method')
  if (path === '' || BAD_TARGET.test(path)) return localError('SP_H1_BAD_REQUEST', 'invalid request path')
  if (INVALID_VALUE.test(authority)) return localError('SP_H1_BAD_REQUEST', 'invalid host')
  HEAD.start(method)
  HEAD.put(' ')
  HEAD.put(path)
  HEAD.put(' HTTP/1.1\r\n')
  HEAD.field('host', authority)
  let length = false
  for (const name in headers) {
    if (name === 'host' || isHopByHop(name)) continue
    const value = headers[name]
    if (name === 'content-length') {
      if (!hasBody) continue
      // One decimal length: the client enforces it on the body it sends.
      if (typeof value !== 'string' || !CONTENT_LENGTH.test(value)) return localError('SP_H1_BAD_REQUEST', 'invalid Content-Length')
      length = true
    }
    if (!TOKEN.test(name)) return localError('SP_H1_BAD_REQUEST', `invalid header name ${JSON.stringify(name)}`)
    if (typeof value === 'string') {
      if (INVALID_VALUE.test(value)) return localError('SP_H1_BAD_REQUEST', `invalid value of header ${name}`)
      HEAD.field(name, value)
    } else {
      for (const one of value) {
        if (INVALID_VALUE.test(one)) return localError('SP_H1_BAD_REQUEST', `invalid value of header ${name}`)
        HEAD.field(name, one)
      }
    }
  }
  if (hasBody) {
    if (!length) HEAD.put('transfer-encoding: chunked\r\n')
  } else if (CONTENT_METHODS.has(method)) HEAD.put('content-length: 0\r\n')
  HEAD.put(last ? 'connection: close\r\n\r\n' : 'connection: keep-alive\r\n\r\n')
  return HEAD.take()
}

/**
 * A socket for an HTTP/1.1 connection, ours or undici's: the one the ALPN probe
 * parked when it is still open, else a new one from the Connector; never
 * synchronously (the pool, or undici's resume loop, is still counting what it
 * opens). Request body chunks marked releasable are freed once written on it
 * (release.ts).
 */
export function connectH1(connector: Connector, parked: Socket | null, callback: (err: Error | null, socket: Socket | null) => void): PendingConnect | null {
  if (parked !== null && !parked.destroyed) {
    releaseWrittenChunks(parked)
    process.nextTick(callback, null, parked)
    return null
  }
  return connector.connect(HTTP11, (err, sock) => {
    if (err !== null || sock === null) { callback(err ?? localError('ECONNREFUSED', 'no socket'), null); return }
    releaseWrittenChunks(sock)
    callback(null, sock)
  })
}

/** Opens `conn` (see connectH1); `done` gets the connect error, if any (SP_CONNECT_CANCELLED when the connection was closed first). */
export function openConnection(conn: H1Connection, connector: Connector, parked: Socket | null, done: (err: Error | null) => void): void {
  conn.opening = connectH1(connector, parked, (err, sock) => {
    conn.opening = null
    if (err !== null || sock === null) { done(err ?? localError('ECONNREFUSED', 'no socket')); return }
    if (conn.gone) { sock.destroy(); done(null); return }
    conn.connected(sock)
    done(null)
  })
}

export { SWEEP_MS }

function noop(): void {}
