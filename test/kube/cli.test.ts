// The real CLI, `serve --kubernetes --kubeconfig FILE`, as a child process
// against the fake API server: traffic, a swap on a watch event, status, the
// API server going away (last table keeps serving, /readyz stays 200), and the
// lease handed back on SIGTERM.
import './quiet.ts'
import t from 'tap'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { eventually, freePort, request, startCli } from '../e2e/harness.ts'
import { backend, gateway, gatewayClass, kubeconfigFile, route, startFake } from './fixtures.ts'

t.test('serve --kubernetes --kubeconfig', async (t) => {
  const up = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'a' })
  const up2 = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'b' })
  t.teardown(() => Promise.all([up.close(), up2.close()]))
  const [port, adminPort] = [await freePort(), await freePort()]
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(port))
  fake.apply(backend('a', up.address.port))
  fake.apply(backend('b', up2.address.port))
  fake.apply(route('one', 'one.example.test', 'a', up.address.port))
  const cli = startCli(t, ['serve', '--kubernetes', '--kubeconfig', kubeconfigFile(t, fake), '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--access-log', 'off'], {
    env: { POD_NAME: 'cli-pod', POD_NAMESPACE: 'sallyport-system', SALLYPORT_LOG_LEVEL: 'info' },
  })
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20_000, '/readyz 200')
  const upstreamOf = async (host: string): Promise<string | number> => {
    const r = await request(`http://127.0.0.1:${port}/`, { host })
    return r.status === 200 ? (JSON.parse(r.body) as { upstream: string }).upstream : r.status
  }
  t.equal(await upstreamOf('one.example.test'), 'a', 'traffic through a route from the API server')

  fake.apply(route('one', 'one.example.test', 'b', up2.address.port))
  await eventually(() => upstreamOf('one.example.test'), (u) => u === 'b', 10_000, 'swap after a watch event')
  t.pass('the watch event swapped the table')

  await eventually(async () => fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'one')?.status, (s) => {
    const parents = (s as { parents?: Array<{ conditions: Array<{ observedGeneration: number }> }> } | undefined)?.parents ?? []
    return parents.some((p) => p.conditions[0]?.observedGeneration === 2)
  }, 10_000, 'status written by the CLI')
  t.pass('status written with observedGeneration 2')
  const lease = fake.get('coordination.k8s.io/v1', 'Lease', 'sallyport-system', 'sallyport-sallyport')
  t.equal((lease?.spec as { holderIdentity?: string }).holderIdentity, 'cli-pod', 'the lease names POD_NAME')

  await fake.stop()
  await new Promise((r) => setTimeout(r, 500))
  t.equal(await upstreamOf('one.example.test'), 'b', 'last table serves while the API server is unreachable')
  t.equal((await request(`${admin}/readyz`)).status, 200, '/readyz stays 200 after the first sync')
  await fake.start()

  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0, 'exits 0 on SIGTERM')
  const released = fake.get('coordination.k8s.io/v1', 'Lease', 'sallyport-system', 'sallyport-sallyport')
  t.equal((released?.spec as { holderIdentity?: string }).holderIdentity, '', 'lease released on shutdown')
})
