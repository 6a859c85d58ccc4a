// A watch the API server ends with an ERROR event (a Status: an internal error
// found once the watch had started, a resourceVersion ahead of its cache — 504
// "Too large resource version") is a failed watch: logged with the Status, and
// retried with backoff from the same resourceVersion. It used to count as a
// watch that delivered something and was re-opened at once, silently: some
// 1,700 watch requests a second per kind for as long as the failure lasted.
// An ERROR 410 (compacted history) still relists, as before.
import '../helpers/capture-logs.ts'
import t from 'tap'
import { KubeSource } from '../../lib/config/kube-source.ts'
import { KUBE_RESOURCES } from '../../lib/config/kube-resources.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { clearLogs, linesWith } from '../helpers/capture-logs.ts'
import { clientFor, route, startFake, until } from './fixtures.ts'

const resources = KUBE_RESOURCES.filter((r) => r.plural === 'httproutes')
const watches = (fake: { requests: ReadonlyArray<{ path: string; query: string }> }): number =>
  fake.requests.filter((r) => r.path.endsWith('/httproutes') && r.query.includes('watch=true')).length
const lists = (fake: { requests: ReadonlyArray<{ path: string; query: string }> }): number =>
  fake.requests.filter((r) => r.path.endsWith('/httproutes') && !r.query.includes('watch=true')).length

t.test('a watch ended by an ERROR event is logged and retried with backoff from its resourceVersion', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r0', 'a.example.test', 'a', 9000))
  const source = new KubeSource({ client: clientFor(fake), resources, debounceMs: 10, backoffMs: { base: 50, max: 200 } })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  await until('watching', () => watches(fake) === 1)
  clearLogs()
  fake.watchErrors.set('httproutes', { code: 500, reason: 'InternalError', message: 'Internal error occurred: etcdserver: request timed out' })
  fake.endWatches()
  const before = { watches: watches(fake), lists: lists(fake) }
  await new Promise((r) => setTimeout(r, 1000))
  // Backoff 50 → 200 ms (±50 %): a handful a second; at once, hundreds.
  const n = watches(fake) - before.watches
  t.ok(n >= 1 && n <= 25, `${n} watch requests in 1 s`)
  t.equal(lists(fake), before.lists, 'resumed from the resourceVersion: no relist')
  const warned = linesWith(/^watch failed/)
  t.ok(warned.length > 0, 'logged')
  t.match(warned[0], { resource: 'httproutes', status: 500, err: /etcdserver: request timed out/ })

  fake.watchErrors.clear()
  fake.apply(route('r0', 'b.example.test', 'a', 9000))
  await until('the change made during the failure is applied', () => [...((last as Snapshot | null)?.httpRoutes.values() ?? [])][0]?.hostnames[0] === 'b.example.test')
  t.equal(lists(fake), before.lists, 'still no relist')
})

t.test('an ERROR event 410 relists, at once', async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r0', 'a.example.test', 'a', 9000))
  const source = new KubeSource({ client: clientFor(fake), resources, debounceMs: 10, backoffMs: { base: 50, max: 200 } })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  await until('watching', () => watches(fake) === 1)
  clearLogs()
  const before = lists(fake)
  fake.expireWatches()
  fake.apply(route('r1', 'c.example.test', 'a', 9000))
  await until('relisted', () => lists(fake) === before + 1)
  await until('the new route is seen', () => (last as Snapshot | null)?.httpRoutes.has('default/r1') === true)
  t.same(linesWith(/^watch failed/), [], 'a 410 is routine, not a failure')
})

t.test("an ERROR event's retryAfterSeconds is waited for, whatever the backoff", async (t) => {
  const fake = await startFake(t)
  fake.apply(route('r0', 'a.example.test', 'a', 9000))
  const source = new KubeSource({ client: clientFor(fake), resources, debounceMs: 10, backoffMs: { base: 5, max: 10 } })
  t.teardown(() => source.close())
  await source.start(() => {})
  await until('watching', () => watches(fake) === 1)
  fake.watchErrors.set('httproutes', { code: 429, reason: 'TooManyRequests', message: 'too many requests', details: { retryAfterSeconds: 1 } })
  fake.endWatches()
  await until('refused once', () => watches(fake) === 2)
  await new Promise((r) => setTimeout(r, 300))
  t.equal(watches(fake), 2, 'not watched again within the second asked for (the backoff alone is 5-10 ms)')
  fake.watchErrors.clear()
  await until('watching again after it', () => watches(fake) === 3)
})

for (const code of [429, 503] as const) {
  t.test(`a watch request refused with ${code} and Retry-After waits for it, and the log has the server's message`, async (t) => {
    const fake = await startFake(t)
    fake.apply(route('r0', 'a.example.test', 'a', 9000))
    const source = new KubeSource({ client: clientFor(fake), resources, debounceMs: 10, backoffMs: { base: 5, max: 10 } })
    t.teardown(() => source.close())
    await source.start(() => {})
    await until('watching', () => watches(fake) === 1)
    clearLogs()
    fake.throttle((r) => r.path.endsWith('/httproutes') && r.query.get('watch') === 'true', '1', 1, code)
    fake.endWatches()
    await until('refused once', () => watches(fake) >= 2)
    await new Promise((r) => setTimeout(r, 400))
    t.equal(watches(fake), 2, 'not watched again within the second asked for (the backoff alone is 5-10 ms)')
    await until('watching again after it', () => watches(fake) === 3)
    const warned = linesWith(/^watch failed/)
    t.equal(warned.length, 1, 'logged once')
    const message = code === 429 ? /Too many requests, please try again later/ : /the apiserver is shutting down/
    t.match(warned[0], { resource: 'httproutes', status: code, err: message, retryAfterMs: 1000 })
  })
}
