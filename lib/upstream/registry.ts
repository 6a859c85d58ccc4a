// The pool registry: outlives route tables (DESIGN.md "Upstream pools"). Pools
// are keyed by what makes connections interchangeable — endpoint, cluster
// protocol, TLS identity hash — so a table swap that keeps a backend keeps its
// warm connections, and a rotated certificate gets fresh pools.
//
// Per request: pick an endpoint (smooth weighted round robin per Cluster
// object), hand the Exchange to that endpoint's pool. A connect failure of a
// request that has not started sending moves to the next endpoint, each
// endpoint at most once; anything later is the resilience layer's business.

import { ErrorCode, SallyportError } from '../errors.ts'
import type { Cluster, Endpoint, RouteTable } from '../compile/table.ts'
import { logger } from '../observe/log.ts'
import { addPoolStatsSource, type PoolConnectionSample } from '../observe/upstream-metrics.ts'
import type { ResilienceView, UpstreamHandler, UpstreamRequest, Upstreams } from './types.ts'
import { Resilience, type ClusterRuntime } from './resilience.ts'
import { poolSettingsFor, poolVariant } from './pool-limits.ts'
import { Connector } from './connect.ts'
import { Exchange, type Redispatcher } from './exchange.ts'
import { AlpnPool } from './alpn-pool.ts'
import { H1Pool } from './h1-pool.ts'
import { H2Pool } from './h2-pool.ts'
import type { PoolSettings, UpstreamPool } from './pool.ts'
import { createResolver, type ResolveFn, type Resolver } from './resolve.ts'
import { buildClientTls } from './tls.ts'

export interface UpstreamOptions {
  /** TCP+TLS connect timeout; default 10 s. */
  readonly connectTimeoutMs?: number
  /** Max silence of an exchange when the route sets none; default 5 min. */
  readonly idleTimeoutMs?: number
  /** Idle pooled connection / HTTP/2 session lifetime; default 60 s. */
  readonly keepAliveTimeoutMs?: number
  /** HTTP/1.1 connections per pool; default 128. */
  readonly connectionsPerPool?: number
  /** Hostname → addresses; default node:dns lookup (all). */
  readonly resolve?: (hostname: string) => Promise<string[]>
}

export function createUpstreams(options: UpstreamOptions = {}): Upstreams {
  return new UpstreamRegistry(options)
}

const DEFAULT_ALPN: readonly string[] = ['h2', 'http/1.1']

const log = logger('upstream')

interface PoolEntry {
  readonly key: string
  readonly pool: UpstreamPool
  /** Cluster id that created the pool (several clusters may share one endpoint pool). */
  readonly cluster: string
}

/** Per Cluster object (i.e. per table): balancer state and resolved pools by endpoint index. */
interface ClusterState {
  /** Endpoint choice, health and circuit breaking of these endpoints (issue 6). */
  readonly balancer: ClusterRuntime
  readonly keys: readonly string[]
  readonly labels: readonly string[]
  readonly pools: Array<UpstreamPool | null>
}

function poolKey(cluster: Cluster, endpoint: Endpoint): string {
  const where = endpoint.kind === 'unix' ? `unix:${endpoint.host}` : `${endpoint.host}:${endpoint.port}`
  return `${where}|${cluster.protocol}|${cluster.tls?.identityHash ?? 'plain'}${poolVariant(cluster)}`
}

function endpointLabel(endpoint: Endpoint): string {
  if (endpoint.kind === 'unix') return `unix:${endpoint.host}`
  return endpoint.host.includes(':') ? `[${endpoint.host}]:${endpoint.port}` : `${endpoint.host}:${endpoint.port}`
}

class UpstreamRegistry implements Upstreams, Redispatcher {
  readonly #settings: PoolSettings
  readonly #resolver: Resolver
  readonly #pools = new Map<string, PoolEntry>()
  readonly #clusters = new WeakMap<Cluster, ClusterState>()
  readonly #unregister: () => void
  readonly #resilience: Resilience
  #closed = false

  constructor(options: UpstreamOptions) {
    this.#settings = {
      connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
      idleTimeoutMs: options.idleTimeoutMs ?? 300_000,
      keepAliveTimeoutMs: options.keepAliveTimeoutMs ?? 60_000,
      connectionsPerPool: options.connectionsPerPool ?? 128,
    }
    this.#resolver = createResolver(options.resolve as ResolveFn | undefined)
    this.#unregister = addPoolStatsSource(() => this.#samples())
    this.#resilience = new Resilience(this.#resolver)
  }

  // hot path
  forward(req: UpstreamRequest, handler: UpstreamHandler): void {
    const cluster = req.cluster
    if (this.#closed) return handler.onError(new SallyportError(ErrorCode.SHUTTING_DOWN, 'upstreams are closed'))
    if (req.signal.aborted) return handler.onError(new SallyportError(ErrorCode.CLIENT_ABORTED, 'request aborted before forwarding'))
    if (cluster.endpoints.length === 0) {
      return handler.onError(new SallyportError(ErrorCode.NO_HEALTHY_UPSTREAM, `no endpoints for ${cluster.id}`))
    }
    if (cluster.protocol === 'TCP' || cluster.protocol === 'TLS') {
      return handler.onError(new SallyportError(ErrorCode.UPSTREAM_PROTOCOL, `${cluster.id} is an L4 (${cluster.protocol}) backend`))
    }
    const state = this.#stateOf(cluster)
    this.#start(req, handler, state)
  }

  get resilience(): ResilienceView {
    return this.#resilience
  }

  // hot path
  /** Circuit breaker admission, then the first attempt to the balancer's endpoint. */
  #start(req: UpstreamRequest, handler: UpstreamHandler, state: ClusterState): void {
    const rt = state.balancer
    const refused = rt.admit()
    if (refused !== null) return handler.onError(refused)
    const index = rt.pick(req)
    if (index === null) return handler.onError(new SallyportError(ErrorCode.NO_HEALTHY_UPSTREAM, `no endpoints for ${req.cluster.id}`))
    const ex = new Exchange(req, handler, this)
    ex.guard = rt
    rt.started(ex)
    this.#send(ex, state, index)
  }

  redispatch(ex: Exchange): boolean {
    const endpoints = ex.cluster.endpoints
    if (this.#closed || ex.aborted || ex.tried >= endpoints.length) return false
    const state = this.#stateOf(ex.cluster)
    const next = (ex.endpointIndex + 1) % endpoints.length
    // Out of the failing pool's callback before starting the next attempt.
    queueMicrotask(() => {
      if (ex.answered) return
      if (this.#closed) ex.fail(new SallyportError(ErrorCode.SHUTTING_DOWN, 'upstreams are closed'))
      else this.#send(ex, state, next)
    })
    return true
  }

  retain(table: RouteTable): void {
    this.#resilience.retain(table)
    const wanted = new Set<string>()
    for (const cluster of table.clusters.values()) {
      for (const endpoint of cluster.endpoints) wanted.add(poolKey(cluster, endpoint))
      // DESIGN.md safety defaults: disabled verification shows in the log at every load.
      if (cluster.tls !== null && cluster.tls.insecureSkipVerify) log.warn({ backend: cluster.id }, 'upstream TLS verification disabled by configuration (insecureSkipVerify)')
    }
    for (const [key, entry] of this.#pools) {
      if (wanted.has(key)) continue
      this.#pools.delete(key)
      log.debug({ key, backend: entry.cluster }, 'upstream pool retired')
      entry.pool.close().catch((err: unknown) => log.warn({ key, err }, 'upstream pool close failed'))
    }
  }

  stats(): ReadonlyArray<{ readonly key: string; readonly cluster: string; readonly protocol: string; readonly connected: number; readonly pending: number; readonly running: number }> {
    const out = []
    for (const entry of this.#pools.values()) {
      const s = entry.pool.stats()
      out.push({ key: entry.key, cluster: entry.cluster, protocol: entry.pool.protocol, connected: s.connected, pending: s.pending, running: s.running })
    }
    return out
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#unregister()
    this.#resilience.close()
    const entries = [...this.#pools.values()]
    this.#pools.clear()
    await Promise.all(entries.map((e) => e.pool.close()))
  }

  *#samples(): Iterable<PoolConnectionSample> {
    for (const entry of this.#pools.values()) {
      yield { backend: entry.cluster, protocol: entry.pool.protocol, connected: entry.pool.stats().connected }
    }
  }

  #stateOf(cluster: Cluster): ClusterState {
    let state = this.#clusters.get(cluster)
    if (state === undefined) {
      const pools: Array<UpstreamPool | null> = cluster.endpoints.map(() => null)
      state = {
        balancer: this.#resilience.runtime(cluster, cluster.endpoints, pools),
        keys: cluster.endpoints.map((e) => poolKey(cluster, e)),
        labels: cluster.endpoints.map(endpointLabel),
        pools,
      }
      this.#clusters.set(cluster, state)
    }
    return state
  }

  // hot path
  #send(ex: Exchange, state: ClusterState, index: number): void {
    state.balancer.entering(ex, index)
    ex.endpointIndex = index
    ex.endpoint = state.labels[index]
    ex.tried++
    let pool = state.pools[index]
    if (pool === null || pool.closed) {
      pool = this.#poolFor(ex.cluster, index, state.keys[index])
      state.pools[index] = pool
    }
    pool.dispatch(ex)
  }

  #poolFor(cluster: Cluster, index: number, key: string): UpstreamPool {
    const existing = this.#pools.get(key)
    if (existing !== undefined && !existing.pool.closed) return existing.pool
    const pool = this.#createPool(cluster, cluster.endpoints[index])
    this.#pools.set(key, { key, pool, cluster: cluster.id })
    log.debug({ key, backend: cluster.id, protocol: pool.protocol }, 'upstream pool created')
    return pool
  }

  #createPool(cluster: Cluster, endpoint: Endpoint): UpstreamPool {
    const tls = cluster.tls
    // Per-cluster connect timeout and connection cap (BackendTrafficPolicy; the pool key carries them).
    const settings = poolSettingsFor(cluster, this.#settings)
    // h2c is cleartext by definition; every other protocol originates TLS when the cluster has it.
    const clientTls = tls === null || cluster.protocol === 'H2C' ? null : buildClientTls(tls)
    if (tls !== null && tls.insecureSkipVerify) log.warn({ backend: cluster.id }, 'upstream TLS verification disabled by configuration')
    const connector = new Connector({ endpoint, tls: clientTls, resolver: this.#resolver, timeoutMs: settings.connectTimeoutMs, backend: cluster.id })
    switch (cluster.protocol) {
      case 'HTTP2':
      case 'H2C':
        return new H2Pool(connector, settings)
      case 'HTTP11':
        return new H1Pool(connector, settings)
      default:
        // HTTP and MCP: over TLS the upstream picks by ALPN; in cleartext HTTP/1.1.
        if (clientTls === null) return new H1Pool(connector, settings)
        return new AlpnPool(connector, settings, tls !== null && tls.alpn.length > 0 ? tls.alpn : DEFAULT_ALPN)
    }
  }
}
