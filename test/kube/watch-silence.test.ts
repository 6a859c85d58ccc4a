// A watch that goes silent without closing (a half-open TCP connection after a
// NAT or load balancer forgot it, an API server VIP failover) is given up after
// a bounded silence and resumed from the last resourceVersion. It used to go
// unnoticed for the watch's 11-minute inactivity timeout: changes made meanwhile
// were not applied, with nothing in the log. The API server sends a bookmark on
// every watch about once a minute, so a healthy quiet watch is never silent
// that long, and must not be re-opened for being quiet.
import '../helpers/capture-logs.ts'
import t from 'tap'
import { KubeSource } from '../../lib/config/kube-source.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { clearLogs, linesWith } from '../helpers/capture-logs.ts'
import { clientFor, route, startFake, until } from './fixtures.ts'

const SILENCE_MS = 2000
const BOOKMARK_MS = 100
const watches = (fake: { requests: ReadonlyArray<{ path: string; query: string }> }, plural: string): number =>
  fake.requests.filter((r) => r.path.endsWith(`/${plural}`) && r.query.includes('watch=true')).length
const lists = (fake: { requests: ReadonlyArray<{ path: string; query: string }> }, plural: string): number =>
  fake.requests.filter((r) => r.path.endsWith(`/${plural}`) && !r.query.includes('watch=true')).length

t.test('a watch silent for longer than the bound is resumed from its resourceVersion, with a warning naming the kind', async (t) => {
  const fake = await startFake(t, BOOKMARK_MS)
  fake.apply(route('r0', 'a.example.test', 'a', 9000))
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10, watchSilenceMs: SILENCE_MS })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  const host = (): string | undefined => [...((last as Snapshot | null)?.httpRoutes.values() ?? [])][0]?.hostnames[0]
  t.equal(host(), 'a.example.test')
  await until('watching', () => watches(fake, 'httproutes') === 1)
  await new Promise((r) => setTimeout(r, 3 * BOOKMARK_MS)) // the server is seen to send bookmarks
  clearLogs()
  const listsBefore = lists(fake, 'httproutes')
  const watchesBefore = watches(fake, 'httproutes')

  fake.silenceWatches('httproutes')
  fake.apply(route('r0', 'b.example.test', 'a', 9000))
  const silenced = performance.now()
  await until('the change made during the silence is applied', () => host() === 'b.example.test', 5_000)
  const took = performance.now() - silenced
  t.ok(took >= SILENCE_MS * 0.8 && took < SILENCE_MS + 3_000, `applied ${Math.round(took)} ms after the watch went silent`)
  t.equal(watches(fake, 'httproutes'), watchesBefore + 1, 'watched again')
  t.equal(lists(fake, 'httproutes'), listsBefore, 'from the last resourceVersion: no relist')
  t.equal(fake.silencedWatches(), 0, 'the silent connection was closed')
  const warned = linesWith(/^watch silent/)
  t.equal(warned.length, 1, 'one warning')
  t.match(warned[0], { kind: 'HTTPRoute', resource: 'httproutes', silentSeconds: Number })
})

t.test('a quiet watch kept alive by bookmarks is left open', async (t) => {
  const fake = await startFake(t, BOOKMARK_MS)
  fake.apply(route('r0', 'a.example.test', 'a', 9000))
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10, watchSilenceMs: SILENCE_MS })
  t.teardown(() => source.close())
  await source.start(() => {})
  await until('watching', () => watches(fake, 'httproutes') === 1)
  const before = { watches: watches(fake, 'httproutes'), lists: lists(fake, 'httproutes') }
  clearLogs()
  await new Promise((r) => setTimeout(r, 2 * SILENCE_MS)) // nothing changes for twice the bound
  t.same({ watches: watches(fake, 'httproutes'), lists: lists(fake, 'httproutes') }, before, 'no re-watch, no relist')
  t.same(linesWith(/^watch silent/), [], 'nothing logged')
})
