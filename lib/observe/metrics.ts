// Prometheus metrics (prom-client). One registry per process; `serve --workers N`
// aggregates the workers' registries in the primary (cluster-metrics.ts), each
// metric by its `aggregator`: sum unless said otherwise below.
// Names follow sallyport_<what>_<unit>; labels come from a fixed set.

import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

export const registry = new Registry()
collectDefaultMetrics({ register: registry, prefix: 'sallyport_process_' })
// --workers: a per-process limit, the same in every worker (inherited from the
// primary); their sum (40000 for a limit of 20000) is no limit anything has.
// The tightest one is what an open_fds alert must compare a worker with.
setAggregator('sallyport_process_process_max_fds', 'min')

/** The aggregator of a metric prom-client created (its default metrics take none as an option). */
function setAggregator(name: string, aggregator: 'min' | 'max' | 'first' | 'average' | 'omit'): void {
  const metric = registry.getSingleMetric(name) // absent where prom-client does not collect it (max_fds: Linux only)
  if (metric !== undefined) (metric as unknown as { aggregator: string }).aggregator = aggregator
}

// ── side loop ──
export const configReloads = new Counter({
  name: 'sallyport_config_reloads_total', help: 'Configuration snapshots compiled and swapped in.',
  labelNames: ['source'] as const, registers: [registry],
})
export const configReloadFailures = new Counter({
  name: 'sallyport_config_reload_failures_total', help: 'Configuration reloads that failed: kept the previous table (unreadable source, compile failure), or applied a table with a port that could not be bound (listen; once per table, not per bind retry).',
  labelNames: ['source', 'reason'] as const, registers: [registry],
})
export const configInvalidObjects = new Gauge({
  name: 'sallyport_config_invalid_objects', help: 'Objects dropped from the current snapshot because they failed validation.',
  labelNames: ['kind'] as const, registers: [registry],
  aggregator: 'max', // --workers: every worker sees the same files
})
export const tableBuiltAt = new Gauge({
  name: 'sallyport_route_table_built_timestamp_seconds', help: 'When the serving route table was compiled (unix seconds); age = time() - this.',
  registers: [registry], aggregator: 'min', // --workers: the stalest worker's table
})
export const tableVersion = new Gauge({
  name: 'sallyport_route_table_version', help: 'Version counter of the serving route table.', registers: [registry],
  aggregator: 'min', // --workers: the worker that lags behind
})
export const kubeStatusWrites = new Counter({
  name: 'sallyport_kube_status_writes_total', help: 'Status subresource writes by the leader (written, or failed after retries).',
  labelNames: ['kind', 'result'] as const, registers: [registry],
})
export const kubeLeader = new Gauge({
  name: 'sallyport_kube_leader', help: '1 while this replica holds the leader Lease (and writes status), else 0.',
  registers: [registry], aggregator: 'max', // --workers: only the first worker campaigns
})
export const compileDuration = new Histogram({
  name: 'sallyport_config_compile_duration_seconds', help: 'Time to compile a snapshot into a route table.',
  buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5], registers: [registry],
})
