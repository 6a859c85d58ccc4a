// Series of removed configuration (lib/observe/series-retention.ts): the names
// a table gives labels, their retirement at a swap, and sweeps that remove
// every series naming a retired name once its grace has passed — request
// series, upstream series, prom-client counters, histograms and gauges (a
// gauge only at 0) — while live names keep theirs. The primary of --workers
// drops the counts it kept from dead workers the same way. Times are passed
// in: a grace of an hour keeps the module's own timer out of the test.
import t from 'tap'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { compile } from '../../lib/compile/compile.ts'
import { registry } from '../../lib/observe/metrics.ts'
import { recordRequest, type RequestKey, type RequestLabels } from '../../lib/observe/http-metrics.ts'
import { backendSeries, upstreamConnectErrors } from '../../lib/observe/upstream-metrics.ts'
import { l4ActiveConnections, recordL4Connection } from '../../lib/observe/l4-metrics.ts'
import { downstreamActiveConnections } from '../../lib/observe/http-metrics.ts'
import { extensionFailures } from '../../lib/observe/extension-metrics.ts'
import { upstreamFailovers } from '../../lib/observe/resilience-metrics.ts'
import {
  addServedNames, keptNames, nameKey, namesLive, ServedNames, sweepRemovedSeries, tableNames,
} from '../../lib/observe/series-retention.ts'
import { ClusterMetrics, parseMetricJson, parseNames, type MetricJson } from '../../lib/observe/cluster-metrics.ts'
import { metricSum } from '../e2e/harness.ts'

const HOUR = 3_600_000

const YAML = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: egress, namespace: default }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: http, protocol: HTTP, port: 8080, allowedRoutes: { namespaces: { from: All } } }
    - { name: tcp, protocol: TCP, port: 5432 }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: api, namespace: default }
spec:
  endpoints: [{ ip: { address: 10.0.0.1, port: 443 } }]
  extensions:
    - { name: limit, type: RateLimit, config: { requests: 10, unit: Second } }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: db, namespace: default }
spec:
  endpoints: [{ ip: { address: 10.0.0.2, port: 5432 } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: exact, namespace: default }
spec:
  parentRefs: [{ name: egress, sectionName: http }]
  hostnames: [api.example.test]
  rules:
    - matches: [{ path: { type: Exact, value: /v1/models } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: 443 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: deep, namespace: team }
spec:
  parentRefs: [{ name: egress, namespace: default, sectionName: http }]
  hostnames: ["*.example.test"]
  rules:
    - matches: [{ path: { type: PathPrefix, value: /a/b/c } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, namespace: default, port: 443 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: regex, namespace: default }
spec:
  parentRefs: [{ name: egress, sectionName: http }]
  rules:
    - matches: [{ path: { type: RegularExpression, value: "/r/[0-9]+" } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: 443 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: anywhere
  namespace: default
  annotations: { sallyport.io/connect-ports: "443" }
spec:
  parentRefs: [{ name: egress, sectionName: http }]
  hostnames: ["*.tunnel.test"]
  rules: [{}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: { name: pg, namespace: default }
spec:
  parentRefs: [{ name: egress, sectionName: tcp }]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: db, port: 5432 }] }]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: team-to-default, namespace: default }
spec:
  from: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: team }]
  to: [{ group: gateway.envoyproxy.io, kind: Backend }]
---
apiVersion: v1
kind: Namespace
metadata: { name: team }
`

t.test('tableNames: every name a table gives a label', async (t) => {
  const parsed = parseManifests('names.yaml', YAML)
  const snapshot = buildSnapshot(parsed.docs, parsed.problems)
  t.same(snapshot.problems.filter((p) => p.severity === 'error'), [])
  const names = tableNames(compile(snapshot, { now: 0, version: 1, gatewayClass: 'sallyport' }).table)
  for (const key of [
    nameKey.port(8080), nameKey.port(5432),
    nameKey.gateway('default/egress'), nameKey.listener('default/egress', 'http'), nameKey.listener('default/egress', 'tcp'),
    nameKey.route('default/exact'), nameKey.route('team/deep'), nameKey.route('default/regex'), nameKey.route('default/anywhere'), nameKey.route('default/pg'),
    nameKey.backend('Backend/default/api:443'), nameKey.backend('Backend/default/db:5432#l4'),
    nameKey.backend('CONNECT/default/anywhere/0'),
    nameKey.extension('limit', 'RateLimit'),
  ]) t.ok(names.has(key), key.replace('\u0001', ' '))
  t.notOk(names.has(nameKey.route('default/nothing')))
})

t.test('namesLive: every named object must be kept; empty names nothing', async (t) => {
  const live = new Set([nameKey.gateway('g/w'), nameKey.listener('g/w', 'http'), nameKey.route('ns/r'), nameKey.backend('B'), nameKey.port(80), nameKey.extension('x', 'Plugin')])
  t.ok(namesLive(live, { gateway: 'g/w', listener: 'http', route: 'ns/r', backend: 'B', code: '200' } as never))
  t.ok(namesLive(live, { gateway: 'g/w', listener: '', route: '', backend: '' }), 'unrouted')
  t.ok(namesLive(live, { port: 80 }), 'a port as a number')
  t.ok(namesLive(live, { extension: 'x', type: 'Plugin' }))
  t.ok(namesLive(live, {}), 'no configuration label')
  t.notOk(namesLive(live, { gateway: 'g/other' }))
  t.notOk(namesLive(live, { gateway: 'g/w', listener: 'https' }), 'a listener is its Gateway\'s')
  t.notOk(namesLive(live, { gateway: 'g/w', route: 'ns/gone' }))
  t.notOk(namesLive(live, { backend: 'C' }))
  t.notOk(namesLive(live, { port: '81' }))
  t.notOk(namesLive(live, { extension: 'x', type: 'RateLimit' }), 'an extension with its type')
})

t.test('ServedNames: a name leaves graceMs after the table that had it was replaced; one that comes back stays', async (t) => {
  const s = new ServedNames(1000)
  t.same(s.names(), null, 'nothing before the first table')
  t.equal(s.serve(new Set(['a', 'b']), 100), null, 'nothing retired')
  t.equal(s.serve(new Set(['b', 'c']), 200), 1200, 'a retired at 200: due at 1200')
  t.ok(s.has('a') && s.has('b') && s.has('c'))
  t.same(s.names()?.sort(), ['a', 'b', 'c'])
  t.equal(s.serve(new Set(['c']), 500), 1200, 'b retired at 500; the first due still at 1200')
  t.equal(s.expire(1199), 1200)
  t.ok(s.has('a'), 'within its grace')
  t.equal(s.expire(1200), 1500, 'a gone; b due at 1500')
  t.notOk(s.has('a'))
  t.equal(s.serve(new Set(['b', 'c']), 1300), null, 'b is back: nothing retired')
  t.equal(s.expire(5000), null)
  t.ok(s.has('b') && s.has('c'))
})

/** A request series key as forward.ts makes one. */
function key(labels: Omit<RequestLabels, 'namespace' | 'serviceAccount'>, rule: object): RequestKey {
  return { ruleKey: rule, clusterKey: null, clientKey: null, listenerKey: null, status: labels.status, labels: () => ({ ...labels, namespace: '', serviceAccount: '' }) }
}

t.test('a sweep removes the series of retired names once their grace has passed, and only those', async (t) => {
  const owner = new ServedNames(HOUR)
  const leave = addServedNames(owner)
  t.teardown(leave)
  const A = { gateway: 'default/gw-a', listener: 'l-a', route: 'default/route-a', backend: 'Backend/default/a:1', port: '1001' }
  const B = { gateway: 'default/gw-b', listener: 'l-b', route: 'default/route-b', backend: 'Backend/default/b:1', port: '1002' }
  const namesOf = (x: typeof A): Set<string> => new Set([nameKey.gateway(x.gateway), nameKey.listener(x.gateway, x.listener), nameKey.route(x.route), nameKey.backend(x.backend), nameKey.port(x.port), nameKey.extension(`ext-${x.port}`, 'Plugin')])
  const t0 = Date.now()
  owner.serve(namesOf(A), t0)
  const clusterA = { id: A.backend }
  const clusterB = { id: B.backend }
  const ruleA = {}
  const ruleB = {}
  // What A's and B's requests leave behind, in every kind of metric.
  const record = (x: typeof A, rule: object, cluster: { id: string }): void => {
    recordRequest(key({ gateway: x.gateway, listener: x.listener, route: x.route, backend: x.backend, status: 200 }, rule), 0.01, 10, 20)
    backendSeries(cluster).observe('200', 0.01)
    upstreamConnectErrors.inc({ backend: x.backend, reason: 'refused' })
    upstreamFailovers.inc({ route: x.route, from_priority: '0', to_priority: '1' })
    extensionFailures.inc({ extension: `ext-${x.port}`, type: 'Plugin', outcome: 'open' })
    recordL4Connection({ gateway: x.gateway, listener: x.listener, route: x.route, backend: x.backend, code: 'ok', bytesIn: 1, bytesOut: 2, seconds: 1 })
    downstreamActiveConnections.inc({ port: x.port })
    downstreamActiveConnections.dec({ port: x.port })
  }
  record(A, ruleA, clusterA)
  l4ActiveConnections.inc({ gateway: A.gateway, listener: A.listener }) // a connection of A still open
  const naming = async (x: typeof A): Promise<string[]> => (await registry.metrics()).split('\n').filter((l) => !l.startsWith('#') &&
    (l.includes(`"${x.gateway}"`) || l.includes(`"${x.route}"`) || l.includes(`"${x.backend}"`) || l.includes(`"${x.port}"`) || l.includes(`"ext-${x.port}"`)))
  const before = (await naming(A)).length
  t.ok(before > 50, `${before} series name A's objects`)

  // B replaces A.
  owner.applying = true
  t.equal(await sweepRemovedSeries(t0 + 2 * HOUR), t0 + 2 * HOUR + 5000, 'between a swap and its serve(), no sweep (one comes back)')
  t.equal((await naming(A)).length, before)
  t.equal(owner.serve(namesOf(B), t0 + 10), t0 + 10 + HOUR, 'A retires: a sweep due after the grace')
  record(B, ruleB, clusterB)
  t.equal(await sweepRemovedSeries(t0 + 20), t0 + 10 + HOUR, 'within the grace: nothing removed')
  t.equal((await naming(A)).length, before)

  const next = await sweepRemovedSeries(t0 + 10 + HOUR)
  t.same(await naming(A), [`sallyport_l4_active_connections{gateway="${A.gateway}",listener="${A.listener}"} 1`], 'only the gauge of a connection still open names A')
  t.equal(next, t0 + 10 + 2 * HOUR, 'a sweep comes back for it')
  const text = await registry.metrics()
  t.equal(metricSum(text, 'sallyport_downstream_requests_total', { route: B.route }), 1, 'B\'s series stay')
  t.equal(metricSum(text, 'sallyport_upstream_request_duration_seconds_count', { backend: B.backend }), 1)
  t.equal(metricSum(text, 'sallyport_upstream_connect_errors_total', { backend: B.backend }), 1)
  t.equal(metricSum(text, 'sallyport_l4_connection_duration_seconds_count', { backend: B.backend }), 1)
  t.equal(metricSum(text, 'sallyport_extension_failures_total', { extension: 'ext-1002' }), 1)
  t.match(text, `sallyport_downstream_active_connections{port="${B.port}"} 0`)

  l4ActiveConnections.dec({ gateway: A.gateway, listener: A.listener })
  t.equal(await sweepRemovedSeries(t0 + 10 + 2 * HOUR), null, 'the gauge at 0 goes; nothing left to come back for')
  t.same(await naming(A), [])

  // A request that outlived the grace on A's table: counted anew from 0, in a series the next sweep removes.
  recordRequest(key({ gateway: A.gateway, listener: A.listener, route: A.route, backend: A.backend, status: 200 }, ruleA), 0.01, 0, 0)
  backendSeries(clusterA).observe('200', 0.01)
  const late = await registry.metrics()
  t.equal(metricSum(late, 'sallyport_downstream_requests_total', { route: A.route }), 1, 'not the old count: the rule object no longer leads to the removed series')
  t.equal(metricSum(late, 'sallyport_upstream_request_duration_seconds_count', { backend: A.backend }), 1, 'nor the Cluster object')
  await sweepRemovedSeries(t0 + 10 + 3 * HOUR)
  t.same(await naming(A), [])
  t.equal(metricSum(await registry.metrics(), 'sallyport_downstream_requests_total', { route: B.route }), 1, 'B still counted')

  // And B's requests still land in B's series after those removals.
  record(B, ruleB, clusterB)
  t.equal(metricSum(await registry.metrics(), 'sallyport_downstream_requests_total', { route: B.route }), 2)
  t.same(keptNames()?.sort(), [...namesOf(B)].sort(), 'what a worker tells its primary')
})

/** A worker's metrics over the IPC channel: one counter labelled by route. */
function answer(counts: Record<string, number>): MetricJson[] {
  const json = [{ name: 'req_total', help: 'h', type: 'counter', aggregator: 'sum', values: Object.entries(counts).map(([route, value]) => ({ value, labels: { route, code: '200' } })) }]
  const parsed = parseMetricJson(JSON.parse(JSON.stringify(json)))
  if (parsed === null) throw new Error('not metric JSON')
  return parsed
}

t.test('--workers: the counts kept from a dead worker go once no live worker keeps what they name', async (t) => {
  const cm = new ClusterMetrics()
  const both = [nameKey.route('ns/a'), nameKey.route('ns/b')]
  cm.observe(1, answer({ 'ns/a': 5, 'ns/b': 1 }), both)
  cm.observe(2, answer({ 'ns/a': 3 }), both)
  cm.exited(1)
  let text = await cm.render()
  t.equal(metricSum(text, 'req_total', { route: 'ns/a' }), 8, 'the dead worker\'s counts are kept')
  t.equal(metricSum(text, 'req_total', { route: 'ns/b' }), 1)

  // A replacement with no table yet says nothing: everything kept.
  cm.observe(3, answer({}), null)
  cm.observe(2, answer({ 'ns/a': 3 }), null)
  t.equal(metricSum(await cm.render(), 'req_total', { route: 'ns/b' }), 1)

  // The workers swept route b: its kept count goes, and does not come back.
  cm.observe(2, answer({ 'ns/a': 3 }), [nameKey.route('ns/a')])
  text = await cm.render()
  t.equal(metricSum(text, 'req_total', { route: 'ns/a' }), 8)
  t.notMatch(text, /ns\/b/, 'route b\'s kept count is gone')
  cm.observe(2, answer({ 'ns/a': 3 }), both)
  t.notMatch(await cm.render(), /ns\/b/, 'for good')

  t.same(parseNames(['x', 'y']), ['x', 'y'])
  t.equal(parseNames(['x', 1]), null)
  t.equal(parseNames(undefined), null)
})
