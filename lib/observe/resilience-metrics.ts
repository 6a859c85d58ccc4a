// Resilience metrics (issue 6): retries, retry budget, failover, ejections,
// overload answers and endpoint health. Labels come from configuration
// (`backend` is the Cluster id, `endpoint` its configured address, `route`
// `namespace/name`) or from fixed lists (`reason`, `limit`), so every series
// set is bounded.

import { Counter, Gauge } from 'prom-client'
import { registry } from './metrics.ts'

export const upstreamRetries = new Counter({
  name: 'sallyport_upstream_retries_total',
  help: 'Retried upstream attempts, by backend of the failed attempt and reason (connect, reset, refused_stream, timeout, status_5xx, status_gateway, status_code, grpc_status).',
  labelNames: ['backend', 'reason'] as const,
  registers: [registry],
})

export const upstreamRetryBudgetExhausted = new Counter({
  name: 'sallyport_upstream_retry_budget_exhausted_total',
  help: 'Retries refused because the retry budget (20 % of the backend\'s active requests, at least 3) was used up; maxParallelRetries refusals count in sallyport_upstream_overload_total{limit="max_parallel_retries"}.',
  registers: [registry],
})

export const upstreamFailovers = new Counter({
  name: 'sallyport_upstream_failover_total',
  help: 'Requests (or attempts) sent to a lower priority level than the route\'s primary, by route and levels.',
  labelNames: ['route', 'from_priority', 'to_priority'] as const,
  registers: [registry],
})

export const upstreamEjections = new Counter({
  name: 'sallyport_upstream_ejections_total',
  help: 'Endpoints ejected by passive outlier detection.',
  labelNames: ['backend'] as const,
  registers: [registry],
})

export const upstreamOverloads = new Counter({
  name: 'sallyport_upstream_overload_total',
  help: 'Requests refused by a circuit breaker limit (max_pending_requests, max_parallel_requests: answered 503; max_parallel_retries: the retry not made).',
  labelNames: ['backend', 'limit'] as const,
  registers: [registry],
})

export interface EndpointHealthSample {
  readonly backend: string
  readonly endpoint: string
  readonly healthy: boolean
}

const sources = new Set<() => Iterable<EndpointHealthSample>>()

/** Register a source of endpoint health (the Upstreams registry); returns the unregister function. */
export function addEndpointHealthSource(source: () => Iterable<EndpointHealthSample>): () => void {
  sources.add(source)
  return () => { sources.delete(source) }
}

export const upstreamEndpointHealthy = new Gauge({
  name: 'sallyport_upstream_endpoint_healthy',
  help: '1 when the endpoint takes traffic (not ejected, not failing active checks), 0 otherwise; endpoints of the current table only.',
  labelNames: ['backend', 'endpoint'] as const,
  registers: [registry],
  // --workers: each worker ejects and checks on its own; summed, a healthy
  // endpoint read 2 with two workers. 0 as soon as one worker has it out.
  aggregator: 'min',
  collect() {
    this.reset()
    for (const source of sources) {
      for (const s of source()) this.set({ backend: s.backend, endpoint: s.endpoint }, s.healthy ? 1 : 0)
    }
  },
})
