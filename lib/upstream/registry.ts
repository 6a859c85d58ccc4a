// The pool registry: outlives route tables (DESIGN.md "Upstream pools"). Pools
// are keyed by what makes connections interchangeable — endpoint, cluster
// protocol, TLS identity hash — so a table swap that keeps a backend keeps its
// warm connections, and a rotated certificate gets fresh pools.
//
// Per request: pick an endpoint (smooth weighted round robin per Cluster
// object; for MCP clusters, the endpoint a tagged session id names:
// mcp-session.ts), hand the Exchange to that endpoint's pool. A connect failure of a
// request that has not started sending moves to the next endpoint, each
// endpoint at most once; anything later is the resilience layer's business.

import { isIP } from 'node:net'
import { performance } from 'node:perf_hooks'
import { ErrorCode, SallyportError } from '../errors.ts'
import type { Cluster, Endpoint, RouteTable } from '../compile/table.ts'
import { logger } from '../observe/log.ts'
import { addPoolStatsSource, upstreamConnectErrors, type PoolConnectionSample } from '../observe/upstream-metrics.ts'
import type { ResilienceView, UpstreamHandler, UpstreamRequest, Upstreams } from './types.ts'
import { Resilience, type ClusterRuntime } from './resilience.ts'
import { DEFAULT_CIRCUIT_LIMIT } from './circuit-breaker.ts'
import { poolSettingsFor, poolVariant } from './pool-limits.ts'
import { Connector } from './connect.ts'
import { proxyKey } from './proxy-connect.ts'
import { Exchange, type Redispatcher } from './exchange.ts'
import { AlpnPool } from './alpn-pool.ts'
import { H1Pool } from './h1-pool.ts'
import { H2Pool } from './h2-pool.ts'
import type { Http1Client, PoolSettings, UpstreamPool } from './pool.ts'
import { DestinationResolver, type DnsSettings, type Resolution, type ResolveFn, type Resolver } from './resolve.ts'
import type { GuardOptions } from './destination-guard.ts'
import { buildClientTls, endpointServername } from './tls.ts'
import { L4Dialer } from './l4-dial.ts'
import { SESSION_HEADER, TAG_LENGTH, endpointsByTag, isTagged } from './mcp-session.ts'
import type { L4DialCallback, L4DialRequest, PendingDial } from './types.ts'

export interface UpstreamOptions {
  /** TCP+TLS connect timeout; default 10 s. */
  readonly connectTimeoutMs?: number
  /** Max silence of an exchange when the route sets none; default 5 min. */
  readonly idleTimeoutMs?: number
  /** Idle pooled connection / HTTP/2 session lifetime; default 60 s. */
  readonly keepAliveTimeoutMs?: number
  /** HTTP/1.1 connections (HTTP/2 sessions) per pool, i.e. per endpoint; default 1024 (Envoy's max_connections). */
  readonly connectionsPerPool?: number
  /** Hostname → addresses, replacing DNS queries (tests, embedding); default: DNS per `dns`. */
  readonly resolve?: (hostname: string) => Promise<string[]>
  /** DNS servers, TTL clamps, stale window (issue 5); default: the system's nameservers, 5 s / 300 s / 60 s. */
  readonly dns?: DnsSettings
  /** Confused-deputy guard allowances and cluster ranges (issue 5); the guard is always on. */
  readonly guard?: GuardOptions
  /** HTTP/1.1 client for ordinary requests (`--http1-client`); default sallyport's own. */
  readonly http1Client?: Http1Client
}

export function createUpstreams(options: UpstreamOptions = {}): Upstreams {
  return new UpstreamRegistry(options)
}

const DEFAULT_ALPN: readonly string[] = ['h2', 'http/1.1']

/** At most one background lookup per cluster within this time (#refresh). */
const REFRESH_FLOOR_MS = 1000

const log = logger('upstream')

interface PoolEntry {
  readonly key: string
  readonly pool: UpstreamPool
  /**
   * Cluster id the pool's metrics name: the one that created it (several
   * clusters may share one endpoint pool) until it leaves the configuration,
   * then one of the clusters still using the pool.
   */
  cluster: string
  readonly connector: Connector
}

/** Per Cluster object (i.e. per table): balancer state and resolved pools by endpoint index. */
interface ClusterState {
  /** The endpoints balanced over: the cluster's, with hostnames replaced by their usable addresses. */
  readonly endpoints: readonly Endpoint[]
  /** Set when no endpoint is usable (every name failed or was refused): every request gets it. */
  readonly error: SallyportError | null
  /** Endpoint choice, health and circuit breaking of these endpoints (issue 6). */
  readonly balancer: ClusterRuntime
  readonly keys: readonly string[]
  readonly labels: readonly string[]
  readonly pools: Array<UpstreamPool | null>
  /** MCP clusters: endpoint index by session tag (mcp-session.ts), built at the first tagged request. */
  sessionTags: ReadonlyMap<string, number> | null
}

/**
 * Clusters with hostname endpoints (issue 5): every usable address of a name is
 * an endpoint with its own pool. The state is rebuilt when a name's Resolution
 * changes (new address → new pool; pools no state uses any more drain).
 */
interface DynamicCluster {
  /** Resolution per cluster.endpoints index (null for non-hostname endpoints) the state was built from. */
  resolutions: ReadonlyArray<Resolution | null>
  state: ClusterState
}

function hasHostnames(cluster: Cluster): boolean {
  // Issue 9: through an upstream proxy, names are the proxy's to resolve (connect.ts);
  // an address in a name's place (an ExternalName Service's) is judged by the guard all the same.
  for (const e of cluster.endpoints) if (resolvedHere(cluster, e)) return true
  return false
}

/** A hostname endpoint resolved and guarded here (not left to the upstream proxy). */
function resolvedHere(cluster: Cluster, e: Endpoint): boolean {
  return e.kind === 'hostname' && (cluster.upstreamProxy == null || isIP(e.host) !== 0)
}

function clusterState(cluster: Cluster, endpoints: readonly Endpoint[], error: SallyportError | null, resilience: Resilience): ClusterState {
  const pools: Array<UpstreamPool | null> = endpoints.map(() => null)
  return {
    endpoints, error,
    balancer: resilience.runtime(cluster, endpoints, pools),
    keys: endpoints.map((e) => poolKey(cluster, e)),
    labels: endpoints.map(endpointLabel),
    pools,
    sessionTags: null,
  }
}

function poolKey(cluster: Cluster, endpoint: Endpoint): string {
  const where = endpoint.kind === 'unix' ? `unix:${endpoint.host}` : `${endpoint.host}:${endpoint.port}`
  // An endpoint's own TLS server name (several fqdn endpoints, no sni): two names on one
  // address and port get two pools, so a connection made for one never serves the other.
  const name = endpointServername(cluster.tls, endpoint)
  return `${where}|${cluster.protocol}|${cluster.tls?.identityHash ?? 'plain'}${name === null ? '' : `|sni=${name}`}${poolVariant(cluster)}${proxyKey(cluster)}`
}

function endpointLabel(endpoint: Endpoint): string {
  if (endpoint.kind === 'unix') return `unix:${endpoint.host}`
  return endpoint.host.includes(':') ? `[${endpoint.host}]:${endpoint.port}` : `${endpoint.host}:${endpoint.port}`
}

class UpstreamRegistry implements Upstreams, Redispatcher {
  readonly #settings: PoolSettings
  readonly #resolver: Resolver
  readonly #destinations: DestinationResolver
  readonly #pools = new Map<string, PoolEntry>()
  readonly #clusters = new WeakMap<Cluster, ClusterState>()
  readonly #dynamic = new Map<Cluster, DynamicCluster>()
  /** The last retained table: its static endpoints keep their pools. */
  #table: RouteTable | null = null
  readonly #unregister: () => void
  readonly #l4: L4Dialer
  readonly #resilience: Resilience
  /**
   * Hostname clusters of the current table whose names gave no usable address:
   * re-resolved every #retryMs until they give one (Envoy's STRICT_DNS
   * clusters keep resolving on their refresh timer whatever traffic does).
   */
  readonly #unresolved = new Set<Cluster>()
  /** Clusters whose names are being resolved by #refresh. */
  readonly #refreshing = new WeakSet<Cluster>()
  /** When #refresh last started a lookup for a cluster (performance.now()). */
  readonly #refreshedAt = new WeakMap<Cluster, number>()
  readonly #retryMs: number
  #retryTimer: NodeJS.Timeout | null = null
  #closed = false

  constructor(options: UpstreamOptions) {
    this.#settings = {
      connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
      idleTimeoutMs: options.idleTimeoutMs ?? 300_000,
      keepAliveTimeoutMs: options.keepAliveTimeoutMs ?? 60_000,
      connectionsPerPool: options.connectionsPerPool ?? DEFAULT_CIRCUIT_LIMIT,
      maxRequestsPerConnection: null,
      http1Client: options.http1Client ?? 'sallyport',
    }
    this.#destinations = new DestinationResolver({ dns: options.dns, guard: options.guard, resolve: options.resolve as ResolveFn | undefined })
    this.#resolver = this.#destinations.connectorResolver()
    // L4 (issue 8): connectors like the pools', hostnames resolved and guarded like theirs.
    this.#l4 = new L4Dialer({
      connector: (cluster, endpoint, tls, timeoutMs) => new Connector({ endpoint, tls, resolver: this.#resolver, timeoutMs, backend: cluster.id, proxy: cluster.upstreamProxy ?? null }),
      resolve: (cluster, hostname) => this.#destinations.resolve(cluster, hostname),
      refreshed: (cluster, hostname) => this.#destinations.refreshed(cluster, hostname),
      connectTimeoutMs: this.#settings.connectTimeoutMs,
    })
    this.#unregister = addPoolStatsSource(() => this.#samples())
    // A name with no usable address is asked again about as often as the DNS cache keeps a negative answer.
    this.#retryMs = Math.max(1000, options.dns?.minTtlMs ?? 5000)
    // Health checks resolve hostnames through the destination guard, as requests do.
    this.#resilience = new Resilience((cluster) => this.#destinations.guardedResolver(cluster), (cluster) => this.#refresh(cluster))
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
    if (hasHostnames(cluster)) {
      const resolved = this.#resolvedState(cluster)
      if (resolved === null) return this.#resolveThenForward(req, handler)
      if (resolved.error !== null) return handler.onError(resolved.error)
      return this.#start(req, handler, resolved)
    }
    const state = this.#stateOf(cluster)
    this.#start(req, handler, state)
  }

  get resilience(): ResilienceView {
    return this.#resilience
  }

  /**
   * Whether an endpoint of `cluster` (an MCP Backend) issued the sessions tagged
   * `tag` (mcp-session.ts): a rule splitting traffic between MCP Backends sends
   * a session back to the Backend whose endpoint has it. A cluster whose names
   * are not resolved yet has issued none here.
   */
  issuedSession(cluster: Cluster, tag: string): boolean {
    const state = hasHostnames(cluster) ? this.#resolvedState(cluster) : this.#stateOf(cluster)
    if (state === null) return false
    const tags = state.sessionTags ?? (state.sessionTags = endpointsByTag(cluster.id, state.labels))
    return tags.has(tag)
  }

  // hot path
  /** Circuit breaker admission, then the first attempt to the balancer's endpoint. */
  #start(req: UpstreamRequest, handler: UpstreamHandler, state: ClusterState): void {
    const rt = state.balancer
    const refused = rt.admit()
    if (refused !== null) return handler.onError(refused)
    let index: number | null = -1
    if (req.cluster.protocol === 'MCP') {
      const pinned = pinSession(req, state)
      if (pinned !== null) {
        req = pinned.req
        index = pinned.index
      }
    }
    if (index === -1) index = rt.pick(req)
    if (index === null) return handler.onError(new SallyportError(ErrorCode.NO_HEALTHY_UPSTREAM, `no endpoints for ${req.cluster.id}`))
    const ex = new Exchange(req, handler, this)
    ex.guard = rt
    rt.started(ex)
    this.#send(ex, state, index)
  }

  /** DNS (or a check) must be waited for: forward once the cluster's names are resolved. */
  #resolveThenForward(req: UpstreamRequest, handler: UpstreamHandler): void {
    const cluster = req.cluster
    const lookups = cluster.endpoints.map((e) => resolvedHere(cluster, e) ? this.#destinations.resolve(cluster, e.host) : null)
    Promise.all(lookups).then((resolutions) => {
      if (this.#closed) return handler.onError(new SallyportError(ErrorCode.SHUTTING_DOWN, 'upstreams are closed'))
      if (req.signal.aborted) return handler.onError(new SallyportError(ErrorCode.CLIENT_ABORTED, 'request aborted while resolving'))
      const state = this.#rebuild(cluster, resolutions)
      if (state.error !== null) {
        if (state.error.code === ErrorCode.UPSTREAM_DNS) upstreamConnectErrors.inc({ backend: cluster.id, reason: 'dns' })
        return handler.onError(state.error)
      }
      this.#start(req, handler, state)
    }, (err: unknown) => handler.onError(new SallyportError(ErrorCode.INTERNAL, 'resolving backend names failed', { cause: err })))
  }

  /** The current state of a hostname cluster without waiting; null when DNS must be asked. Rebuilt on change. */
  // hot path
  #resolvedState(cluster: Cluster): ClusterState | null {
    const d = this.#dynamic.get(cluster)
    if (d === undefined) return null
    const endpoints = cluster.endpoints
    let changed = false
    for (let i = 0; i < endpoints.length; i++) {
      const e = endpoints[i]
      if (!resolvedHere(cluster, e)) continue
      const r = this.#destinations.peek(cluster, e.host)
      if (r === null) return null
      if (r !== d.resolutions[i]) changed = true
    }
    if (!changed) return d.state
    return this.#rebuild(cluster, endpoints.map((e) => resolvedHere(cluster, e) ? this.#destinations.peek(cluster, e.host) : null))
  }

  #rebuild(cluster: Cluster, resolutions: ReadonlyArray<Resolution | null>): ClusterState {
    const previous = this.#dynamic.get(cluster)
    if (previous !== undefined && previous.resolutions.every((r, i) => r === resolutions[i])) return previous.state
    const endpoints: Endpoint[] = []
    let error: SallyportError | null = null
    cluster.endpoints.forEach((e, i) => {
      const r = resolutions[i]
      if (e.kind !== 'hostname' || r === null || r === undefined) { endpoints.push(e); return }
      if (r.error !== null) error ??= r.error
      // The name stays with its addresses: their connections' TLS server name (tls.ts endpointServername).
      for (const host of r.addresses) endpoints.push({ host, port: e.port, kind: 'ip', weight: e.weight, zone: e.zone, name: e.host })
    })
    const state = clusterState(cluster, endpoints, endpoints.length === 0 ? error : null, this.#resilience)
    this.#dynamic.set(cluster, { resolutions, state })
    if (previous !== undefined) {
      log.info({ backend: cluster.id, endpoints: state.labels }, 'backend addresses changed')
      this.#retireUnused(null)
    }
    if (state.error === null) this.#unresolved.delete(cluster)
    else if (this.#table?.clusters.get(cluster.id) === cluster) {
      this.#unresolved.add(cluster)
      if (this.#retryTimer === null && !this.#closed) this.#retryTimer = setTimeout(this.#retryUnresolved, this.#retryMs).unref()
    }
    return state
  }

  /**
   * Resolve a hostname cluster's names again without waiting for a request:
   * the cached answers when they are current (a changed one rebuilds the
   * endpoints at once), else a lookup in the background. One at a time per cluster.
   */
  #refresh(cluster: Cluster): void {
    if (this.#closed || this.#refreshing.has(cluster) || !hasHostnames(cluster)) return
    if (this.#table?.clusters.get(cluster.id) !== cluster || this.#resolvedState(cluster) !== null) return
    // A resolver failing fast (SERVFAIL) is not asked once per request of the traffic that finds the cluster unavailable.
    const now = performance.now()
    if (now - (this.#refreshedAt.get(cluster) ?? -Infinity) < REFRESH_FLOOR_MS) return
    this.#refreshedAt.set(cluster, now)
    this.#refreshing.add(cluster)
    const lookups = cluster.endpoints.map((e) => resolvedHere(cluster, e) ? this.#destinations.resolve(cluster, e.host) : null)
    Promise.all(lookups).then((resolutions) => {
      this.#refreshing.delete(cluster)
      if (!this.#closed && this.#table?.clusters.get(cluster.id) === cluster) this.#rebuild(cluster, resolutions)
    }, (err: unknown) => {
      this.#refreshing.delete(cluster)
      log.warn({ backend: cluster.id, err }, 'resolving backend names failed')
    })
  }

  #retryUnresolved = (): void => {
    this.#retryTimer = null
    if (this.#closed) return
    for (const cluster of this.#unresolved) {
      if (this.#table?.clusters.get(cluster.id) !== cluster) this.#unresolved.delete(cluster)
      else this.#refresh(cluster)
    }
    if (this.#unresolved.size > 0) this.#retryTimer = setTimeout(this.#retryUnresolved, this.#retryMs).unref()
  }

  dialL4(req: L4DialRequest, callback: L4DialCallback): PendingDial {
    if (this.#closed) {
      process.nextTick(callback, new SallyportError(ErrorCode.SHUTTING_DOWN, 'upstreams are closed'), null)
      return { cancel: noop }
    }
    return this.#l4.dial(req, callback)
  }

  /**
   * A connect failure of an unsent request: the next endpoint of the cluster's
   * current list, each at most once. A hostname cluster's list may have changed
   * since the request was sent (a new DNS answer while the connect hung): the
   * position is found again by address, a request whose address left the answer
   * goes where the balancer picks, and the new list's addresses are each tried
   * (once per exchange). When every address of an expired answer — served while
   * its refresh runs — has refused, the refresh is waited for (at most
   * STALE_REFRESH_WAIT_MS, resolve.ts) and a changed answer is tried before the failure is
   * the answer: a name that moved is not a failed request.
   */
  redispatch(ex: Exchange, err: SallyportError): boolean {
    const dynamic = hasHostnames(ex.cluster)
    const state = dynamic ? this.#dynamic.get(ex.cluster)?.state : this.#stateOf(ex.cluster)
    if (state === undefined || this.#closed || ex.aborted) return false
    if (dynamic && !ex.relisted && ex.guard !== state.balancer) {
      ex.relisted = true
      ex.tried = 0
    }
    if (ex.tried < state.endpoints.length) {
      // Out of the failing pool's callback before starting the next attempt.
      queueMicrotask(() => this.#next(ex, state))
      return true
    }
    return dynamic && !ex.relisted && this.#afterRefresh(ex, state, err)
  }

  /** The attempt after a connect failure: the endpoint after the failed one in `state`'s list. */
  #next(ex: Exchange, state: ClusterState): void {
    if (ex.answered) return
    if (this.#closed) return ex.fail(new SallyportError(ErrorCode.SHUTTING_DOWN, 'upstreams are closed'))
    const rt = state.balancer
    const n = state.endpoints.length
    let next: number
    if (ex.guard === rt) next = (ex.endpointIndex + 1) % n
    else {
      const at = state.labels.indexOf(ex.endpoint)
      next = at !== -1 ? (at + 1) % n : rt.pick(ex.req) ?? 0
    }
    // The outcome of the next attempt is the new list's to count (the cluster's breaker counters are shared).
    ex.guard = rt
    this.#send(ex, state, next)
  }

  /** Every address of `tried` refused: when a name's answer had expired, its refresh decides (false: nothing to wait for). */
  #afterRefresh(ex: Exchange, tried: ClusterState, err: SallyportError): boolean {
    const cluster = ex.cluster
    let expired = false
    const lookups = cluster.endpoints.map((e) => {
      if (e.kind !== 'hostname') return null
      const refreshed = this.#destinations.refreshed(cluster, e.host)
      if (refreshed !== null) expired = true
      return refreshed ?? this.#destinations.resolve(cluster, e.host)
    })
    if (!expired) return false
    ex.relisted = true
    Promise.all(lookups).then((resolutions) => {
      if (ex.answered) return
      if (this.#closed) return ex.fail(new SallyportError(ErrorCode.SHUTTING_DOWN, 'upstreams are closed'))
      const state = this.#rebuild(cluster, resolutions)
      if (state === tried || state.error !== null || state.endpoints.length === 0) return ex.giveUp(err)
      log.debug({ backend: cluster.id, endpoints: state.labels }, 'connect failed on an expired DNS answer: trying the refreshed one')
      ex.tried = 0
      this.#next(ex, state)
    }, () => ex.giveUp(err))
    return true
  }

  retain(table: RouteTable): void {
    this.#table = table
    this.#resilience.retain(table)
    this.#retireUnused(table)
  }

  /**
   * Close pools nothing uses: not a static endpoint of the current table, not an
   * address of a current DNS state. `swapped`: a new table — DNS states of
   * clusters it no longer has are dropped, and those of clusters it keeps (by id)
   * keep their pools until the new Cluster objects resolve to the same addresses.
   */
  #retireUnused(swapped: RouteTable | null): void {
    const table = this.#table
    if (table === null) return
    /** Pool key → a cluster id using it. */
    const wanted = new Map<string, string>()
    const ids = new Set(table.clusters.keys())
    for (const [c, d] of this.#dynamic) {
      if (ids.has(c.id)) for (const k of d.state.keys) wanted.set(k, c.id)
      if (swapped !== null && swapped.clusters.get(c.id) !== c) this.#dynamic.delete(c)
    }
    for (const cluster of table.clusters.values()) {
      for (const endpoint of cluster.endpoints) wanted.set(poolKey(cluster, endpoint), cluster.id)
      // DESIGN.md safety defaults: disabled verification shows in the log at every load.
      if (swapped !== null && cluster.tls !== null && cluster.tls.insecureSkipVerify) log.warn({ backend: cluster.id }, 'upstream TLS verification disabled by configuration (insecureSkipVerify)')
    }
    for (const [key, entry] of this.#pools) {
      const user = wanted.get(key)
      if (user !== undefined) {
        // Kept for another cluster: its metrics stop naming a backend that is gone.
        if (!ids.has(entry.cluster)) entry.cluster = entry.connector.backend = user
        continue
      }
      this.#pools.delete(key)
      log.debug({ key, backend: entry.cluster }, 'upstream pool retired')
      entry.pool.close().catch((err: unknown) => log.warn({ key, err }, 'upstream pool close failed'))
    }
  }

  stats(): ReadonlyArray<{ readonly key: string; readonly cluster: string; readonly protocol: string; readonly connected: number; readonly pending: number; readonly running: number }> {
    const out = []
    for (const entry of this.#pools.values()) {
      const s = entry.pool.stats()
      // pending: what the circuit breaker counts (waiting, and someone still waits for it).
      out.push({ key: entry.key, cluster: entry.cluster, protocol: entry.pool.protocol, connected: s.connected, pending: entry.pool.pending(), running: s.running })
    }
    return out
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer)
    this.#retryTimer = null
    this.#unresolved.clear()
    this.#unregister()
    this.#resilience.close()
    this.#destinations.close()
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
      state = clusterState(cluster, cluster.endpoints, null, this.#resilience)
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
      pool = this.#poolFor(ex.cluster, state.endpoints[index], state.keys[index])
      state.pools[index] = pool
    }
    pool.dispatch(ex)
  }

  #poolFor(cluster: Cluster, endpoint: Endpoint, key: string): UpstreamPool {
    const existing = this.#pools.get(key)
    if (existing !== undefined && !existing.pool.closed) return existing.pool
    const { pool, connector } = this.#createPool(cluster, endpoint)
    this.#pools.set(key, { key, pool, cluster: cluster.id, connector })
    log.debug({ key, backend: cluster.id, protocol: pool.protocol }, 'upstream pool created')
    return pool
  }

  #createPool(cluster: Cluster, endpoint: Endpoint): { pool: UpstreamPool; connector: Connector } {
    const tls = cluster.tls
    // Per-cluster connect timeout and connection cap (BackendTrafficPolicy; the pool key carries them).
    const settings = poolSettingsFor(cluster, this.#settings)
    // h2c is cleartext by definition; every other protocol originates TLS when the cluster has it.
    const clientTls = tls === null || cluster.protocol === 'H2C' ? null : buildClientTls(tls, endpointServername(tls, endpoint))
    if (tls !== null && tls.insecureSkipVerify) log.warn({ backend: cluster.id }, 'upstream TLS verification disabled by configuration')
    const connector = new Connector({ endpoint, tls: clientTls, resolver: this.#resolver, timeoutMs: settings.connectTimeoutMs, backend: cluster.id, proxy: cluster.upstreamProxy ?? null })
    return { pool: newPool(cluster, connector, settings, clientTls === null ? null : tls), connector }
  }
}

function newPool(cluster: Cluster, connector: Connector, settings: PoolSettings, tls: Cluster['tls']): UpstreamPool {
  switch (cluster.protocol) {
    case 'HTTP2':
    case 'H2C':
      return new H2Pool(connector, settings)
    case 'HTTP11':
      return new H1Pool(connector, settings)
    default:
      // HTTP and MCP: over TLS the upstream picks by ALPN; in cleartext HTTP/1.1.
      if (tls === null) return new H1Pool(connector, settings)
      return new AlpnPool(connector, settings, tls.alpn.length > 0 ? tls.alpn : DEFAULT_ALPN)
  }
}

/**
 * MCP session affinity (mcp-session.ts): a session id the gateway tagged goes
 * upstream without its tag, to the endpoint the tag names while that endpoint
 * is in the cluster's list and available (or no endpoint is). Otherwise index
 * -1: balanced as usual — the upstream that gets it answers 404 for a session
 * it does not know, and MCP clients then initialize again. null: no tagged id,
 * the request goes as it came. An endpoint kept out of rotation by weight 0
 * still serves its sessions (it drains).
 */
function pinSession(req: UpstreamRequest, state: ClusterState): { req: UpstreamRequest; index: number } | null {
  const id = req.headers[SESSION_HEADER]
  if (typeof id !== 'string' || !isTagged(id)) return null
  const headers = { ...req.headers, [SESSION_HEADER]: id.slice(TAG_LENGTH + 1) }
  let index = -1
  if (req.pinSession !== false) {
    const tags = state.sessionTags ?? (state.sessionTags = endpointsByTag(req.cluster.id, state.labels))
    const named = tags.get(id.slice(0, TAG_LENGTH))
    if (named !== undefined && state.balancer.mayTake(named)) index = named
  }
  return { req: { ...req, headers }, index }
}

function noop(): void {}
