// SIGTERM while the API server accepts connections but never answers (a wedged
// API server, a network path that drops replies): the data plane starts
// draining at once (/readyz 503), the lease release is best effort and short,
// and the process exits within about --drain-seconds plus that bound, well
// before a kubelet's SIGKILL (terminationGracePeriodSeconds).
import './quiet.ts'
import t from 'tap'
import { eventually, request } from '../e2e/harness.ts'
import { startKubeCli } from './cli-fixture.ts'

t.test('SIGTERM with an API server that never answers: drains at once, exits within the bound', async (t) => {
  const { cli, fake, admin } = await startKubeCli(t)
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
