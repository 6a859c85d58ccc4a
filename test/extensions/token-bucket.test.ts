// LocalBuckets with an injected clock and a small key cap: refill, and what a
// full map forgets — refilled buckets first, then the least recently used of
// the limit holding the most keys — so a flood of distinct keys on one limit
// never resets a spent bucket of another, nor a busy one of its own.
import t from 'tap'
import { LocalBuckets, type BucketFamily, type BucketLimit } from '../../lib/extensions/token-bucket.ts'

const HOUR = 3_600_000
/** 2 per hour, as the probe's strict.test route. */
const STRICT: BucketLimit = { capacity: 2, perMs: 2 / HOUR }
/** 100 per second: a key used once is full again after 10 ms. */
const FAST: BucketLimit = { capacity: 100, perMs: 100 / 1000 }

function clock(): { now: () => number; advance(ms: number): void } {
  let at = 1000
  return { now: () => at, advance(ms: number) { at += ms } }
}

function spend(b: LocalBuckets, f: BucketFamily, key: string, limit: BucketLimit): void {
  for (let i = 0; i < limit.capacity; i++) b.decide(f, key, limit, 'take', 1)
}

t.test('take until empty, wait, refill (injected clock)', async (t) => {
  const c = clock()
  const b = new LocalBuckets({ now: c.now })
  const f = b.family('rl:a')
  t.same(b.decide(f, 'k', STRICT, 'take', 1), { allowed: true, remaining: 1, waitMs: 0 })
  t.same(b.decide(f, 'k', STRICT, 'take', 1), { allowed: true, remaining: 0, waitMs: 0 })
  const d = b.decide(f, 'k', STRICT, 'take', 1)
  t.same([d.allowed, d.remaining], [false, 0])
  t.ok(Math.abs(d.waitMs - HOUR / 2) <= 1, `wait half an hour for one token (${d.waitMs} ms)`)
  c.advance(d.waitMs - 1000)
  t.equal(b.decide(f, 'k', STRICT, 'take', 1).allowed, false, 'not a second before')
  c.advance(1000)
  t.equal(b.decide(f, 'k', STRICT, 'take', 1).allowed, true, 'one token back after the wait it named')
  t.equal(b.decide(f, 'other', STRICT, 'take', 1).remaining, 1, 'another key: its own bucket')
  t.equal(b.size, 2)
})

t.test('a full map forgets refilled buckets first: a spent bucket survives a flood of fast-refilling keys', async (t) => {
  const c = clock()
  const b = new LocalBuckets({ now: c.now, maxKeys: 100 })
  const strict = b.family('rl:strict')
  const other = b.family('rl:other')
  spend(b, strict, 'route', STRICT)
  let most = 0
  for (let i = 0; i < 1000; i++) {
    b.decide(other, `user-${i}`, FAST, 'take', 1)
    c.advance(1)
    most = Math.max(most, b.size)
  }
  t.equal(most, 100, 'never more than maxKeys')
  t.equal(b.decide(strict, 'route', STRICT, 'take', 1).allowed, false, 'strict bucket still spent')
})

t.test('then the least recently used keys of the limit holding the most: a spent bucket survives a flood of slow keys', async (t) => {
  const c = clock()
  const b = new LocalBuckets({ now: c.now, maxKeys: 100 })
  const strict = b.family('rl:strict')
  const other = b.family('rl:other')
  spend(b, strict, 'route', STRICT)
  // Keys that stay spent for an hour: nothing refilled, something must go.
  for (let i = 0; i < 1000; i++) {
    spend(b, other, `user-${i}`, STRICT)
    c.advance(1)
  }
  t.ok(b.size <= 100)
  t.equal(b.decide(strict, 'route', STRICT, 'take', 1).allowed, false, 'strict bucket (another limit) still spent')
  t.equal(b.decide(other, 'user-999', STRICT, 'take', 1).allowed, false, 'the newest flood key kept')
  t.equal(b.decide(other, 'user-0', STRICT, 'take', 1).allowed, true, 'the oldest flood key forgotten')
})

t.test('least recently used, not first inserted: a busy key of the flooded limit survives', async (t) => {
  const c = clock()
  const b = new LocalBuckets({ now: c.now, maxKeys: 100 })
  const f = b.family('rl:per-user')
  spend(b, f, 'busy', STRICT)
  let refilled = 0
  for (let i = 0; i < 1000; i++) {
    spend(b, f, `user-${i}`, STRICT)
    if (i % 10 === 0 && b.decide(f, 'busy', STRICT, 'take', 1).allowed) refilled++
    c.advance(1)
  }
  t.equal(refilled, 0, 'the busy bucket stayed spent')
})

t.test('a family asked for again is the same family (state survives reloads)', async (t) => {
  const b = new LocalBuckets({ now: () => 0 })
  spend(b, b.family('rl:x'), 'k', STRICT)
  t.equal(b.decide(b.family('rl:x'), 'k', STRICT, 'take', 1).allowed, false)
})
