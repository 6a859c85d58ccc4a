// Kubernetes mode end to end inside one process: the real Runtime fed by the
// Kubernetes source from the fake API server; traffic through the data plane;
// status write-back; leader election between two replicas.
import './quiet.ts'
import t from 'tap'
import net from 'node:net'
import { Runtime } from '../../lib/runtime/runtime.ts'
import { createKubeMode, type KubeMode } from '../../lib/runtime/kube-mode.ts'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { freePort, request } from '../e2e/harness.ts'
import { backend, clientFor, gateway, gatewayClass, route, startFake, until } from './fixtures.ts'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'
import type { Test } from 'tap'
import { metricValue } from '../helpers/metrics.ts'

const HTTP_ROUTE = 'gateway.networking.k8s.io/v1'
const LEASE = { durationMs: 1000, renewDeadlineMs: 700, retryPeriodMs: 100 }

async function replica(t: Test, fake: FakeApiServer, identity: string): Promise<{ runtime: Runtime; kube: KubeMode }> {
  const kube = createKubeMode({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 50, max: 200 }, lease: { ...LEASE, identity, namespace: 'sallyport-system' } })
  const runtime = new Runtime({ configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, ...kube.runtimeOptions })
  let stopped = false
  t.teardown(async () => { if (!stopped) { await kube.stop(); await runtime.stop(100) } })
  await runtime.start()
  kube.start()
  const stop = async (release: boolean): Promise<void> => { stopped = true; await kube.stop({ release }); await runtime.stop(100) }
  return { runtime, kube: Object.assign(kube, { stopReplica: stop }) }
}

function routeStatus(fake: FakeApiServer, name: string): Array<Record<string, unknown>> {
  const r = fake.get(HTTP_ROUTE, 'HTTPRoute', 'default', name)
  return ((r?.status as Record<string, unknown> | undefined)?.parents ?? []) as Array<Record<string, unknown>>
}

t.test('routes from the API server serve traffic; update, delete, 410, outage', async (t) => {
  const upA = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'a' })
  const upB = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'b' })
  t.teardown(() => Promise.all([upA.close(), upB.close()]))
  const port = await freePort()
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(port))
  fake.apply(backend('a', upA.address.port))
  fake.apply(backend('b', upB.address.port))
  fake.apply(route('one', 'one.example.test', 'a', upA.address.port))
  // Another controller's entry must survive our writes.
  fake.apply({ ...fake.get(HTTP_ROUTE, 'HTTPRoute', 'default', 'one'), status: { parents: [{ parentRef: { name: 'other' }, controllerName: 'example.com/other', conditions: [] }] } })
  const { runtime, kube } = await replica(t, fake, 'only')
  t.ok(runtime.ready(), 'ready after the first sync')
  const url = `http://127.0.0.1:${port}/`
  const upstreamOf = async (host: string): Promise<string | number> => {
    const r = await request(url, { host })
    return r.status === 200 ? (JSON.parse(r.body) as { upstream: string }).upstream : r.status
  }
  t.equal(await upstreamOf('one.example.test'), 'a', 'a route created in the API server serves')
  await until('the only replica leads', () => kube.elector?.isLeader() === true)
  t.equal(await metricValue('sallyport_kube_leader'), 1, 'sallyport_kube_leader says so')

  fake.apply(route('one', 'one.example.test', 'b', upB.address.port))
  await until('update swaps the table', async () => await upstreamOf('one.example.test') === 'b')
  fake.apply(route('two', 'two.example.test', 'a', upA.address.port))
  await until('new route', async () => await upstreamOf('two.example.test') === 'a')
  fake.remove(HTTP_ROUTE, 'HTTPRoute', 'default', 'two')
  await until('delete removes the route', async () => await upstreamOf('two.example.test') === 404)

  // 410 Gone with changes the informer did not see: relist, still correct.
  fake.expireWatches()
  fake.apply(route('three', 'three.example.test', 'b', upB.address.port))
  await until('after 410', async () => await upstreamOf('three.example.test') === 'b')

  // Status: leader writes conditions with observedGeneration; others' entries kept.
  await until('leader', () => kube.elector?.isLeader() === true)
  await until('route status written', () => routeStatus(fake, 'one').some((p) => p.controllerName === 'sallyport.io/gateway-controller'))
  const parents = routeStatus(fake, 'one')
  t.ok(parents.some((p) => p.controllerName === 'example.com/other'), "another controller's entry is preserved")
  const ours = parents.find((p) => p.controllerName === 'sallyport.io/gateway-controller') as { conditions: Array<{ type: string; status: string; observedGeneration: number; lastTransitionTime: string }> }
  const accepted = ours.conditions.find((c) => c.type === 'Accepted')
  t.equal(accepted?.status, 'True')
  t.equal(accepted?.observedGeneration, 2, 'observedGeneration is the generation compiled (one edit: 2)')
  t.type(accepted?.lastTransitionTime, 'string')
  type GwStatus = { conditions: Array<{ type: string; status: string }>; listeners: Array<{ name: string; attachedRoutes: number }> }
  const gwStatus = (): GwStatus | undefined => fake.get(HTTP_ROUTE, 'Gateway', 'default', 'egress')?.status as GwStatus | undefined
  await until('listener attachedRoutes: one and three', () => gwStatus()?.listeners[0]?.attachedRoutes === 2)
  t.equal(gwStatus()?.conditions.find((c) => c.type === 'Programmed')?.status, 'True', 'Gateway Programmed')
  const gc = fake.get(HTTP_ROUTE, 'GatewayClass', '', 'sallyport')?.status as { conditions: Array<{ type: string; status: string }> }
  t.equal(gc.conditions.find((c) => c.type === 'Accepted')?.status, 'True', 'GatewayClass Accepted')
  const be = fake.get('gateway.envoyproxy.io/v1alpha1', 'Backend', 'default', 'a')?.status as { conditions: Array<{ type: string }> } | undefined
  t.ok(be?.conditions.some((c) => c.type === 'Accepted'), 'Backend status written')

  // Nothing changed: no writes.
  await kube.statusWriter?.sync()
  const puts = fake.count('PUT', /\/status$/)
  await kube.kubeSource.reload()
  await kube.statusWriter?.sync()
  await new Promise((r) => setTimeout(r, 200))
  t.equal(fake.count('PUT', /\/status$/), puts, 'no status write when nothing changed')

  // A 409 (someone wrote the object since) is retried with a fresh read.
  const r3 = fake.get(HTTP_ROUTE, 'HTTPRoute', 'default', 'three')
  fake.apply({ ...r3, spec: { ...(r3?.spec as object), hostnames: ['three.example.test', 'tres.example.test'] } })
  await until('status for generation 2 of three', () => routeStatus(fake, 'three').some((p) => (p.conditions as Array<{ observedGeneration: number }>).every((c) => c.observedGeneration === 2)))

  // The API server goes away: the last table keeps serving; readiness holds.
  await fake.stop()
  await new Promise((r) => setTimeout(r, 300))
  t.equal(await upstreamOf('one.example.test'), 'b', 'serving while the API server is unreachable')
  t.ok(runtime.ready(), 'still ready')
  await fake.start()
  fake.apply(route('four', 'four.example.test', 'a', upA.address.port))
  await until('back after the outage', async () => await upstreamOf('four.example.test') === 'a', 15_000)
})

t.test('a listener whose port cannot be bound: the written Gateway status says so until it binds', async (t) => {
  const up = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'a' })
  t.teardown(() => up.close())
  const port = await freePort()
  const squatter = net.createServer((s) => s.destroy())
  await new Promise<void>((resolve) => squatter.listen(port, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { if (squatter.listening) squatter.close(() => resolve()); else resolve() }))
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(port))
  fake.apply(backend('a', up.address.port))
  fake.apply(route('r', 'r.example.test', 'a', up.address.port))
  const { runtime, kube } = await replica(t, fake, 'only')
  t.equal(runtime.ready(), false, 'not ready: the port is taken')
  await until('leader', () => kube.elector?.isLeader() === true)
  type Cond = { type: string; status: string; reason: string; message: string }
  type GwStatus = { conditions?: Cond[]; listeners?: Array<{ name: string; conditions: Cond[] }> }
  const gwStatus = (): GwStatus | undefined => fake.get(HTTP_ROUTE, 'Gateway', 'default', 'egress')?.status as GwStatus | undefined
  const listenerProgrammed = (): Cond | undefined => gwStatus()?.listeners?.find((l) => l.name === 'http')?.conditions.find((c) => c.type === 'Programmed')
  const gatewayProgrammed = (): Cond | undefined => gwStatus()?.conditions?.find((c) => c.type === 'Programmed')
  await until('Gateway status written', () => listenerProgrammed() !== undefined)
  t.equal(listenerProgrammed()?.status, 'False', 'the listener is written Programmed=False')
  t.equal(listenerProgrammed()?.reason, 'Pending')
  t.match(listenerProgrammed()?.message, new RegExp(`\\b${port}\\b.*EADDRINUSE|EADDRINUSE.*\\b${port}\\b`), 'naming the port and the OS error')
  t.equal(gatewayProgrammed()?.status, 'False', 'the Gateway, whose only listener it is, too')

  await new Promise<void>((resolve) => squatter.close(() => resolve()))
  await until('listener Programmed=True written once the port binds', () => listenerProgrammed()?.status === 'True', 20_000)
  t.equal(gatewayProgrammed()?.status, 'True', 'the Gateway is programmed again')
  t.ok(runtime.ready(), 'ready')
  t.equal((await request(`http://127.0.0.1:${port}/`, { host: 'r.example.test' })).status, 200, 'and it serves')
})

t.test('two replicas: exactly one writes status; the other takes over when it stops', async (t) => {
  const up = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'a' })
  t.teardown(() => up.close())
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(await freePort()))
  fake.apply(backend('a', up.address.port))
  fake.apply(route('r', 'r.example.test', 'a', up.address.port))
  // Two replicas; the second cannot bind the Gateway's port in this one process
  // (it retries), but it compiles, watches and campaigns like any replica.
  const a = await replica(t, fake, 'replica-a')
  await until('a leads', () => a.kube.elector?.isLeader() === true)
  const b = await replica(t, fake, 'replica-b')
  await until('status written', () => routeStatus(fake, 'r').length > 0)
  for (let i = 2; i <= 4; i++) {
    const cur = fake.get(HTTP_ROUTE, 'HTTPRoute', 'default', 'r')
    fake.apply({ ...cur, spec: { ...(cur?.spec as object), hostnames: [`r${i}.example.test`] } })
    await until(`generation ${i} written`, () => routeStatus(fake, 'r').some((p) => (p.conditions as Array<{ observedGeneration: number }>)[0]?.observedGeneration === i))
  }
  t.equal(b.kube.elector?.isLeader(), false, 'b follows')
  t.ok((a.kube.statusWriter?.writes ?? 0) > 0, 'a wrote status')
  t.equal(b.kube.statusWriter?.writes, 0, 'b wrote nothing')
  const lease = fake.get('coordination.k8s.io/v1', 'Lease', 'sallyport-system', 'sallyport-sallyport')?.spec as { holderIdentity: string }
  t.equal(lease.holderIdentity, 'replica-a')

  // a dies without releasing the lease: b takes over after the lease expires.
  const died = Date.now()
  await (a.kube as KubeMode & { stopReplica: (release: boolean) => Promise<void> }).stopReplica(false)
  await until('b leads', () => b.kube.elector?.isLeader() === true, 10_000)
  t.ok(Date.now() - died >= 700, 'b waited for the lease to expire')
  const cur = fake.get(HTTP_ROUTE, 'HTTPRoute', 'default', 'r')
  fake.apply({ ...cur, spec: { ...(cur?.spec as object), hostnames: ['r5.example.test'] } })
  await until('b writes generation 5', () => routeStatus(fake, 'r').some((p) => (p.conditions as Array<{ observedGeneration: number }>)[0]?.observedGeneration === 5))
  // The fake stores the write before b has read its answer (and counted it): wait for b's count.
  await until('b counts its write', () => (b.kube.statusWriter?.writes ?? 0) > 0, 2_000)
  t.ok((b.kube.statusWriter?.writes ?? 0) > 0, 'b writes status now')
  t.equal((fake.get('coordination.k8s.io/v1', 'Lease', 'sallyport-system', 'sallyport-sallyport')?.spec as { holderIdentity: string }).holderIdentity, 'replica-b')
})
