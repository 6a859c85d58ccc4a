// DnsCache against a real DNS server (dnsmasq on a loopback port) behind a
// relay that can stop answering or answer SERVFAIL (helpers/dns-switch.ts):
// an expired answer is served at once while one refresh per name runs in the
// background, replaced when the refresh succeeds and dropped once the stale
// window has closed with refreshes still failing.
import t, { type Test } from 'tap'
import { DnsClient, DnsError } from '../../lib/upstream/dns.ts'
import { DnsCache, type DnsCacheOptions } from '../../lib/upstream/dns-cache.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'
import { startDnsSwitch } from '../helpers/dns-switch.ts'

const skip = dnsmasqSkip()

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

async function until(fn: () => Promise<boolean>, what: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (let i = 0; i < 1000; i++) {
    if (await fn()) return
    if (Date.now() > deadline) break
    await sleep(50)
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`)
}

function cacheFor(t: Test, server: string, query: { timeoutMs: number }, options: DnsCacheOptions): DnsCache {
  const client = new DnsClient({ servers: [server], timeoutMs: query.timeoutMs, tries: 1 })
  const cache = new DnsCache(client, options)
  t.teardown(() => { cache.close(); client.cancel() })
  return cache
}

t.test('an expired answer is served at once while the resolver is silent; one refresh per name; the refresh replaces it', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.40 api.stale.test'], ttl: 1 })
  const sw = await startDnsSwitch(t, dns.server)
  // A query to the silent resolver waits 4 s before it fails.
  const cache = cacheFor(t, sw.server, { timeoutMs: 4000 }, { minTtlMs: 1000, maxTtlMs: 1000, staleMs: 30_000 })
  const first = await cache.lookup('api.stale.test', 4)
  t.same(first.addresses, ['203.0.113.40'])
  const askedBefore = sw.queries('api.stale.test', 'A')
  sw.set('silent')
  await sleep(1300) // past the 1 s TTL; the refresh ahead (at 80 %) is still waiting on the silent resolver
  const started = Date.now()
  t.equal(cache.peek('api.stale.test', 4), first, 'peek (the request path) gets the expired answer without waiting')
  for (let i = 0; i < 20; i++) t.equal(await cache.lookup('api.stale.test', 4), first, 'the last answer, served stale')
  t.ok(Date.now() - started < 2000, `served within 2 s while the resolver is silent (took ${Date.now() - started} ms)`)
  await sleep(300) // any other query would have arrived by now
  t.equal(sw.queries('api.stale.test', 'A') - askedBefore, 1, 'one refresh in flight for the name, whatever the requests')

  // The resolver answers again, with a new address: a refresh replaces the stale answer.
  await dns.update(['203.0.113.41 api.stale.test'], { name: 'api.stale.test', expect: '203.0.113.41' })
  sw.set('pass')
  await until(async () => (await cache.lookup('api.stale.test', 4)).addresses[0] === '203.0.113.41', 'the refreshed answer', 10_000)
})

t.test('a negative answer (AAAA NODATA) is served stale too: a silent resolver does not hold it', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.43 api.v4only.test'], ttl: 1 })
  const sw = await startDnsSwitch(t, dns.server)
  const cache = cacheFor(t, sw.server, { timeoutMs: 4000 }, { minTtlMs: 1000, maxTtlMs: 1000, staleMs: 30_000 })
  const nodata = await cache.lookup('api.v4only.test', 6)
  t.equal(nodata.error?.kind, 'nodata', 'no AAAA records is an answer')
  sw.set('silent')
  await sleep(1300)
  const started = Date.now()
  for (let i = 0; i < 10; i++) t.equal(await cache.lookup('api.v4only.test', 6), nodata)
  t.ok(Date.now() - started < 2000, `served within 2 s while the resolver is silent (took ${Date.now() - started} ms)`)
})

t.test('past the stale window, with refreshes still failing, the answer is no longer served', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.44 api.window.test'], ttl: 1 })
  const sw = await startDnsSwitch(t, dns.server)
  const cache = cacheFor(t, sw.server, { timeoutMs: 500 }, { minTtlMs: 1000, maxTtlMs: 1000, staleMs: 1500 })
  const before = Date.now()
  const first = await cache.lookup('api.window.test', 4)
  sw.set('silent')
  let failed: unknown = null
  await until(async () => {
    try {
      t.equal(await cache.lookup('api.window.test', 4), first)
      return false
    } catch (err) {
      failed = err
      return true
    }
  }, 'the stale window to close', 8000)
  t.ok(Date.now() - before >= 2500, 'not before TTL + stale window')
  t.ok(failed instanceof DnsError && failed.kind === 'timeout', 'the resolver\'s failure is what the request gets')
})

t.test('a failing resolver is asked at most once per name and hold-down, not once per request; recovery follows soon', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.45 api.storm.test', '203.0.113.46 api.mute.test'] })
  const sw = await startDnsSwitch(t, dns.server)
  sw.set('servfail')
  const cache = cacheFor(t, sw.server, { timeoutMs: 1000 }, { minTtlMs: 1000, maxTtlMs: 1000, staleMs: 30_000 })
  let started = Date.now()
  let failures = 0
  for (let i = 0; i < 500; i++) {
    await cache.lookup('api.storm.test', 4).then(() => t.fail('answered'), (err: unknown) => { if (err instanceof DnsError && err.kind === 'servfail') failures++ })
  }
  let elapsed = Date.now() - started
  t.equal(failures, 500, 'every request gets the SERVFAIL')
  const asked = sw.queries('api.storm.test', 'A')
  t.ok(asked <= 2 + Math.ceil(elapsed / 1000), `${asked} queries in ${elapsed} ms for 500 requests: about one a second`)

  // A resolver that does not answer: the query's failure is what the next requests get at once.
  sw.set('silent', { name: 'api.mute.test' })
  const first = await cache.lookup('api.mute.test', 4).then(() => null, (err: unknown) => err)
  t.ok(first instanceof DnsError && first.kind === 'timeout', 'the query timed out')
  started = Date.now()
  for (let i = 0; i < 20; i++) {
    const err = await cache.lookup('api.mute.test', 4).then(() => null, (e: unknown) => e)
    if (err !== first) t.fail(`request ${i}: ${String(err)}`)
  }
  elapsed = Date.now() - started
  t.ok(elapsed < 900, `the next 20 requests failed at once, not after a query each (${elapsed} ms; a query waits 1 s)`)
  t.equal(sw.queries('api.mute.test', 'A'), 1, 'no query during the hold-down')

  // The resolver answers again: the name resolves within about the hold-down.
  sw.set('pass')
  const back = Date.now()
  await until(() => cache.lookup('api.storm.test', 4).then((a) => a.addresses[0] === '203.0.113.45', () => false), 'the name to resolve again', 5000)
  t.ok(Date.now() - back < 3000, `resolved again ${Date.now() - back} ms after the resolver recovered`)
})

t.test('NXDOMAIN and NODATA are cached: one query for many requests', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.47 api.v4.test'] })
  const sw = await startDnsSwitch(t, dns.server)
  const cache = cacheFor(t, sw.server, { timeoutMs: 1000 }, { minTtlMs: 5000, maxTtlMs: 5000, staleMs: 30_000 })
  for (let i = 0; i < 100; i++) {
    t.equal((await cache.lookup('nope.test', 4)).error?.kind, 'nxdomain')
    t.equal((await cache.lookup('api.v4.test', 6)).error?.kind, 'nodata')
  }
  t.equal(sw.queries('nope.test', 'A'), 1, 'NXDOMAIN asked once')
  t.equal(sw.queries('api.v4.test', 'AAAA'), 1, 'NODATA asked once')
})

t.test('a name looked up for a request is refreshed ahead once: past its TTL the next request finds the new answer', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.48 api.moved.test'], ttl: 1 })
  const cache = cacheFor(t, dns.server, { timeoutMs: 1000 }, { minTtlMs: 1000, maxTtlMs: 1000, staleMs: 30_000 })
  t.same((await cache.lookup('api.moved.test', 4)).addresses, ['203.0.113.48'])
  await dns.update(['203.0.113.49 api.moved.test'], { name: 'api.moved.test', expect: '203.0.113.49' })
  await sleep(1300) // past the TTL, with no request since the first
  t.same(cache.peek('api.moved.test', 4)?.addresses, ['203.0.113.49'], 'not the old answer served stale')
})

t.test('the cache holds a bounded number of names: the least recently used go first, a name in use stays', async (t) => {
  const asked = new Map<string, number>()
  const querier = {
    query: async (name: string): Promise<{ addresses: string[]; ttlSec: number }> => {
      asked.set(name, (asked.get(name) ?? 0) + 1)
      if (name.startsWith('nx')) throw new DnsError('ENOTFOUND', 'nxdomain', `A lookup of ${name} failed: nxdomain (ENOTFOUND)`)
      return { addresses: ['203.0.113.7'], ttlSec: 300 }
    },
  }
  const cache = new DnsCache(querier, { minTtlMs: 60_000, maxTtlMs: 300_000, staleMs: 60_000, maxEntries: 50 })
  t.teardown(() => cache.close())
  t.same((await cache.lookup('api.example.com', 4)).addresses, ['203.0.113.7'])
  // A client asking for ever new names (a forward proxy's requested hosts, say), while a Backend's name keeps being used.
  for (let i = 0; i < 1000; i++) {
    t.equal((await cache.lookup(`nx${i}.example.com`, 4)).error?.kind, 'nxdomain')
    if (i % 10 === 0) t.not(cache.peek('api.example.com', 4), null, `the name in use is cached after ${i} others`)
  }
  t.ok(cache.size <= 50, `${cache.size} names cached, at most 50`)
  t.equal(asked.get('api.example.com'), 1, 'the name in use was asked once')
  await cache.lookup('nx999.example.com', 4)
  t.equal(asked.get('nx999.example.com'), 1, 'a recent name is still cached')
  await cache.lookup('nx0.example.com', 4)
  t.equal(asked.get('nx0.example.com'), 2, 'the oldest unused name was evicted, and is asked again')
})
