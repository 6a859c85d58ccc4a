// The resilience state of the upstream layer (issue 6), owned by the pool
// registry and outliving route tables: per cluster id a ClusterGuard (circuit
// breaker counters, retry budget, overload marker), per endpoint an
// EndpointHealth (ejection, active checks, requests in flight), active health
// checkers for the clusters of the current table. Per Cluster object (i.e. per
// table) a ClusterRuntime ties them to that table's endpoint list, balancer
// and outlier thresholds; the registry asks it for an endpoint and the
// exchange reports outcomes to it (ExchangeGuard).

import { performance } from 'node:perf_hooks'
import { ErrorCode, type SallyportError } from '../errors.ts'
import type { Cluster, Endpoint, RouteTable } from '../compile/table.ts'
import { addEndpointHealthSource, type EndpointHealthSample } from '../observe/resilience-metrics.ts'
import type { Exchange, ExchangeGuard } from './exchange.ts'
import type { OutgoingHeaders, ResilienceView } from './types.ts'
import { createBalancer, weightsOf, type Balancer, type PickInput } from './balancer.ts'
import { ClusterGuard, limitsOf } from './circuit-breaker.ts'
import { QUEUE_TIMEOUT } from './queue-timeout.ts'
import { HealthChecker, type AddressVerdicts } from './health-check.ts'
import { EndpointHealth, OutlierDetector } from './outlier.ts'
import type { Resolver } from './resolve.ts'
import type { UpstreamPool } from './pool.ts'

/** Balancer picks a retry may take to find an endpoint it has not tried (Envoy Gateway's host_selection_retry_max_attempts). */
const RETRY_HOST_PICKS = 5

/** Exchanges waiting for a connection in a cluster's pools (circuit breaker maxPendingRequests). */
function pendingOf(pools: ReadonlyArray<UpstreamPool | null>): number {
  let n = 0
  for (let i = 0; i < pools.length; i++) {
    const p = pools[i]
    if (p !== null) n += p.pending()
  }
  return n
}

export function endpointLabel(endpoint: Endpoint): string {
  if (endpoint.kind === 'unix') return `unix:${endpoint.host}`
  return endpoint.host.includes(':') ? `[${endpoint.host}]:${endpoint.port}` : `${endpoint.host}:${endpoint.port}`
}

/** Failures that say something about the endpoint (not the client, not us). */
function isLocalOriginFailure(code: ErrorCode): boolean {
  return code === ErrorCode.UPSTREAM_CONNECT || code === ErrorCode.UPSTREAM_RESET || code === ErrorCode.UPSTREAM_TIMEOUT ||
    code === ErrorCode.UPSTREAM_TLS || code === ErrorCode.UPSTREAM_PROTOCOL
}

/** One cluster of one table: its endpoints' health, balancer and outlier thresholds. */
export class ClusterRuntime implements ExchangeGuard {
  readonly cluster: Cluster
  readonly guard: ClusterGuard
  readonly health: readonly EndpointHealth[]
  readonly detector: OutlierDetector | null
  readonly balancer: Balancer
  /** Health can change (passive or active checks): picks need the clock. */
  readonly dynamic: boolean
  /** The balancers' weights (weightsOf): 0 keeps an endpoint out of rotation, unless all are 0. */
  readonly #weights: Float64Array
  #pending: () => number = () => 0

  constructor(cluster: Cluster, guard: ClusterGuard, health: readonly EndpointHealth[], endpoints: readonly Endpoint[]) {
    this.cluster = cluster
    this.guard = guard
    this.health = health
    const passive = cluster.healthCheck?.passive ?? null
    this.detector = passive === null ? null : new OutlierDetector(passive)
    this.detector?.setEndpoints(health)
    this.balancer = createBalancer(endpoints, health, cluster.lb)
    this.#weights = weightsOf(endpoints)
    this.dynamic = passive !== null || (cluster.healthCheck?.active ?? null) !== null || (cluster.lb?.slowStartWindowMs ?? 0) > 0
  }

  /** How to count exchanges waiting for a connection (the registry's pools of this cluster). */
  setPending(pending: () => number): void {
    this.#pending = pending
  }

  // hot path
  /**
   * The balancer's endpoint; for a retry (input.avoid) one the request has not
   * tried yet while the backend has such an endpoint available: the balancer
   * is asked again (at most RETRY_HOST_PICKS times, as Envoy Gateway's
   * host_selection_retry_max_attempts), then the endpoints are scanned, so a
   * ConsistentHash key moves to the next one for that retry only.
   */
  pick(input: PickInput): number | null {
    const now = this.dynamic ? performance.now() : 0
    const first = this.balancer.pick(input, now)
    const avoid = input.avoid
    if (first === null || avoid === undefined || avoid === null || avoid.length === 0) return first
    const health = this.health
    if (!avoid.includes(health[first].label)) return first
    for (let k = 0; k < RETRY_HOST_PICKS; k++) {
      const i = this.balancer.pick(input, now)
      if (i !== null && !avoid.includes(health[i].label) && health[i].isAvailable(now)) return i
    }
    const n = health.length
    for (let k = 1; k < n; k++) {
      const i = (first + k) % n
      if (this.#weights[i] > 0 && !avoid.includes(health[i].label) && health[i].isAvailable(now)) return i
    }
    return first
  }

  /**
   * A request may go to endpoint `index` now: it is neither ejected nor failing
   * active checks, or no endpoint is (the balancer's panic routing would pick
   * among all of them). MCP session pins (registry.ts).
   */
  mayTake(index: number): boolean {
    const now = performance.now()
    const health = this.health
    if (health[index].isAvailable(now)) return true
    for (let i = 0; i < health.length; i++) if (health[i].isAvailable(now)) return false
    return true
  }

  // hot path
  /** Circuit breaker admission; on success the exchange counts as active until finished(). */
  admit(): SallyportError | null {
    return this.guard.admit(this.#pending)
  }

  available(now: number): boolean {
    if (this.guard.isOverloaded(now)) return false
    const health = this.health
    for (let i = 0; i < health.length; i++) if (health[i].isAvailable(now)) return true
    return false
  }

  // ── ExchangeGuard ──

  started(_ex: Exchange): void {
    this.guard.active++
  }

  entering(ex: Exchange, index: number): void {
    const previous = ex.endpointHealth
    if (previous !== null) previous.inflight--
    const h = this.health[index]
    h.inflight++
    ex.endpointHealth = h
  }

  responded(ex: Exchange, status: number, headers: OutgoingHeaders): void {
    const needsClock = this.detector !== null || status === 429 || status === 503
    const now = needsClock ? performance.now() : 0
    const h = ex.endpointHealth
    if (this.detector !== null && h !== null) this.detector.onStatus(h, status, now)
    this.guard.onStatus(status, headers, now)
  }

  failed(ex: Exchange, err: SallyportError): void {
    // Waited the pool's queue timeout: the backend is as overloaded as when its breaker refuses.
    if (err.detail === QUEUE_TIMEOUT) { this.guard.queueTimedOut(); return }
    // A client that goes away is not an upstream failure (STYLE.md §5).
    const h = ex.endpointHealth
    if (this.detector === null || !isLocalOriginFailure(err.code) || h === null) return
    this.detector.onLocalFailure(h, performance.now())
  }

  finished(ex: Exchange): void {
    this.guard.active--
    const h = ex.endpointHealth
    if (h === null) return
    h.inflight--
    ex.endpointHealth = null
  }
}

/** No active check judges the endpoint any more: back to the default verdict. */
function resetChecks(h: EndpointHealth): void {
  h.activeHealthy = true
  h.checkFailures = 0
  h.checkSuccesses = 0
}

/** The resolver a cluster's connections use outside the request path: its hostnames, guarded as requests' are. */
export type GuardedResolverFor = (cluster: Cluster) => Resolver

/** Asks the registry to resolve a hostname cluster's names again (it has no usable address). */
export type RefreshCluster = (cluster: Cluster) => void

export class Resilience implements ResilienceView {
  readonly #resolverFor: GuardedResolverFor
  readonly #refresh: RefreshCluster
  readonly #guards = new Map<string, ClusterGuard>()
  /** Per cluster id, per endpoint label: configured endpoints, the latest answer's addresses, the addresses checks probe. */
  readonly #endpoints = new Map<string, Map<string, EndpointHealth>>()
  /** Active checkers by `cluster id|endpoint label`. */
  readonly #checkers = new Map<string, { readonly id: string; readonly label: string; readonly checker: HealthChecker }>()
  /** The runtime of a cluster's latest endpoint list (hostname clusters rebuild it when DNS answers change). */
  readonly #latest = new WeakMap<Cluster, ClusterRuntime>()
  readonly #unregister: () => void
  #table: RouteTable | null = null

  constructor(resolverFor: GuardedResolverFor, refresh: RefreshCluster = () => {}) {
    this.#resolverFor = resolverFor
    this.#refresh = refresh
    this.#unregister = addEndpointHealthSource(() => this.#samples())
  }

  /**
   * A runtime for `endpoints` of `cluster` (the cluster's own, or the usable
   * addresses its hostnames resolved to); `pools` lets the breaker count
   * exchanges waiting for a connection. Endpoint health is keyed by cluster
   * id and address, so it survives table swaps and DNS rebuilds; a new answer
   * of the current table's cluster forgets addresses no longer in it (a name
   * rotating through many addresses holds state for its current ones only).
   */
  runtime(cluster: Cluster, endpoints: readonly Endpoint[], pools: ReadonlyArray<UpstreamPool | null> | null): ClusterRuntime {
    const now = performance.now()
    let guard = this.#guards.get(cluster.id)
    if (guard === undefined) {
      guard = new ClusterGuard(cluster.id)
      this.#guards.set(cluster.id, guard)
    }
    guard.limits = limitsOf(cluster.circuitBreaker)
    const health = endpoints.map((e) => this.#endpointHealth(cluster.id, e, now))
    const rt = new ClusterRuntime(cluster, guard, health, endpoints)
    if (pools !== null) rt.setPending(() => pendingOf(pools))
    this.#latest.set(cluster, rt)
    if (endpoints !== cluster.endpoints && this.#table?.clusters.get(cluster.id) === cluster) this.#forgetGone(cluster.id)
    return rt
  }

  #endpointHealth(id: string, e: Endpoint, now: number): EndpointHealth {
    let states = this.#endpoints.get(id)
    if (states === undefined) this.#endpoints.set(id, states = new Map())
    const label = endpointLabel(e)
    let h = states.get(label)
    if (h === undefined) {
      h = new EndpointHealth(id, label, now)
      states.set(label, h)
    }
    return h
  }

  /**
   * Drop the health of a cluster's addresses that neither its latest endpoint
   * list (current table) nor its active checks use any more. A runtime still
   * holding one (requests in flight) keeps its object; an address that comes
   * back starts afresh, as a new host does in Envoy.
   */
  #forgetGone(id: string): void {
    const states = this.#endpoints.get(id)
    const cluster = this.#table?.clusters.get(id)
    if (states === undefined || cluster === undefined) return
    const keep = new Set<string>()
    for (const e of cluster.endpoints) {
      keep.add(endpointLabel(e))
      const checker = this.#checkers.get(`${id}|${endpointLabel(e)}`)?.checker
      if (checker !== undefined) for (const a of checker.addresses()) keep.add(endpointLabel(a))
    }
    const rt = this.#latest.get(cluster)
    if (rt !== undefined) for (const h of rt.health) keep.add(h.label)
    for (const label of states.keys()) if (!keep.has(label)) states.delete(label)
  }

  /** Endpoint health entries held for a cluster id (tests: bounded by its endpoints and current answers). */
  endpointStates(id: string): number {
    return this.#endpoints.get(id)?.size ?? 0
  }

  /** The latest runtime of a cluster, or one over its configured endpoints. */
  runtimeOf(cluster: Cluster): ClusterRuntime {
    return this.#latest.get(cluster) ?? this.runtime(cluster, cluster.endpoints, null)
  }

  // hot path
  available(cluster: Cluster): boolean {
    if (cluster.endpoints.length === 0) return false
    let rt = this.runtimeOf(cluster)
    if (rt.health.length === 0) {
      // A hostname cluster whose names gave no usable address (NXDOMAIN, resolver
      // down, every address refused): unavailable, but not for good — failover
      // sends it no traffic, so ask for its names here (the DNS cache's negative
      // TTL bounds the queries). An answer the cache already has counts at once.
      this.#refresh(cluster)
      rt = this.runtimeOf(cluster)
      if (rt.health.length === 0) return false
    }
    return rt.available(performance.now())
  }

  admitRetry(cluster: Cluster): string | null {
    const guard = this.runtimeOf(cluster).guard
    const refused = guard.admitRetry()
    if (refused === null) guard.activeRetries++
    return refused
  }

  retryDone(cluster: Cluster): void {
    const guard = this.#guards.get(cluster.id)
    if (guard !== undefined && guard.activeRetries > 0) guard.activeRetries--
  }

  /**
   * What a cluster's health checker resolves its hostnames with: the destination
   * guard of the cluster as the current table has it (a checker outlives tables
   * that keep its check, while the Gateway's allowed ranges may change), so a
   * probe never goes where a request could not (a name resolving to the
   * metadata service, loopback...). A refused address fails the check.
   */
  #checkResolver(cluster: Cluster): Resolver {
    const id = cluster.id
    return { resolve: (hostname: string) => this.#resolverFor(this.#table?.clusters.get(id) ?? cluster).resolve(hostname) }
  }

  /** After a swap: health state and checkers for the table's clusters; the rest goes. */
  retain(table: RouteTable): void {
    this.#table = table
    const wantedClusters = new Set<string>()
    const wantedCheckers = new Set<string>()
    for (const cluster of table.clusters.values()) {
      if (cluster.protocol === 'TCP' || cluster.protocol === 'TLS') continue
      const active = cluster.healthCheck?.active ?? null
      wantedClusters.add(cluster.id)
      if (active === null) continue
      for (const endpoint of cluster.endpoints) {
        const label = endpointLabel(endpoint)
        const key = `${cluster.id}|${label}`
        wantedCheckers.add(key)
        const existing = this.#checkers.get(key)?.checker
        if (existing !== undefined && existing.sameAs(active, cluster)) continue
        if (existing !== undefined) this.#stopChecker(cluster.id, existing)
        // A name whose addresses the registry balances over is checked per address (no upstream proxy).
        const perAddress = endpoint.kind === 'hostname' && cluster.upstreamProxy == null ? this.#addressVerdicts(cluster.id) : null
        const checker = new HealthChecker(cluster, endpoint, this.#endpointHealth(cluster.id, endpoint, performance.now()), active, this.#checkResolver(cluster), perAddress)
        this.#checkers.set(key, { id: cluster.id, label, checker })
        checker.start()
      }
    }
    for (const [key, { id, label, checker }] of this.#checkers) {
      if (wantedCheckers.has(key)) continue
      this.#checkers.delete(key)
      this.#stopChecker(id, checker)
      const h = this.#endpoints.get(id)?.get(label)
      if (h !== undefined) resetChecks(h)
    }
    for (const id of this.#endpoints.keys()) if (!wantedClusters.has(id)) this.#endpoints.delete(id)
    for (const id of this.#guards.keys()) if (!table.clusters.has(id)) {
      const guard = this.#guards.get(id) as ClusterGuard
      if (guard.active === 0 && guard.activeRetries === 0) this.#guards.delete(id)
    }
  }

  /** Where a cluster's per-address check verdicts go. */
  #addressVerdicts(id: string): AddressVerdicts {
    return {
      healthOf: (e) => this.#endpointHealth(id, e, performance.now()),
      changed: () => this.#forgetGone(id),
    }
  }

  /** A checker no table wants (or replaced): stopped; the addresses it judged count as healthy again. */
  #stopChecker(id: string, checker: HealthChecker): void {
    checker.stop()
    const states = this.#endpoints.get(id)
    if (states !== undefined) for (const a of checker.addresses()) {
      const h = states.get(endpointLabel(a))
      if (h !== undefined) resetChecks(h)
    }
  }

  health(): ReadonlyArray<Readonly<Record<string, unknown>>> {
    const table = this.#table
    if (table === null) return []
    const now = performance.now()
    const out: Array<Record<string, unknown>> = []
    for (const cluster of table.clusters.values()) {
      if (cluster.protocol === 'TCP' || cluster.protocol === 'TLS') continue
      const rt = this.runtimeOf(cluster)
      const g = rt.guard
      out.push({
        backend: cluster.id,
        available: rt.available(now),
        overloaded: g.isOverloaded(now),
        overloadedForMs: g.overloadedUntil === 0 ? 0 : Math.round(g.overloadedUntil - now),
        activeRequests: g.active,
        activeRetries: g.activeRetries,
        circuitLimits: g.limits,
        loadBalancer: cluster.lb?.type ?? 'RoundRobin',
        activeChecks: cluster.healthCheck?.active !== null && cluster.healthCheck?.active !== undefined,
        outlierDetection: rt.detector !== null,
        endpoints: rt.health.map((h) => ({
          endpoint: h.label,
          healthy: h.isAvailable(now),
          ejected: h.isEjected(now),
          ejectedForMs: h.isEjected(now) ? Math.round(h.ejectedUntil - now) : 0,
          ejections: h.ejections,
          activeCheckHealthy: h.activeHealthy,
          inflight: h.inflight,
        })),
      })
    }
    return out
  }

  close(): void {
    for (const { checker } of this.#checkers.values()) checker.stop()
    this.#checkers.clear()
    this.#unregister()
  }

  *#samples(): Iterable<EndpointHealthSample> {
    const table = this.#table
    if (table === null) return
    const now = performance.now()
    for (const cluster of table.clusters.values()) {
      if (cluster.protocol === 'TCP' || cluster.protocol === 'TLS') continue
      for (const h of this.runtimeOf(cluster).health) yield { backend: cluster.id, endpoint: h.label, healthy: h.isAvailable(now) }
    }
  }
}
