// A status write that keeps failing (RBAC without `httproutes/status`, a CRD
// status schema that refuses our body, a broken admission webhook) is retried
// with a per-object exponential backoff, and logged once per object per change
// of error plus one summary line per pass: the load on the API server and the
// log do not grow with time x objects. (The whole pass was retried every 5 s,
// with a warning per object each time: 40 PUTs and 40 lines a second at 200
// routes, forever.)
import '../helpers/capture-logs.ts'
import t from 'tap'
import { StatusWriter } from '../../lib/runtime/status-writer.ts'
import { KUBE_RESOURCES } from '../../lib/config/kube-resources.ts'
import type { KubeObject } from '../../lib/config/kube-source.ts'
import type { ObjectStatus, Status } from '../../lib/compile/status.ts'
import { emptySnapshot } from '../../lib/resources/snapshot.ts'
import { clearLogs, linesWith } from '../helpers/capture-logs.ts'
import { metricValue } from '../helpers/metrics.ts'
import { clientFor, route, startFake, until } from './fixtures.ts'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'

const CONTROLLER = 'sallyport.io/gateway-controller'
const GW = 'gateway.networking.k8s.io/v1'
const routes = KUBE_RESOURCES.find((r) => r.plural === 'httproutes') as KubeObject['resource']
const gwRef = { group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: 'default', name: 'egress', sectionName: null, port: null }
const BACKOFF = { base: 400, max: 1600 }

function source(fake: FakeApiServer) {
  return {
    lookup(_kind: string, _apiVersion: string, namespace: string, name: string): KubeObject | null {
      const raw = fake.get(GW, 'HTTPRoute', namespace, name)
      return raw === null ? null : { resource: routes, version: 'v1', raw: raw as KubeObject['raw'] }
    },
  }
}

const routeStatus = (n: string, message = ''): ObjectStatus => ({
  kind: 'HTTPRoute', apiVersion: GW, namespace: 'default', name: n, generation: 1, conditions: [], listeners: [],
  parents: [{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [{ type: 'Accepted', status: 'True', reason: 'Accepted', message, observedGeneration: 1 }] }],
})
const status = (objects: ObjectStatus[]): Status => ({ objects: new Map(objects.map((o) => [`HTTPRoute/${o.namespace}/${o.name}`, o])), servedGateways: new Set(['default/egress']) })
const statusPuts = (fake: FakeApiServer, name = 'r\\d+'): number => fake.count('PUT', new RegExp(`/httproutes/${name}/status$`))
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
const written = (fake: FakeApiServer, n: string): boolean => ((fake.get(GW, 'HTTPRoute', 'default', n)?.status as { parents?: unknown[] } | undefined)?.parents?.length ?? 0) > 0

t.test('writes refused with 403 back off per object; the log says so once, plus one line per pass', async (t) => {
  const fake = await startFake(t)
  const names = Array.from({ length: 30 }, (_, i) => `r${i}`)
  for (const n of names) fake.apply(route(n, `${n}.example.test`, 'a', 1))
  fake.refuse((r) => r.method === 'PUT' && r.path.endsWith('/status'), 403)
  const writer = new StatusWriter({ client: clientFor(fake), source: source(fake), controllerName: CONTROLLER, isLeader: () => true, backoffMs: BACKOFF })
  t.teardown(() => writer.close())
  const failedBefore = await metricValue('sallyport_kube_status_writes_total', { kind: 'HTTPRoute', result: 'failed' })
  clearLogs()
  const compiled = status(names.map((n) => routeStatus(n)))
  writer.update(compiled, emptySnapshot())
  await writer.sync()
  t.equal(statusPuts(fake), 30, 'each object tried once')
  t.equal(await metricValue('sallyport_kube_status_writes_total', { kind: 'HTTPRoute', result: 'failed' }), failedBefore + 30, 'each failed write counted')

  // Compiles in the meantime (the same status) do not write the objects that are backing off.
  for (let i = 0; i < 5; i++) {
    writer.update(status(names.map((n) => routeStatus(n))), emptySnapshot())
    await writer.sync()
  }
  t.equal(statusPuts(fake), 30, 'no write while backing off, however many compiles')

  // Over 3.6 s: tries at about 0, 0.4, 1.2, 2.8 s (the delay doubles up to 1.6 s), not one per 0.4 s.
  await sleep(3600)
  await writer.sync() // lets a pass in flight finish (and writes nothing: none is due right after one)
  const perObject = statusPuts(fake, 'r0')
  t.ok(perObject >= 3 && perObject <= 5, `r0 tried ${perObject} times in 3.6 s (a fixed 0.4 s retry: 9)`)
  t.equal(statusPuts(fake), perObject * 30, 'the objects failing together are retried together')

  const perObjectLines = linesWith('status write failed')
  const names0 = new Set(perObjectLines.map((l) => l.name))
  t.equal(names0.size, perObjectLines.length, 'each object is logged at most once for the same error')
  t.ok(perObjectLines.length <= 10 * perObject, 'per-object lines are capped per pass')
  t.match(perObjectLines[0], { kind: 'HTTPRoute', namespace: 'default', err: /403 .*cannot update resource "httproutes\/status"/ })
  const summaries = linesWith('status writes failing')
  t.equal(summaries.length, perObject, 'one summary line per pass that failed')
  t.match(summaries[0], { failing: 30, failed: 30, first: /^HTTPRoute default\/r\d+: .*PUT .*403/ })

  // A different status for one object is tried at once, backoff or not.
  const before = statusPuts(fake, 'r7')
  writer.update(status(names.map((n) => routeStatus(n, n === 'r7' ? 'changed' : ''))), emptySnapshot())
  await writer.sync()
  t.equal(statusPuts(fake, 'r7'), before + 1, 'a changed status is written without waiting')

  // The rule is fixed: the next retry writes everything, and a success resets the backoff.
  fake.refuse(null)
  await until('every status written once the 403 is gone', () => names.every((n) => written(fake, n)), 3000)
  t.ok(linesWith('status writes succeed again', 30).length >= 1, 'the recovery is logged')
  clearLogs()
  const r3 = fake.get(GW, 'HTTPRoute', 'default', 'r3') as Record<string, unknown>
  fake.apply({ ...r3, status: {} }) // someone erases r3's status; its next write fails
  fake.refuse((r) => r.method === 'PUT' && r.path.endsWith('/r3/status'), 500)
  const r3Before = statusPuts(fake, 'r3')
  writer.update(status(names.map((n) => routeStatus(n, n === 'r7' ? 'changed' : ''))), emptySnapshot())
  await writer.sync()
  t.equal(statusPuts(fake, 'r3'), r3Before + 1)
  t.match(linesWith('status write failed'), [{ name: 'r3', err: /500/ }], 'a new failure is logged again')
  fake.refuse(null)
  await until('r3 retried after the base delay, not the delay the 403 had reached', () => written(fake, 'r3'), BACKOFF.base * 3)
})

t.test('a failure whose error changes is logged again', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('x', 'x.example.test', 'a', 1))
  fake.refuse((r) => r.method === 'PUT', 403)
  const writer = new StatusWriter({ client: clientFor(fake), source: source(fake), controllerName: CONTROLLER, isLeader: () => true, backoffMs: { base: 50, max: 50 } })
  t.teardown(() => writer.close())
  clearLogs()
  writer.update(status([routeStatus('x')]), emptySnapshot())
  await writer.sync()
  await until('retried twice', () => statusPuts(fake, 'x') >= 3)
  t.equal(linesWith('status write failed').length, 1, 'the same 403 three times: one line')
  fake.refuse((r) => r.method === 'PUT', 422)
  await until('the 422 logged', () => linesWith('status write failed').length === 2)
  t.match(linesWith('status write failed')[1], { name: 'x', err: /422 .*is invalid/ })
})

t.test('a new leader term tries every failing object at once (kube-mode resets the backoff on becoming leader)', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('y', 'y.example.test', 'a', 1))
  fake.refuse((r) => r.method === 'PUT', 503)
  let leader = true
  const writer = new StatusWriter({ client: clientFor(fake), source: source(fake), controllerName: CONTROLLER, isLeader: () => leader, backoffMs: { base: 60_000, max: 60_000 } })
  t.teardown(() => writer.close())
  writer.update(status([routeStatus('y')]), emptySnapshot())
  await writer.sync()
  t.equal(statusPuts(fake, 'y'), 1)
  fake.refuse(null)
  leader = false // the API server was away long enough to lose the lease...
  await writer.sync()
  leader = true // ...and it is back
  await writer.sync()
  t.equal(statusPuts(fake, 'y'), 1, 'still backing off for a minute')
  writer.resetBackoff()
  await writer.sync()
  t.equal(statusPuts(fake, 'y'), 2, 'written at once in the new term')
  t.ok(written(fake, 'y'))
})
