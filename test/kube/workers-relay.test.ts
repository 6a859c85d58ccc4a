// `serve --kubernetes --workers N`: one set of informers per replica. The
// primary lists and watches the API server and relays the objects to its
// workers over the cluster IPC channel (lib/runtime/kube-relay.ts), so the API
// server sees one list and one watch per kind whatever N is; every worker still
// compiles and serves the configuration, picks up changes, gets the whole store
// when it is replaced, and loses what a relist after 410 Gone finds deleted.
import './quiet.ts'
import t from 'tap'
import { KUBE_RESOURCES, resourcePath } from '../../lib/config/kube-resources.ts'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'
import { eventually, freePort, metricSum, request, settleLogs, startCli } from '../e2e/harness.ts'
import { backend, gateway, gatewayClass, kubeconfigFile, route, startFake } from './fixtures.ts'

const WORKERS = 3

/** Lists and watches of each kind (its collection path, cluster-wide), as the fake API server saw them. */
function listWatchCounts(fake: FakeApiServer): Map<string, { lists: number; watches: number }> {
  const out = new Map<string, { lists: number; watches: number }>()
  for (const res of KUBE_RESOURCES) {
    const path = resourcePath(res, res.versions[0] as string, null)
    const gets = fake.requests.filter((r) => r.method === 'GET' && r.path === path)
    const watches = gets.filter((r) => new URLSearchParams(r.query).get('watch') === 'true').length
    out.set(`${res.kind}.${res.group}`, { lists: gets.length - watches, watches })
  }
  return out
}

/** `rounds` of fresh connections (cluster hands them to the workers in turn): every answer's status. */
async function statuses(port: number, host: string, rounds = WORKERS * 3): Promise<number[]> {
  const codes: number[] = []
  for (let i = 0; i < rounds; i++) codes.push((await request(`http://127.0.0.1:${port}/`, { host })).status)
  return codes
}

t.test('serve --kubernetes --workers 3: one list and one watch per kind; every worker serves what they bring', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'a' })
  t.teardown(() => upstream.close())
  const [port, adminPort] = [await freePort(), await freePort()]
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(port))
  fake.apply(backend('a', upstream.address.port))
  fake.apply(route('one', 'one.example.test', 'a', upstream.address.port))
  const cli = startCli(t, [
    'serve', '--kubeconfig', kubeconfigFile(t, fake), '--workers', String(WORKERS), '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`,
    '--drain-seconds', '1', '--access-log', 'off',
  ], { env: { POD_NAME: 'relay-pod', POD_NAMESPACE: 'sallyport-system', SALLYPORT_LOG_LEVEL: 'info' } })
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 60_000, 'every worker ready')

  const oneSet = (what: string): void => {
    for (const [kind, n] of listWatchCounts(fake)) t.same(n, { lists: 1, watches: 1 }, `${what}: ${kind} listed and watched once`)
  }
  oneSet('at start')
  t.same(await statuses(port, 'one.example.test'), Array(WORKERS * 3).fill(200), 'every worker serves the configuration')

  // A change made through the API server reaches every worker.
  fake.apply(route('two', 'two.example.test', 'a', upstream.address.port))
  await eventually(() => statuses(port, 'two.example.test'), (codes) => codes.every((c) => c === 200), 15_000, 'the new route on every worker')
  oneSet('after a change')

  // A worker that is replaced gets the whole store from the primary, without a list of its own.
  await settleLogs()
  const [victim] = [...new Set([...cli.stdout().matchAll(/"pid":(\d+)/g)].map((m) => Number(m[1])))].filter((pid) => pid !== cli.child.pid)
  t.ok(victim !== undefined, 'a worker pid')
  process.kill(victim as number, 'SIGKILL')
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 503, 10_000, '/readyz 503 while a worker is missing')
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 60_000, '/readyz 200 once the worker is replaced')
  t.same(await statuses(port, 'two.example.test'), Array(WORKERS * 3).fill(200), 'the replacement serves the latest configuration')
  oneSet('after a worker was replaced')

  // The API server goes away; meanwhile a route is deleted and the history compacted, so the
  // primary's watches get 410 Gone and relist: the deletion must reach every worker.
  await fake.stop()
  fake.remove('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'one')
  fake.expireWatches()
  await fake.start()
  await eventually(() => statuses(port, 'one.example.test'), (codes) => codes.every((c) => c === 404), 30_000, 'the deleted route gone from every worker')
  t.same(await statuses(port, 'two.example.test'), Array(WORKERS * 3).fill(200), 'the rest still served everywhere')
  t.ok((listWatchCounts(fake).get('HTTPRoute.gateway.networking.k8s.io')?.lists ?? 0) >= 2, 'the deletion came from a relist (the history was gone)')
  // The primary's failed watches (the server gone) are in /metrics with the workers' counts.
  const metrics = (await request(`${admin}/metrics`)).body
  t.ok(metricSum(metrics, 'sallyport_config_reload_failures_total', { source: 'kubernetes', reason: 'watch' }) >= 1, 'the failed watches counted')

  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0)
})
