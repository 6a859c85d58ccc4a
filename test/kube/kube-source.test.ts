// The Kubernetes source against the fake API server, driven by client-node's
// ListWatch: sync, update, delete, chunked lists, 410 relist, dropped watches,
// 403 and 404 kinds, label and namespace scoping.
import './quiet.ts'
import t from 'tap'
import { KubeSource } from '../../lib/config/kube-source.ts'
import { KUBE_RESOURCES } from '../../lib/config/kube-resources.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { backend, clientFor, gateway, gatewayClass, route, startFake, until } from './fixtures.ts'

function hostsOf(s: Snapshot): string[] {
  return [...s.httpRoutes.values()].flatMap((r) => [...r.hostnames]).sort()
}

t.test('sync, update, delete, chunked lists, validation', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(8080))
  fake.apply(backend('a', 9000))
  for (let i = 0; i < 7; i++) fake.apply(route(`r${i}`, `r${i}.example.test`, 'a', 9000))
  // Invalid: dropped with a problem, never fatal.
  fake.apply({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'bad', namespace: 'default' }, spec: { rules: [{ matches: [{ path: { type: 'Nope', value: '/' } }] }] } })
  const source = new KubeSource({ client: clientFor(fake), pageSize: 3, debounceMs: 10 })
  t.teardown(() => source.close())
  const snaps: Snapshot[] = []
  await source.start((s) => { snaps.push(s) })
  t.ok(source.synced())
  const first = snaps.at(-1) as Snapshot
  t.equal(first.httpRoutes.size, 7, 'every page of the chunked list arrived')
  t.ok(fake.count('GET', /\/httproutes$/) >= 3, 'listed in pages')
  t.equal(first.gateways.size, 1)
  t.equal(first.backends.size, 1)
  const bad = first.problems.find((p) => p.name === 'bad')
  t.ok(bad, 'the invalid route is reported')
  t.equal(bad?.source.file, 'kube:gateway.networking.k8s.io/v1/HTTPRoute')
  t.match(first.httpRoutes.get('default/r0')?.source, { file: 'kube:gateway.networking.k8s.io/v1/HTTPRoute', doc: 0 })

  fake.apply(route('r0', 'changed.example.test', 'a', 9000))
  await until('update', () => hostsOf(snaps.at(-1) as Snapshot).includes('changed.example.test'))
  fake.remove('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r1')
  await until('delete', () => !(snaps.at(-1) as Snapshot).httpRoutes.has('default/r1'))

  // A status-only write does not rebuild the snapshot; it goes to the status listener.
  const statusChanges: string[] = []
  source.onStatusChange((obj) => statusChanges.push(String(obj.raw.metadata?.name)))
  const before = snaps.length
  const r2 = fake.get('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r2')
  fake.apply({ ...r2, status: { parents: [] } })
  await until('status change seen', () => statusChanges.length > 0)
  await new Promise((r) => setTimeout(r, 100))
  t.equal(snaps.length, before, 'no snapshot for a status-only change')
  t.same(statusChanges, ['r2'], 'the status listener heard of it')
})

t.test('410 Gone relists; dropped watches resume from the last resourceVersion', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r0', 'r0.example.test', 'a', 9000))
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 20, max: 100 } })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  const lists = (): number => fake.requests.filter((r) => r.method === 'GET' && r.path.endsWith('/httproutes') && !r.query.includes('watch=true')).length
  const watches = (): typeof fake.requests => fake.requests.filter((r) => r.path.endsWith('/httproutes') && r.query.includes('watch=true'))
  t.equal(lists(), 1)
  await until('watching', () => watches().length === 1)
  t.match(watches()[0]?.query, /allowWatchBookmarks=true/, 'bookmarks asked for')

  // Dropped: the next watch starts at the last resourceVersion seen, and
  // events written meanwhile arrive once (no relist, nothing lost).
  const rvBefore = fake.resourceVersion
  fake.dropWatches()
  fake.apply(route('r1', 'r1.example.test', 'a', 9000))
  await until('r1 after the drop', () => last?.httpRoutes.has('default/r1') === true)
  t.equal(lists(), 1, 'no relist after a dropped connection')
  const resumed = watches().at(-1)
  t.ok(resumed !== undefined && new URLSearchParams(resumed.query).get('resourceVersion') === rvBefore, `resumed from ${rvBefore}`)

  // Bookmarks move the resourceVersion forward on a quiet resource.
  fake.apply(gatewayClass())
  // The watch is ended cleanly right after the bookmark, so the client reads
  // the bookmark before the end whatever the machine's load.
  fake.bookmark()
  fake.endWatches()
  await until('re-watch', () => watches().length >= 3)
  t.equal(new URLSearchParams(watches().at(-1)?.query).get('resourceVersion'), fake.resourceVersion, 'resumed from the bookmark')

  // 410: the history is gone; the informer relists and ends up correct, with a
  // delete that happened while it could not see.
  fake.expireWatches()
  fake.remove('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r0')
  fake.apply(route('r2', 'r2.example.test', 'a', 9000))
  await until('relist', () => lists() === 2)
  await until('state after relist', () => last !== null && !last.httpRoutes.has('default/r0') && last.httpRoutes.has('default/r2'))
  t.same(hostsOf(last as unknown as Snapshot), ['r1.example.test', 'r2.example.test'])

  // The other form of 410: the watch request itself answered 410 Gone.
  // (The informer is kept out while r3 is written and the history compacted, so it
  // comes back with a resourceVersion that is too old.)
  fake.goneAs = 'http'
  fake.forbid('httproutes')
  fake.apply(route('r3', 'r3.example.test', 'a', 9000))
  fake.expireWatches()
  fake.allow('httproutes')
  await until('relist after an HTTP 410', () => lists() >= 3 && last?.httpRoutes.has('default/r3') === true)
  t.pass('relisted after an HTTP 410 on the watch')
})

t.test('a continue token that expires mid-list restarts the list', async (t) => {
  const fake = await startFake(t)
  for (let i = 0; i < 6; i++) fake.apply(route(`r${i}`, `r${i}.example.test`, 'a', 9000))
  const source = new KubeSource({ client: clientFor(fake), pageSize: 2, debounceMs: 10 })
  t.teardown(() => source.close())
  // Expire tokens as soon as the first page of httproutes was served.
  const origPush = fake.requests.push.bind(fake.requests)
  let expired = false
  fake.requests.push = (...items) => {
    const n = origPush(...items)
    const r = items[0]
    if (!expired && r !== undefined && r.path.endsWith('/httproutes') && r.query.includes('continue=')) { expired = true; fake.expireContinueTokens() }
    return n
  }
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  t.ok(expired, 'a token expired mid-list')
  t.equal((last as Snapshot | null)?.httpRoutes.size, 6, 'the restarted list is complete')
})

t.test('403 on one kind is logged and the rest works; 404 kinds are skipped', async (t) => {
  const fake = await startFake(t)
  fake.forbid('secrets')
  fake.hide('egressextensions')
  fake.apply(route('r0', 'r0.example.test', 'a', 9000))
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 20, max: 50 } })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  t.equal((last as Snapshot | null)?.httpRoutes.size, 1, 'routes served though secrets are forbidden')
  fake.apply({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 's', namespace: 'default' }, data: { token: 'eA==' } })
  fake.allow('secrets')
  await until('secrets after RBAC fixed', () => last?.secrets.has('default/s') === true)
  t.pass('the forbidden kind recovered with backoff')
})

t.test('a forbidden BackendTLSPolicy holds the first sync: serving without it would reach its backends without TLS', async (t) => {
  const fake = await startFake(t)
  fake.forbid('backendtlspolicies')
  fake.forbid('secrets')
  fake.apply(route('r0', 'r0.example.test', 'a', 9000))
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 20, max: 50 } })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  let started = false
  const start = source.start((s) => { last = s }).then(() => { started = true })
  // Retried with backoff (20-50 ms) meanwhile: several refusals, and still nothing served.
  await until('backendtlspolicies refused a few times', () => fake.count('GET', /backendtlspolicies/) >= 4)
  t.equal(started, false, 'not synced')
  t.equal(source.synced(), false)
  t.equal(last, null, 'no snapshot: no table, /readyz stays 503')
  fake.allow('backendtlspolicies')
  await start
  t.equal((last as Snapshot | null)?.httpRoutes.size, 1, 'served once BackendTLSPolicies can be read (Secrets, still forbidden, do not hold it)')
})

t.test('once synced, a BackendTLSPolicy forbidden later keeps the policies last read', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r0', 'r0.example.test', 'a', 9000))
  fake.apply({
    apiVersion: 'gateway.networking.k8s.io/v1', kind: 'BackendTLSPolicy', metadata: { name: 'p', namespace: 'default' },
    spec: { targetRefs: [{ group: '', kind: 'Service', name: 'a' }], validation: { hostname: 'a.example.test', wellKnownCACertificates: 'System' } },
  })
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 20, max: 50 } })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  t.equal((last as Snapshot | null)?.backendTLSPolicies.size, 1)
  fake.forbid('backendtlspolicies') // its watch is cut; resumed and relisted, each refused
  const before = fake.count('GET', /backendtlspolicies/)
  await until('refused a few times', () => fake.count('GET', /backendtlspolicies/) >= before + 3)
  fake.apply(route('r1', 'r1.example.test', 'a', 9000))
  await until('the new route served', () => last?.httpRoutes.size === 2)
  t.equal((last as Snapshot | null)?.backendTLSPolicies.size, 1, 'the policy read before is still applied')
})

t.test('a list refused with 429 waits at least the Retry-After, whatever the backoff', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r0', 'r0.example.test', 'a', 9000))
  fake.throttle((r) => r.method === 'GET' && r.path.endsWith('/httproutes'), '1', 1)
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 5, max: 10 } })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  const started = source.start((s) => { last = s })
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.equal(fake.count('GET', /\/httproutes$/), 1, 'not listed again within the second asked for (the backoff alone is 5-10 ms)')
  await started
  await until('routes listed after the Retry-After', () => last?.httpRoutes.size === 1)
  t.equal(fake.count('GET', /\/httproutes$/), 2, 'listed once more')
})

t.test('namespace and label scoping', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('in', 'in.example.test', 'a', 9000, { namespace: 'team-a', labels: { egress: 'yes' } }))
  fake.apply(route('unlabelled', 'x.example.test', 'a', 9000, { namespace: 'team-a' }))
  fake.apply(route('other', 'other.example.test', 'a', 9000, { namespace: 'team-b', labels: { egress: 'yes' } }))
  const source = new KubeSource({ client: clientFor(fake), namespaces: ['team-a'], labelSelector: 'egress=yes', debounceMs: 10 })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  t.same(hostsOf(last as unknown as Snapshot), ['in.example.test'])
  t.ok(fake.requests.some((r) => r.path === '/apis/gateway.networking.k8s.io/v1/namespaces/team-a/httproutes'), 'namespaced list')
  t.ok(fake.requests.some((r) => r.path === '/apis/gateway.networking.k8s.io/v1/gatewayclasses'), 'cluster-scoped kinds cluster-wide')
})

t.test('a burst of changes coalesces into few snapshots; lookup by kind, namespace and name (issue 11)', async (t) => {
  const fake = await startFake(t)
  fake.apply(backend('a', 9000))
  for (let i = 0; i < 20; i++) fake.apply(route(`r${i}`, `r${i}.example.test`, 'a', 9000))
  // Generous delays: the burst below lands well inside them even on a loaded machine.
  const source = new KubeSource({ client: clientFor(fake), firstDelayMs: 100, debounceMs: 300, maxDelayMs: 2000 })
  t.teardown(() => source.close())
  const snaps: Snapshot[] = []
  await source.start((s) => { snaps.push(s) })
  const before = snaps.length
  for (let i = 0; i < 20; i++) fake.apply(route(`r${i}`, `burst${i}.example.test`, 'a', 9000))
  await until('burst applied', () => hostsOf(snaps.at(-1) as Snapshot).filter((h) => h.startsWith('burst')).length === 20)
  t.ok(snaps.length - before <= 3, `20 changes gave ${snaps.length - before} snapshot(s)`)

  t.equal(source.lookup('HTTPRoute', '', 'default', 'r3')?.raw.metadata?.name, 'r3')
  t.equal(source.lookup('HTTPRoute', 'gateway.networking.k8s.io/v1', 'default', 'r3')?.version, 'v1')
  t.equal(source.lookup('HTTPRoute', 'gateway.networking.k8s.io/v1beta1', 'default', 'r3'), null, 'another apiVersion: not this object')
  t.equal(source.lookup('GRPCRoute', '', 'default', 'r3'), null)
  fake.remove('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r3')
  await until('delete', () => !(snaps.at(-1) as Snapshot).httpRoutes.has('default/r3'))
  t.equal(source.lookup('HTTPRoute', '', 'default', 'r3'), null, 'gone from the index')
})

t.test('watches the server ends cleanly resume at once, however often (a proxy with a short idle timeout)', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r0', 'r0.example.test', 'a', 9000))
  const resources = KUBE_RESOURCES.filter((r) => r.plural === 'httproutes')
  const source = new KubeSource({ client: clientFor(fake), resources, debounceMs: 10, backoffMs: { base: 50, max: 200 } })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  const watches = (): number => fake.requests.filter((r) => r.path.endsWith('/httproutes') && r.query.includes('watch=true')).length
  await until('watching', () => watches() === 1)
  // No events, no bookmarks: every watch lives about a second and ends cleanly (200).
  for (let i = 1; i <= 5; i++) {
    await new Promise((r) => setTimeout(r, 1000))
    const before = watches()
    fake.endWatches()
    await until(`watching again after clean end ${i}`, () => watches() > before, 1500)
  }
  t.pass('each clean end was followed by a new watch at once')
  fake.apply(route('r1', 'r1.example.test', 'a', 9000))
  await until('a change after the clean ends', () => last?.httpRoutes.has('default/r1') === true, 1500)
  t.pass('and a change is seen promptly')
})

t.test('watches that end at once with nothing are retried with backoff, not in a loop', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r0', 'r0.example.test', 'a', 9000))
  const resources = KUBE_RESOURCES.filter((r) => r.plural === 'httproutes')
  const source = new KubeSource({ client: clientFor(fake), resources, debounceMs: 10, backoffMs: { base: 50, max: 200 } })
  t.teardown(() => source.close())
  await source.start(() => {})
  const watches = (): number => fake.requests.filter((r) => r.path.endsWith('/httproutes') && r.query.includes('watch=true')).length
  fake.endWatchesAtOnce = true
  fake.endWatches()
  const before = watches()
  await new Promise((r) => setTimeout(r, 1000))
  // Backoff 50 → 200 ms (±50 %): a handful a second; a loop would be hundreds.
  t.ok(watches() - before <= 25, `${watches() - before} watch requests in 1 s`)
  fake.endWatchesAtOnce = false
})
