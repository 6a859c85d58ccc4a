// HTTP/1.1 upstream pool: sallyport's own connections (h1-client.ts) for
// every request but upgrades; a WebSocket (or other) upgrade goes through an
// undici Pool made on first use, driven with dispatch() and a handler object
// (undici 8 handler API), since the connection leaves the pool with it.
// `--http1-client undici` sends every request that way (the client before
// sallyport had its own, kept as a fallback).
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
import { ExchangeClock, type ClockOwner } from './clock.ts'
import { chunkedOnly, H1ParseError, OTHER_CODING } from './h1-parser.ts'
import { connectH1, H1Connection, H1Request, openConnection, SWEEP_MS, type H1Host } from './h1-client.ts'
import { h1RequestHeaders, responseHeaders, trailerFields } from './headers.ts'
import { localError } from './normalize-error.ts'
import { idleMsOf, type PoolSettings, type PoolStats, type UpstreamPool } from './pool.ts'
import { markReleasableChunks } from './release.ts'
import { QueueTimeout } from './queue-timeout.ts'


// Only undici's Pool (and the client it drives), not its index: the index also
// loads fetch, WebSocket, the cache and mock agents, about 12 MiB of resident
// memory a gateway never uses. undici is pinned to an exact version in
// package.json, and test/upstream covers this path on every run.
let PoolClass: typeof UndiciPool | null = null
function undiciPool(): typeof UndiciPool {
  PoolClass ??= createRequire(import.meta.url)('undici/lib/dispatcher/pool.js') as typeof UndiciPool
  return PoolClass
}

export class H1Pool implements UpstreamPool, H1Host {
  readonly protocol = 'h1'
  readonly settings: PoolSettings
  readonly #connector: Connector
  #parked: Socket | null
  #closed = false
  /** Every connection, connecting or connected. */
  readonly #conns = new Set<H1Connection>()
  /** Free connections, the most recently used last (reused first: warm, and the others age out). */
  readonly #idle: H1Connection[] = []
  /** Requests waiting for a connection, in order. */
  #queue: H1Request[] = []
  #connecting = 0
  /** Dispatched, not yet started on a connection, not given up on (undici's included). */
  #waiting = 0
  /** Of #waiting, those waiting in undici's pool (upgrades, `--http1-client undici`), not in #queue. */
  #waitingUndici = 0
  /** What an UndiciAttempt reports to when it stops waiting. */
  readonly #undiciHost = { left: (): void => { this.#waiting--; this.#waitingUndici-- } }
  #sweep: NodeJS.Timeout | null = null
  /** What bounds the wait in #queue (undici's queue has no such bound). */
  readonly #queueTimeout: QueueTimeout
  #drained: (() => void) | null = null
  #undici: UndiciPool | null = null

  constructor(connector: Connector, settings: PoolSettings, parked: Socket | null = null) {
    this.settings = settings
    this.#connector = connector
    this.#parked = parked
    this.#queueTimeout = new QueueTimeout(settings.connectTimeoutMs, this.#sweepQueue)
  }

  get closed(): boolean {
    return this.#closed
  }

  // hot path
  dispatch(ex: Exchange): void {
    if (ex.req.upgrade !== null || this.settings.http1Client === 'undici') { this.#dispatchUndici(ex); return }
    if (this.#closed) { ex.fail(localError('SP_POOL_CLOSED', 'upstream pool closed')); return }
    const req = new H1Request(ex, this)
    this.#waiting++
    ex.setAttempt(req)
    const idle = this.#takeIdle()
    if (idle !== undefined && this.#queue.length === 0) { idle.start(req); return }
    if (idle !== undefined) this.#idle.push(idle)
    ex.queuedAt = this.#queueTimeout.queued()
    this.#queue.push(req)
    this.#pump()
  }

  /** The most recently used free connection still inside its keep-alive deadline (older ones close). */
  #takeIdle(): H1Connection | undefined {
    const idle = this.#idle
    if (idle.length === 0) return undefined
    const now = Date.now()
    for (;;) {
      const conn = idle.pop()
      if (conn === undefined || now - conn.idleSince < conn.keepAliveMs) return conn
      conn.close()
    }
  }

  /** Hands free connections to waiting requests; opens connections for the rest, up to the limit. */
  #pump(): void {
    const queue = this.#queue
    while (queue.length > 0) {
      const next = queue[0]
      if (next.cancelled) { queue.shift(); continue }
      const conn = this.#takeIdle()
      if (conn === undefined) break
      queue.shift()
      conn.start(next)
    }
    // The requests that want a connection: every one of ours still waiting is in
    // the queue and not cancelled (cancelled ones stay there until they reach its
    // front). Counted, not walked: a walk on every dispatch made each request cost
    // the queue's length while a long queue waited (upstream slow, connections at
    // their limit).
    const wanted = this.#waiting - this.#waitingUndici
    // #open never completes synchronously, so #connecting counts each one opened here.
    while (wanted > this.#connecting && this.#conns.size < this.settings.connectionsPerPool) this.#open()
  }

  #open(): void {
    const conn = new H1Connection(this)
    this.#conns.add(conn)
    this.#connecting++
    const parked = this.#parked
    this.#parked = null
    openConnection(conn, this.#connector, parked, (err) => {
      this.#connecting--
      // Closed while connecting (the pool closing with no request left for it): connectionGone did the rest.
      if (conn.gone) return
      if (err === null) {
        conn.idleSince = Date.now()
        this.connectionFree(conn)
        return
      }
      this.#conns.delete(conn)
      conn.close()
      // The connect failed: the oldest request still waiting fails with it
      // (the exchange may move to the next endpoint). The others keep waiting
      // while another connection may still serve them; with none open or
      // opening, they would only queue up behind the same failure: they fail too.
      const queue = this.#queue
      const all = this.#conns.size === 0
      while (queue.length > 0) {
        const r = queue.shift() as H1Request
        if (r.cancelled) continue
        r.fail(err)
        if (!all) break
      }
      this.#pump()
      this.#checkDrained()
    })
  }

  // ── H1Host ──

  connectionFree(conn: H1Connection): void {
    if (conn.gone) return
    // Queued requests are served even after close(): it waits for them.
    const queue = this.#queue
    while (queue.length > 0) {
      const r = queue.shift() as H1Request
      if (r.cancelled) continue
      conn.start(r)
      return
    }
    if (this.#closed) { conn.close(); return }
    this.#idle.push(conn)
    this.#sweep ??= setInterval(this.#sweepIdle, SWEEP_MS).unref()
  }

  connectionGone(conn: H1Connection): void {
    if (!this.#conns.delete(conn)) return
    const i = this.#idle.indexOf(conn)
    if (i !== -1) this.#idle.splice(i, 1)
    if (this.#queue.length > 0) this.#pump()
    this.#checkDrained()
  }

  left(): void {
    this.#waiting--
    if (this.#closed) this.#stopUnwanted()
  }

  /**
   * Closing, and no request of ours waits any more: connections still
   * connecting would only be closed when they connect (or time out). Stop them.
   */
  #stopUnwanted(): void {
    if (this.#waiting - this.#waitingUndici > 0 || this.#connecting === 0) return
    for (const conn of [...this.#conns]) if (conn.opening !== null) conn.close()
  }

  requeue(req: H1Request): void {
    this.#waiting++
    req.ex.queuedAt = this.#queueTimeout.queued()
    this.#queue.unshift(req)
    this.#pump()
  }

  /**
   * Fails the requests that waited the queue timeout for a connection (never
   * sent: another level may take them) and drops the cancelled ones, which
   * otherwise stay until they reach the front.
   */
  #sweepQueue = (): void => {
    const queue = this.#queue
    const timeout = this.#queueTimeout
    let expired: H1Request[] | null = null
    let kept = 0
    for (let i = 0; i < queue.length; i++) {
      const r = queue[i]
      if (r.cancelled) continue
      if (timeout.expired(r.ex.queuedAt)) (expired ??= []).push(r)
      else queue[kept++] = r
    }
    queue.length = kept
    if (kept === 0) timeout.stop()
    if (expired !== null) for (const r of expired) r.fail(timeout.error(r.ex.endpoint))
    this.#checkDrained()
  }

  /** Closes connections idle past their keep-alive deadline. */
  #sweepIdle = (): void => {
    const now = Date.now()
    for (const conn of [...this.#idle]) if (now - conn.idleSince >= conn.keepAliveMs) conn.close()
    if (this.#idle.length === 0 && this.#sweep !== null) {
      clearInterval(this.#sweep)
      this.#sweep = null
    }
  }

  pending(): number {
    return this.#waiting
  }

  stats(): PoolStats {
    let connected = 0
    for (const c of this.#conns) if (c.socket !== null) connected++
    const u = this.#undici?.stats
    return {
      connected: connected + (u?.connected ?? 0),
      pending: this.#waiting + (u?.pending ?? 0),
      running: this.#conns.size - this.#idle.length - this.#connecting + (u?.running ?? 0),
    }
  }

  #checkDrained(): void {
    if (this.#closed && this.#conns.size === 0 && this.#drained !== null && this.#queue.every((r) => r.cancelled)) {
      const done = this.#drained
      this.#drained = null
      done()
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#sweep !== null) { clearInterval(this.#sweep); this.#sweep = null }
    if (this.#queue.length === 0) this.#queueTimeout.stop()
    const parked = this.#parked
    this.#parked = null
    if (parked !== null) parked.destroy()
    // Requests still queued finish where they are (on connections yet to be made or freed): wait for them.
    for (const conn of [...this.#idle]) conn.close()
    this.#pump()
    this.#stopUnwanted()
    const drained = this.#conns.size === 0 && this.#queue.every((r) => r.cancelled) ? Promise.resolve() : new Promise<void>((resolve) => { this.#drained = resolve })
    await Promise.all([drained, this.#undici?.close()])
  }

  // ── undici: upgrades, and everything with `--http1-client undici` ──

  #dispatchUndici(ex: Exchange): void {
    if (this.#closed) { ex.fail(localError('SP_POOL_CLOSED', 'upstream pool closed')); return }
    const req = ex.req
    const idleMs = idleMsOf(ex, this.settings)
    const headersMs = req.timeouts.headersMs ?? idleMs
    const upgrade = req.upgrade
    // A request without a body keeps its own clocks (see UndiciAttempt); undici's are
    // off for it. With a body, undici's headers clock is kept: it also restarts on
    // upload progress, which the handler does not see.
    const own = req.body === null && upgrade === null
    const attempt = new UndiciAttempt(ex, this.#undiciHost, own ? headersMs : 0, own ? idleMs : 0)
    this.#waiting++
    this.#waitingUndici++
    ex.setAttempt(attempt)
    if (req.body !== null && upgrade === null) markReleasableChunks(req.body)
    this.#undiciPool().dispatch({
      path: req.path,
      method: req.method,
      headers: h1RequestHeaders(req.headers, req.authority),
      body: upgrade === null ? req.body : null,
      upgrade,
      headersTimeout: own ? 0 : headersMs,
      bodyTimeout: own ? 0 : idleMs,
    }, attempt)
  }

  #undiciPool(): UndiciPool {
    if (this.#undici !== null) return this.#undici
    const connector = this.#connector
    const settings = this.settings
    const endpoint = connector.endpoint
    // The origin only labels the pool: Host is always set from the request and
    // the connect function below ignores undici's connect parameters.
    const host = endpoint.kind === 'unix' ? 'localhost' : endpoint.host.includes(':') ? `[${endpoint.host}]` : endpoint.host
    const origin = `http://${host}${endpoint.kind === 'unix' ? '' : `:${endpoint.port}`}`
    const Pool = undiciPool()
    const pool = new Pool(origin, {
      connections: settings.connectionsPerPool,
      pipelining: 1,
      allowH2: false,
      keepAliveTimeout: settings.keepAliveTimeoutMs,
      keepAliveMaxTimeout: settings.keepAliveTimeoutMs,
      // The last request a connection carries goes with Connection: close.
      ...(settings.maxRequestsPerConnection === null ? {} : { maxRequestsPerClient: settings.maxRequestsPerConnection }),
      connect: (_options, callback) => {
        const parked = this.#parked
        this.#parked = null
        connectH1(connector, parked, (err, sock) => {
          if (err === null && sock !== null) callback(null, sock)
          else callback(err ?? localError('ECONNREFUSED', 'no socket'), null)
        })
      },
    })
    // Connection-level errors reach the requests through their handlers.
    pool.on('connectionError', noop)
    this.#undici = pool
    return pool
  }
}

function noop(): void {}

type Controller = Dispatcher.DispatchController

/**
 * One request on the undici pool (`--http1-client undici`, and upgrades): handler
 * for undici, Attempt for the exchange.
 *
 * Clocks: a bodiless request runs on an ExchangeClock (clock.ts) rather than
 * undici's parser timer, whose timer objects outlived two minor GCs under load;
 * either clock firing aborts the exchange, as undici's did.
 */
class UndiciAttempt implements Dispatcher.DispatchHandler, Attempt, ClockOwner {
  readonly #ex: Exchange
  /** Counted in the pool's pending() until it starts, fails or is cancelled. */
  #pool: { left(): void } | null
  #controller: Controller | null = null
  #body: ResponseBody | null = null
  #cancelled: Error | null = null
  /** Own clocks (ms); 0 when undici keeps them (requests with a body, upgrades). */
  readonly #headersMs: number
  readonly #idleMs: number
  readonly #clock: ExchangeClock = new ExchangeClock(this)

  constructor(ex: Exchange, pool: { left(): void }, headersMs: number, idleMs: number) {
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

  timedOut(afterHead: boolean): void {
    const controller = this.#controller
    if (controller === null || controller.aborted) return
    controller.abort(afterHead
      ? localError('SP_IDLE_TIMEOUT', 'upstream exchange idle for too long')
      : localError('SP_HEADERS_TIMEOUT', 'upstream response headers did not arrive in time'))
  }

  onRequestStart(controller: Controller): void {
    this.#stopWaiting()
    this.#controller = controller
    // From here on the body may be read: never retried on another endpoint.
    this.#ex.sent = true
    if (this.#cancelled !== null) { controller.abort(this.#cancelled); return }
    this.#clock.start(this.#headersMs, this.#idleMs)
  }

  onResponseStart(controller: Controller, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200) { this.#ex.informational(statusCode, headers); return }
    // What sallyport's own parser refuses (h1-parser.ts) and undici would pass on:
    // a transfer coding the client would get undecoded.
    const te = headers['transfer-encoding']
    if (te !== undefined && !chunkedOnly(te)) { controller.abort(new H1ParseError('SP_H1_BAD_FRAMING', OTHER_CODING)); return }
    this.#clock.responded()
    this.#body = this.#ex.respond(statusCode, responseHeaders(headers, null), this, 'h1')
    if (this.#body === null) { this.#clock.stop(); controller.abort(new Error('answered')) }
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    this.#clock.touch()
    const body = this.#body
    if (body !== null && !body.push(chunk)) controller.pause()
  }

  onResponseEnd(_controller: Controller, trailers: IncomingHttpHeaders): void {
    this.#clock.stop()
    const body = this.#body
    if (body === null) return
    if (trailers !== undefined && trailers !== null) {
      for (const _ in trailers) { body.trailers = trailerFields(trailers); break }
    }
    body.push(null)
  }

  onResponseError(_controller: Controller, err: Error): void {
    this.#clock.stop()
    this.#stopWaiting()
    if (this.#body === null) this.#ex.fail(err)
    else this.#ex.failBody(err)
  }

  onRequestUpgrade(_controller: Controller, statusCode: number, headers: IncomingHttpHeaders, socket: Duplex): void {
    this.#ex.tunnel(statusCode, responseHeaders(headers, 'upgrade'), socket)
  }

  cancel(reason: Error): void {
    if (this.#cancelled !== null) return
    this.#clock.stop()
    this.#stopWaiting() // still queued in undici, but nobody waits for it any more
    this.#cancelled = reason
    const controller = this.#controller
    if (controller !== null && !controller.aborted) controller.abort(reason)
  }

  resume(): void {
    this.#clock.touch() // as undici's parser does on resume
    const controller = this.#controller
    if (controller !== null) controller.resume()
  }
}
