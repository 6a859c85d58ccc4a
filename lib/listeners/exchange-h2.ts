// HTTP/2 exchanges (TLS h2 and h2c) on the core stream API: no compat objects.
// Extended CONNECT (RFC 8441, :protocol) becomes a tunnel request.

import { constants, type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2'
import { Readable, type Duplex } from 'node:stream'
import { NOOP_OBSERVER, wasCut, type Exchange, type ExchangeObserver } from '../router/exchange.ts'
import type { ConnectionSni } from '../router/misdirected.ts'
import type { OutgoingHeaders } from '../upstream/types.ts'
import { ResponseBody, type BodySink } from '../upstream/exchange.ts'
import { CLIENT_GONE, localError } from '../upstream/normalize-error.ts'
import { clientIp, closedBeforeEnd } from './exchange-h1.ts'
import { h2StreamEnd, splice, upstreamEnd } from './tunnel-ends.ts'

const END_STREAM = constants.NGHTTP2_FLAG_END_STREAM

/** Response headers HTTP/2 forbids (RFC 9113 §8.2.2) that an HTTP/1.1 upstream or a tunnel may carry. */
const H2_FORBIDDEN: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'sec-websocket-accept'])

/** What no HTTP/2 field value may hold (RFC 9113 §8.2.1); node's HTTP/2 sends them as given. */
const INVALID_H2_VALUE = /[\0\r\n]/

function noop(): void {}

// hot path
/**
 * A response's fields for `stream.respond` as a flat name/value list, `:status`
 * first, without those HTTP/2 forbids. node keeps what `respond` is given on the
 * stream for the stream's life: given an object, it copies it into a fresh one
 * first (and deleting the forbidden fields from ours made ours a dictionary);
 * a list it keeps as it is. `bench/alloc-profile.ts --h2`: 16.3–16.7 KiB
 * allocated per request against 17.9–18.3 with the object. null: a value
 * holds NUL, CR or LF, which HTTP/2 forbids (the gateway's own fields only:
 * nghttp2 refuses an upstream's).
 */
function responseFields(status: number, headers: OutgoingHeaders): string[] | null {
  const out = [':status', String(status)]
  for (const name in headers) {
    if (H2_FORBIDDEN.has(name)) continue
    const v = headers[name] as string | string[] | undefined
    if (v === undefined) continue
    if (typeof v === 'string') {
      if (INVALID_H2_VALUE.test(v)) return null
      out.push(name, v)
    } else {
      for (let i = 0; i < v.length; i++) {
        if (INVALID_H2_VALUE.test(v[i] as string)) return null
        out.push(name, v[i] as string)
      }
    }
  }
  return out
}

/** What the streams of one HTTP/2 connection share, known when it was handed to the HTTP/2 server. */
export interface H2Connection {
  /** The client's address. */
  readonly address: string
  /**
   * Issue 7: the SPIFFE ID of the client's verified certificate (HTTPS), read at
   * the handshake. Not from a stream's session later: node unlinks a stream from
   * its session when it closes, and the access line is written after that.
   */
  readonly spiffeId: string | null
  /** GEP-3567: the server name (SNI) the connection was made for; null: none, or h2c. */
  readonly sni: ConnectionSni | null
}

export class H2Exchange implements Exchange, BodySink {
  readonly protocol = 'h2' as const
  readonly scheme: 'http' | 'https'
  readonly method: string
  readonly target: string
  readonly authority: string
  readonly headers: IncomingHttpHeaders
  readonly body: Readable | null
  readonly upgrade: string | null
  readonly clientAddress: string
  readonly port: number
  readonly sni: ConnectionSni | null
  readonly #stream: ServerHttp2Stream
  /** Its session, kept: node drops the stream's reference when it is destroyed. */
  readonly #session: object | undefined
  readonly #spiffeId: string | null
  #bytesOut = 0
  /** A tunnel's bytes from the client (a tunnel has no request body to count them). */
  #tunnelIn = 0
  #out: Readable | null = null
  /** Our answer is all written (or handed to stream.end()). */
  #finished = false
  /** An extended CONNECT tunnel was opened: it ends when either side does. */
  #tunnelled = false
  /** Which side's reset ended the tunnel, if one did. */
  #cutBy: 'client' | 'upstream' | null = null
  #closed = false
  /** The response body is paused until the client stream drains. */
  #draining = false
  /** #out when it is an upstream body written through onBodyData/onBodyEnd/onBodyError (ResponseBody.attachSink). */
  #sunk: ResponseBody | null = null
  #observer: ExchangeObserver = NOOP_OBSERVER

  constructor(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, port: number, scheme: 'http' | 'https', conn: H2Connection | undefined) {
    this.#stream = stream
    this.#session = stream.session
    this.#spiffeId = conn === undefined ? null : conn.spiffeId
    this.sni = conn === undefined ? null : conn.sni
    this.scheme = scheme
    this.method = headers[':method'] ?? 'GET'
    this.target = headers[':path'] ?? ''
    this.authority = headers[':authority'] ?? headers.host ?? ''
    this.headers = headers
    const protocol = headers[':protocol']
    this.upgrade = this.method === 'CONNECT' && typeof protocol === 'string' ? protocol.toLowerCase() : null
    this.body = this.upgrade !== null || (flags & END_STREAM) !== 0 ? null : new RequestBody(stream)
    this.clientAddress = clientIp(conn?.address)
    this.port = port
    stream.on('error', noop)
  }

  observe(observer: ExchangeObserver): void {
    this.#observer = observer
    this.#stream.once('close', this.#onClose)
  }

  #onClose = (): void => {
    const s = this.#stream
    // Our answer was all given and the stream closed without a reset. Not the
    // stream's own state alone: a stream closed with its session (a client's
    // GOAWAY, a dropped connection) reads as cleanly ended even if nothing was
    // answered, and its upstream request must then be cancelled.
    const completed = this.#finished && (this.#tunnelled ? this.#cutBy !== 'client' : s.rstCode === constants.NGHTTP2_NO_ERROR)
    this.#closed = true
    this.#observer.onEnd(completed, !completed && wasCut(this.#session))
    // The client reset the stream mid-body: stop reading upstream.
    const out = this.#out
    if (!completed && out !== null && !out.destroyed) out.destroy()
  }

  headersSent(): boolean { return this.#stream.headersSent }

  informational(status: number, headers: OutgoingHeaders): void {
    const stream = this.#stream
    if (this.upgrade !== null || isGone(stream) || stream.headersSent || status < 102 || status > 199) return
    const fields: Record<string, string | string[]> = { ':status': String(status) }
    for (const name in headers) {
      const v = headers[name]
      if (v === undefined || H2_FORBIDDEN.has(name)) continue
      // A field HTTP/2 cannot carry: an interim response is advice, dropped.
      if (typeof v === 'string' ? INVALID_H2_VALUE.test(v) : v.some((one) => INVALID_H2_VALUE.test(one))) return
      fields[name] = v
    }
    try {
      stream.additionalHeaders(fields)
    } catch {
      // Fields HTTP/2 will not carry: an interim response is advice, dropped.
    }
  }

  // hot path
  respond(status: number, headers: OutgoingHeaders, body: Readable | string | null, trailers: (() => OutgoingHeaders | null) | null = null): boolean {
    const stream = this.#stream
    if (isGone(stream)) {
      if (body !== null && typeof body !== 'string') body.destroy()
      return true
    }
    const fields = responseFields(status, headers)
    // Nothing sent: the caller answers instead, as when node refuses a field below.
    if (fields === null) return false
    try {
      const waitForTrailers = trailers !== null && body !== null && typeof body !== 'string'
      stream.respond(fields, { endStream: body === null, waitForTrailers })
      if (waitForTrailers) stream.once('wantTrailers', () => sendTrailers(stream, trailers))
    } catch {
      // Fields node's HTTP/2 refuses (a single-value field twice, say): the caller answers instead.
      if (!isGone(stream) && !stream.headersSent) return false
      if (body !== null && typeof body !== 'string') body.destroy()
      if (!isGone(stream)) stream.close(constants.NGHTTP2_INTERNAL_ERROR)
      return true
    }
    if (body === null) { this.#finished = true; this.#stopUpload(); return true }
    if (typeof body === 'string') {
      this.#bytesOut += Buffer.byteLength(body)
      this.#finished = true
      stream.end(body)
      this.#stopUpload()
      return true
    }
    this.#out = body
    // Straight from an upstream pool: its chunks come here without the stream
    // machinery in between (upstream/exchange.ts BodySink).
    if (body instanceof ResponseBody && body.attachSink(this)) { this.#sunk = body; return true }
    // Copied by hand, as in exchange-h1.ts: no stream.pipeline (an AbortController and
    // an AbortError with a stack trace per call), no pipe() (six listeners and their
    // closures); 'drain' is listened for only when the stream's window is full.
    body.on('data', this.#onOutData)
    body.once('end', this.onBodyEnd)
    body.once('error', this.onBodyError)
    body.once('close', this.#onOutClose)
    return true
  }

  #onOutData = (chunk: Buffer): void => {
    this.#bytesOut += chunk.length
    if (this.#stream.write(chunk) || this.#draining) return
    // Backpressure: the body stops flowing (the upstream pauses) until the client opens its window.
    this.#draining = true
    this.#out?.pause()
    this.#stream.once('drain', this.#onDrain)
  }

  // hot path
  onBodyData(chunk: Buffer): boolean {
    const stream = this.#stream
    if (stream.destroyed) return true // reset by the client: the exchange is being cancelled
    this.#bytesOut += chunk.length
    if (stream.write(chunk)) return true
    if (!this.#draining) {
      this.#draining = true
      stream.once('drain', this.#onDrain)
    }
    return false
  }

  #countOut = (chunk: Buffer): void => { this.#bytesOut += chunk.length }

  #countIn = (chunk: Buffer): void => { this.#tunnelIn += chunk.length }

  #onDrain = (): void => {
    this.#draining = false
    const out = this.#out
    if (out === null || out.destroyed) return
    if (this.#sunk !== null) this.#sunk.resumeSink()
    else out.resume()
  }

  onBodyEnd = (): void => {
    this.#finished = true
    if (this.#stream.destroyed) return
    this.#stream.end() // END_STREAM, or trailers first (wantTrailers)
    this.#stopUpload()
  }

  /**
   * The answer is whole and the client is still sending its request body:
   * RST_STREAM(NO_ERROR) once the answer is out (node waits for it), so the
   * client stops uploading what nobody reads (RFC 9113 §8.1, as Envoy does).
   * Without it a 404 or an upstream's early 401 to a large upload left the
   * client sending it all, and the stream open until it had.
   */
  #stopUpload(): void {
    const stream = this.#stream
    if (this.body === null || this.upgrade !== null || stream.destroyed || stream.closed) return
    if (stream.state.remoteClose !== 0) return
    stream.close(constants.NGHTTP2_NO_ERROR)
  }

  onBodyError = (err: Error): void => {
    if (this.#closed) return // destroyed because the client reset the stream: not an upstream failure
    // RST_STREAM rather than a clean END_STREAM: the client must not take a cut body for the whole.
    // destroy(err) resets at once (INTERNAL_ERROR); close(code) would end the stream cleanly first.
    if (!this.#stream.destroyed) this.#stream.destroy(err)
    this.#observer.onBodyError(err)
  }

  /** Destroyed without an error and before its end: reset, never a clean end. */
  #onOutClose = (): void => {
    const err = closedBeforeEnd(this.#out)
    if (err !== null) this.onBodyError(err) // the same failure as a body error
  }

  respondGrpc(grpcStatus: number, message: string): void {
    if (isGone(this.#stream)) return
    this.#stream.respond({
      ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(grpcStatus), 'grpc-message': encodeURIComponent(message),
    }, { endStream: true })
    this.#finished = true
    this.#stopUpload()
  }

  tunnel(_status: number, headers: OutgoingHeaders, upstream: Duplex): number | null {
    const stream = this.#stream
    if (isGone(stream)) { upstream.destroy(); return null }
    // RFC 8441 §5: success is 2xx; an HTTP/1.1 upstream's 101 is a 200 here.
    // A field HTTP/2 cannot carry (an extension's edit with a CR in it): the tunnel opens without the answer's fields.
    stream.respond(responseFields(200, headers) ?? [':status', '200'])
    this.#finished = true
    this.#tunnelled = true
    // A stream's 'data' always comes (the relay reads only sockets without it).
    stream.on('data', this.#countIn)
    upstream.on('data', this.#countOut)
    // END_STREAM and FIN passed on both ways, a reset as a reset (tunnel-ends.ts).
    splice(h2StreamEnd(stream), upstreamEnd(upstream), (side) => {
      this.#cutBy = side
      if (side === 'upstream') this.#observer.onBodyError(new Error('the upstream reset the tunnel'))
    })
    return 200
  }

  reset(): void {
    if (!this.#stream.destroyed) this.#stream.close(constants.NGHTTP2_INTERNAL_ERROR)
  }

  /**
   * Issue 7: SPIFFE ID of a verified client certificate (HTTPS with frontend
   * validation), as its connection's handshake gave it: once the stream has
   * closed node no longer links it to its session, and the access line is
   * written after that.
   */
  spiffeId(): string | null { return this.#spiffeId }

  bytesIn(): number {
    const body = this.body
    return body instanceof RequestBody ? body.bytes : this.#tunnelIn
  }

  bytesOut(): number { return this.#bytesOut }
}

/** Nothing can be answered on it: destroyed, or closed (reset by the client, its session dropped) and destroyed only on the next tick. */
function isGone(stream: ServerHttp2Stream): boolean {
  return stream.destroyed || stream.closed
}

function sendTrailers(stream: ServerHttp2Stream, trailers: () => OutgoingHeaders | null): void {
  if (stream.destroyed) return
  const t = trailers()
  try {
    stream.sendTrailers(t ?? {})
  } catch {
    stream.close(constants.NGHTTP2_INTERNAL_ERROR)
  }
}

function ignoreError(): void {}

/**
 * The request half of an HTTP/2 stream as a plain Readable. upstream/ may
 * destroy the body it was given once sent (undici does); destroying the
 * ServerHttp2Stream itself would reset the response half too. Destroying this
 * view only stops forwarding: the rest of the request is drained.
 */
class RequestBody extends Readable {
  readonly #stream: ServerHttp2Stream
  /** Request body bytes received. */
  bytes = 0

  constructor(stream: ServerHttp2Stream) {
    super({ highWaterMark: 64 * 1024 })
    this.#stream = stream
    stream.on('data', this.#onData)
    stream.once('end', this.#onEnd)
    stream.once('aborted', this.#onAborted)
    // The client can abort before anything reads the body (the upstream still being
    // dialled): its failure is for whoever reads it, never an uncaught 'error'.
    this.on('error', ignoreError)
  }

  #onData = (chunk: Buffer): void => {
    this.bytes += chunk.length
    if (!this.push(chunk)) this.#stream.pause()
  }

  // A stream reset or lost under it emits 'aborted' before the 'end' node then
  // emits too, and #onAborted takes this listener off: a cut body never ends here.
  #onEnd = (): void => { this.push(null) }

  // The code says whose failure it is: the client's, not the upstream's (normalize-error.ts).
  #onAborted = (): void => { this.destroy(localError(CLIENT_GONE, 'client aborted the request body')) }

  override _read(): void { this.#stream.resume() }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    const stream = this.#stream
    stream.off('data', this.#onData)
    stream.off('end', this.#onEnd)
    stream.off('aborted', this.#onAborted)
    if (!stream.destroyed && !stream.readableEnded) stream.resume() // drain what is left; the response half lives on
    cb(err)
  }
}
