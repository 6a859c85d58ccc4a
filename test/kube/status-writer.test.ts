// StatusWriter details against the fake API server: 409 retried with a fresh
// read (also under the shipped RBAC, for every kind it writes), invalid objects reported on the parents they name, policy ancestors,
// GEP-4488 Backend parents (controller in `name`), leader gating.
import './quiet.ts'
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { parseAllDocuments } from 'yaml'
import { StatusWriter } from '../../lib/runtime/status-writer.ts'
import { KUBE_RESOURCES, apiVersion, objectPath } from '../../lib/config/kube-resources.ts'
import type { KubeObject } from '../../lib/config/kube-source.ts'
import type { ObjectStatus, Status } from '../../lib/compile/status.ts'
import { emptySnapshot } from '../../lib/resources/snapshot.ts'
import { clientFor, route, startFake, until } from './fixtures.ts'
import type { FakeApiServer, PolicyRule } from '../helpers/fake-apiserver.ts'
import { metricValue } from '../helpers/metrics.ts'
import { ROOT } from '../e2e/harness.ts'

const CONTROLLER = 'sallyport.io/gateway-controller'
const res = (group: string, plural: string) => KUBE_RESOURCES.find((r) => r.group === group && r.plural === plural) as KubeObject['resource']

function lookupFrom(fake: FakeApiServer, stale = new Map<string, KubeObject['raw']>()) {
  return {
    lookup(kind: string, apiVersion: string, namespace: string, name: string): KubeObject | null {
      const plural = { HTTPRoute: 'httproutes', Backend: 'backends', BackendTrafficPolicy: 'backendtrafficpolicies' }[kind] as string
      const group = kind === 'BackendTrafficPolicy' ? 'gateway.envoyproxy.io' : 'gateway.networking.k8s.io'
      const r = res(group, plural)
      // A stale copy is handed out once (an informer lagging behind), then the current object.
      const old = stale.get(`${kind}/${name}`)
      stale.delete(`${kind}/${name}`)
      const raw = old ?? fake.get(`${group}/${r.versions[0]}`, r.kind, namespace, name)
      return raw === null || raw === undefined ? null : { resource: r, version: r.versions[0] as string, raw: raw as KubeObject['raw'] }
    },
  }
}

/** A compile result; its Gateways (`namespace/name`) are the ones this writer serves (default: default/egress). */
function status(objects: ObjectStatus[], servedGateways: readonly string[] = ['default/egress']): Status {
  return { objects: new Map(objects.map((o) => [`${o.kind}/${o.namespace}/${o.name}`, o])), servedGateways: new Set(servedGateways) }
}

const accepted = (gen: number) => ({ type: 'Accepted', status: 'True' as const, reason: 'Accepted', message: '', observedGeneration: gen })
const gwRef = { group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: 'default', name: 'egress', sectionName: null, port: null }

t.test('409 is retried with a fresh read; other entries preserved', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r', 'r.example.test', 'a', 1))
  const stale = fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r') as KubeObject['raw']
  // Someone else writes its entry after our informer's copy was taken.
  fake.apply({ ...stale, status: { parents: [{ parentRef: { name: 'x' }, controllerName: 'example.com/other', conditions: [] }] } })
  let leader = true
  const writer = new StatusWriter({ client: clientFor(fake), source: lookupFrom(fake, new Map([['HTTPRoute/r', stale]])), controllerName: CONTROLLER, isLeader: () => leader })
  const s = status([{ kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: 'r', generation: 1, conditions: [], listeners: [], parents: [{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [accepted(1)] }] }])
  writer.update(s, emptySnapshot())
  await writer.sync()
  t.equal(fake.count('PUT', /httproutes\/r\/status$/), 2, 'first PUT conflicted, second succeeded')
  t.equal(fake.count('GET', /httproutes\/r$/), 1, 'one fresh read')
  const parents = (fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r')?.status as { parents: Array<{ controllerName: string }> }).parents
  t.same(parents.map((p) => p.controllerName).sort(), ['example.com/other', CONTROLLER])

  leader = false
  const before = fake.count('PUT', /\/status$/)
  writer.update(status([{ ...[...s.objects.values()][0] as ObjectStatus, parents: [] }]), emptySnapshot())
  await writer.sync()
  t.equal(fake.count('PUT', /\/status$/), before, 'no writes when not leader')
})

t.test('an object deleted between a 409 and its re-read is not a failed write', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r', 'r.example.test', 'a', 1))
  const stale = fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r') as KubeObject['raw']
  // The PUT is refused as based on a stale copy; by the re-read, the route is gone.
  fake.refuse((r) => r.method === 'PUT' && r.path.endsWith('/httproutes/r/status'), 409)
  fake.remove('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r')
  const failedBefore = await metricValue('sallyport_kube_status_writes_total', { kind: 'HTTPRoute', result: 'failed' })
  const writer = new StatusWriter({ client: clientFor(fake), source: lookupFrom(fake, new Map([['HTTPRoute/r', stale]])), controllerName: CONTROLLER, isLeader: () => true })
  t.teardown(() => writer.close())
  writer.update(status([{ kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: 'r', generation: 1, conditions: [], listeners: [], parents: [{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [accepted(1)] }] }]), emptySnapshot())
  await writer.sync()
  t.equal(fake.count('GET', /httproutes\/r$/), 1, 'the re-read found nothing')
  t.equal(await metricValue('sallyport_kube_status_writes_total', { kind: 'HTTPRoute', result: 'failed' }), failedBefore, 'deleted meanwhile: nothing failed')
})

// The re-read is a GET of the single object: the shipped ClusterRole has to grant
// `get` on every kind whose status is written, or each conflict is a failed write
// (a warning, sallyport_kube_status_writes_total{result="failed"}) until the retry 5 s later.
t.test('a 409 is resolved by the re-read under the ClusterRole of deploy/kubernetes/rbac.yaml, for every kind whose status is written', async (t) => {
  const fake = await startFake(t)
  const docs = parseAllDocuments(fs.readFileSync(path.join(ROOT, 'deploy', 'kubernetes', 'rbac.yaml'), 'utf8')).map((d) => d.toJSON() as { kind?: string; rules?: PolicyRule[] } | null)
  const clusterRole = docs.find((d) => d?.kind === 'ClusterRole')
  fake.authorize(clusterRole?.rules ?? [])
  const kinds = KUBE_RESOURCES.filter((r) => r.status)
  t.ok(kinds.length >= 12, 'every kind with a status subresource')
  for (const [i, r] of kinds.entries()) {
    const version = r.versions[0] as string
    const av = apiVersion(r.group, version)
    const name = r.kind === 'Gateway' ? 'egress' : `obj-${i}`
    const namespace = r.namespaced ? 'default' : ''
    fake.apply({ apiVersion: av, kind: r.kind, metadata: { name, ...(r.namespaced ? { namespace } : {}) }, spec: {} })
    const stale = fake.get(av, r.kind, namespace, name) as KubeObject['raw']
    // Someone else writes the status after our informer's copy was taken.
    fake.apply({ ...stale, status: { conditions: [{ type: 'SetElsewhere', status: 'True', reason: 'Other', message: '', lastTransitionTime: '2026-01-01T00:00:00Z' }] } })
    let handedOut = false
    const source = {
      lookup: (): KubeObject => {
        const raw = handedOut ? fake.get(av, r.kind, namespace, name) as KubeObject['raw'] : stale
        handedOut = true
        return { resource: r, version, raw }
      },
    }
    const failedBefore = await metricValue('sallyport_kube_status_writes_total', { kind: r.modelKind, result: 'failed' })
    const writer = new StatusWriter({ client: clientFor(fake), source, controllerName: CONTROLLER, isLeader: () => true })
    writer.update(status([{ kind: r.modelKind, apiVersion: av, namespace, name, generation: 1, conditions: [accepted(1)], listeners: [], parents: [{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [accepted(1)] }] }]), emptySnapshot())
    await writer.sync()
    writer.close()
    const at = objectPath(r, version, namespace, name)
    const what = `${r.group}/${r.plural}`
    t.equal(fake.requests.filter((q) => q.method === 'PUT' && q.path === `${at}/status`).length, 2, `${what}: the first PUT conflicted, the second was written`)
    t.equal(fake.requests.filter((q) => q.method === 'GET' && q.path === at).length, 1, `${what}: one fresh read`)
    t.equal(await metricValue('sallyport_kube_status_writes_total', { kind: r.modelKind, result: 'failed' }), failedBefore, `${what}: no failed write`)
    t.match(JSON.stringify(fake.get(av, r.kind, namespace, name)?.status), /"Accepted"/, `${what}: our status is there`)
  }
})

t.test('invalid objects, Backend parents, policy ancestors', async (t) => {
  const fake = await startFake(t)
  fake.apply({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'bad', namespace: 'default' }, spec: { parentRefs: [{ name: 'egress' }], rules: [] } })
  fake.apply({ apiVersion: 'gateway.networking.k8s.io/v1alpha1', kind: 'Backend', metadata: { name: 'b', namespace: 'default' }, spec: { type: 'ExternalHostname', externalHostname: { hostname: 'api.example.com' }, port: 443 } })
  fake.apply({ apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'BackendTrafficPolicy', metadata: { name: 'p', namespace: 'default' }, spec: { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'egress' }] } })
  const writer = new StatusWriter({ client: clientFor(fake), source: lookupFrom(fake), controllerName: CONTROLLER, isLeader: () => true })
  const invalid = { type: 'Accepted', status: 'False' as const, reason: 'Invalid', message: 'spec.rules: bad', observedGeneration: 0 }
  writer.update(status([
    { kind: 'HTTPRoute', apiVersion: '', namespace: 'default', name: 'bad', generation: 0, conditions: [invalid], parents: [], listeners: [] },
    { kind: 'Backend', apiVersion: 'gateway.networking.k8s.io/v1alpha1', namespace: 'default', name: 'b', generation: 1, conditions: [accepted(1)], parents: [{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [accepted(1)] }], listeners: [] },
    { kind: 'BackendTrafficPolicy', apiVersion: 'gateway.envoyproxy.io/v1alpha1', namespace: 'default', name: 'p', generation: 1, conditions: [accepted(1)], parents: [{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [accepted(1)] }], listeners: [] },
  ]), emptySnapshot())
  await writer.sync()
  const bad = fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'bad')?.status as { parents: Array<{ parentRef: { name: string }; conditions: Array<{ reason: string; observedGeneration: number }> }> }
  t.equal(bad.parents[0]?.parentRef.name, 'egress', 'the invalid route reports on the parent it names')
  t.equal(bad.parents[0]?.conditions[0]?.reason, 'Invalid')
  t.equal(bad.parents[0]?.conditions[0]?.observedGeneration, 1, 'the object generation is observed')
  const b = fake.get('gateway.networking.k8s.io/v1alpha1', 'Backend', 'default', 'b')?.status as { parents: Array<{ name: string; parentRef: { name: string } }> }
  t.equal(b.parents[0]?.name, CONTROLLER, 'GEP-4488 BackendParentStatus names the controller in `name`')
  const p = fake.get('gateway.envoyproxy.io/v1alpha1', 'BackendTrafficPolicy', 'default', 'p')?.status as { ancestors: Array<{ controllerName: string; ancestorRef: { name: string } }> }
  t.equal(p.ancestors[0]?.ancestorRef.name, 'egress', 'policy ancestors')
})

t.test('our entries are removed from objects compile no longer reports on', async (t) => {
  const fake = await startFake(t)
  fake.apply({ ...route('gone', 'g.example.test', 'a', 1), status: { parents: [
    { parentRef: { name: 'egress' }, controllerName: CONTROLLER, conditions: [] },
    { parentRef: { name: 'x' }, controllerName: 'example.com/other', conditions: [] },
  ] } })
  const r = res('gateway.networking.k8s.io', 'httproutes')
  const source = {
    ...lookupFrom(fake),
    objects: (): KubeObject[] => [{ resource: r, version: 'v1', raw: fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'gone') as KubeObject['raw'] }],
  }
  const writer = new StatusWriter({ client: clientFor(fake), source, controllerName: CONTROLLER, isLeader: () => true })
  writer.update(status([]), emptySnapshot())
  await writer.sync()
  const parents = (fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'gone')?.status as { parents: Array<{ controllerName: string }> }).parents
  t.same(parents.map((p) => p.controllerName), ['example.com/other'], 'ours removed, the other kept')
})

t.test('a pass skips objects whose status and resourceVersion did not change; a change by anyone is still seen', async (t) => {
  const fake = await startFake(t)
  const names = ['a', 'b', 'c', 'd']
  for (const n of names) fake.apply(route(n, `${n}.example.test`, 'a', 1))
  let clock = 0
  // now() is read once per condition the writer rebuilds: a count of the objects it re-examined.
  const writer = new StatusWriter({ client: clientFor(fake), source: lookupFrom(fake), controllerName: CONTROLLER, isLeader: () => true, now: () => { clock++; return new Date(1_700_000_000_000) } })
  const of = (n: string, message = '') => ({ kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: n, generation: 1, conditions: [], listeners: [], parents: [{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [{ ...accepted(1), message }] }] })
  const before = await metricValue('sallyport_kube_status_writes_total', { kind: 'HTTPRoute', result: 'written' })
  writer.update(status(names.map((n) => of(n))), emptySnapshot())
  await writer.sync()
  t.equal(fake.count('PUT', /\/status$/), 4, 'first pass writes every route')
  t.equal(await metricValue('sallyport_kube_status_writes_total', { kind: 'HTTPRoute', result: 'written' }), before + 4, 'sallyport_kube_status_writes_total counts them')

  // Same statuses again (a reload that changed nothing for them): nothing re-examined, nothing written.
  clock = 0
  writer.update(status(names.map((n) => of(n))), emptySnapshot())
  await writer.sync()
  t.equal(fake.count('PUT', /\/status$/), 4)
  t.equal(clock, 0, 'unchanged objects were skipped')

  // One status changes: only that route is rebuilt and written.
  writer.update(status(names.map((n) => of(n, n === 'b' ? 'now different' : ''))), emptySnapshot())
  await writer.sync()
  t.equal(fake.count('PUT', /httproutes\/b\/status$/), 2)
  t.equal(fake.count('PUT', /\/status$/), 5)

  // Someone else strips our entry from c (its resourceVersion moves): the next pass puts it back.
  const c = fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'c') as KubeObject['raw']
  fake.apply({ ...c, status: { parents: [] } })
  writer.update(status(names.map((n) => of(n, n === 'b' ? 'now different' : ''))), emptySnapshot())
  await writer.sync()
  t.equal(fake.count('PUT', /httproutes\/c\/status$/), 2, 'c rewritten after an outside change')
  const parents = (fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'c')?.status as { parents: Array<{ controllerName: string }> }).parents
  t.same(parents.map((p) => p.controllerName), [CONTROLLER])
})

// Two deployments, each serving its own GatewayClass, both with controllerName
// sallyport.io/gateway-controller (the README requires it): an entry carrying our
// controllerName is ours only when its parentRef names a Gateway we serve.
t.test("entries for Gateways another deployment serves are kept, in place, though they carry our controllerName", async (t) => {
  const fake = await startFake(t)
  const ref = (name: string) => ({ ...gwRef, name })
  const theirs = { parentRef: { group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: 'default', name: 'gw-b' }, controllerName: CONTROLLER, conditions: [{ type: 'Accepted', status: 'True', reason: 'Accepted', message: 'by b', observedGeneration: 1, lastTransitionTime: '2026-01-01T00:00:00Z' }] }
  const other = { parentRef: { name: 'x' }, controllerName: 'example.com/other', conditions: [] }
  fake.apply({ ...route('shared', 's.example.test', 'a', 1), status: { parents: [theirs, other] } })
  fake.apply({ ...route('only-b', 'b.example.test', 'a', 1), status: { parents: [theirs] } })
  fake.apply({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'bad', namespace: 'default' }, spec: { parentRefs: [{ name: 'gw-a' }, { name: 'gw-b' }], rules: [] } })
  fake.apply({ apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'BackendTrafficPolicy', metadata: { name: 'p', namespace: 'default' }, spec: { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'gw-a' }, { group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'gw-b' }] } })
  const cur = fake.get('gateway.envoyproxy.io/v1alpha1', 'BackendTrafficPolicy', 'default', 'p') as Record<string, unknown>
  fake.apply({ ...cur, status: { ancestors: [{ ancestorRef: theirs.parentRef, controllerName: CONTROLLER, conditions: theirs.conditions }] } })
  const r = res('gateway.networking.k8s.io', 'httproutes')
  const source = {
    ...lookupFrom(fake),
    objects: (): KubeObject[] => [{ resource: r, version: 'v1', raw: fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'only-b') as KubeObject['raw'] }],
  }
  const writer = new StatusWriter({ client: clientFor(fake), source, controllerName: CONTROLLER, isLeader: () => true })
  const invalid = { type: 'Accepted', status: 'False' as const, reason: 'Invalid', message: 'spec.rules: bad', observedGeneration: 0 }
  const compiled = status([
    { kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: 'shared', generation: 1, conditions: [], listeners: [], parents: [{ parentRef: ref('gw-a'), controllerName: CONTROLLER, conditions: [accepted(1)] }] },
    { kind: 'HTTPRoute', apiVersion: '', namespace: 'default', name: 'bad', generation: 0, conditions: [invalid], parents: [], listeners: [] },
    // compile names every Gateway a policy targets; only the one we serve is ours to report on.
    { kind: 'BackendTrafficPolicy', apiVersion: 'gateway.envoyproxy.io/v1alpha1', namespace: 'default', name: 'p', generation: 1, conditions: [accepted(1)], parents: [{ parentRef: ref('gw-a'), controllerName: CONTROLLER, conditions: [accepted(1)] }, { parentRef: ref('gw-b'), controllerName: CONTROLLER, conditions: [accepted(1)] }], listeners: [] },
  ], ['default/gw-a'])
  writer.update(compiled, emptySnapshot())
  await writer.sync()
  type Parents = { parents: Array<{ parentRef: { name: string }; controllerName: string; conditions: Array<{ message: string }> }> }
  const shared = (fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'shared')?.status as Parents).parents
  t.same(shared.map((p) => p.parentRef.name), ['gw-b', 'x', 'gw-a'], "b's entry and the other controller's kept where they were; ours added")
  t.same(shared[0], theirs, "b's entry untouched")
  t.equal(fake.count('PUT', /httproutes\/only-b\/status$/), 0, "a route only b reports on is not swept")
  t.same((fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'only-b')?.status as Parents).parents, [theirs])
  const bad = (fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'bad')?.status as Parents).parents
  t.same(bad.map((p) => p.parentRef.name), ['gw-a'], 'an invalid route is reported on the parent we serve only')
  const ancestors = (fake.get('gateway.envoyproxy.io/v1alpha1', 'BackendTrafficPolicy', 'default', 'p')?.status as { ancestors: Array<{ ancestorRef: { name: string }; conditions: unknown }> }).ancestors
  t.same(ancestors.map((a) => a.ancestorRef.name), ['gw-b', 'gw-a'], 'policy ancestors: b\'s kept, ours added')
  t.same(ancestors[0]?.conditions, theirs.conditions)

  // The other deployment's writer, serving gw-b, on the same objects: it leaves ours alone, and
  // neither has anything left to write (entry order is kept, so they cannot undo each other).
  const b = new StatusWriter({ client: clientFor(fake), source: lookupFrom(fake), controllerName: CONTROLLER, isLeader: () => true })
  b.update(status([
    { kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: 'shared', generation: 1, conditions: [], listeners: [], parents: [{ parentRef: ref('gw-b'), controllerName: CONTROLLER, conditions: [{ ...accepted(1), message: 'by b' }] }] },
  ], ['default/gw-b']), emptySnapshot())
  await b.sync()
  const puts = fake.count('PUT', /\/status$/)
  writer.update(status([...compiled.objects.values()], ['default/gw-a']), emptySnapshot())
  await writer.sync()
  await b.sync()
  t.equal(fake.count('PUT', /\/status$/), puts, 'no writes left for either')
  t.same((fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'shared')?.status as Parents).parents.map((p) => p.parentRef.name), ['gw-b', 'x', 'gw-a'])
})

t.test('a Gateway we do not serve (its class belongs to another controller) gets no status from us', async (t) => {
  const fake = await startFake(t)
  const gw = fake.apply({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: 'istio-gw', namespace: 'default' }, spec: { gatewayClassName: 'istio', listeners: [{ name: 'http', protocol: 'HTTP', port: 80 }] } })
  const istio = { conditions: [{ type: 'Accepted', status: 'True', reason: 'Accepted', message: 'istio', observedGeneration: 1, lastTransitionTime: '2026-01-01T00:00:00Z' }] }
  fake.apply({ ...gw, status: istio })
  const gwRes = res('gateway.networking.k8s.io', 'gateways')
  const source = { lookup: (): KubeObject => ({ resource: gwRes, version: 'v1', raw: fake.get('gateway.networking.k8s.io/v1', 'Gateway', 'default', 'istio-gw') as KubeObject['raw'] }) }
  const writer = new StatusWriter({ client: clientFor(fake), source, controllerName: CONTROLLER, isLeader: () => true })
  // What compile reports for `--gateway-class istio` when istio's GatewayClass is not ours.
  const msg = 'GatewayClass istio belongs to controller istio.io/gateway-controller, not sallyport.io/gateway-controller'
  writer.update(status([{ kind: 'Gateway', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: 'istio-gw', generation: 1, parents: [], listeners: [],
    conditions: [{ type: 'Accepted', status: 'False', reason: 'Invalid', message: msg, observedGeneration: 1 }] }], []), emptySnapshot())
  await writer.sync()
  t.equal(fake.count('PUT', /\/status$/), 0, 'nothing written')
  t.same(fake.get('gateway.networking.k8s.io/v1', 'Gateway', 'default', 'istio-gw')?.status, istio, "istio's status stands")
})

t.test('a status change is looked at again for objects we report on, not for every object', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('ours', 'o.example.test', 'a', 1))
  fake.apply({ ...route('theirs', 't.example.test', 'a', 1), status: { parents: [{ parentRef: { name: 'x' }, controllerName: 'example.com/other', conditions: [] }] } })
  let lookups = 0
  const base = lookupFrom(fake)
  const source = { lookup: (...args: Parameters<typeof base.lookup>) => { lookups++; return base.lookup(...args) } }
  const writer = new StatusWriter({ client: clientFor(fake), source, controllerName: CONTROLLER, isLeader: () => true })
  writer.update(status([{ kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: 'ours', generation: 1, conditions: [], listeners: [], parents: [{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [accepted(1)] }] }]), emptySnapshot())
  await writer.sync()
  const r = res('gateway.networking.k8s.io', 'httproutes')
  const current = (name: string): KubeObject => ({ resource: r, version: 'v1', raw: fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', name) as KubeObject['raw'] })
  const before = lookups
  writer.statusChanged(current('ours')) // our own write coming back
  const theirs = fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'theirs') as KubeObject['raw']
  fake.apply({ ...theirs, status: { parents: [] } })
  writer.statusChanged(current('theirs')) // another controller's object
  await new Promise((r) => setTimeout(r, 100))
  t.equal(lookups, before, 'no pass for either')
  const ours = fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'ours') as KubeObject['raw']
  fake.apply({ ...ours, status: { parents: [] } })
  writer.statusChanged(current('ours'))
  await until('ours written again', () => ((fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'ours')?.status as { parents: unknown[] }).parents.length === 1), 2_000)
  t.ok(lookups > before, 'a pass for ours, and its entry is back')
})

t.test('what the writer remembers per object goes with the object', async (t) => {
  // Its last writes and repair counts were kept for every object it ever wrote:
  // memory that grew with a long-lived cluster's churn.
  const fake = await startFake(t)
  const names = Array.from({ length: 20 }, (_, i) => `r${i}`)
  for (const n of names) fake.apply(route(n, `${n}.example.test`, 'a', 1))
  const writer = new StatusWriter({ client: clientFor(fake), source: lookupFrom(fake), controllerName: CONTROLLER, isLeader: () => true })
  const routeStatus = (n: string): ObjectStatus => ({ kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: n, generation: 1, conditions: [], listeners: [], parents: [{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [accepted(1)] }] })
  writer.update(status(names.map(routeStatus)), emptySnapshot())
  await writer.sync()
  t.equal(fake.count('PUT', /httproutes\/r\d+\/status$/), 20, 'twenty statuses written')
  t.equal(writer.tracked(), 20, 'one record per object reported on')
  // Nineteen routes deleted: compile reports on one.
  writer.update(status([routeStatus('r0')]), emptySnapshot())
  await writer.sync()
  t.equal(writer.tracked(), 1, 'the records of the routes gone are dropped')
})

t.test('an API server shedding load (429) ends the pass; the rest is written after its Retry-After', async (t) => {
  // Each object used to be tried and refused in turn, then all again 5 s later
  // whatever the server had asked for.
  const fake = await startFake(t)
  const names = Array.from({ length: 12 }, (_, i) => `r${i}`)
  for (const n of names) fake.apply(route(n, `${n}.example.test`, 'a', 1))
  const writer = new StatusWriter({ client: clientFor(fake), source: lookupFrom(fake), controllerName: CONTROLLER, isLeader: () => true })
  t.teardown(() => writer.close())
  const routeStatus = (n: string): ObjectStatus => ({ kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: n, generation: 1, conditions: [], listeners: [], parents: [{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [accepted(1)] }] })
  fake.throttle((r) => r.method === 'PUT', '1', 1)
  writer.update(status(names.map(routeStatus)), emptySnapshot())
  await writer.sync()
  const tried = fake.count('PUT', /httproutes\/r\d+\/status$/)
  t.ok(tried <= 4, `the pass stopped at the 429: ${tried} PUTs, at most the ${4} already in flight`)
  const written = (): number => names.filter((n) => (fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', n)?.status as { parents?: unknown[] } | undefined)?.parents?.length === 1).length
  t.ok(written() < names.length, 'the rest waits')
  await until('every status written after the Retry-After', () => written() === names.length)
  t.equal(fake.count('PUT', /httproutes\/r\d+\/status$/), names.length + 1, 'each object written once, plus the one refused')
})

// A Gateway we stopped serving (deleted, or moved to another controller's class)
// stays ours until our entries naming it are gone from every object: then it is
// forgotten. Kept for ever, the list grew with every Gateway a long-lived
// cluster ever retired, and a Gateway of that name made later, one this
// deployment cannot see, had another deployment's entries for it taken for ours.
t.test('a Gateway we served is ours to clean up after until our entries naming it are gone, and no longer', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r', 'r.example.test', 'a', 1))
  const r = res('gateway.networking.k8s.io', 'httproutes')
  // As an informer hands them out: one object per version of the route, the same to lookup() and objects().
  let last: KubeObject | null = null
  const current = (): KubeObject => {
    const raw = fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r') as KubeObject['raw']
    if (last?.raw.metadata?.resourceVersion !== raw.metadata?.resourceVersion) last = { resource: r, version: 'v1', raw }
    return last as KubeObject
  }
  const source = { lookup: current, objects: (): KubeObject[] => [current()] }
  const writer = new StatusWriter({ client: clientFor(fake), source, controllerName: CONTROLLER, isLeader: () => true, backoffMs: { base: 50, max: 100 } })
  t.teardown(() => writer.close())
  const routeStatus = (parents: ObjectStatus['parents']): ObjectStatus => ({ kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: 'r', generation: 1, conditions: [], listeners: [], parents })
  type Parents = { parents: Array<{ parentRef: { name: string }; controllerName: string; conditions: Array<{ message: string }> }> }
  const parents = (): Parents['parents'] => (fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r')?.status as Parents | undefined)?.parents ?? []
  writer.update(status([routeStatus([{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [accepted(1)] }])]), emptySnapshot())
  await writer.sync()
  t.equal(parents().length, 1, 'our entry for default/egress written')

  // default/egress is deleted. The write that would remove our entry fails for a while: it is tried again until it is done.
  fake.refuse((q) => q.method === 'PUT' && q.path.endsWith('/httproutes/r/status'), 500)
  writer.update(status([routeStatus([])], []), emptySnapshot())
  await writer.sync()
  t.equal(parents().length, 1, 'the entry is still there (the write failed)')
  fake.refuse(null)
  await until('our entry for the deleted Gateway removed', () => parents().length === 0, 2_000)
  await writer.sync()

  // A Gateway of the same name, made later under a GatewayClass of another deployment
  // (same controllerName) that this one does not see (its --label-selector leaves it out):
  // that deployment's entry is not ours, however often we are asked to look.
  const theirs = { parentRef: { group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: 'default', name: 'egress' }, controllerName: CONTROLLER, conditions: [{ type: 'Accepted', status: 'True', reason: 'Accepted', message: 'by the other deployment', observedGeneration: 1, lastTransitionTime: '2026-01-01T00:00:00Z' }] }
  fake.apply({ ...current().raw, status: { parents: [theirs] } })
  const puts = fake.count('PUT', /httproutes\/r\/status$/)
  writer.statusChanged(current())
  writer.update(status([routeStatus([])], []), emptySnapshot())
  await writer.sync()
  await new Promise((resolve) => setTimeout(resolve, 100))
  await writer.sync()
  t.equal(fake.count('PUT', /httproutes\/r\/status$/), puts, 'nothing written')
  t.same(parents(), [theirs], "the other deployment's entry stands")
})

t.test("a follower, which writes nothing, forgets a retired Gateway once the leader's cleanup shows in what it reads", async (t) => {
  const fake = await startFake(t)
  const ours = { parentRef: { group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: 'default', name: 'egress' }, controllerName: CONTROLLER, conditions: [] }
  fake.apply({ ...route('r', 'r.example.test', 'a', 1), status: { parents: [ours] } })
  const r = res('gateway.networking.k8s.io', 'httproutes')
  const current = (): KubeObject => ({ resource: r, version: 'v1', raw: fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r') as KubeObject['raw'] })
  let leader = false
  const writer = new StatusWriter({ client: clientFor(fake), source: { lookup: current, objects: () => [current()] }, controllerName: CONTROLLER, isLeader: () => leader })
  t.teardown(() => writer.close())
  const routeStatus = (parents: ObjectStatus['parents']): ObjectStatus => ({ kind: 'HTTPRoute', apiVersion: 'gateway.networking.k8s.io/v1', namespace: 'default', name: 'r', generation: 1, conditions: [], listeners: [], parents })
  writer.update(status([routeStatus([{ parentRef: gwRef, controllerName: CONTROLLER, conditions: [] }])]), emptySnapshot())
  writer.update(status([routeStatus([])], []), emptySnapshot()) // default/egress deleted
  // The leader removes our entry; a Gateway of that name comes back under a deployment this one does not see, which writes its own.
  const theirs = { ...ours, conditions: [{ type: 'Accepted', status: 'True', reason: 'Accepted', message: 'by the other deployment', observedGeneration: 1, lastTransitionTime: '2026-01-01T00:00:00Z' }] }
  fake.apply({ ...current().raw, status: { parents: [] } })
  writer.update(status([routeStatus([])], []), emptySnapshot()) // the next compile: nothing names default/egress any more
  fake.apply({ ...current().raw, status: { parents: [theirs] } })
  leader = true
  await writer.sync()
  t.equal(fake.count('PUT', /httproutes\/r\/status$/), 0, 'nothing written on becoming leader')
  t.same((fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r')?.status as { parents: unknown[] }).parents, [theirs])
})
