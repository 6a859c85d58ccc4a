// `serve --workers N`: the primary's /metrics, aggregated over the workers.
//
// prom-client's AggregatorRegistry.clusterMetrics() aggregates the workers that
// are alive at scrape time, so when a worker dies and is replaced its counts
// vanish: an aggregated counter goes from 100 to 50, which Prometheus reads as a
// counter reset (rate() and increase() then count the survivors' whole total as
// new). Here the primary keeps the last metrics each worker answered with and,
// when a worker exits, folds its counters and histograms (buckets, sum, count)
// into a retained base that is added to every later aggregate. Aggregated
// counters therefore never go down across worker restarts.
//
// What is still lost: what a dead worker counted after the primary last scraped
// it (a worker that dies before its first scrape loses everything it counted).
// The aggregate does not go down because of it: it was never shown. Gauges are
// not retained: a dead worker's connections, pool sizes or memory are gone with
// it. How each metric is combined across workers is its `aggregator` (sum
// unless the metric says otherwise: lib/observe/metrics.ts), which
// AggregatorRegistry.aggregate reads from the first worker's JSON.
//
// Kept counts of configuration that is gone go too: each worker sends, with its
// metrics, the names of the Gateways, listeners, routes, backends, ports and
// extensions it still keeps series of (series-retention.ts), and a kept series
// naming something no live worker keeps is dropped, as the workers dropped
// theirs; it would otherwise stay for good (and come back in every scrape).

import { AggregatorRegistry } from 'prom-client'
import { namesLive, type NameSet } from './series-retention.ts'

/** A metric as `registry.getMetricsAsJSON()` gives it, after a trip over the cluster IPC channel. */
export interface MetricJson {
  readonly name: string
  readonly help: string
  readonly type: string
  readonly aggregator?: string
  readonly values: readonly MetricJsonValue[]
}

export interface MetricJsonValue {
  readonly value: number
  readonly labels: Readonly<Record<string, string | number>>
  /** Histograms: `<name>_bucket`, `_sum`, `_count`. */
  readonly metricName?: string
}

interface Retained {
  readonly name: string
  readonly help: string
  readonly type: string
  readonly metricName: string | undefined
  readonly labels: Readonly<Record<string, string | number>>
  value: number
}

export class ClusterMetrics {
  /** Worker id → its last answer. */
  readonly #last = new Map<number, readonly MetricJson[]>()
  /** Worker id → the configuration names it keeps series of (absent: not known yet). */
  readonly #names = new Map<number, ReadonlySet<string>>()
  /** Workers gone: an answer that arrives late must not bring one back. */
  readonly #exited = new Set<number>()
  /** Series key → counts of the workers gone. */
  readonly #retained = new Map<string, Retained>()

  /** Worker `id` answered a scrape with `metrics`, keeping series of `names` (null: it has no table yet). */
  observe(id: number, metrics: readonly MetricJson[], names: readonly string[] | null = null): void {
    if (this.#exited.has(id)) return
    this.#last.set(id, metrics)
    if (names !== null) this.#names.set(id, new Set(names))
  }

  /** Worker `id` exited: keep what it had counted when last scraped. */
  exited(id: number): void {
    this.#exited.add(id)
    const last = this.#last.get(id)
    this.#last.delete(id)
    this.#names.delete(id)
    if (last === undefined) return
    for (const metric of last) {
      // Only what is monotonic and summed: counters and histograms. A counter a
      // metric aggregates otherwise (none today) would not add up this way.
      if (metric.type !== 'counter' && metric.type !== 'histogram') continue
      if (metric.aggregator !== undefined && metric.aggregator !== 'sum') continue
      for (const v of metric.values) {
        const key = seriesKey(metric.name, v)
        const r = this.#retained.get(key)
        if (r !== undefined) r.value += v.value
        else this.#retained.set(key, { name: metric.name, help: metric.help, type: metric.type, metricName: v.metricName, labels: v.labels, value: v.value })
      }
    }
  }

  /** Prometheus text: the live workers' last answers, the retained counts of those gone, and `own`: what the primary itself counts. */
  async render(own: readonly MetricJson[] = []): Promise<string> {
    this.#forgetRemoved()
    const lists: Array<readonly MetricJson[]> = [...this.#last.values()]
    if (own.length > 0) lists.push(own)
    if (this.#retained.size > 0) lists.push(this.#retainedJson())
    if (lists.length === 0) return ''
    return AggregatorRegistry.aggregate(lists).metrics()
  }

  /** Drop kept counts naming what no live worker keeps; nothing while no live worker has said what it keeps. */
  #forgetRemoved(): void {
    if (this.#retained.size === 0 || this.#names.size === 0) return
    const sets = [...this.#names.values()]
    const live: NameSet = { has: (key) => sets.some((s) => s.has(key)) }
    for (const [key, r] of this.#retained) if (!namesLive(live, r.labels)) this.#retained.delete(key)
  }

  #retainedJson(): MetricJson[] {
    const byName = new Map<string, { name: string; help: string; type: string; aggregator: string; values: MetricJsonValue[] }>()
    for (const r of this.#retained.values()) {
      let m = byName.get(r.name)
      if (m === undefined) byName.set(r.name, m = { name: r.name, help: r.help, type: r.type, aggregator: 'sum', values: [] })
      m.values.push(r.metricName === undefined ? { value: r.value, labels: r.labels } : { value: r.value, labels: r.labels, metricName: r.metricName })
    }
    return [...byName.values()]
  }
}

function seriesKey(name: string, v: MetricJsonValue): string {
  const labels = Object.keys(v.labels).sort().map((k) => `${k}=${String(v.labels[k])}`).join('\u0001')
  return `${name}\u0000${v.metricName ?? ''}\u0000${labels}`
}

/** The names a worker keeps series of, checked: it crossed a process boundary. null: none or not a list of strings. */
export function parseNames(data: unknown): string[] | null {
  if (!Array.isArray(data)) return null
  for (const n of data as unknown[]) if (typeof n !== 'string') return null
  return data as string[]
}

/** The metrics a worker sent, checked: it crossed a process boundary. null: not metric JSON. */
export function parseMetricJson(data: unknown): MetricJson[] | null {
  if (!Array.isArray(data)) return null
  const out: MetricJson[] = []
  for (const m of data as unknown[]) {
    if (typeof m !== 'object' || m === null) return null
    const { name, help, type, aggregator, values } = m as Record<string, unknown>
    if (typeof name !== 'string' || typeof help !== 'string' || typeof type !== 'string' || !Array.isArray(values)) return null
    if (aggregator !== undefined && typeof aggregator !== 'string') return null
    const vals: MetricJsonValue[] = []
    for (const v of values as unknown[]) {
      if (typeof v !== 'object' || v === null) return null
      const { value, labels, metricName } = v as Record<string, unknown>
      // JSON turns NaN and ±Infinity into null; such a sample is skipped, not the scrape.
      if (value === null) continue
      if (typeof value !== 'number' || typeof labels !== 'object' || labels === null) return null
      if (metricName !== undefined && typeof metricName !== 'string') return null
      vals.push(metricName === undefined ? { value, labels: labels as Record<string, string | number> } : { value, labels: labels as Record<string, string | number>, metricName })
    }
    out.push(aggregator === undefined ? { name, help, type, values: vals } : { name, help, type, aggregator, values: vals })
  }
  return out
}
