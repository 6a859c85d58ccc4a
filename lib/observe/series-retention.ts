// Metric series of configuration that is gone.
//
// Labels name configuration objects: `gateway` (namespace/name), `listener`
// (with its Gateway), `route` (namespace/name), `backend` (the Cluster id),
// `port` (a listener port) and `extension` (with its `type`). A reload that
// removes one leaves its series untouched from then on; before, they stayed
// for good (each route/backend pair ever served: ~37 series; 600 reloads with
// new names took /metrics from 813 to 23,013 lines). Prometheus exporters drop
// such series (Envoy, once a removed cluster has drained; prom-client offers
// `remove(labels)`), and so does sallyport:
//
// - Each Runtime records the names of the table it serves (ServedNames). A
//   name the new table does not have is retired at the swap, and the series
//   naming it are removed `graceMs` later (--removed-series-seconds, default
//   300): time for the requests still running on the old table to finish and
//   be counted, and for Prometheus to scrape their last values. A name that
//   comes back in time is simply live again; one that comes back later starts
//   its counters from 0, which Prometheus reads as a counter reset.
// - A gauge of things still open (connections of a removed port, exchanges of
//   a removed backend) goes once it reads 0: removed earlier, the decrement of
//   the last one would bring it back below 0.
// - A request that outlives the grace on the old table counts in a series
//   made anew, which the next sweep removes (request, upstream and L4
//   connection series arm one; a rarer counter, an upstream error, waits for
//   the sweep of the next reload).
// - With --workers the primary keeps what dead workers counted; each worker
//   sends the names it keeps with its metrics, and the primary drops the kept
//   counts of names no live worker has (cluster-metrics.ts).
//
// Series whose labels name no configuration object (client namespace and
// service account, codes, reasons) are not touched.

import { Counter, Gauge, Histogram } from 'prom-client'
import type { RouteRule, RouteTable, VirtualHost, HostIndex, L4Route, PrefixNode, RouteMatch } from '../compile/table.ts'
import { registry } from './metrics.ts'
import { logger } from './log.ts'

const log = logger('metrics')

const SEP = '\u0001'

/** The labels that name configuration objects (an extension's `type` goes with its name). */
export const CONFIG_LABELS: ReadonlySet<string> = new Set(['gateway', 'listener', 'route', 'backend', 'port', 'extension'])

/** Names a series may carry; what is absent or '' names nothing. */
export interface NamedLabels {
  readonly gateway?: string | number
  readonly listener?: string | number
  readonly route?: string | number
  readonly backend?: string | number
  readonly port?: string | number
  readonly extension?: string | number
  readonly type?: string | number
}

/** Names as keys: a letter for the kind, then the name. */
export interface NameSet {
  has(key: string): boolean
}

export const nameKey = {
  gateway: (gateway: string): string => 'g' + gateway,
  listener: (gateway: string, listener: string): string => 'l' + gateway + SEP + listener,
  route: (route: string): string => 'r' + route,
  backend: (backend: string): string => 'b' + backend,
  port: (port: string | number): string => 'p' + String(port),
  extension: (name: string, type: string): string => 'e' + name + SEP + type,
} as const

/** Whether every configuration object `labels` names is in `names`. */
export function namesLive(names: NameSet, labels: NamedLabels): boolean {
  const gateway = labels.gateway
  if (gateway !== undefined && gateway !== '') {
    if (!names.has(nameKey.gateway(String(gateway)))) return false
    const listener = labels.listener
    if (listener !== undefined && listener !== '' && !names.has(nameKey.listener(String(gateway), String(listener)))) return false
  }
  const route = labels.route
  if (route !== undefined && route !== '' && !names.has(nameKey.route(String(route)))) return false
  const backend = labels.backend
  if (backend !== undefined && backend !== '' && !names.has(nameKey.backend(String(backend)))) return false
  const port = labels.port
  if (port !== undefined && port !== '' && !names.has(nameKey.port(port))) return false
  const extension = labels.extension
  if (extension !== undefined && extension !== '' && !names.has(nameKey.extension(String(extension), String(labels.type ?? '')))) return false
  return true
}

/** Every name `table` can give a label: what its ports, listeners, rules, clusters and extension chains are called. */
export function tableNames(table: RouteTable): Set<string> {
  const out = new Set<string>()
  const rules = new Set<RouteRule>()
  const l4 = new Set<L4Route>()
  for (const [port, entry] of table.ports) {
    out.add(nameKey.port(port))
    for (const l of entry.listeners) {
      out.add(nameKey.gateway(l.gateway))
      out.add(nameKey.listener(l.gateway, l.name))
    }
    if (entry.http !== null) addHostRules(entry.http, rules)
    if (entry.tcp !== null) l4.add(entry.tcp)
    if (entry.sni !== null) {
      for (const r of entry.sni.exact.values()) l4.add(r)
      for (const w of entry.sni.wildcards) l4.add(w.value)
      if (entry.sni.fallback !== null) l4.add(entry.sni.fallback)
    }
  }
  for (const rule of rules) {
    out.add(nameKey.route(rule.route.namespace + '/' + rule.route.name))
    // CONNECT to the requested host: a template cluster outside table.clusters.
    const requested = rule.connect?.requested
    if (requested != null) out.add(nameKey.backend(requested.cluster.id))
  }
  for (const r of l4) out.add(nameKey.route(r.route.namespace + '/' + r.route.name))
  for (const id of table.clusters.keys()) out.add(nameKey.backend(id))
  for (const chain of table.extensionChains ?? []) {
    for (const e of chain.extensions) out.add(nameKey.extension(e.name, e.type))
  }
  return out
}

function addHostRules(index: HostIndex, rules: Set<RouteRule>): void {
  const vhosts = new Set<VirtualHost>(index.exact.values())
  for (const w of index.wildcards) vhosts.add(w.value)
  if (index.fallback !== null) vhosts.add(index.fallback)
  const add = (matches: readonly RouteMatch[]): void => { for (const m of matches) rules.add(m.rule) }
  for (const v of vhosts) {
    for (const matches of v.exactPaths.values()) add(matches)
    add(v.regexes)
    const stack: PrefixNode[] = [v.prefixes]
    for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
      add(node.matches)
      for (const child of node.children.values()) stack.push(child)
    }
  }
}

/**
 * The names one runtime's tables gave labels, lately: those of the serving
 * table, and those it dropped less than `graceMs` ago. Pure: times are passed in.
 */
export class ServedNames implements NameSet {
  readonly graceMs: number
  /** Set between the swap and `serve`: the new table's names are not known yet, so none retires. */
  applying = false
  #served = false
  #current: ReadonlySet<string> = new Set()
  /** Names the serving table does not have → when they left it (ms). */
  readonly #retired = new Map<string, number>()

  constructor(graceMs: number) { this.graceMs = graceMs }

  /** A table with `names` serves from `now`: names of the one before that it lacks retire. When a sweep is due (ms), or null. */
  serve(names: ReadonlySet<string>, now: number): number | null {
    for (const key of this.#retired.keys()) if (names.has(key)) this.#retired.delete(key)
    for (const key of this.#current) if (!names.has(key)) this.#retired.set(key, now)
    this.#current = names
    this.#served = true
    this.applying = false
    return this.#due()
  }

  has(key: string): boolean {
    return this.#current.has(key) || this.#retired.has(key)
  }

  /** Forget the names retired more than graceMs before `now`. When the next sweep is due (ms), or null. */
  expire(now: number): number | null {
    for (const [key, at] of this.#retired) if (at + this.graceMs <= now) this.#retired.delete(key)
    return this.#due()
  }

  /** What it keeps, for the primary of --workers; null before its first table. */
  names(): string[] | null {
    return this.#served ? [...this.#current, ...this.#retired.keys()] : null
  }

  #due(): number | null {
    let first = Infinity
    for (const at of this.#retired.values()) if (at < first) first = at
    return first === Infinity ? null : first + this.graceMs
  }
}

/**
 * Removes, from series it owns, those naming something `live` lacks; returns
 * how many of those it had to keep (a gauge not yet 0), so that a sweep comes back for them.
 */
export type SeriesPruner = (live: NameSet) => number

const owners = new Set<ServedNames>()
const pruners = new Set<SeriesPruner>()
/** Least time before a sweep comes back for the gauges it had to keep (not yet 0). */
const RETRY_MIN_MS = 5_000

/** Names some owner keeps; while one is between a swap and its `serve`, every name (none retires then). */
class LiveView implements NameSet {
  deferred = false
  has(key: string): boolean {
    for (const o of owners) {
      if (o.applying) { this.deferred = true; return true }
      if (o.has(key)) return true
    }
    return false
  }
}

/** Register the series a module keeps outside prom-client (http-metrics.ts, upstream-metrics.ts). */
export function addSeriesPruner(pruner: SeriesPruner): () => void {
  pruners.add(pruner)
  return () => { pruners.delete(pruner) }
}

/** Take part in sweeps with `names` (a Runtime); returns the way out. */
export function addServedNames(names: ServedNames): () => void {
  owners.add(names)
  return () => { owners.delete(names) }
}

/** The names this process keeps, for the primary of --workers; null while none has served a table. */
export function keptNames(): string[] | null {
  let out: string[] | null = null
  for (const o of owners) {
    const n = o.names()
    if (n !== null) out = out === null ? n : out.concat(n)
  }
  return out
}

/**
 * Series with `labels` were made (once per label set, not per request) or
 * counted in (an L4 connection ended): if they name something retired — a
 * request that outlived the grace on an old table — a sweep comes for them.
 */
export function noteSeries(labels: NamedLabels): void {
  if (owners.size === 0) return
  const view = new LiveView()
  if (namesLive(view, labels)) return
  let grace = Infinity
  for (const o of owners) if (o.graceMs < grace) grace = o.graceMs
  scheduleSweep(Date.now() + grace)
}

/**
 * One sweep at `now`: names retired longer than their grace are forgotten, and
 * every series naming something no owner keeps is removed. When the next is due (ms), or null.
 */
export async function sweepRemovedSeries(now: number): Promise<number | null> {
  if (owners.size === 0) return null
  for (const o of owners) if (o.applying) return now + RETRY_MIN_MS // nothing retires until its serve()
  let next = Infinity
  let grace = Infinity
  for (const o of owners) {
    const due = o.expire(now)
    if (due !== null && due < next) next = due
    if (o.graceMs < grace) grace = o.graceMs
  }
  const live = new LiveView()
  let kept = 0
  for (const prune of pruners) kept += prune(live)
  kept += await pruneRegistry(live)
  if (kept > 0 || live.deferred) next = Math.min(next, now + Math.max(grace, RETRY_MIN_MS))
  return next === Infinity ? null : next
}

/** prom-client's metrics (counters, gauges, histograms) with a label that names configuration. */
async function pruneRegistry(live: NameSet): Promise<number> {
  let kept = 0
  for (const metric of registry.getMetricsAsArray()) {
    if (!(metric instanceof Counter || metric instanceof Gauge || metric instanceof Histogram)) continue
    const labelNames = (metric as unknown as { readonly labelNames?: readonly string[] }).labelNames ?? []
    if (!labelNames.some((l) => CONFIG_LABELS.has(l))) continue
    const gauge = metric instanceof Gauge
    // One value per label set; a histogram's `_count` (its buckets add `le`).
    const count = metric instanceof Histogram ? `${metric.name}_count` : undefined
    const { values } = await metric.get()
    for (const v of values as ReadonlyArray<{ readonly value: number; readonly labels: Partial<Record<string, string | number>>; readonly metricName?: string }>) {
      if (count !== undefined && v.metricName !== count) continue
      if (namesLive(live, v.labels)) continue
      if (gauge && v.value !== 0) { kept++; continue }
      metric.remove(v.labels)
    }
  }
  return kept
}

let timer: NodeJS.Timeout | null = null
let timerAt = Infinity

/** A sweep at `at` (ms), unless one is due sooner. */
function scheduleSweep(at: number): void {
  if (timer !== null && timerAt <= at) return
  if (timer !== null) clearTimeout(timer)
  timerAt = at
  timer = setTimeout(runSweep, Math.max(0, at - Date.now()))
  timer.unref()
}

function runSweep(): void {
  timer = null
  timerAt = Infinity
  sweepRemovedSeries(Date.now()).then(
    (next) => { if (next !== null) scheduleSweep(next) },
    (err: unknown) => {
      log.warn({ err }, 'removing the metric series of removed configuration failed; trying again in a minute')
      scheduleSweep(Date.now() + 60_000)
    },
  )
}

/** A Runtime's part: the names it serves, retired at each swap, swept on a timer. */
export class RemovedSeries {
  readonly #names: ServedNames
  readonly #leave: () => void

  constructor(graceMs: number) {
    this.#names = new ServedNames(graceMs)
    this.#leave = addServedNames(this.#names)
  }

  /** A table is about to be swapped in: no name retires until `served`. */
  applying(): void {
    this.#names.applying = true
  }

  /** `table` serves (after the swap, off the requests' way: the walk is O(table)). */
  served(table: RouteTable): void {
    const due = this.#names.serve(tableNames(table), Date.now())
    if (due !== null) scheduleSweep(due)
  }

  close(): void {
    this.#leave()
  }
}
