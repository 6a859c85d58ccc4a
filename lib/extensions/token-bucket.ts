// Token buckets, local (per process) and global (Redis, one atomic Lua script
// so every replica shares the budget). Both answer the same question the same
// way: `take` one or more tokens if there are enough, `check` that the bucket
// is not empty (token budgets: the cost is known only after the response),
// `charge` a cost afterwards (may go below zero: the next requests wait).
// Local buckets are bounded by count (keys are bounded by size: Limiter
// hashes long parts), and a full map forgets what costs nothing first.

import { performance } from 'node:perf_hooks'
import type { RedisClient } from './redis-client.ts'
import { Script } from './redis-client.ts'

export type BucketMode = 'take' | 'check' | 'charge'

export interface BucketLimit {
  /** Bucket size (burst). */
  readonly capacity: number
  /** Refill, tokens per millisecond. */
  readonly perMs: number
}

export interface Decision {
  readonly allowed: boolean
  /** Whole tokens left after this decision. */
  readonly remaining: number
  /** Until the request would be allowed (0 when allowed). */
  readonly waitMs: number
}

/** Keys per process, every RateLimit and AIUsage budget together (each key is bounded: Limiter hashes long parts). */
const MAX_LOCAL_KEYS = 65_536

interface State {
  tokens: number
  /** Last decision (ms, the buckets' clock): least recently used goes first. */
  at: number
  /** When the bucket is full again: from then on it is the same as no entry. */
  fullAt: number
}

/** The buckets of one limit (a Limiter's key prefix): what eviction is fair between. */
export class BucketFamily {
  readonly name: string
  readonly buckets = new Map<string, State>()
  /** Limiters holding it (family() minus release()): at 0 the limit left the configuration. */
  users = 0
  constructor(name: string) { this.name = name }
}

export interface LocalBucketsOptions {
  /** Milliseconds, monotonic (default performance.now). */
  readonly now?: () => number
  /** Keys kept at most, all families together (default 65,536). */
  readonly maxKeys?: number
}

export class LocalBuckets {
  readonly #families = new Map<string, BucketFamily>()
  readonly #now: () => number
  readonly #maxKeys: number
  #size = 0

  constructor(options: LocalBucketsOptions = {}) {
    this.#now = options.now ?? performance.now.bind(performance)
    this.#maxKeys = Math.max(1, options.maxKeys ?? MAX_LOCAL_KEYS)
  }

  /**
   * The family of one limit, held until release(); asked again while held (a
   * reload builds the new limit before the old one closes), the same one, so
   * its state survives.
   */
  family(name: string): BucketFamily {
    let f = this.#families.get(name)
    if (f === undefined) this.#families.set(name, f = new BucketFamily(name))
    f.users++
    return f
  }

  /** A limit that used `family` closed: the last one gone, its buckets go too (a limit renamed on every reload would keep them all). */
  release(family: BucketFamily): void {
    if (--family.users > 0 || this.#families.get(family.name) !== family) return
    this.#families.delete(family.name)
    this.#size -= family.buckets.size
    family.buckets.clear()
  }

  /** Keys held, all families together. */
  get size(): number { return this.#size }

  /** Families held (limits configured, and those closing). */
  get families(): number { return this.#families.size }

  // hot path
  decide(family: BucketFamily, key: string, limit: BucketLimit, mode: BucketMode, cost: number): Decision {
    const now = this.#now()
    let s = family.buckets.get(key)
    if (s === undefined) {
      s = { tokens: limit.capacity, at: now, fullAt: now }
      // A released family (an AIUsage charge after its limit left, past chain.ts's grace) stores nothing: nobody reads it again.
      if (family.users > 0) {
        if (this.#size >= this.#maxKeys) this.#evict(now)
        family.buckets.set(key, s)
        this.#size++
      }
    }
    const tokens = Math.min(limit.capacity, s.tokens + (now - s.at) * limit.perMs)
    s.at = now
    let allowed = false
    if (mode === 'take') {
      if (tokens >= cost) { s.tokens = tokens - cost; allowed = true } else s.tokens = tokens
    } else if (mode === 'charge') {
      s.tokens = Math.max(-limit.capacity, tokens - cost)
      allowed = true
    } else {
      s.tokens = tokens
      allowed = tokens > 0
    }
    s.fullAt = now + (limit.capacity - s.tokens) / limit.perMs
    return { allowed, remaining: Math.max(0, Math.floor(s.tokens)), waitMs: allowed ? 0 : waitFor(s.tokens, mode === 'take' ? cost : 1e-9, limit) }
  }

  /**
   * The map is full: make room for a tenth of it. First forget the buckets
   * that have refilled (a full bucket is what a new key gets: nothing is
   * lost). If that is not enough, cut the families holding the most keys down
   * to a common size, each losing its least recently used: a flood of
   * distinct keys on one limit evicts that limit's own idle keys, never a
   * spent bucket of a smaller limit, nor the busy keys of its own. Hits do not
   * reorder anything (the hot path stays a Map get); the cost is a sort here,
   * once per tenth of the map.
   */
  #evict(now: number): void {
    const want = Math.ceil(this.#maxKeys / 10)
    let freed = 0
    for (const f of this.#families.values()) {
      for (const [k, s] of f.buckets) {
        if (s.fullAt <= now) { f.buckets.delete(k); freed++ }
      }
    }
    if (freed < want) {
      const bySize = [...this.#families.values()].filter(f => f.buckets.size > 0).sort((a, b) => b.buckets.size - a.buckets.size)
      // The level L the j largest are cut to: their keys above L are at least what is still wanted.
      let sum = 0
      let level = 0
      let j = 0
      while (j < bySize.length) {
        sum += (bySize[j] as BucketFamily).buckets.size
        j++
        const next = j < bySize.length ? (bySize[j] as BucketFamily).buckets.size : 0
        if (sum - j * next >= want - freed) { level = Math.max(next, Math.floor((sum - (want - freed)) / j)); break }
      }
      for (let i = 0; i < j; i++) {
        const f = bySize[i] as BucketFamily
        freed += dropLeastRecent(f.buckets, f.buckets.size - level)
      }
    }
    this.#size -= freed
  }
}

/** Drop the n least recently used entries; how many were dropped. */
function dropLeastRecent(map: Map<string, State>, n: number): number {
  if (n <= 0) return 0
  if (n >= map.size) { const all = map.size; map.clear(); return all }
  const ats = new Float64Array(map.size)
  let i = 0
  for (const s of map.values()) ats[i++] = s.at
  ats.sort()
  const cut = ats[n - 1] as number
  let dropped = 0
  for (const [k, s] of map) {
    if (s.at <= cut) {
      map.delete(k)
      if (++dropped === n) break
    }
  }
  return dropped
}

function waitFor(tokens: number, need: number, limit: BucketLimit): number {
  return Math.ceil(Math.max(0, need - tokens) / limit.perMs)
}

// Redis TIME inside the script: every replica uses one clock (the server's).
// Redis ≥ 5 replicates script effects, so a non-deterministic TIME is allowed.
const BUCKET_LUA = new Script(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local mode = ARGV[4]
local v = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(v[1])
local at = tonumber(v[2])
if tokens == nil then tokens = cap; at = now end
tokens = math.min(cap, tokens + math.max(0, now - at) * rate)
local allowed = 0
local need = cost
if mode == 'take' then
  if tokens >= cost then tokens = tokens - cost; allowed = 1 end
elseif mode == 'charge' then
  tokens = math.max(-cap, tokens - cost); allowed = 1
else
  need = 0.000000001
  if tokens > 0 then allowed = 1 end
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
-- Kept until full again (a charge may leave it in debt, down to -cap): gone earlier, it would start full.
redis.call('PEXPIRE', KEYS[1], math.ceil((cap - tokens) / rate) + 1000)
local wait = 0
if allowed == 0 then wait = math.ceil(math.max(0, need - tokens) / rate) end
local remaining = math.floor(tokens)
if remaining < 0 then remaining = 0 end
return {allowed, remaining, wait}
`)

export async function decideGlobal(client: RedisClient, key: string, limit: BucketLimit, mode: BucketMode, cost: number): Promise<Decision> {
  const r = await client.eval(BUCKET_LUA, [key], [limit.capacity, limit.perMs, cost, mode])
  if (!Array.isArray(r) || r.length !== 3) throw new Error('unexpected reply from the rate-limit script')
  return { allowed: r[0] === 1, remaining: Number(r[1]), waitMs: Number(r[2]) }
}
