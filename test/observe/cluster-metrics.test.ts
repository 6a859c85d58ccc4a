// The primary's aggregate over --workers: counters and histograms of a worker
// that exited stay in it (as of its last scrape); gauges go with the worker;
// each metric is combined by the aggregator its JSON names.
import t from 'tap'
import { Counter, Gauge, Histogram, Registry } from 'prom-client'
import { ClusterMetrics, parseMetricJson, type MetricJson } from '../../lib/observe/cluster-metrics.ts'
import { metricSum } from '../e2e/harness.ts'

/** One worker's registry: a counter, a histogram, a summed gauge and a per-process limit. */
function worker(): { registry: Registry; requests: Counter<'code'>; duration: Histogram; connections: Gauge; limit: Gauge; json: () => Promise<MetricJson[]> } {
  const registry = new Registry()
  const requests = new Counter({ name: 'req_total', help: 'h', labelNames: ['code'] as const, registers: [registry] })
  const duration = new Histogram({ name: 'dur_seconds', help: 'h', buckets: [0.1, 1], registers: [registry] })
  const connections = new Gauge({ name: 'conns', help: 'h', registers: [registry] })
  const limit = new Gauge({ name: 'max_fds', help: 'h', registers: [registry], aggregator: 'min' })
  // Over the IPC channel as JSON, as the worker sends it.
  const json = async (): Promise<MetricJson[]> => {
    const parsed = parseMetricJson(JSON.parse(JSON.stringify(await registry.getMetricsAsJSON())))
    if (parsed === null) throw new Error('not metric JSON')
    return parsed
  }
  return { registry, requests, duration, connections, limit, json }
}

t.test('a worker that exits keeps its counts; a late answer does not bring it back', async (t) => {
  const cm = new ClusterMetrics()
  const a = worker()
  const b = worker()
  for (const w of [a, b]) { w.connections.set(3); w.limit.set(20000) }
  a.requests.inc({ code: '200' }, 60)
  b.requests.inc({ code: '200' }, 40)
  b.requests.inc({ code: '503' }, 2)
  a.duration.observe(0.05)
  b.duration.observe(0.5)
  b.duration.observe(5)
  cm.observe(1, await a.json())
  cm.observe(2, await b.json())
  let text = await cm.render()
  t.equal(metricSum(text, 'req_total', { code: '200' }), 100)
  t.equal(metricSum(text, 'conns'), 6, 'gauges sum by default')
  t.equal(metricSum(text, 'max_fds'), 20000, 'a per-process limit by its own aggregator (min)')

  // b counts more after its last scrape, then dies: those are lost, the rest stays.
  b.requests.inc({ code: '200' }, 5)
  const late = await b.json()
  cm.exited(2)
  cm.observe(2, late)
  const c = worker()
  c.connections.set(1)
  c.limit.set(20000)
  c.requests.inc({ code: '200' })
  cm.observe(3, await c.json())
  text = await cm.render()
  t.equal(metricSum(text, 'req_total', { code: '200' }), 101, "a's 60 + b's 40 as last scraped + c's 1")
  t.equal(metricSum(text, 'req_total', { code: '503' }), 2, 'a series only the dead worker had')
  t.equal(metricSum(text, 'dur_seconds_count'), 3, 'histogram count kept')
  t.equal(metricSum(text, 'dur_seconds_bucket', { le: '1' }), 2, 'cumulative buckets kept')
  t.equal(metricSum(text, 'dur_seconds_bucket', { le: '+Inf' }), 3)
  t.ok(Math.abs(metricSum(text, 'dur_seconds_sum') - 5.55) < 1e-9, 'histogram sum kept')
  t.equal(metricSum(text, 'conns'), 4, "the dead worker's gauges are gone")
  t.equal(metricSum(text, 'max_fds'), 20000)

  // Every worker gone: the retained counts alone.
  cm.exited(1)
  cm.exited(3)
  text = await cm.render()
  t.equal(metricSum(text, 'req_total', { code: '200' }), 101)
  t.equal(metricSum(text, 'conns'), 0)
  t.match(text, /# TYPE req_total counter/)
})

t.test('parseMetricJson refuses what is not metric JSON', async (t) => {
  t.equal(parseMetricJson(null), null)
  t.equal(parseMetricJson([{ name: 'x' }]), null)
  t.equal(parseMetricJson([{ name: 'x', help: 'h', type: 'counter', values: [{ value: 'one', labels: {} }] }]), null)
  t.same(parseMetricJson([{ name: 'x', help: 'h', type: 'gauge', values: [{ value: null, labels: {} }, { value: 1, labels: { a: 'b' } }] }]),
    [{ name: 'x', help: 'h', type: 'gauge', values: [{ value: 1, labels: { a: 'b' } }] }], 'a NaN sample (null in JSON) is skipped')
})
