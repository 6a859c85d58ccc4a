// Leader election when the Lease requests of the leader hang (accepted, never
// answered): the leader must stop counting itself leader at its renew deadline,
// whatever is in flight, so it has stopped writing status before the lease can
// expire for another replica (client-go's renew deadline). Two writers at once
// is what leader election is there to prevent.
import './quiet.ts'
import t from 'tap'
import { Runtime } from '../../lib/runtime/runtime.ts'
import { createKubeMode, type KubeMode } from '../../lib/runtime/kube-mode.ts'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { freePort } from '../e2e/harness.ts'
import { backend, clientFor, gateway, gatewayClass, route, startFake, until } from './fixtures.ts'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'
import { microTime } from '../../lib/runtime/leader-election.ts'
import type { Test } from 'tap'

const HTTP_ROUTE = 'gateway.networking.k8s.io/v1'
// Renew deadline well inside the lease duration, as client-go's 10 s / 15 s.
const LEASE = { durationMs: 3000, renewDeadlineMs: 1500, retryPeriodMs: 200 }

async function replica(t: Test, fake: FakeApiServer, identity: string): Promise<KubeMode> {
  // Each replica has its own token, so the fake server can hang one replica's requests only.
  const kube = createKubeMode({ client: clientFor(fake, `token-${identity}`), debounceMs: 10, backoffMs: { base: 50, max: 200 }, lease: { ...LEASE, identity, namespace: 'sallyport-system' } })
  const runtime = new Runtime({ configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, ...kube.runtimeOptions })
  t.teardown(async () => { fake.answer(); await kube.stop({ release: false }); await runtime.stop(100) })
  await runtime.start()
  kube.start()
  return kube
}

function observedGeneration(fake: FakeApiServer, name: string): number {
  const parents = ((fake.get(HTTP_ROUTE, 'HTTPRoute', 'default', name)?.status as { parents?: Array<{ conditions: Array<{ observedGeneration: number }> }> } | undefined)?.parents ?? [])
  return parents[0]?.conditions[0]?.observedGeneration ?? 0
}

t.test('a leader whose Lease requests hang steps down at its renew deadline, before another replica can take over', async (t) => {
  const up = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'a' })
  t.teardown(() => up.close())
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(await freePort()))
  fake.apply(backend('a', up.address.port))
  fake.apply(route('r', 'r.example.test', 'a', up.address.port))
  const a = await replica(t, fake, 'a')
  await until('a leads', () => a.elector?.isLeader() === true)
  const b = await replica(t, fake, 'b')
  await until('status written', () => observedGeneration(fake, 'r') === 1)

  // a's Lease requests now hang; everything else of a's still gets through.
  fake.hang((r) => r.authorization === 'Bearer token-a' && r.path.includes('/leases'))
  // The moment b leads (it waits for the lease to expire on its own clock), a must not.
  let aLeaderWhenBLed: boolean | null = null
  await until('b leads', () => {
    if (b.elector?.isLeader() !== true) return false
    aLeaderWhenBLed = a.elector?.isLeader() ?? null
    return true
  }, 15_000)
  t.equal(aLeaderWhenBLed, false, 'a had stepped down when b took over')
  t.equal(a.elector?.isLeader(), false, 'a is not the leader while its lease requests hang')

  // Only b writes status now.
  const aWrites = a.statusWriter?.writes
  const cur = fake.get(HTTP_ROUTE, 'HTTPRoute', 'default', 'r')
  fake.apply({ ...cur, spec: { ...(cur?.spec as object), hostnames: ['r2.example.test'] } })
  await until('generation 2 written', () => observedGeneration(fake, 'r') === 2)
  await until('b counts its write', () => (b.statusWriter?.writes ?? 0) > 0, 2_000)
  t.equal(a.statusWriter?.writes, aWrites, 'a wrote nothing')
})

t.test('Lease times are MicroTime: six fractional digits, as the API server decodes them', async (t) => {
  t.equal(microTime(new Date(Date.UTC(2026, 10, 27, 7, 30, 5, 42))), '2026-11-27T07:30:05.042000Z')
  t.equal(microTime(new Date(Date.UTC(2026, 0, 1))), '2026-01-01T00:00:00.000000Z')
})
