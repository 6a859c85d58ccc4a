// Downstream HTTP metrics. Labels are bounded: route is the route's ns/name
// ('' when none matched), backend the cluster id, code the exact status,
// namespace/service_account the client's identity from table.clients ('' when unknown).
//
// Per-request cost: prom-client hashes and validates the label object on every
// inc/observe (≈1 µs per metric, 4 metrics per request). Instead each request
// updates one plain Series found by identity lookups (no label strings built),
// and the four families are rendered from the series at scrape time
// (bench/request-path.ts).

import { Counter, Gauge, type Metric } from 'prom-client'
import { registry } from './metrics.ts'
import { addSeriesPruner, namesLive, noteSeries } from './series-retention.ts'

export const downstreamActiveConnections = new Gauge({
  name: 'sallyport_downstream_active_connections', help: 'Open client connections by listening port.',
  labelNames: ['port'] as const, registers: [registry],
})
export const downstreamTlsHandshakeErrors = new Counter({
  name: 'sallyport_downstream_tls_handshake_errors_total',
  help: 'Client TLS handshakes that failed on a listening port, by reason class (client_cert_missing, client_cert_unknown_ca, protocol_version, timeout, ...).',
  labelNames: ['port', 'reason'] as const, registers: [registry],
})
export const downstreamConnectionsRejected = new Counter({
  name: 'sallyport_downstream_connections_rejected_total',
  help: 'Client connections closed at accept because their listening port had --max-connections open.',
  labelNames: ['port'] as const, registers: [registry],
})
export const downstreamConnectionsClosed = new Counter({
  name: 'sallyport_downstream_connections_closed_total',
  help: 'Client connections the gateway closed for abuse, by listening port and reason (premature_resets: an HTTP/2 rapid reset).',
  labelNames: ['port', 'reason'] as const, registers: [registry],
})
export const downstreamActiveStreams = new Gauge({
  name: 'sallyport_downstream_active_streams', help: 'Requests (HTTP/1.1 exchanges and HTTP/2 streams) in flight.',
  registers: [registry],
})

/** Label values of a request series; built only the first time a series is seen. */
export interface RequestLabels {
  readonly gateway: string
  readonly listener: string
  readonly route: string
  readonly backend: string
  readonly namespace: string
  readonly serviceAccount: string
  readonly status: number
}

/**
 * What identifies a request's series cheaply: the table objects it went
 * through (rule, cluster, client identity; null when none) plus listener and
 * status. Lookups are by object identity, so no label string is built or
 * hashed per request; `labels()` runs once per new combination.
 */
export interface RequestKey {
  readonly ruleKey: object | null
  readonly clusterKey: object | null
  readonly clientKey: object | null
  /** The serving listener (an object of the table: stable per table); null when none. */
  readonly listenerKey: object | null
  readonly status: number
  labels(): RequestLabels
}

const BUCKETS: readonly number[] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

class Series {
  readonly gateway: string
  readonly listener: string
  readonly route: string
  readonly backend: string
  readonly namespace: string
  readonly serviceAccount: string
  readonly code: string
  requests = 0
  bytesIn = 0
  bytesOut = 0
  sum = 0
  /** Non-cumulative counts per bucket; the last one is +Inf. */
  readonly buckets = new Float64Array(BUCKETS.length + 1)
  constructor(s: RequestLabels) {
    this.gateway = s.gateway
    this.listener = s.listener
    this.route = s.route
    this.backend = s.backend
    this.namespace = s.namespace
    this.serviceAccount = s.serviceAccount
    this.code = String(s.status)
  }
}

/**
 * Every series by label values. It outlives table swaps (counters stay
 * monotonic) until what it names leaves the configuration (series-retention.ts).
 */
const series = new Map<string, Series>()

const NONE = {}
type ByListener = Map<object, Series>
type ByClient = Map<object, ByListener>
type ByStatus = Map<number, ByClient>
type ByCluster = Map<object, ByStatus>
/**
 * rule → cluster → status → client → listener → Series; weak at the top so old
 * tables can go. Made anew when series are removed: a rule object of an old
 * table (or one compile reuses) must not lead to a series no longer rendered.
 */
let cache = new WeakMap<object, ByCluster>()

function child<K, V>(map: Map<K, V>, key: K, make: () => V): V {
  let v = map.get(key)
  if (v === undefined) {
    v = make()
    map.set(key, v)
  }
  return v
}

// hot path
function seriesOf(k: RequestKey): Series {
  const ruleKey = k.ruleKey ?? NONE
  let byCluster = cache.get(ruleKey)
  if (byCluster === undefined) {
    byCluster = new Map()
    cache.set(ruleKey, byCluster)
  }
  const byListener = child(child(child(byCluster, k.clusterKey ?? NONE, (): ByStatus => new Map()), k.status, (): ByClient => new Map()), k.clientKey ?? NONE, (): ByListener => new Map())
  const listenerKey = k.listenerKey ?? NONE
  let x = byListener.get(listenerKey)
  if (x === undefined) {
    const l = k.labels()
    const key = l.route + '\u0001' + l.backend + '\u0001' + l.status + '\u0001' + l.listener + '\u0001' + l.gateway + '\u0001' + l.namespace + '\u0001' + l.serviceAccount
    x = series.get(key)
    if (x === undefined) {
      x = new Series(l)
      series.set(key, x)
      noteSeries(x)
    }
    byListener.set(listenerKey, x)
  }
  return x
}

// hot path
/** Records one finished request in every request metric. */
export function recordRequest(k: RequestKey, seconds: number, bytesIn: number, bytesOut: number): void {
  const x = seriesOf(k)
  x.requests++
  x.bytesIn += bytesIn
  x.bytesOut += bytesOut
  x.sum += seconds
  let i = 0
  while (i < BUCKETS.length && seconds > BUCKETS[i]) i++
  x.buckets[i]++
}

export interface Value {
  value: number
  labels: Record<string, string | number>
  metricName?: string
}

/** A family rendered from the series at scrape time (prom-client's Metric shape: name, help, type, get()). */
export class Family {
  readonly name: string
  readonly help: string
  readonly type: 'counter' | 'histogram'
  readonly aggregator = 'sum' as const
  readonly #values: () => Value[]
  constructor(name: string, help: string, type: 'counter' | 'histogram', values: () => Value[]) {
    this.name = name
    this.help = help
    this.type = type
    this.#values = values
  }
  async get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: Value[] }> {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: this.#values() }
  }
  reset(): void {}
}

/** Sums series sharing the labels `pick` selects. */
function grouped<T>(pick: (s: Series) => Record<string, string>, init: () => T, add: (acc: T, s: Series) => void): Array<[Record<string, string>, T]> {
  const groups = new Map<string, [Record<string, string>, T]>()
  for (const s of series.values()) {
    const labels = pick(s)
    const key = Object.values(labels).join('\u0001')
    let g = groups.get(key)
    if (g === undefined) {
      g = [labels, init()]
      groups.set(key, g)
    }
    add(g[1], s)
  }
  return [...groups.values()]
}

const byRoute = (s: Series): Record<string, string> => ({ gateway: s.gateway, route: s.route })

function register(family: Family): void {
  registry.registerMetric(family as unknown as Metric<string>)
}

register(new Family('sallyport_downstream_requests_total', 'Requests answered on the data plane, by final status code.', 'counter', () => {
  const out: Value[] = []
  for (const s of series.values()) {
    out.push({
      value: s.requests,
      labels: { gateway: s.gateway, listener: s.listener, route: s.route, backend: s.backend, namespace: s.namespace, service_account: s.serviceAccount, code: s.code },
    })
  }
  return out
}))

register(new Family('sallyport_downstream_request_duration_seconds', 'Time from request arrival to the end of the response.', 'histogram', () => {
  const out: Value[] = []
  const name = 'sallyport_downstream_request_duration_seconds'
  const groups = grouped(
    (s) => ({ gateway: s.gateway, route: s.route, backend: s.backend, code: s.code }),
    () => ({ buckets: new Float64Array(BUCKETS.length + 1), sum: 0, count: 0 }),
    (acc, s) => { for (let i = 0; i < acc.buckets.length; i++) acc.buckets[i] += s.buckets[i]; acc.sum += s.sum; acc.count += s.requests },
  )
  for (const [labels, acc] of groups) {
    let cumulative = 0
    for (let i = 0; i < BUCKETS.length; i++) {
      cumulative += acc.buckets[i]
      out.push({ metricName: name + '_bucket', labels: { ...labels, le: BUCKETS[i] }, value: cumulative })
    }
    out.push({ metricName: name + '_bucket', labels: { ...labels, le: '+Inf' }, value: acc.count })
    out.push({ metricName: name + '_sum', labels, value: acc.sum })
    out.push({ metricName: name + '_count', labels, value: acc.count })
  }
  return out
}))

register(new Family('sallyport_downstream_bytes_received_total', 'Request bytes received from clients.', 'counter', () =>
  grouped(byRoute, () => ({ n: 0 }), (acc, s) => { acc.n += s.bytesIn }).map(([labels, acc]) => ({ labels, value: acc.n }))))

register(new Family('sallyport_downstream_bytes_sent_total', 'Response body bytes sent to clients.', 'counter', () =>
  grouped(byRoute, () => ({ n: 0 }), (acc, s) => { acc.n += s.bytesOut }).map(([labels, acc]) => ({ labels, value: acc.n }))))

// Series naming a Gateway, listener, route or backend the configuration no longer has.
addSeriesPruner((live) => {
  let removed = false
  for (const [key, s] of series) {
    if (namesLive(live, s)) continue
    series.delete(key)
    removed = true
  }
  if (removed) cache = new WeakMap()
  return 0
})
