// SIGTERM while the API server accepts connections but never answers (a wedged
// API server, a network path that drops replies): the data plane starts
// draining at once (/readyz 503), the lease release is best effort and short,
// and the process exits within about --drain-seconds plus that bound, well
// before a kubelet's SIGKILL (terminationGracePeriodSeconds).
import './quiet.ts'
import t from 'tap'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { eventually, freePort, request, startCli } from '../e2e/harness.ts'
import { backend, gateway, gatewayClass, kubeconfigFile, route, startFake } from './fixtures.ts'

t.test('SIGTERM with an API server that never answers: drains at once, exits within the bound', async (t) => {
  const up = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'a' })
  t.teardown(() => up.close())
  const [port, adminPort] = [await freePort(), await freePort()]
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(port))
  fake.apply(backend('a', up.address.port))
  fake.apply(route('one', 'one.example.test', 'a', up.address.port))
  const cli = startCli(t, ['serve', '--kubernetes', '--kubeconfig', kubeconfigFile(t, fake), '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--access-log', 'off'], {
    env: { POD_NAME: 'cli-pod', POD_NAMESPACE: 'sallyport-system', SALLYPORT_LOG_LEVEL: 'info' },
  })
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20_000, '/readyz 200')
  await eventually(async () => fake.get('coordination.k8s.io/v1', 'Lease', 'sallyport-system', 'sallyport-sallyport')?.spec, (s) => (s as { holderIdentity?: string } | undefined)?.holderIdentity === 'cli-pod', 10_000, 'the CLI leads')

  // From now on nothing is answered; wait until a lease renewal (every 2 s) is stuck in flight.
  const leaseRequests = (): number => fake.requests.filter((r) => r.path.includes('/leases')).length
  const before = leaseRequests()
  fake.hang(() => true)
  await eventually(async () => leaseRequests(), (n) => n > before, 5_000, 'a lease request in flight')

  const started = Date.now()
  cli.child.kill('SIGTERM')
  await eventually(() => request(`${admin}/readyz`, { timeoutMs: 1000 }), (r) => r.status === 503, 3_000, '/readyz 503 (draining)')
  t.pass('draining started at once')
  const bound = 10_000 // --drain-seconds 1, the lease release's bound, slack for a loaded machine; it took ~59 s
  let timer: NodeJS.Timeout | undefined
  const code = await Promise.race([cli.exited, new Promise<string>((resolve) => { timer = setTimeout(() => resolve('still running'), bound + 5_000) })])
  clearTimeout(timer)
  const took = Date.now() - started
  t.equal(code, 0, 'exits 0')
  t.ok(took < bound, `exited ${took} ms after SIGTERM (bound ${bound} ms)`)
})
