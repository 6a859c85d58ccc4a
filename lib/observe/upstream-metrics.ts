// Upstream metrics (STYLE.md §7: sallyport_<what>_<unit>, fixed labels).
// `backend` is the Cluster id (bounded by configuration); `code` is the HTTP
// status or the SP_ERR_* code; `reason` comes from a fixed list in
// lib/upstream/normalize-error.ts and lib/upstream/tls.ts.

import { Counter, Gauge, Histogram } from 'prom-client'
import { registry } from './metrics.ts'

export const upstreamRequestDuration = new Histogram({
  name: 'sallyport_upstream_request_duration_seconds',
  help: 'Upstream exchanges from dispatch to the end of the response body (or the error), by backend and status or error code.',
  labelNames: ['backend', 'code'] as const,
  buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [registry],
})

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

export const upstreamActiveRequests = new Gauge({
  name: 'sallyport_upstream_active_requests',
  help: 'Upstream exchanges in flight.',
  labelNames: ['backend'] as const,
  registers: [registry],
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
