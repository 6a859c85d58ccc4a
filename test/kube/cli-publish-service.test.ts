// The real CLI, `serve --kubernetes --kubeconfig FILE --publish-service NS/NAME`,
// as a child process against the fake API server: the Gateway's
// status.addresses are the Service's, as deploy/kubernetes runs it (the
// Service named through $(POD_NAMESPACE), here spelled out); and a later run
// without the flag removes them.
import './quiet.ts'
import t from 'tap'
import { eventually, freePort, request, startCli } from '../e2e/harness.ts'
import { gateway, gatewayClass, kubeconfigFile, startFake } from './fixtures.ts'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'

t.test('serve --kubernetes --publish-service writes the Service\'s addresses on the Gateway', async (t) => {
  const [port, adminPort] = [await freePort(), await freePort()]
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(port))
  fake.apply({
    apiVersion: 'v1', kind: 'Service', metadata: { name: 'sallyport', namespace: 'sallyport-system' },
    spec: { type: 'LoadBalancer', clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], ports: [{ name: 'http', port: 80, targetPort: 'http' }] },
    status: { loadBalancer: { ingress: [{ ip: '203.0.113.7' }] } },
  })
  const cli = startCli(t, [
    'serve', '--kubernetes', '--kubeconfig', kubeconfigFile(t, fake), '--publish-service', 'sallyport-system/sallyport',
    '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--access-log', 'off',
  ], { env: { POD_NAME: 'cli-pod', POD_NAMESPACE: 'sallyport-system', SALLYPORT_LOG_LEVEL: 'info' } })
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20_000, '/readyz 200')
  const addresses = await eventually(async () => (fake.get('gateway.networking.k8s.io/v1', 'Gateway', 'default', 'egress')?.status as { addresses?: unknown } | undefined)?.addresses,
    (a) => Array.isArray(a) && a.length === 2, 15_000, 'status.addresses written by the CLI')
  t.same(addresses, [{ type: 'IPAddress', value: '203.0.113.7' }, { type: 'IPAddress', value: '10.96.0.10' }], 'the load balancer address, then the cluster IP')
  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0, 'exits 0 on SIGTERM')
  const before = gatewayStatus(fake)

  // The next run without the flag knows no address: the ones the first run
  // wrote go (the Gateway is sallyport's; kubectl get gateway would show them
  // otherwise), though nothing else in the status changes.
  const again = startCli(t, [
    'serve', '--kubernetes', '--kubeconfig', kubeconfigFile(t, fake),
    '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--access-log', 'off',
  ], { env: { POD_NAME: 'cli-pod', POD_NAMESPACE: 'sallyport-system', SALLYPORT_LOG_LEVEL: 'info' } })
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20_000, '/readyz 200 (second run)')
  await eventually(async () => gatewayStatus(fake), (s) => s !== undefined && !('addresses' in s), 15_000, 'status.addresses removed by the run without --publish-service')
  t.pass('status.addresses removed')
  t.same(gatewayStatus(fake)?.conditions, before?.conditions, 'the conditions as they were: only the addresses changed')
  t.same(gatewayStatus(fake)?.listeners, before?.listeners, 'the listeners as they were')
  again.child.kill('SIGTERM')
  t.equal(await again.exited, 0, 'exits 0 on SIGTERM')
})

function gatewayStatus(fake: FakeApiServer): Record<string, unknown> | undefined {
  return fake.get('gateway.networking.k8s.io/v1', 'Gateway', 'default', 'egress')?.status as Record<string, unknown> | undefined
}
