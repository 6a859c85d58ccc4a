// Two sallyport deployments in one cluster, one per GatewayClass (`--gateway-class a`
// and `--gateway-class b`; both classes name controllerName
// sallyport.io/gateway-controller, as the README requires). Each owns the
// RouteParentStatus entries for its own Gateway and leaves the other's alone,
// also on a route attached to both; a status someone else erased is written
// again; and once settled neither writes anything.
import './quiet.ts'
import t from 'tap'
import { Runtime } from '../../lib/runtime/runtime.ts'
import { createKubeMode, type KubeMode } from '../../lib/runtime/kube-mode.ts'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { freePort } from '../e2e/harness.ts'
import { backend, clientFor, route, startFake, until } from './fixtures.ts'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'
import type { Test } from 'tap'

const GW = 'gateway.networking.k8s.io/v1'
const CONTROLLER = 'sallyport.io/gateway-controller'
const LEASE = { durationMs: 1000, renewDeadlineMs: 700, retryPeriodMs: 100 }

async function deployment(t: Test, fake: FakeApiServer, gatewayClass: string): Promise<KubeMode> {
  const kube = createKubeMode({ client: clientFor(fake), gatewayClass, debounceMs: 10, backoffMs: { base: 50, max: 200 }, lease: { ...LEASE, identity: `pod-${gatewayClass}`, namespace: 'sallyport-system' } })
  const runtime = new Runtime({ configPaths: [], gatewayClass, bind: '127.0.0.1', accessLog: false, ...kube.runtimeOptions })
  t.teardown(async () => { await kube.stop(); await runtime.stop(100) })
  await runtime.start()
  kube.start()
  await until(`${gatewayClass} leads`, () => kube.elector?.isLeader() === true)
  return kube
}

function classAndGateway(fake: FakeApiServer, cls: string, port: number, annotations: Record<string, string> = {}): void {
  fake.apply({ apiVersion: GW, kind: 'GatewayClass', metadata: { name: cls }, spec: { controllerName: CONTROLLER } })
  fake.apply({
    apiVersion: GW, kind: 'Gateway',
    metadata: { name: `gw-${cls}`, namespace: 'default', annotations: { 'sallyport.io/allow-destination-cidrs': '127.0.0.0/8', ...annotations } },
    spec: { gatewayClassName: cls, listeners: [{ name: 'http', protocol: 'HTTP', port }] },
  })
}

function routeOn(name: string, parents: readonly string[], backendPort: number, backendName = 'up'): Record<string, unknown> {
  const r = route(name, `${name}.example.test`, backendName, backendPort) as { spec: Record<string, unknown> }
  r.spec.parentRefs = parents.map((p) => ({ name: p, namespace: 'default' }))
  return r
}

function parentsOf(fake: FakeApiServer, name: string): string[] {
  const s = fake.get(GW, 'HTTPRoute', 'default', name)?.status as { parents?: Array<{ parentRef: { name: string }; controllerName: string }> } | undefined
  return (s?.parents ?? []).filter((p) => p.controllerName === CONTROLLER).map((p) => p.parentRef.name)
}

const statusWrites = (fake: FakeApiServer): number => fake.count('PUT', /\/status$/) + fake.count('PATCH', /\/status$/)

async function quiet(fake: FakeApiServer, ms: number): Promise<number> {
  const before = statusWrites(fake)
  await new Promise((r) => setTimeout(r, ms))
  return statusWrites(fake) - before
}

t.test('two deployments, one GatewayClass each: neither erases the other\'s route status', async (t) => {
  const up = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => up.close())
  const fake = await startFake(t)
  classAndGateway(fake, 'a', await freePort())
  classAndGateway(fake, 'b', await freePort())
  fake.apply(backend('up', up.address.port))
  fake.apply(routeOn('r-a', ['gw-a'], up.address.port))
  fake.apply(routeOn('r-b', ['gw-b'], up.address.port))
  fake.apply(routeOn('r-ab', ['gw-a', 'gw-b'], up.address.port))

  const a = await deployment(t, fake, 'a')
  await until('a reports on its routes', () => parentsOf(fake, 'r-a').includes('gw-a') && parentsOf(fake, 'r-ab').includes('gw-a'))
  const b = await deployment(t, fake, 'b')
  await until('b reports on its routes', () => parentsOf(fake, 'r-b').includes('gw-b') && parentsOf(fake, 'r-ab').includes('gw-b'))

  // A change both compile: each writer makes a full pass, with everything the other wrote in view.
  fake.apply(routeOn('r-c', ['gw-a', 'gw-b'], up.address.port))
  await until('both report on the new route', () => parentsOf(fake, 'r-c').length === 2)
  await a.statusWriter?.sync()
  await b.statusWriter?.sync()
  t.same(parentsOf(fake, 'r-a'), ['gw-a'], "r-a keeps a's entry")
  t.same(parentsOf(fake, 'r-b'), ['gw-b'], "r-b keeps b's entry")
  t.same(parentsOf(fake, 'r-ab').sort(), ['gw-a', 'gw-b'], 'r-ab has both')
  t.equal(await quiet(fake, 1500), 0, 'settled: no status writes')

  // Someone clears r-a's status (kubectl edit --subresource=status, another controller's bug): a writes it again.
  const ra = fake.get(GW, 'HTTPRoute', 'default', 'r-a')
  fake.apply({ ...ra, status: { parents: [] } })
  await until('r-a repaired', () => parentsOf(fake, 'r-a').includes('gw-a'), 5_000)
  // Only b's entry is stripped from r-ab: b puts it back, a has nothing to do.
  const aWrites = a.statusWriter?.writes
  const rab = fake.get(GW, 'HTTPRoute', 'default', 'r-ab') as unknown as { status: { parents: Array<{ parentRef: { name: string } }> } }
  fake.apply({ ...rab, status: { parents: rab.status.parents.filter((p) => p.parentRef.name !== 'gw-b') } })
  await until('r-ab repaired', () => parentsOf(fake, 'r-ab').includes('gw-b'), 5_000)
  t.same(parentsOf(fake, 'r-ab').sort(), ['gw-a', 'gw-b'])
  t.equal(await quiet(fake, 1500), 0, 'settled again: no status writes')
  t.equal(a.statusWriter?.writes, aWrites, 'a wrote nothing for b\'s entry')
})

t.test('a status the two deployments see differently is not fought over without end', async (t) => {
  // One Envoy Gateway Backend (status.conditions: one list, not per Gateway) used
  // through both Gateways; b's Gateway denies its destination, so b finds it not
  // Accepted while a finds it Accepted. Each would undo the other's write.
  const up = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'up' })
  t.teardown(() => up.close())
  const fake = await startFake(t)
  classAndGateway(fake, 'a', await freePort())
  classAndGateway(fake, 'b', await freePort(), { 'sallyport.io/destination-denylist': '127.0.0.0/8' })
  fake.apply(backend('up', up.address.port))
  fake.apply(routeOn('r-ab', ['gw-a', 'gw-b'], up.address.port))
  await deployment(t, fake, 'a')
  await deployment(t, fake, 'b')
  await until('both report on the route', () => parentsOf(fake, 'r-ab').length === 2)
  const backendWrites = (): number => fake.count('PUT', /backends\/up\/status$/)
  await new Promise((r) => setTimeout(r, 1500))
  const before = backendWrites()
  await new Promise((r) => setTimeout(r, 1500))
  t.ok(backendWrites() - before <= 2, `at most a write or two in 1.5 s once each has tried a few times (${backendWrites() - before}; ${before} before)`)
})
