// One forwarded request across its attempts: the state shared by the registry
// (endpoint choice, connect fallback), the protocol pools (h1/h2) and the
// response body. It guarantees the UpstreamHandler contract — exactly one of
// onResponse / onTunnel / onError, once — and records the metrics at the end.

import { performance } from 'node:perf_hooks'
import { Readable, type Duplex } from 'node:stream'
import { ErrorCode, SallyportError } from '../errors.ts'
import type { Cluster } from '../compile/table.ts'
import type { OutgoingHeaders, UpstreamHandler, UpstreamRequest } from './types.ts'
import type { EndpointHealth } from './outlier.ts'
import { BACKEND_REQUEST_TIMEOUT, PER_TRY_TIMEOUT, awaitingClient, connectReason, localError, normalizeUpstreamError, tlsReason } from './normalize-error.ts'
import { isCountedTlsError } from './connect.ts'
import { responseHeaders } from './headers.ts'
import { tagSessionHeader } from './mcp-session.ts'
import {
  backendSeries, upstreamConnectErrors, upstreamTlsHandshakeErrors, type BackendSeries,
} from '../observe/upstream-metrics.ts'

/** A protocol-level attempt (one undici dispatch or one h2 stream) the exchange can cancel. */
export interface Attempt {
  /** Tear the upstream exchange down (RST_STREAM / socket reset). */
  cancel(reason: Error): void
  /** The response body consumer wants more. */
  resume(): void
}

/**
 * Resilience hooks (issue 6, lib/upstream/resilience.ts): outcome per endpoint
 * for outlier detection and overload tracking, in-flight counts for the
 * circuit breaker and LeastRequest. Client aborts are reported too; the guard
 * does not count them against the backend.
 */
export interface ExchangeGuard {
  started(ex: Exchange): void
  /**
   * Before an attempt goes to endpoint `index` of this guard's list
   * (ex.endpointHealth still names the previous attempt's endpoint, which may
   * belong to an older list of the same cluster: a DNS answer changed).
   */
  entering(ex: Exchange, index: number): void
  responded(ex: Exchange, status: number, headers: OutgoingHeaders): void
  failed(ex: Exchange, err: SallyportError): void
  finished(ex: Exchange): void
}

/** Called by the exchange when a connect failure may move to the next endpoint. */
export interface Redispatcher {
  /** True: the exchange goes on (another attempt, or `giveUp` with `err` later); false: `err` is its answer. */
  redispatch(ex: Exchange, err: SallyportError): boolean
}

/**
 * Interim (1xx) responses an upstream may send per exchange before its final
 * one, 100 Continue included, and their heads' bytes together (HTTP/1.1 wire
 * size; an HTTP/2 head counted the same way). Past either the exchange fails
 * as an upstream protocol error (502) and its connection or stream is closed:
 * an upstream sending 1xx heads without end would otherwise hold the request,
 * its connection and the client's reads until the idle bound.
 */
export const MAX_INFORMATIONAL = 16
export const MAX_INFORMATIONAL_BYTES = 64 * 1024
/** What a status line and the blank line after the fields add to a head's size. */
const STATUS_LINE_BYTES = 'HTTP/1.1 100 \r\n\r\n'.length

export class Exchange {
  readonly req: UpstreamRequest
  readonly cluster: Cluster
  readonly #handler: UpstreamHandler
  readonly #redispatcher: Redispatcher
  readonly #started: number
  readonly #series: BackendSeries
  /** `host:port` of the endpoint of the current attempt. */
  endpoint = ''
  /** Index of the current attempt's endpoint in the endpoint list of `guard` (the registry's state it was sent with). */
  endpointIndex = 0
  /**
   * Health of the current attempt's endpoint, which counts it in flight; null
   * before the first attempt and once finished. Held by identity, not index:
   * a DNS answer that changes under a pending connect gives the cluster a new
   * list, and the retry to the next address must still release this one.
   */
  endpointHealth: EndpointHealth | null = null
  /** Endpoints tried so far (connect fallback tries each at most once). */
  tried = 0
  /**
   * The connect fallback moved on to a new address list of the cluster (a DNS
   * answer changed, or an expired one was refreshed): its addresses are each
   * tried once more, once per exchange.
   */
  relisted = false
  /** True once request bytes may have left: never retried after this point. */
  sent = false
  /** Resilience hooks; null when none (set by the registry before the first attempt). */
  guard: ExchangeGuard | null = null
  /** The tick of its pool's queue clock it last started waiting at (queue-timeout.ts). */
  queuedAt = 0
  #attempt: Attempt | null = null
  #answered = false
  #finished = false
  #body: ResponseBody | null = null
  /** The try's backendRequest deadline (req.timeouts.deadlineMs), from its first attempt on. */
  #deadline: NodeJS.Timeout | null = null
  #deadlineSet = false
  #informational = 0
  #informationalBytes = 0
  /** A tunnel handed to the listener and not yet closed: still active (tunnel()). */
  #tunnelOpen = false

  constructor(req: UpstreamRequest, handler: UpstreamHandler, redispatcher: Redispatcher) {
    this.req = req
    this.cluster = req.cluster
    this.#handler = handler
    this.#redispatcher = redispatcher
    this.#started = performance.now()
    const series = backendSeries(req.cluster)
    this.#series = series
    series.active++
    req.signal.addEventListener('abort', this)
  }

  get answered(): boolean {
    return this.#answered
  }

  get aborted(): boolean {
    return this.req.signal.aborted
  }

  setAttempt(attempt: Attempt | null): void {
    this.#attempt = attempt
    if (attempt === null || this.#deadlineSet) return
    // The request starts going out: the try's deadline runs from here to its response's last byte.
    this.#deadlineSet = true
    const ms = this.req.timeouts.deadlineMs
    if (ms !== undefined && ms !== null && ms > 0 && !this.#finished) this.#deadline = setTimeout(onDeadline, ms, this)
  }

  /** The backendRequest deadline ran out: before the head, the try fails as a timeout; after it, its body is cut. */
  deadlineExpired(): void {
    this.#deadline = null
    if (this.#finished) return
    this.#timedOut(localError(BACKEND_REQUEST_TIMEOUT, `backendRequest timeout (${this.req.timeouts.deadlineMs} ms) exceeded`))
  }

  /** The try ran out of time (backendRequest deadline, per-try timeout): the endpoint's failure, counted as such. */
  #timedOut(err: Error): void {
    const attempt = this.#attempt
    if (!this.#answered) {
      this.fail(err)
      if (attempt !== null) attempt.cancel(err)
    } else if (this.#body !== null) {
      this.#body.destroy(normalizeUpstreamError(err, null, this.endpoint))
    }
  }

  #clearDeadline(): void {
    if (this.#deadline === null) return
    clearTimeout(this.#deadline)
    this.#deadline = null
  }

  /** Cancellation listener (an object, so no closure per request). */
  handleEvent(): void {
    const cause: unknown = this.req.signal.reason
    // The attempt loop's per-try timeout is the endpoint's timeout, as a
    // backendRequest one is: outlier detection counts it (Envoy reports
    // LocalOriginTimeout); the loop retries it or answers 504. A client that
    // goes away (or the route timeout) counts against nobody.
    if (cause instanceof SallyportError && cause.detail === PER_TRY_TIMEOUT) return this.#timedOut(cause)
    const reason = new SallyportError(ErrorCode.CLIENT_ABORTED, 'request aborted by the client or the route timeout', { cause })
    const attempt = this.#attempt
    if (attempt !== null) attempt.cancel(reason)
    if (!this.#answered) {
      this.#answered = true
      this.#handler.onError(reason, this.endpoint)
      this.finish(reason.code)
    } else if (this.#body !== null) {
      this.#body.destroy(reason)
    }
  }

  /**
   * An interim (1xx) head before the final one, fields as the upstream sent them
   * (hop-by-hop ones are removed here). 100 Continue stays between the gateway and
   * the upstream: the gateway answered its own client's expectation.
   */
  informational(status: number, raw: Readonly<Record<string, string | string[] | number | undefined>>): void {
    if (this.#answered || this.#finished) return
    this.#informationalBytes += headBytes(raw)
    if (++this.#informational > MAX_INFORMATIONAL || this.#informationalBytes > MAX_INFORMATIONAL_BYTES) {
      const attempt = this.#attempt
      const err = new SallyportError(ErrorCode.UPSTREAM_PROTOCOL,
        `upstream ${this.endpoint} sent more than ${MAX_INFORMATIONAL} interim (1xx) responses or ${MAX_INFORMATIONAL_BYTES / 1024} KiB of them`,
        { detail: 'too many interim (1xx) responses' })
      this.fail(err)
      if (attempt !== null) attempt.cancel(err)
      return
    }
    if (status <= 101 || status > 199) return
    this.#handler.onInformational?.(status, responseHeaders(raw, null))
  }

  // hot path
  respond(status: number, headers: OutgoingHeaders, attempt: Attempt, protocol: string): ResponseBody | null {
    if (this.#answered) {
      attempt.cancel(new SallyportError(ErrorCode.CLIENT_ABORTED, 'exchange already answered'))
      return null
    }
    this.#answered = true
    if (this.cluster.protocol === 'MCP') {
      // MCP event streams live as long as they keep sending (as with the route's own timeout, router/forward.ts).
      this.#clearDeadline()
      // The client gets a session id naming the endpoint that issued it (mcp-session.ts).
      tagSessionHeader(headers, this.cluster.id, this.endpoint)
    }
    if (this.guard !== null) this.guard.responded(this, status, headers)
    const body = new ResponseBody(this, attempt, status)
    this.#body = body
    this.#handler.onResponse({ status, headers, body, endpoint: this.endpoint, protocol, trailers: () => body.trailers })
    return body
  }

  tunnel(status: number, headers: OutgoingHeaders, stream: Duplex): void {
    if (this.#answered) {
      stream.destroy()
      return
    }
    this.#answered = true
    this.#attempt = null
    // An open tunnel is a request in flight until it closes, as Envoy counts an upgraded
    // stream: LeastRequest sees WebSocket load, maxParallelRequests bounds it, the gauge shows it.
    this.#tunnelOpen = !stream.destroyed
    if (this.#tunnelOpen) stream.once('close', () => this.#release())
    this.finish(String(status))
    this.#handler.onTunnel({ status, headers, stream, endpoint: this.endpoint })
  }

  /**
   * A failure before the response started. Connect failures of unsent
   * requests move to the next endpoint, unless the caller retries them itself
   * (req.connectFallback false: the router's attempt loop).
   */
  fail(err: unknown): void {
    if (this.#answered) return
    let error = normalizeUpstreamError(err, this.req.signal, this.endpoint)
    if (error.code === ErrorCode.UPSTREAM_TIMEOUT && awaitingClient(this.req.body)) {
      error = new SallyportError(ErrorCode.CLIENT_TIMEOUT, 'the request body stopped arriving from the client', { cause: err })
    }
    this.#count(error)
    if (this.guard !== null) this.guard.failed(this, error)
    if (error.code === ErrorCode.UPSTREAM_CONNECT && !this.sent && this.req.connectFallback !== false && this.#redispatcher.redispatch(this, error)) return
    this.giveUp(error)
  }

  /** A failure already counted (`fail`) is the answer: nowhere else to try. */
  giveUp(error: SallyportError): void {
    if (this.#answered) return
    this.#answered = true
    this.#attempt = null
    this.#handler.onError(error, this.endpoint)
    this.finish(error.code)
  }

  /** A failure after the response started: the body errors. */
  failBody(err: unknown): void {
    const body = this.#body
    if (body === null) return this.fail(err)
    body.destroy(normalizeUpstreamError(err, this.req.signal, this.endpoint))
  }

  #count(error: SallyportError): void {
    if (error.code === ErrorCode.UPSTREAM_CONNECT) upstreamConnectErrors.inc({ backend: this.cluster.id, reason: connectReason(error) })
    // Handshake failures are counted by the Connector, once per handshake; what it did not see
    // (e.g. a TLS 1.3 server rejecting our certificate after the handshake) is counted here.
    else if (error.code === ErrorCode.UPSTREAM_TLS && !isCountedTlsError(error.cause)) upstreamTlsHandshakeErrors.inc({ backend: this.cluster.id, reason: tlsReason(error) })
  }

  /** End of the exchange: metrics, and the abort listener goes. Idempotent. */
  finish(code: string): void {
    if (this.#finished) return
    this.#finished = true
    this.#clearDeadline()
    this.req.signal.removeEventListener('abort', this)
    this.#series.observe(code, (performance.now() - this.#started) / 1000)
    if (!this.#tunnelOpen) this.#release()
  }

  /** The exchange stops counting as active (a tunnel: when it closes). */
  #release(): void {
    if (this.guard !== null) this.guard.finished(this)
    this.#series.active--
  }
}

/** An interim head's size as HTTP/1.1 writes it: status line, `name: value\r\n` per field, blank line. */
function headBytes(raw: Readonly<Record<string, string | string[] | number | undefined>>): number {
  let n = STATUS_LINE_BYTES
  for (const name in raw) {
    const v = raw[name]
    if (v === undefined) continue
    if (Array.isArray(v)) for (const one of v) n += name.length + one.length + 4
    else n += name.length + String(v).length + 4
  }
  return n
}

function onDeadline(ex: Exchange): void {
  ex.deadlineExpired()
}

/**
 * True when `body` is a response body straight from an upstream pool: its
 * chunks are the pool's socket reads, referenced by nothing once emitted. A
 * listener that is its only consumer may release a chunk's memory after
 * writing it (lib/upstream/release.ts); a body an extension replaced is not one.
 */
export function isUpstreamBody(body: Readable): boolean {
  return body instanceof ResponseBody
}

/**
 * A direct consumer of an upstream response body (ResponseBody.attachSink):
 * the pool's chunks reach it as they arrive, without the stream's buffering,
 * its events and the process.nextTick calls they cost per response (four or
 * five for a small body). Exactly one of onBodyEnd / onBodyError is called, once.
 */
export interface BodySink {
  /** A chunk of the body; false: write no more until ResponseBody.resumeSink(). */
  onBodyData(chunk: Buffer): boolean
  /** The body ended; its trailers (if any) are set on the body. */
  onBodyEnd(): void
  /** The body failed, or was destroyed before its end. */
  onBodyError(err: Error): void
}

/**
 * The response body handed to the request path. Backpressure: push() returning
 * false pauses the upstream (undici controller / h2 stream); _read resumes it.
 * Destroying it before the end cancels the upstream exchange.
 */
export class ResponseBody extends Readable {
  readonly #exchange: Exchange
  readonly #attempt: Attempt
  readonly #status: number
  /** Set by the pool just before the end of the body when the upstream sent trailers (gRPC's grpc-status). */
  trailers: OutgoingHeaders | null = null
  #sink: BodySink | null = null
  /** With a sink: the body ended or failed (the sink was told). */
  #sinkDone = false

  constructor(exchange: Exchange, attempt: Attempt, status: number) {
    super({ highWaterMark: 64 * 1024 })
    this.#exchange = exchange
    this.#attempt = attempt
    this.#status = status
    // The upstream's failure (a reset, a short body) is told to whoever reads
    // the body; a body nobody listens to (a mirror's answer, one dropped after
    // the client left) must not turn it into an unhandled 'error' that ends
    // the process.
    this.on('error', noop)
  }

  /**
   * Hands the body to `sink` instead of the stream interface (the client
   * writer that is its only consumer). Refused (false) once anything read it
   * as a stream; from then on the stream side stays empty.
   */
  attachSink(sink: BodySink): boolean {
    if (this.#sink !== null || this.destroyed || this.readableLength > 0 || this.readableEnded ||
      this.readableFlowing !== null || this.listenerCount('data') > 0 || this.listenerCount('readable') > 0) return false
    this.#sink = sink
    return true
  }

  /** The sink takes chunks again after onBodyData returned false. */
  resumeSink(): void {
    if (!this.#sinkDone) this.#attempt.resume()
  }

  // hot path
  override push(chunk: Buffer | null, encoding?: BufferEncoding): boolean {
    const sink = this.#sink
    if (sink === null) return super.push(chunk, encoding)
    if (this.#sinkDone) return false
    if (chunk !== null) return sink.onBodyData(chunk)
    this.#sinkDone = true
    this.#exchange.setAttempt(null)
    this.#exchange.finish(String(this.#status))
    sink.onBodyEnd()
    return false
  }

  override _read(): void {
    this.#attempt.resume()
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    const sink = this.#sink
    const unfinished = sink === null ? !this.readableEnded : !this.#sinkDone
    const reason = err ?? new SallyportError(ErrorCode.CLIENT_ABORTED, 'response body destroyed')
    if (unfinished) this.#attempt.cancel(reason)
    this.#exchange.setAttempt(null)
    this.#exchange.finish(err === null ? String(this.#status) : err instanceof SallyportError ? err.code : ErrorCode.UPSTREAM_RESET)
    if (sink === null) { callback(err); return }
    // The sink hears of the failure here; the stream side, which nobody
    // listens to, must not emit an unhandled 'error'.
    if (unfinished) {
      this.#sinkDone = true
      sink.onBodyError(reason)
    }
    callback(null)
  }
}

function noop(): void {}
