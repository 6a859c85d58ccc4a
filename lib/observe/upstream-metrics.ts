// Upstream metrics (STYLE.md §7: sallyport_<what>_<unit>, fixed labels).
// `backend` is the Cluster id (bounded by configuration); `code` is the HTTP
// status or the SP_ERR_* code; `reason` comes from a fixed list in
// lib/upstream/normalize-error.ts and lib/upstream/tls.ts.

import { Counter, Gauge, type Metric } from 'prom-client'
import { registry } from './metrics.ts'
import { Family, type Value } from './http-metrics.ts'
import { addSeriesPruner, namesLive, noteSeries } from './series-retention.ts'

export const upstreamConnectErrors = new Counter({
  name: 'sallyport_upstream_connect_errors_total',
  help: 'Failed connection attempts to upstream endpoints (refused, unreachable, dns, timeout, other).',
  labelNames: ['backend', 'reason'] as const,
  registers: [registry],
})

export const upstreamTlsHandshakeErrors = new Counter({
  name: 'sallyport_upstream_tls_handshake_errors_total',
  help: 'Failed TLS handshakes to upstream endpoints, by reason class (unknown_ca, hostname_mismatch, expired, ...).',
  labelNames: ['backend', 'reason'] as const,
  registers: [registry],
})

// Per-exchange cost: prom-client hashes and validates a label object on every
// inc/dec/observe (three per exchange). Instead each exchange updates the plain
// BackendSeries of its cluster (looked up once per Cluster object), and the two
// families are rendered from the series at scrape time, as http-metrics.ts does.

const DURATION_BUCKETS: readonly number[] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

/** One status or error code of a backend: non-cumulative bucket counts (the last is +Inf), sum, count. */
class CodeSeries {
  readonly buckets = new Float64Array(DURATION_BUCKETS.length + 1)
  sum = 0
  count = 0
}

/** What upstream/ records per backend: exchanges in flight and their durations by code. */
export class BackendSeries {
  readonly backend: string
  active = 0
  readonly byCode = new Map<string, CodeSeries>()
  constructor(backend: string) { this.backend = backend }

  // hot path
  observe(code: string, seconds: number): void {
    let c = this.byCode.get(code)
    if (c === undefined) {
      c = new CodeSeries()
      this.byCode.set(code, c)
    }
    c.sum += seconds
    c.count++
    let i = 0
    while (i < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[i]) i++
    c.buckets[i]++
  }
}

/**
 * Every backend by cluster id. It outlives table swaps (counters stay
 * monotonic) until the backend leaves the configuration (series-retention.ts).
 */
const backends = new Map<string, BackendSeries>()
/** The series of each Cluster object, found once per table rather than per exchange; made anew when series are removed. */
let byCluster = new WeakMap<object, BackendSeries>()

// hot path
/** The series of a Cluster (`id`: its backend label). */
export function backendSeries(cluster: { readonly id: string }): BackendSeries {
  let s = byCluster.get(cluster)
  if (s === undefined) {
    s = backends.get(cluster.id)
    if (s === undefined) {
      s = new BackendSeries(cluster.id)
      backends.set(cluster.id, s)
      noteSeries(s)
    }
    byCluster.set(cluster, s)
  }
  return s
}

// A backend no longer configured goes once nothing is in flight to it: an
// exchange holds its series and decrements `active` when it ends.
addSeriesPruner((live) => {
  let kept = 0
  let removed = false
  for (const [id, b] of backends) {
    if (namesLive(live, b)) continue
    if (b.active !== 0) { kept++; continue }
    backends.delete(id)
    removed = true
  }
  if (removed) byCluster = new WeakMap()
  return kept
})

const DURATION = 'sallyport_upstream_request_duration_seconds'
registry.registerMetric(new Family(DURATION, 'Upstream exchanges from dispatch to the end of the response body (or the error), by backend and status or error code.', 'histogram', () => {
  const out: Value[] = []
  for (const b of backends.values()) {
    for (const [code, c] of b.byCode) {
      const labels = { backend: b.backend, code }
      let cumulative = 0
      for (let i = 0; i < DURATION_BUCKETS.length; i++) {
        cumulative += c.buckets[i]
        out.push({ metricName: DURATION + '_bucket', labels: { ...labels, le: DURATION_BUCKETS[i] }, value: cumulative })
      }
      out.push({ metricName: DURATION + '_bucket', labels: { ...labels, le: '+Inf' }, value: c.count })
      out.push({ metricName: DURATION + '_sum', labels, value: c.sum })
      out.push({ metricName: DURATION + '_count', labels, value: c.count })
    }
  }
  return out
}) as unknown as Metric<string>)

export const upstreamActiveRequests = new Gauge({
  name: 'sallyport_upstream_active_requests',
  help: 'Upstream exchanges in flight.',
  labelNames: ['backend'] as const,
  registers: [registry],
  collect() {
    this.reset() // the backends of `backends`, none it dropped
    for (const b of backends.values()) this.set({ backend: b.backend }, b.active)
  },
})

export interface PoolConnectionSample {
  readonly backend: string
  readonly protocol: string
  readonly connected: number
}

const sources = new Set<() => Iterable<PoolConnectionSample>>()

/** Register a stats source for the pool gauge (an Upstreams registry); returns the unregister function. */
export function addPoolStatsSource(source: () => Iterable<PoolConnectionSample>): () => void {
  sources.add(source)
  return () => { sources.delete(source) }
}

export const upstreamPoolConnections = new Gauge({
  name: 'sallyport_upstream_pool_connections',
  help: 'Open upstream connections (HTTP/1.1) or sessions (HTTP/2), by backend and protocol.',
  labelNames: ['backend', 'protocol'] as const,
  registers: [registry],
  collect() {
    this.reset()
    for (const source of sources) {
      for (const s of source()) this.inc({ backend: s.backend, protocol: s.protocol }, s.connected)
    }
  },
})
