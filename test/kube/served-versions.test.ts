// A kind whose served versions change under a running gateway: its CRD
// upgraded to a release that no longer serves the version the informer
// watches, or uninstalled, or installed again.
import '../helpers/capture-logs.ts'
import t, { type Test } from 'tap'
import { KubeSource } from '../../lib/config/kube-source.ts'
import { KUBE_RESOURCES } from '../../lib/config/kube-resources.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { FakeApiServer } from '../helpers/fake-apiserver.ts'
import { clearLogs, linesWith, logLines } from '../helpers/capture-logs.ts'
import { FAKE_RESOURCES, clientFor, until } from './fixtures.ts'

const GW = 'gateway.networking.k8s.io'
const RESOURCES = KUBE_RESOURCES.filter((r) => r.plural === 'grpcroutes')

function grpcRoute(version: string, name: string, hostname: string): Record<string, unknown> {
  return {
    apiVersion: `${GW}/${version}`, kind: 'GRPCRoute', metadata: { name, namespace: 'default' },
    spec: { parentRefs: [{ name: 'egress' }], hostnames: [hostname], rules: [{ backendRefs: [{ name: 'svc', port: 9000 }] }] },
  }
}

/** A fake that serves GRPCRoute at v1alpha2 only, as Gateway API releases before v1.1 did. */
async function oldCluster(t: Test): Promise<FakeApiServer> {
  const fake = new FakeApiServer(FAKE_RESOURCES.map((d) => d.plural === 'grpcroutes' ? { ...d, version: 'v1alpha2' } : d))
  await fake.start()
  t.teardown(() => fake.stop())
  return fake
}

function hostsOf(s: Snapshot | null): string[] {
  return [...(s?.grpcRoutes.values() ?? [])].flatMap((r) => [...r.hostnames]).sort()
}

t.test('the watched version stops being served (CRD upgraded): the informer moves to a served version', async (t) => {
  const fake = await oldCluster(t)
  fake.apply(grpcRoute('v1alpha2', 'kept', 'kept.example.test'))
  fake.apply(grpcRoute('v1alpha2', 'removed', 'removed.example.test'))
  const source = new KubeSource({ client: clientFor(fake), resources: RESOURCES, debounceMs: 10, backoffMs: { base: 20, max: 100 }, notFoundRetryMs: 60_000 })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  t.same(hostsOf(last), ['kept.example.test', 'removed.example.test'], 'synced at v1alpha2')
  const watchingOld = (): boolean => fake.requests.some((r) => r.path === `/apis/${GW}/v1alpha2/grpcroutes` && r.query.includes('watch=true'))
  await until('watching v1alpha2', watchingOld)

  // The upgrade: v1 served, v1alpha2 gone; a route deleted and one created meanwhile.
  clearLogs()
  fake.serveVersion(GW, 'grpcroutes', 'v1')
  fake.remove(`${GW}/v1`, 'GRPCRoute', 'default', 'removed')
  fake.apply(grpcRoute('v1', 'added', 'added.example.test'))
  await until('the routes as v1 serves them', () => hostsOf(last).join() === 'added.example.test,kept.example.test')
  t.equal((last as Snapshot | null)?.grpcRoutes.get('default/kept')?.apiVersion, `${GW}/v1`, 'read at v1')
  t.equal(linesWith(/watch failed/).length, 0, 'no "watch failed" warnings for a version that is gone')

  // And it keeps watching at v1.
  fake.apply(grpcRoute('v1', 'later', 'later.example.test'))
  await until('a later change', () => hostsOf(last).includes('later.example.test'))
})

t.test('a kind whose CRD is uninstalled after sync is logged once, not retried as an error, and picked up again when reinstalled', async (t) => {
  const fake = await oldCluster(t)
  fake.apply(grpcRoute('v1alpha2', 'r', 'r.example.test'))
  // The 5-minute look for a kind never served would outlast this test: a kind that was served is looked for with the backoff.
  const source = new KubeSource({ client: clientFor(fake), resources: RESOURCES, debounceMs: 10, backoffMs: { base: 20, max: 40 }, notFoundRetryMs: 5 * 60_000 })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  await until('watching', () => fake.requests.some((r) => r.path.endsWith('/grpcroutes') && r.query.includes('watch=true')))

  clearLogs()
  fake.remove(`${GW}/v1alpha2`, 'GRPCRoute', 'default', 'r') // the API server deletes a CRD's objects first
  await until('the route deleted', () => hostsOf(last).length === 0)
  fake.hide('grpcroutes')
  fake.endWatches()
  const requests = (): number => fake.requests.filter((r) => r.path.endsWith('/grpcroutes')).length
  const before = requests()
  await until('looked for a few times', () => requests() - before >= 10)
  t.equal(logLines.filter((l) => /no longer served/.test(l.msg) && l.level >= 30).length, 2, 'one line for the version, one for the kind')
  t.equal(linesWith(/watch failed/).length, 0, 'no "watch failed" warnings')

  fake.unhide('grpcroutes')
  fake.apply(grpcRoute('v1alpha2', 'back', 'back.example.test'))
  await until('installed again', () => hostsOf(last).includes('back.example.test'))
})
