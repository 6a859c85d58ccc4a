// HTTP/2 (TLS, ALPN h2) and h2c (prior knowledge) upstream: node:http2
// sessions per key, many streams per session. A new session is opened when
// every live one is at the peer's SETTINGS_MAX_CONCURRENT_STREAMS or has
// received GOAWAY; idle sessions close after keepAliveTimeoutMs, and a session
// that has carried maxRequestsPerConnection streams takes no more (it closes
// once they finish). Sessions are used only after the peer's SETTINGS arrived,
// so the stream limit and SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441) are
// known before the first stream.

import { connect as h2connect, constants, type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type IncomingHttpStatusHeader } from 'node:http2'
import type { Socket } from 'node:net'
import type { Readable } from 'node:stream'
import type { Connector, PendingConnect } from './connect.ts'
import type { Attempt, Exchange, ResponseBody } from './exchange.ts'
import { h2RequestHeaders, responseHeaders, trailerFields, websocketAccept } from './headers.ts'
import { STREAM_REFUSED, localError } from './normalize-error.ts'
import { H1Pool } from './h1-pool.ts'
import { idleMsOf, stillWaiting, type PoolSettings, type PoolStats, type UpstreamPool } from './pool.ts'
import { QueueTimeout } from './queue-timeout.ts'

const H2: readonly string[] = ['h2']
/** Our own ceiling on streams per session, whatever the peer allows. */
const MAX_STREAMS_PER_SESSION = 1000

interface SessionState {
  readonly session: ClientHttp2Session
  active: number
  /** Streams started on it, for maxRequestsPerConnection. */
  started: number
  /** Peer SETTINGS received. */
  ready: boolean
  /** GOAWAY received, errored or closing: no new streams. */
  dead: boolean
  error: Error | null
}

export class H2Pool implements UpstreamPool {
  readonly protocol: string
  readonly #connector: Connector
  readonly #settings: PoolSettings
  readonly #scheme: 'http' | 'https'
  readonly #sessions: SessionState[] = []
  #waiting: Exchange[] = []
  #connecting = 0
  /** Connects in progress, stopped when the pool closes. */
  readonly #opening = new Set<PendingConnect>()
  #closed = false
  /** HTTP/1.1 Upgrade over a new connection, when the peer lacks RFC 8441. */
  #h1: H1Pool | null = null
  /** What bounds the wait in #waiting. */
  readonly #queueTimeout: QueueTimeout

  constructor(connector: Connector, settings: PoolSettings, adopted: Socket | null = null) {
    this.#connector = connector
    this.#settings = settings
    this.#queueTimeout = new QueueTimeout(settings.connectTimeoutMs, this.#sweepQueue)
    this.#scheme = connector.secure ? 'https' : 'http'
    this.protocol = connector.secure ? 'h2' : 'h2c'
    if (adopted !== null) this.#adopt(adopted)
  }

  get closed(): boolean {
    return this.#closed
  }

  // hot path
  dispatch(ex: Exchange): void {
    const state = this.#pick()
    if (state !== null) {
      this.#start(state, ex)
      return
    }
    ex.queuedAt = this.#queueTimeout.queued()
    this.#waiting.push(ex)
    if (this.#connecting === 0 && this.#mayOpen()) this.#open()
  }

  /** Fails the requests that waited the queue timeout for a stream (never sent); drops answered ones. */
  #sweepQueue = (): void => {
    const waiting = this.#waiting
    const timeout = this.#queueTimeout
    let expired: Exchange[] | null = null
    let kept = 0
    for (let i = 0; i < waiting.length; i++) {
      const ex = waiting[i]
      if (ex.answered) continue
      if (timeout.expired(ex.queuedAt)) (expired ??= []).push(ex)
      else waiting[kept++] = ex
    }
    waiting.length = kept
    if (kept === 0) timeout.stop()
    if (expired !== null) for (const ex of expired) ex.fail(timeout.error(ex.endpoint))
  }

  /**
   * Live sessions stay within connectionsPerPool (circuitBreaker
   * maxConnections caps HTTP/2 sessions as it caps HTTP/1.1 connections);
   * at the cap, requests wait for a stream of a live session.
   */
  #mayOpen(): boolean {
    let live = this.#connecting
    const sessions = this.#sessions
    for (let i = 0; i < sessions.length; i++) if (!sessions[i].dead) live++
    return live < this.#settings.connectionsPerPool
  }

  pending(): number {
    return stillWaiting(this.#waiting) + (this.#h1 === null ? 0 : this.#h1.pending())
  }

  stats(): PoolStats {
    let running = 0
    for (const s of this.#sessions) running += s.active
    const h1 = this.#h1 === null ? null : this.#h1.stats()
    return {
      connected: this.#sessions.length + (h1 === null ? 0 : h1.connected),
      pending: this.#waiting.length + (h1 === null ? 0 : h1.pending),
      running: running + (h1 === null ? 0 : h1.running),
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#queueTimeout.stop()
    const waiting = this.#waiting
    this.#waiting = []
    for (const ex of waiting) ex.fail(localError('UND_ERR_CLOSED', 'upstream pool closed'))
    // Nobody waits any more: a connect still in progress would only be closed when it ends.
    for (const opening of [...this.#opening]) opening.cancel()
    const closing: Array<Promise<void>> = []
    for (const s of this.#sessions) {
      // session.close(): no new streams, in-flight ones finish, then the socket closes.
      closing.push(new Promise((resolve) => {
        if (s.session.closed || s.session.destroyed) resolve()
        else s.session.close(() => resolve())
      }))
    }
    if (this.#h1 !== null) closing.push(this.#h1.close())
    await Promise.all(closing)
  }

  #pick(): SessionState | null {
    const sessions = this.#sessions
    for (let i = 0; i < sessions.length; i++) {
      const s = sessions[i]
      if (!s.ready || s.dead) continue
      // Destroyed under us (nghttp2 found a response malformed enough to end the
      // session: DATA on a 204): its 'close' comes a few ticks later, and a stream
      // asked of it now fails without being sent.
      if (s.session.destroyed) { s.dead = true; continue }
      const limit = Math.min(s.session.remoteSettings.maxConcurrentStreams ?? 100, MAX_STREAMS_PER_SESSION)
      if (s.active < limit) return s
    }
    return null
  }

  #open(): void {
    if (this.#closed) return
    this.#connecting++
    const opening = this.#connector.connect(H2, (err, socket) => {
      this.#opening.delete(opening)
      this.#connecting--
      if (err !== null || socket === null) {
        this.#failWaiting(err ?? new Error('no socket'))
        return
      }
      if (this.#closed) {
        socket.destroy()
        return
      }
      if (this.#connector.secure && (socket as Socket & { alpnProtocol?: string | false }).alpnProtocol !== 'h2') {
        socket.destroy()
        this.#failWaiting(localError('ERR_HTTP2_ERROR', 'upstream did not negotiate h2 by ALPN'))
        return
      }
      this.#adopt(socket)
    })
    this.#opening.add(opening)
  }

  #failWaiting(err: Error): void {
    const waiting = this.#waiting
    this.#waiting = []
    for (const ex of waiting) ex.fail(err)
  }

  #adopt(socket: Socket): void {
    const endpoint = this.#connector.endpoint
    const session = h2connect(`${this.#scheme}://${endpoint.kind === 'unix' ? 'localhost' : 'upstream'}`, {
      createConnection: () => socket,
      settings: { enablePush: false },
    })
    const state: SessionState = { session, active: 0, started: 0, ready: false, dead: false, error: null }
    this.#sessions.push(state)
    session.once('remoteSettings', () => {
      state.ready = true
      this.#drain()
    })
    session.on('goaway', () => {
      state.dead = true
      this.#drain()
    })
    session.on('error', (err: Error) => {
      state.dead = true
      state.error = err
    })
    session.once('close', () => {
      state.dead = true
      const i = this.#sessions.indexOf(state)
      if (i !== -1) this.#sessions.splice(i, 1)
      // A session that died before its SETTINGS: the waiting requests never got a stream.
      if (!state.ready && this.#connecting === 0 && this.#pick() === null) {
        this.#failWaiting(state.error ?? localError('ERR_HTTP2_SESSION_ERROR', 'upstream closed the session before SETTINGS'))
      } else {
        this.#drain()
      }
    })
    session.setTimeout(this.#settings.keepAliveTimeoutMs, () => {
      if (state.active === 0) {
        state.dead = true
        session.close()
      }
    })
    // Pooled sessions must not keep the process alive on their own.
    session.unref()
  }

  #drain(): void {
    while (this.#waiting.length > 0) {
      const ex = this.#waiting[0]
      if (ex.answered) {
        this.#waiting.shift()
        continue
      }
      const state = this.#pick()
      if (state === null) {
        if (this.#connecting === 0 && !this.#closed && this.#mayOpen()) this.#open()
        return
      }
      this.#waiting.shift()
      this.#start(state, ex)
    }
  }

  /** Called by a stream when it closes. */
  release(state: SessionState): void {
    state.active--
    if (state.active === 0 && state.dead && !state.session.closed) state.session.close()
    if (this.#waiting.length > 0) this.#drain()
  }

  // hot path
  #start(state: SessionState, ex: Exchange): void {
    if (ex.answered) return
    const req = ex.req
    const upgrade = req.upgrade
    let headers: Record<string, string | string[]>
    let wsKey: string | null = null
    if (upgrade !== null) {
      if (state.session.remoteSettings.enableConnectProtocol !== true) {
        // RFC 8441 not offered by the peer: HTTP/1.1 Upgrade over a new connection.
        this.#h1 ??= new H1Pool(this.#connector, this.#settings)
        this.#h1.dispatch(ex)
        return
      }
      // RFC 8441 §5: Sec-WebSocket-Key/Accept are not used over HTTP/2.
      const key = req.headers['sec-websocket-key']
      wsKey = typeof key === 'string' ? key : null
      headers = h2RequestHeaders(req.headers, 'CONNECT', req.path, req.authority, this.#scheme, upgrade)
      delete headers['sec-websocket-key']
    } else {
      headers = h2RequestHeaders(req.headers, req.method, req.path, req.authority, this.#scheme, null)
    }
    let stream: ClientHttp2Stream
    // A stream whose request side stays open (a body, a tunnel) gets an abort signal:
    // node resets a stream aborted that way with CANCEL and no END_STREAM first (#reset).
    const aborter = req.body === null && upgrade === null ? null : new AbortController()
    try {
      stream = state.session.request(headers, aborter === null ? { endStream: true } : { endStream: false, signal: aborter.signal })
    } catch (err) {
      state.dead = true
      ex.fail(err)
      return
    }
    state.active++
    ex.sent = true
    const max = this.#settings.maxRequestsPerConnection
    // Retired: no new streams; closed when its last one ends (release).
    if (max !== null && ++state.started >= max) state.dead = true
    const attempt = new H2Attempt(ex, stream, state, this, wsKey, aborter)
    ex.setAttempt(attempt)
    const idleMs = idleMsOf(ex, this.#settings)
    stream.setTimeout(idleMs, onStreamTimeout)
    if (req.timeouts.headersMs !== null) attempt.headersTimer = setTimeout(onHeadersTimeout, req.timeouts.headersMs, attempt)
    if (req.body !== null && upgrade === null) attempt.sendBody(req.body)
  }
}

const kAttempt = Symbol('sallyport.h2Attempt')
type AttemptStream = ClientHttp2Stream & { [kAttempt]: H2Attempt }

function attemptOf(stream: ClientHttp2Stream): H2Attempt {
  return (stream as AttemptStream)[kAttempt]
}

// Module-level listeners with the attempt hung on the stream: no closures per request.
function onStreamResponse(this: ClientHttp2Stream, headers: IncomingHttpHeaders & IncomingHttpStatusHeader): void {
  attemptOf(this).onResponse(headers)
}
/** node emits 'headers' for a 1xx HEADERS block before the final one. */
function onStreamInformational(this: ClientHttp2Stream, headers: IncomingHttpHeaders & IncomingHttpStatusHeader): void {
  const status = headers[':status']
  if (status !== undefined) attemptOf(this).onInformational(status, headers)
}
function onStreamData(this: ClientHttp2Stream, chunk: Buffer): void {
  attemptOf(this).onData(chunk)
}
function onStreamEnd(this: ClientHttp2Stream): void {
  attemptOf(this).onEnd()
}
function onStreamTrailers(this: ClientHttp2Stream, headers: IncomingHttpHeaders): void {
  attemptOf(this).onTrailers(headers)
}
function onStreamError(this: ClientHttp2Stream, err: Error): void {
  attemptOf(this).error ??= err
}
function onBodyError(this: Readable & { [kAttempt]?: H2Attempt }, err: Error): void {
  this[kAttempt]?.abortWith(err)
}
function onStreamClose(this: ClientHttp2Stream): void {
  attemptOf(this).onClose()
}
function onStreamTimeout(this: ClientHttp2Stream): void {
  attemptOf(this).abortWith(localError('SP_IDLE_TIMEOUT', 'upstream exchange idle for too long'))
}
function onHeadersTimeout(attempt: H2Attempt): void {
  attempt.headersTimer = null
  attempt.abortWith(localError('SP_HEADERS_TIMEOUT', 'upstream response headers did not arrive in time'))
}

class H2Attempt implements Attempt {
  readonly #ex: Exchange
  readonly #stream: ClientHttp2Stream
  readonly #state: SessionState
  readonly #pool: H2Pool
  readonly #wsKey: string | null
  readonly #aborter: AbortController | null
  #body: ResponseBody | null = null
  #ended = false
  #tunnelled = false
  #cancelled = false
  error: Error | null = null
  headersTimer: NodeJS.Timeout | null = null

  constructor(ex: Exchange, stream: ClientHttp2Stream, state: SessionState, pool: H2Pool, wsKey: string | null, aborter: AbortController | null) {
    this.#ex = ex
    this.#stream = stream
    this.#state = state
    this.#pool = pool
    this.#wsKey = wsKey
    this.#aborter = aborter
    ;(stream as AttemptStream)[kAttempt] = this
    stream.on('response', onStreamResponse)
    stream.on('headers', onStreamInformational)
    stream.on('error', onStreamError)
    stream.on('close', onStreamClose)
  }

  onResponse(headers: IncomingHttpHeaders & IncomingHttpStatusHeader): void {
    if (this.headersTimer !== null) {
      clearTimeout(this.headersTimer)
      this.headersTimer = null
    }
    const status = headers[':status'] ?? 502
    // RFC 9110 §15: 100..599 (1xx came as 'headers'). nghttp2 takes any three digits;
    // a 600 would reach an HTTP/1.1 client as it is. The stream goes; its close reports this.
    if (status < 200 || status > 599) {
      this.abortWith(localError('SP_H2_BAD_STATUS', `upstream sent :status ${status}`))
      return
    }
    const stream = this.#stream
    if (this.#ex.req.upgrade !== null && status === 200) {
      this.#tunnelled = true
      stream.setTimeout(0)
      const out = responseHeaders(headers, null)
      if (this.#wsKey !== null) {
        // The client may be speaking HTTP/1.1 WebSocket: give the listener the accept value it must answer.
        out['sec-websocket-accept'] = websocketAccept(this.#wsKey)
      }
      this.#ex.tunnel(200, out, stream)
      return
    }
    this.#body = this.#ex.respond(status, responseHeaders(headers, null), this, this.#pool.protocol)
    if (this.#body === null) return
    stream.on('data', onStreamData)
    stream.on('trailers', onStreamTrailers)
    stream.on('end', onStreamEnd)
  }

  onInformational(status: number, headers: IncomingHttpHeaders): void {
    if (this.#body === null && !this.#tunnelled) this.#ex.informational(status, headers)
  }

  onTrailers(headers: IncomingHttpHeaders): void {
    const body = this.#body
    if (body !== null) body.trailers = trailerFields(headers)
  }

  onData(chunk: Buffer): void {
    const body = this.#body
    if (body !== null && !body.push(chunk)) this.#stream.pause()
  }

  onEnd(): void {
    // node also ends the stream's readable side when the session goes under it (its
    // socket closed: the stream is closed with NGHTTP2_CANCEL first). Only an end with
    // no error code is the upstream's END_STREAM; the other is a cut body, which
    // onClose reports.
    if (this.#stream.rstCode !== constants.NGHTTP2_NO_ERROR) return
    this.#ended = true
    const body = this.#body
    if (body !== null) body.push(null)
  }

  onClose(): void {
    if (this.headersTimer !== null) {
      clearTimeout(this.headersTimer)
      this.headersTimer = null
    }
    this.#pool.release(this.#state)
    if (this.#ended || this.#tunnelled || this.#cancelled) return
    const stream = this.#stream
    // RFC 9113 §8.7: REFUSED_STREAM (from the peer, or nghttp2 for streams past a
    // GOAWAY's last stream id) says the request was not processed; any other code
    // may follow a request the upstream acted on. Node reports both as
    // ERR_HTTP2_STREAM_ERROR, so the refusal gets its own code for the retry decision.
    const err = stream.rstCode === constants.NGHTTP2_REFUSED_STREAM
      ? localError(STREAM_REFUSED, 'upstream refused the stream (RST_STREAM code 7, REFUSED_STREAM)')
      : this.error ?? localError('SP_STREAM_RESET', `upstream stream closed (RST_STREAM code ${stream.rstCode ?? 'none'})`)
    if (this.#body === null) this.#ex.fail(err)
    else this.#ex.failBody(err)
  }

  /**
   * The request body into the stream, with pipe() rather than stream.pipeline():
   * pipeline destroys the stream when it is closed under it, before node has sent
   * the RST_STREAM, so a cancelled upload left the upstream's stream open for good
   * (and its slot on the session). A body that fails resets the stream.
   */
  sendBody(body: Readable): void {
    (body as Readable & { [kAttempt]?: H2Attempt })[kAttempt] = this
    body.once('error', onBodyError)
    body.pipe(this.#stream)
  }

  /** Our own timers, a failed request body: reset the stream and report `err`. */
  abortWith(err: Error): void {
    if (this.#ended || this.#tunnelled) return
    this.error ??= err
    this.#reset()
  }

  cancel(): void {
    if (this.#cancelled || this.#tunnelled) return
    this.#cancelled = true
    this.#reset()
  }

  #reset(): void {
    const stream = this.#stream
    const body = this.#ex.req.body
    if (body !== null) body.unpipe(stream)
    if (stream.closed) return
    // close(CANCEL) on a stream whose request side is still open ends that side
    // first: node flushes an END_STREAM before the RST_STREAM, and the upstream
    // would take the cut body for a whole one. destroy(err) resets it without, but
    // with INTERNAL_ERROR (a gRPC server reads a cancelled streaming call as
    // INTERNAL); the stream's abort signal resets it with CANCEL alone.
    if (stream.writableEnded || this.#aborter === null) stream.close(constants.NGHTTP2_CANCEL)
    else this.#aborter.abort()
    // What already arrived is not wanted: node closes a stream only once its readable
    // side is consumed. A stream reset with DATA already buffered and nobody reading
    // it (a :status 600 whose HEADERS and DATA came in one read) never closed: the
    // request waited for good (no timer fires on a closed stream), its slot on the
    // session stayed taken and the pool could not close.
    stream.removeListener('data', onStreamData)
    stream.resume()
  }

  resume(): void {
    this.#stream.resume()
  }
}
