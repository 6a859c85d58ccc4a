// Which resourceVersion each list asks for, as client-go's reflector does it:
// - the first list of an informer: resourceVersion=0 ("any"), served from the
//   API server's watch cache rather than read from etcd (a quorum read per kind
//   per replica at every start was the cost at scale);
// - a relist after the watch's history expired (410): the last resourceVersion
//   seen, without a limit ("not older than": the watch cache answers, and the
//   result is never older than what was already applied, which "any" could be
//   on another API server);
// - that relist refused because the version is unavailable there (410 Expired,
//   or 504 "Too large resource version" from an API server behind us): at once
//   again with no resourceVersion, a quorum read, paged.
import '../helpers/capture-logs.ts'
import t from 'tap'
import { KubeSource } from '../../lib/config/kube-source.ts'
import { KUBE_RESOURCES } from '../../lib/config/kube-resources.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'
import { clientFor, route, startFake, until } from './fixtures.ts'

const resources = KUBE_RESOURCES.filter((r) => r.plural === 'httproutes')

function lists(fake: FakeApiServer): URLSearchParams[] {
  return fake.requests.filter((r) => r.method === 'GET' && r.path.endsWith('/httproutes') && !r.query.includes('watch=true')).map((r) => new URLSearchParams(r.query))
}
function watches(fake: FakeApiServer): URLSearchParams[] {
  return fake.requests.filter((r) => r.path.endsWith('/httproutes') && r.query.includes('watch=true')).map((r) => new URLSearchParams(r.query))
}

t.test('the first list asks for resourceVersion=0; a relist after 410 for the last one seen, not older', async (t) => {
  const fake = await startFake(t)
  for (let i = 0; i < 5; i++) fake.apply(route(`r${i}`, `r${i}.example.test`, 'a', 9000))
  const source = new KubeSource({ client: clientFor(fake), resources, pageSize: 2, debounceMs: 10, backoffMs: { base: 20, max: 100 } })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  t.equal((last as Snapshot | null)?.httpRoutes.size, 5)
  const first = lists(fake)[0] as URLSearchParams
  t.equal(first.get('resourceVersion'), '0', 'the initial list is served from the watch cache')
  t.equal(first.get('resourceVersionMatch'), null, 'no match: "any" is what RV=0 means')
  t.equal(first.get('limit'), '2', 'paged as before')
  t.ok(lists(fake).slice(1).every((q) => q.get('resourceVersion') === null && q.get('continue') !== null), 'continue pages carry no resourceVersion')
  await until('watching', () => watches(fake).length === 1)

  // Changes the watch sees move the resourceVersion the relist will ask for.
  fake.apply(route('r5', 'r5.example.test', 'a', 9000))
  await until('r5', () => (last as Snapshot | null)?.httpRoutes.has('default/r5') === true)
  const seen = fake.resourceVersion
  const before = lists(fake).length
  fake.expireWatches()
  await until('relisted', () => lists(fake).length > before)
  const relist = lists(fake)[before] as URLSearchParams
  t.equal(relist.get('resourceVersion'), seen, 'not older than what was applied')
  t.equal(relist.get('limit'), null, 'unpaged: with a limit the server would read etcd at exactly that version (410 once compacted)')
  t.equal(lists(fake).length, before + 1, 'one list: answered from the cache, not refused')
  fake.remove('gateway.networking.k8s.io/v1', 'HTTPRoute', 'default', 'r0')
  await until('watching again, from the relist', () => (last as Snapshot | null)?.httpRoutes.has('default/r0') === false)
})

for (const code of [410, 504] as const) {
  t.test(`a relist refused with ${code} lists again at once with no resourceVersion (a quorum read)`, async (t) => {
    const fake = await startFake(t)
    fake.apply(route('r0', 'r0.example.test', 'a', 9000))
    // Backoff far longer than the test waits: the fallback must not wait for it.
    const source = new KubeSource({ client: clientFor(fake), resources, pageSize: 2, debounceMs: 10, backoffMs: { base: 60_000, max: 60_000 } })
    t.teardown(() => source.close())
    let last: Snapshot | null = null
    await source.start((s) => { last = s })
    await until('watching', () => watches(fake).length === 1)
    fake.apply(route('r1', 'r1.example.test', 'a', 9000))
    await until('r1 seen', () => (last as Snapshot | null)?.httpRoutes.has('default/r1') === true)
    const seen = fake.resourceVersion
    // Another API server answers the relist: its cache has not reached `seen` (504), or compacted it (410).
    fake.refuse((r) => r.method === 'GET' && r.path.endsWith('/httproutes') && r.query.get('watch') === null && r.query.get('resourceVersion') === seen, code)
    const before = lists(fake).length
    fake.expireWatches()
    fake.apply(route('r2', 'r2.example.test', 'a', 9000))
    await until('r2 seen after the relist', () => (last as Snapshot | null)?.httpRoutes.has('default/r2') === true)
    const after = lists(fake).slice(before)
    t.equal(after[0]?.get('resourceVersion'), seen, 'first, not older than the last seen')
    t.equal(after[1]?.get('resourceVersion'), null, 'then a quorum read')
    t.equal(after[1]?.get('limit'), '2', 'paged')
    fake.refuse(null)
  })
}
