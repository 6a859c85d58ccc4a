// A LoadBalancer Service's addresses live in its status: the load balancer
// controller writes status.loadBalancer.ingress once it has provisioned one,
// after the Service is created. The source must hand that write on
// (--publish-service publishes them on the Gateways), while other status-only
// writes of a Service stay quiet.
import './quiet.ts'
import t from 'tap'
import { KubeSource } from '../../lib/config/kube-source.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { clientFor, gateway, startFake, until } from './fixtures.ts'

function service(status: Record<string, unknown> | null): Record<string, unknown> {
  return {
    apiVersion: 'v1', kind: 'Service', metadata: { name: 'sallyport', namespace: 'sallyport-system' },
    spec: { type: 'LoadBalancer', clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], ports: [{ name: 'http', port: 80 }] },
    ...(status === null ? {} : { status }),
  }
}

t.test("a Service's load balancer address written by a status update reaches the snapshot; other status writes do not", async (t) => {
  const fake = await startFake(t)
  fake.apply(gateway(8080))
  fake.apply(service(null))
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10 })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  let snaps = 0
  await source.start((s) => { last = s; snaps++ })
  const ingress = () => (last as Snapshot | null)?.services.get('sallyport-system/sallyport')?.loadBalancerIngress
  t.same(ingress(), [], 'created: no load balancer yet')

  fake.apply(service({ loadBalancer: { ingress: [{ ip: '203.0.113.7' }] } }))
  await until('the controller-written address is seen', () => ingress()?.[0]?.ip === '203.0.113.7')
  fake.apply(service({ loadBalancer: { ingress: [{ ip: '203.0.113.7' }, { hostname: 'lb.example.net' }] } }))
  await until('a hostname too', () => ingress()?.length === 2)

  await new Promise((r) => setTimeout(r, 200))
  const before = snaps
  for (let i = 0; i < 3; i++) {
    fake.apply(service({ loadBalancer: { ingress: [{ ip: '203.0.113.7' }, { hostname: 'lb.example.net' }] }, conditions: [{ type: 'Probe', status: i % 2 === 0 ? 'True' : 'False' }] }))
  }
  await new Promise((r) => setTimeout(r, 300))
  t.equal(snaps, before, 'no snapshot for status noise')
})
