// --publish-service in Kubernetes mode, inside one process: the real Runtime
// fed by the Kubernetes source, the status writer writing to the fake API
// server. The Gateway's status.addresses are the Service's; a load balancer
// address that arrives in a status update of the Service reaches them; nothing
// is written when nothing changed; without the flag (or without an address)
// the field is removed: sallyport is the Gateways' controller.
import './quiet.ts'
import t from 'tap'
import type { Test } from 'tap'
import { Runtime } from '../../lib/runtime/runtime.ts'
import { createKubeMode, type KubeMode } from '../../lib/runtime/kube-mode.ts'
import { freePort } from '../e2e/harness.ts'
import { clientFor, gateway, gatewayClass, startFake, until } from './fixtures.ts'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'

const GW = 'gateway.networking.k8s.io/v1'
const LEASE = { durationMs: 1000, renewDeadlineMs: 700, retryPeriodMs: 100 }

type GwStatus = { addresses?: Array<{ type: string; value: string }>; conditions?: Array<{ type: string; status: string; reason: string; message: string }> }

async function replica(t: Test, fake: FakeApiServer, publishService: string | null): Promise<{ runtime: Runtime; kube: KubeMode }> {
  const kube = createKubeMode({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 50, max: 200 }, lease: { ...LEASE, identity: 'only', namespace: 'sallyport-system' } })
  const runtime = new Runtime({ configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, publishService, ...kube.runtimeOptions })
  t.teardown(async () => { await kube.stop(); await runtime.stop(100) })
  await runtime.start()
  kube.start()
  await until('leader', () => kube.elector?.isLeader() === true)
  return { runtime, kube }
}

function service(name: string, spec: Record<string, unknown>, status: Record<string, unknown> | null = null): Record<string, unknown> {
  return {
    apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'sallyport-system' },
    spec: { ports: [{ name: 'http', port: 80, targetPort: 'http' }], ...spec }, ...(status === null ? {} : { status }),
  }
}

function gwStatus(fake: FakeApiServer): GwStatus | undefined {
  return fake.get(GW, 'Gateway', 'default', 'egress')?.status as GwStatus | undefined
}

const gatewayPuts = (fake: FakeApiServer): number => fake.count('PUT', /gateways\/egress\/status$/)

async function settled(kube: KubeMode): Promise<void> {
  await kube.statusWriter?.sync()
  await new Promise((r) => setTimeout(r, 300))
  await kube.statusWriter?.sync()
}

t.test('status.addresses: the Service\'s cluster IP, then its load balancer address from a status update; no write when nothing changed', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(await freePort()))
  fake.apply(service('sallyport', { type: 'LoadBalancer', clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'] }))
  fake.apply(service('unrelated', { clusterIP: '10.96.0.99' }))
  const { runtime, kube } = await replica(t, fake, 'sallyport-system/sallyport')

  await until('the cluster IP written', () => JSON.stringify(gwStatus(fake)?.addresses) === JSON.stringify([{ type: 'IPAddress', value: '10.96.0.10' }]))
  t.pass('status.addresses holds the cluster IP (no load balancer yet)')
  t.equal(gwStatus(fake)?.conditions?.find((c) => c.type === 'Programmed')?.status, 'True')

  await settled(kube)
  let puts = gatewayPuts(fake)
  await kube.kubeSource.reload()
  await settled(kube)
  t.equal(gatewayPuts(fake), puts, 'a pass with nothing changed writes nothing')

  // Unrelated Service churn: no compile, no write.
  const version = runtime.table()?.version
  fake.apply(service('unrelated', { clusterIP: '10.96.0.99', ports: [{ name: 'http', port: 81 }] }))
  await new Promise((r) => setTimeout(r, 300))
  t.equal(runtime.table()?.version, version, 'another Service changing recompiles nothing')
  t.equal(gatewayPuts(fake), puts, 'and writes nothing')

  // The load balancer controller writes the Service's status.
  fake.apply(service('sallyport', { type: 'LoadBalancer', clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'] }, { loadBalancer: { ingress: [{ ip: '203.0.113.7' }, { hostname: 'lb.example.net' }] } }))
  await until('the load balancer addresses written', () => gwStatus(fake)?.addresses?.length === 3)
  t.same(gwStatus(fake)?.addresses, [{ type: 'IPAddress', value: '203.0.113.7' }, { type: 'Hostname', value: 'lb.example.net' }, { type: 'IPAddress', value: '10.96.0.10' }], 'load balancer first, then the cluster IP')

  await settled(kube)
  puts = gatewayPuts(fake)
  await kube.kubeSource.reload()
  await settled(kube)
  t.equal(gatewayPuts(fake), puts, 'written once: no write on the passes after')

  // The Service goes away: sallyport owns the field, and no address is bound.
  fake.remove('v1', 'Service', 'sallyport-system', 'sallyport')
  await until('the addresses removed', () => gwStatus(fake)?.addresses === undefined)
  t.pass('status.addresses removed with the Service')
})

t.test('spec.addresses naming an address the Service does not have: Programmed=False AddressNotUsable written; the usable one listed', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  const gw = gateway(await freePort()) as { spec: Record<string, unknown> }
  fake.apply({ ...gw, spec: { ...gw.spec, addresses: [{ type: 'IPAddress', value: '10.96.0.10' }, { type: 'IPAddress', value: '192.0.2.1' }] } })
  fake.apply(service('sallyport', { clusterIP: '10.96.0.10' }))
  await replica(t, fake, 'sallyport-system/sallyport')
  await until('Programmed=False written', () => gwStatus(fake)?.conditions?.find((c) => c.type === 'Programmed')?.reason === 'AddressNotUsable')
  t.match(gwStatus(fake)?.conditions?.find((c) => c.type === 'Programmed')?.message, /192\.0\.2\.1 \(IPAddress\) cannot be used/)
  t.same(gwStatus(fake)?.addresses, [{ type: 'IPAddress', value: '10.96.0.10' }])
  fake.apply({ ...gw, spec: { ...gw.spec, addresses: [{ type: 'IPAddress', value: '10.96.0.10' }] } })
  await until('Programmed=True once the unusable address is gone', () => gwStatus(fake)?.conditions?.find((c) => c.type === 'Programmed')?.status === 'True')
  t.pass('Programmed again')
})

// sallyport is the controller of the Gateways it serves, and status.addresses is
// the controller's to write (Gateway API: "the network addresses that have been
// bound to the Gateway"), as Envoy Gateway and Istio write their Gateways'. A run
// without --publish-service knows no address: the addresses an earlier run with
// the flag wrote would go on telling `kubectl get gateway` and conformance an
// address nothing binds any more.
t.test('without --publish-service, the addresses an earlier run wrote are removed; the rest of the status is left as it was', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(await freePort()))
  fake.apply(service('sallyport', { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'] }))
  const first = await replica(t, fake, 'sallyport-system/sallyport')
  await until('the cluster IP written', () => gwStatus(fake)?.addresses?.length === 1)
  await settled(first.kube)
  await first.kube.stop()
  await first.runtime.stop(100)
  const before = gwStatus(fake)

  await replica(t, fake, null)
  await until('the addresses removed', () => gwStatus(fake)?.addresses === undefined)
  t.pass('status.addresses removed by the run without --publish-service')
  t.same(gwStatus(fake)?.conditions, before?.conditions, 'conditions as they were (lastTransitionTime kept): only the addresses changed')
})

t.test('without --publish-service, a stale address is removed also where spec.addresses asks for it: Programmed=False agrees with an empty status.addresses', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  const gw = gateway(await freePort()) as { spec: Record<string, unknown> }
  fake.apply({ ...gw, spec: { ...gw.spec, addresses: [{ type: 'IPAddress', value: '10.96.0.10' }] } })
  // What a run with the flag wrote: the requested address, which the Service had.
  const g = fake.get(GW, 'Gateway', 'default', 'egress')
  fake.apply({ ...g, status: { addresses: [{ type: 'IPAddress', value: '10.96.0.10' }] } })
  fake.apply(service('sallyport', { clusterIP: '10.96.0.10' }))
  await replica(t, fake, null)
  await until('Programmed=False written', () => gwStatus(fake)?.conditions?.find((c) => c.type === 'Programmed')?.reason === 'AddressNotUsable')
  t.match(gwStatus(fake)?.conditions?.find((c) => c.type === 'Programmed')?.message, /cannot be assigned: sallyport publishes no addresses/)
  t.equal(gwStatus(fake)?.addresses, undefined, 'no address listed: none is assigned')
})

t.test('with --publish-service and no Service yet, an address written before (by anyone) is removed', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(await freePort()))
  const g = fake.get(GW, 'Gateway', 'default', 'egress')
  fake.apply({ ...g, status: { addresses: [{ type: 'Hostname', value: 'set.elsewhere.example' }] } })
  const { kube } = await replica(t, fake, 'sallyport-system/sallyport')
  await until('conditions written', () => gwStatus(fake)?.conditions?.some((c) => c.type === 'Programmed') === true)
  await settled(kube)
  t.equal(gwStatus(fake)?.addresses, undefined, 'removed')
})

t.test('a Service with more addresses than GatewayStatus holds (16): the first 16 are written, not a refused status', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(await freePort()))
  const externalIPs = Array.from({ length: 20 }, (_, i) => `192.0.2.${i + 1}`)
  fake.apply(service('front', { type: 'ClusterIP', clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], externalIPs }))
  await replica(t, fake, 'sallyport-system/front')
  await until('addresses written', () => (gwStatus(fake)?.addresses?.length ?? 0) > 0)
  t.same(gwStatus(fake)?.addresses?.map((a) => a.value), externalIPs.slice(0, 16))
  t.match(gwStatus(fake)?.conditions?.find((c) => c.type === 'Accepted'), { status: 'True' }, 'and the rest of the status with them')
})
