// A Pod's addresses live in its status: the kubelet writes status.podIPs after
// the Pod is created and scheduled. The source must hand that write on (client
// identity and EndpointSelector backends read the IPs and readiness), while
// status-only writes that change neither stay quiet.
import './quiet.ts'
import t from 'tap'
import { KubeSource } from '../../lib/config/kube-source.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { clientFor, gateway, startFake, until } from './fixtures.ts'

function pod(name: string, status: Record<string, unknown> | null, nodeName: string | null = 'node-a'): Record<string, unknown> {
  return {
    apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'team-a', labels: { app: 'client' } },
    spec: { serviceAccountName: 'billing', ...(nodeName === null ? {} : { nodeName }), containers: [{ name: 'c', image: 'x' }] },
    ...(status === null ? {} : { status }),
  }
}

t.test("a Pod's IP written by a status update reaches the snapshot; a later IP change and the IP going away too", async (t) => {
  const fake = await startFake(t)
  fake.apply(gateway(8080))
  fake.apply(pod('worker', null, null))
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10 })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  const ips = (): readonly string[] | undefined => (last as Snapshot | null)?.pods.get('team-a/worker')?.podIPs
  t.same(ips(), [], 'created, not yet scheduled: no address')

  fake.apply(pod('worker', { phase: 'Pending' }))
  await until('scheduled', () => (last as Snapshot | null)?.pods.get('team-a/worker')?.nodeName === 'node-a')
  fake.apply(pod('worker', { phase: 'Running', podIP: '10.1.2.3', podIPs: [{ ip: '10.1.2.3' }] }))
  await until('the kubelet-written address is seen', () => ips()?.[0] === '10.1.2.3')
  fake.apply(pod('worker', { phase: 'Running', podIP: '10.1.2.3', podIPs: [{ ip: '10.1.2.3' }, { ip: 'fd00::3' }] }))
  await until('a second address', () => ips()?.length === 2)
  fake.apply(pod('worker', { phase: 'Running', podIP: '10.1.2.3', podIPs: [{ ip: '10.1.2.3' }], conditions: [{ type: 'Ready', status: 'False' }] }))
  await until('readiness lost', () => (last as Snapshot | null)?.pods.get('team-a/worker')?.ready === false)
  fake.apply(pod('worker', { phase: 'Succeeded' }))
  await until('the address released', () => ips()?.length === 0)
  t.pass('every status write that changes what is read from it was handed on')
})

t.test("a Pod's status write that changes nothing sallyport reads builds no snapshot", async (t) => {
  const fake = await startFake(t)
  fake.apply(gateway(8080))
  fake.apply(pod('worker', { phase: 'Running', podIPs: [{ ip: '10.1.2.3' }], conditions: [{ type: 'Ready', status: 'True' }] }))
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10 })
  t.teardown(() => source.close())
  let snaps = 0
  await source.start(() => { snaps++ })
  await new Promise((r) => setTimeout(r, 300)) // the start's own passes settle
  const before = snaps
  // Restart counts, probe times, other conditions: the IPs and readiness stay.
  for (let i = 0; i < 5; i++) {
    fake.apply(pod('worker', { phase: 'Running', podIPs: [{ ip: '10.1.2.3' }], conditions: [{ type: 'Ready', status: 'True' }, { type: 'ContainersReady', status: 'True', lastProbeTime: `2026-11-27T00:00:0${i}Z` }], containerStatuses: [{ name: 'c', restartCount: i }] }))
  }
  await new Promise((r) => setTimeout(r, 300))
  t.equal(snaps, before, 'no snapshot for status noise')
})
