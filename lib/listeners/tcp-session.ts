// One client connection on a TCP or TLS listener, from route to close: choose
// a backend by weight, dial it (the next endpoint on connect failure, then the
// next backend), splice, and account for it once — metrics and one access-log
// line — however it ends. A client that resets while its backend is still
// being dialled stops the dial (and frees its circuit-breaker slot) at once.
//
// Backend choice: smooth weighted round robin over the route's backendRefs
// (state per L4Route object, so a new table starts fresh); weight 0 gets no
// connections. Gateway API (TCPRoute/TLSRoute backendRefs): a connection
// routed to an invalid backendRef is rejected, i.e. closed. When every
// endpoint of the chosen backend fails to connect, the other backends are
// tried in priority (failover level) order, each once.
//
// Connection limits: the listener's (`maxConnections`, enforced at accept) and
// the backend's BackendTrafficPolicy circuitBreaker.maxConnections (open L4
// connections to that cluster from this process); past either, the
// connection is closed at once.

import type { Socket } from 'node:net'
import type { Cluster, L4Route, WeightedCluster } from '../compile/table.ts'
import { ErrorCode, type SallyportError } from '../errors.ts'
import type { Logger } from '../observe/log.ts'
import { l4ActiveConnections, recordL4Connection, type L4Code, type L4Reason } from '../observe/l4-metrics.ts'
import { Splice, type SpliceResult } from '../upstream/l4-splice.ts'
import { resetSocket } from '../upstream/reset-socket.ts'
import type { L4Connection, PendingDial, Upstreams } from '../upstream/types.ts'
import { tracer } from '../observe/tracing.ts'

/** Everything a session needs besides the socket; one per listener and table. */
export interface SessionEnv {
  readonly upstreams: Upstreams
  readonly clusters: ReadonlyMap<string, Cluster>
  readonly idleTimeoutMs: number
}

/** Open L4 connections per cluster id, for circuitBreaker.maxConnections. */
const openByCluster = new Map<string, number>()

interface RoutePicker {
  readonly weights: Float64Array
  readonly current: Float64Array
  readonly total: number
}

const pickers = new WeakMap<L4Route, RoutePicker>()

/** Index into route.backends by smooth weighted round robin; -1 when no weight. */
export function pickBackend(route: L4Route): number {
  let p = pickers.get(route)
  if (p === undefined) {
    const weights = new Float64Array(route.backends.length)
    let total = 0
    // Only the best failover level takes new connections; the rest are fallbacks.
    let level = Infinity
    for (const b of route.backends) if (b.weight > 0 && b.priority < level) level = b.priority
    route.backends.forEach((b, i) => {
      weights[i] = b.priority === level ? Math.max(0, b.weight) : 0
      total += weights[i]
    })
    p = { weights, current: new Float64Array(route.backends.length), total }
    pickers.set(route, p)
  }
  if (p.total === 0) return -1
  let best = -1
  for (let i = 0; i < p.weights.length; i++) {
    if (p.weights[i] === 0) continue
    p.current[i] += p.weights[i]
    if (best === -1 || p.current[i] > p.current[best]) best = i
  }
  p.current[best] -= p.total
  return best
}

/** Failover order after `first`: the others with weight, by priority then position. */
function fallbacks(route: L4Route, first: number): number[] {
  const order: number[] = []
  route.backends.forEach((b, i) => { if (i !== first && b.weight > 0) order.push(i) })
  return order.sort((a, b) => route.backends[a].priority - route.backends[b].priority || a - b)
}

export interface SessionLabels {
  readonly gateway: string
  readonly listener: string
  readonly protocol: 'tcp' | 'tls'
  readonly mode: 'Passthrough' | 'Terminate' | null
  readonly client: string
  /** `access` logger, or null when the access log is off. */
  readonly accessLog: Logger | null
}

export class L4Session {
  #labels: SessionLabels
  readonly #started = performance.now()
  readonly #client: Socket
  #route: L4Route | null = null
  #sni: string | null = null
  #backend = ''
  #endpoint = ''
  #splice: Splice | null = null
  #upstream: Socket | null = null
  #cluster: string | null = null
  /** The dial under way, cancelled when the client leaves first. */
  #dialing: PendingDial | null = null
  #finished = false
  /** The socket carrying the client's bytes (the TLSSocket once terminated). */
  #stream: Socket

  constructor(client: Socket, labels: SessionLabels) {
    this.#client = client
    this.#stream = client
    this.#labels = labels
    l4ActiveConnections.inc({ gateway: labels.gateway, listener: labels.listener })
    client.once('close', this.#onEarlyClose)
  }

  set sni(value: string | null) { this.#sni = value }

  /**
   * The listener the client's server name selects, once it is known (several
   * listeners may share a TLS port, told apart by hostname): the connection is
   * counted and logged under it from here on.
   */
  listenedOn(gateway: string, listener: string): void {
    const l = this.#labels
    if (this.#finished || (l.gateway === gateway && l.listener === listener)) return
    l4ActiveConnections.dec({ gateway: l.gateway, listener: l.listener })
    l4ActiveConnections.inc({ gateway, listener })
    this.#labels = { ...l, gateway, listener }
  }

  /** The TLSSocket that now owns the accepted socket (Terminate): closing goes through it. */
  set stream(value: Socket) { this.#stream = value }

  /** Route the connection (the stream may be a TLSSocket over the accepted socket). */
  start(env: SessionEnv, route: L4Route | null, stream: Socket, originateTls: boolean, connectMs: number | null): void {
    if (this.#finished) return
    this.#route = route
    this.#stream = stream
    if (route === null) return this.fail('no_route')
    const first = pickBackend(route)
    if (first === -1) return this.fail('no_backend')
    // Read the client while its backend is dialled (a paused socket does not see
    // a reset): the bytes wait in the stream's buffer, up to its highWaterMark,
    // and a FIN only marks the end, for the splice to pass on after the bytes.
    stream.read(0)
    this.#dial(env, route, [first, ...fallbacks(route, first)], 0, originateTls, connectMs ?? route.connectMs, null)
  }

  /** Ends a connection that never reached an upstream. */
  /** Whether the connection was accounted for (failed, cut or spliced and closed). */
  get finished(): boolean { return this.#finished }

  fail(reason: L4Reason): void {
    if (this.#finished) return
    // A TLSSocket owns the accepted socket's handle: destroy it, never the socket under it.
    this.#stream.destroy()
    this.#finish(reason, this.#client.bytesRead, 0)
  }

  /** Listener shutdown past its grace period: the gateway's cut, a reset (l4-splice.ts), logged at once. */
  abort(): void {
    if (this.#splice !== null) return this.#splice.abort('shutdown')
    if (this.#finished) return
    resetSocket(this.#stream)
    this.#finish('shutdown', this.#client.bytesRead, 0)
    this.#dialing?.cancel() // after the finish: its callback then sees the session over
  }

  #dial(env: SessionEnv, route: L4Route, order: readonly number[], at: number, originateTls: boolean, connectMs: number | null, lastError: L4Reason | null): void {
    if (this.#finished) return
    if (at >= order.length) return this.fail(lastError ?? 'connect_failed')
    const ref: WeightedCluster = route.backends[order[at]]
    const next = (reason: L4Reason): void => this.#dial(env, route, order, at + 1, originateTls, connectMs, lastError ?? reason)
    if (ref.denied !== undefined) return at === 0 ? this.fail('forbidden') : next('forbidden')
    const cluster = ref.cluster === null ? undefined : env.clusters.get(ref.cluster)
    // Gateway API: a connection routed to an invalid backendRef is rejected (no failover).
    if (cluster === undefined) return at === 0 ? this.fail('backend_invalid') : next('backend_invalid')
    this.#backend = cluster.id
    const max = cluster.circuitBreaker?.maxConnections ?? null
    const open = openByCluster.get(cluster.id) ?? 0
    if (max !== null && open >= max) return next('overloaded')
    openByCluster.set(cluster.id, open + 1)
    this.#cluster = cluster.id
    this.#dialing = env.upstreams.dialL4({ cluster, originateTls, connectMs }, (err, conn) => {
      this.#dialing = null
      if (err !== null || conn === null) {
        this.#release()
        const reason = reasonOf(err)
        // TLS and policy failures are answers about this backend; connect failures move on.
        if (reason === 'connect_failed') return next(reason)
        return this.fail(reason)
      }
      this.#connected(env, conn)
    })
  }

  #connected(env: SessionEnv, conn: L4Connection): void {
    if (this.#finished || this.#stream.destroyed) {
      conn.socket.destroy()
      this.#release()
      if (!this.#finished) this.#finish('client_reset', this.#client.bytesRead, 0)
      return
    }
    this.#client.removeListener('close', this.#onEarlyClose)
    this.#endpoint = conn.endpoint
    this.#upstream = conn.socket
    // BackendTrafficPolicy timeout.idle on the route wins over the listener default.
    const idleMs = this.#route?.idleMs ?? env.idleTimeoutMs
    this.#splice = new Splice(this.#stream, conn.socket, idleMs, this.#onSpliced)
  }

  #onSpliced = (r: SpliceResult): void => {
    this.#release()
    this.#finish(r.end, r.bytesIn, r.bytesOut)
  }

  #onEarlyClose = (): void => {
    // The client left before an upstream was connected (or the hello was read):
    // the dial stops (its callback then releases the breaker slot and sees the session finished).
    if (this.#splice === null && !this.#finished) this.#finish('client_reset', this.#client.bytesRead, this.#client.bytesWritten)
    this.#dialing?.cancel()
  }

  #release(): void {
    const id = this.#cluster
    if (id === null) return
    this.#cluster = null
    const n = (openByCluster.get(id) ?? 1) - 1
    if (n <= 0) openByCluster.delete(id)
    else openByCluster.set(id, n)
  }

  #finish(code: L4Code, bytesIn: number, bytesOut: number): void {
    if (this.#finished) return
    this.#finished = true
    const l = this.#labels
    const seconds = (performance.now() - this.#started) / 1000
    const route = this.#route === null ? '' : `${this.#route.route.namespace}/${this.#route.route.name}`
    l4ActiveConnections.dec({ gateway: l.gateway, listener: l.listener })
    recordL4Connection({ gateway: l.gateway, listener: l.listener, route, backend: this.#backend, code, bytesIn, bytesOut, seconds })
    // Issue 10: one span per connection (a root: L4 carries no trace context).
    if (tracer !== null) {
      tracer.recordConnection({
        startedAt: this.#started, protocol: l.protocol, gateway: l.gateway, listener: l.listener, port: this.#client.localPort ?? 0,
        client: l.client, sni: this.#sni, route, backend: this.#backend, endpoint: this.#endpoint, bytesIn, bytesOut, code,
      })
    }
    const log = l.accessLog
    if (log !== null) {
      log.info({
        protocol: l.protocol, mode: l.mode, gateway: l.gateway, listener: l.listener, client: l.client,
        sni: this.#sni, route, backend: this.#backend, upstream: this.#endpoint,
        bytesIn, bytesOut, durationMs: Math.round(seconds * 1000), reason: code,
      }, 'connection')
    }
  }
}

function reasonOf(err: SallyportError | null): L4Reason {
  switch (err?.code) {
    case ErrorCode.UPSTREAM_TLS: return 'tls_failed'
    case ErrorCode.FORBIDDEN: return 'forbidden'
    default: return 'connect_failed'
  }
}
