// HTTP/1.1 upstream: one undici Pool per key, driven with dispatch() and a
// handler object (undici 8 handler API: onRequestStart / onResponseStart /
// onResponseData / onResponseEnd / onResponseError, controller pause/resume/abort).
// Connections come from our Connector (resolution, address fallback, TLS built
// once per pool); the first one may be a socket already negotiated by the ALPN
// probe (alpn-pool.ts).

import { createRequire } from 'node:module'
import type { Pool as UndiciPool, Dispatcher } from 'undici'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import type { IncomingHttpHeaders } from 'undici/types/header.js'
import type { Connector } from './connect.ts'
import type { Attempt, Exchange, ResponseBody } from './exchange.ts'
import { h1RequestHeaders, responseHeaders } from './headers.ts'
import { localError } from './normalize-error.ts'
import { idleMsOf, type PoolSettings, type PoolStats, type UpstreamPool } from './pool.ts'
import { markReleasableChunks, releaseWrittenChunks } from './release.ts'

const HTTP11: readonly string[] = ['http/1.1']

// Only undici's Pool (and the client it drives), not its index: the index also
// loads fetch, WebSocket, the cache and mock agents, about 12 MiB of resident
// memory a gateway never uses. undici is pinned to an exact version in
// package.json, and test/upstream covers this path on every run.
const Pool = createRequire(import.meta.url)('undici/lib/dispatcher/pool.js') as typeof UndiciPool
type Pool = UndiciPool

export class H1Pool implements UpstreamPool {
  readonly protocol = 'h1'
  readonly #pool: Pool
  readonly #settings: PoolSettings
  #parked: Socket | null
  #closed = false
  /** Dispatched, not yet started on a connection, not given up on (H1Attempt calls left()). */
  #waiting = 0

  constructor(connector: Connector, settings: PoolSettings, parked: Socket | null = null) {
    this.#settings = settings
    this.#parked = parked
    const endpoint = connector.endpoint
    // The origin only labels the pool: Host is always set from the request and
    // the connect function below ignores undici's connect parameters.
    const host = endpoint.kind === 'unix' ? 'localhost' : endpoint.host.includes(':') ? `[${endpoint.host}]` : endpoint.host
    const origin = `http://${host}${endpoint.kind === 'unix' ? '' : `:${endpoint.port}`}`
    this.#pool = new Pool(origin, {
      connections: settings.connectionsPerPool,
      pipelining: 1,
      allowH2: false,
      keepAliveTimeout: settings.keepAliveTimeoutMs,
      keepAliveMaxTimeout: settings.keepAliveTimeoutMs,
      // The last request a connection carries goes with Connection: close.
      ...(settings.maxRequestsPerConnection === null ? {} : { maxRequestsPerClient: settings.maxRequestsPerConnection }),
      connect: (_options, callback) => {
        const socket = this.#parked
        if (socket !== null) {
          this.#parked = null
          if (!socket.destroyed) {
            releaseWrittenChunks(socket)
            // Never synchronously: undici's client is still inside its resume loop.
            process.nextTick(callback, null, socket)
            return
          }
        }
        connector.connect(HTTP11, (err, sock) => {
          if (err !== null || sock === null) callback(err ?? new Error('no socket'), null)
          else {
            // Request body chunks marked releasable are freed once written (release.ts).
            releaseWrittenChunks(sock)
            callback(null, sock)
          }
        })
      },
    })
    // Connection-level errors reach the requests through their handlers.
    this.#pool.on('connectionError', noop)
  }

  get closed(): boolean {
    return this.#closed
  }

  // hot path
  dispatch(ex: Exchange): void {
    const req = ex.req
    const idleMs = idleMsOf(ex, this.#settings)
    const headersMs = req.timeouts.headersMs ?? idleMs
    const upgrade = req.upgrade
    // A request without a body keeps its own clocks (see H1Attempt); undici's are
    // off for it. With a body, undici's headers clock is kept: it also restarts on
    // upload progress, which the handler does not see.
    const own = req.body === null && upgrade === null
    const attempt = new H1Attempt(ex, this, own ? headersMs : 0, own ? idleMs : 0)
    this.#waiting++
    ex.setAttempt(attempt)
    if (req.body !== null && upgrade === null) markReleasableChunks(req.body)
    this.#pool.dispatch({
      path: req.path,
      method: req.method,
      headers: h1RequestHeaders(req.headers, req.authority),
      body: upgrade === null ? req.body : null,
      upgrade,
      headersTimeout: own ? 0 : headersMs,
      bodyTimeout: own ? 0 : idleMs,
    }, attempt)
  }

  pending(): number {
    return this.#waiting
  }

  /** An attempt of this pool started on a connection, or was given up on. */
  left(): void {
    this.#waiting--
  }

  stats(): PoolStats {
    const s = this.#pool.stats
    return { connected: s.connected, pending: s.pending, running: s.running }
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    const parked = this.#parked
    this.#parked = null
    if (parked !== null) parked.destroy()
    await this.#pool.close()
  }
}

function noop(): void {}

type Controller = Dispatcher.DispatchController

function onClock(attempt: H1Attempt): void {
  attempt.timedOut()
}

/**
 * One request on the undici pool: handler for undici, Attempt for the exchange.
 *
 * Clocks: undici's parser timer for the response headers and body is a new
 * timer object per request on a kept-alive connection, held in undici's timer
 * list for up to half a second after it is cleared, so under load every one of
 * them outlived two minor GCs and was promoted: about half of what a small
 * request left in the old generation. A bodiless request runs on node timers
 * here instead (cleared at the end, they die young): the headers clock from the
 * moment the request is on a connection, then the idle clock, restarted by
 * every body chunk. Either one firing aborts the exchange, as undici's did.
 */
class H1Attempt implements Dispatcher.DispatchHandler, Attempt {
  readonly #ex: Exchange
  /** Counted in the pool's pending() until it starts, fails or is cancelled. */
  #pool: H1Pool | null
  #controller: Controller | null = null
  #body: ResponseBody | null = null
  #cancelled: Error | null = null
  /** Own clocks (ms); 0 when undici keeps them (requests with a body, upgrades). */
  readonly #headersMs: number
  readonly #idleMs: number
  #timer: NodeJS.Timeout | null = null
  #responded = false

  constructor(ex: Exchange, pool: H1Pool, headersMs: number, idleMs: number) {
    this.#ex = ex
    this.#pool = pool
    this.#headersMs = headersMs
    this.#idleMs = idleMs
  }

  #stopWaiting(): void {
    const pool = this.#pool
    if (pool === null) return
    this.#pool = null
    pool.left()
  }

  #stopClock(): void {
    const timer = this.#timer
    if (timer !== null) {
      this.#timer = null
      clearTimeout(timer)
    }
  }

  timedOut(): void {
    this.#timer = null
    const controller = this.#controller
    if (controller === null || controller.aborted) return
    controller.abort(this.#responded
      ? localError('SP_IDLE_TIMEOUT', 'upstream exchange idle for too long')
      : localError('SP_HEADERS_TIMEOUT', 'upstream response headers did not arrive in time'))
  }

  onRequestStart(controller: Controller): void {
    this.#stopWaiting()
    this.#controller = controller
    // From here on the body may be read: never retried on another endpoint.
    this.#ex.sent = true
    if (this.#cancelled !== null) { controller.abort(this.#cancelled); return }
    if (this.#headersMs > 0) this.#timer = setTimeout(onClock, this.#headersMs, this)
  }

  onResponseStart(controller: Controller, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200) return
    this.#responded = true
    if (this.#timer !== null) {
      if (this.#headersMs === this.#idleMs) this.#timer.refresh()
      else {
        clearTimeout(this.#timer)
        this.#timer = setTimeout(onClock, this.#idleMs, this)
      }
    }
    this.#body = this.#ex.respond(statusCode, responseHeaders(headers, null), this, 'h1')
    if (this.#body === null) { this.#stopClock(); controller.abort(new Error('answered')) }
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    if (this.#timer !== null) this.#timer.refresh()
    const body = this.#body
    if (body !== null && !body.push(chunk)) controller.pause()
  }

  onResponseEnd(_controller: Controller, trailers: IncomingHttpHeaders): void {
    this.#stopClock()
    const body = this.#body
    if (body === null) return
    if (trailers !== undefined && trailers !== null) {
      for (const _ in trailers) { body.trailers = responseHeaders(trailers, null); break }
    }
    body.push(null)
  }

  onResponseError(_controller: Controller, err: Error): void {
    this.#stopClock()
    this.#stopWaiting()
    if (this.#body === null) this.#ex.fail(err)
    else this.#ex.failBody(err)
  }

  onRequestUpgrade(_controller: Controller, statusCode: number, headers: IncomingHttpHeaders, socket: Duplex): void {
    this.#ex.tunnel(statusCode, responseHeaders(headers, 'upgrade'), socket)
  }

  cancel(reason: Error): void {
    if (this.#cancelled !== null) return
    this.#stopClock()
    this.#stopWaiting() // still queued in undici, but nobody waits for it any more
    this.#cancelled = reason
    const controller = this.#controller
    if (controller !== null && !controller.aborted) controller.abort(reason)
  }

  resume(): void {
    if (this.#timer !== null) this.#timer.refresh() // as undici's parser does on resume
    const controller = this.#controller
    if (controller !== null) controller.resume()
  }
}
