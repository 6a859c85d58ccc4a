// Token buckets, local (per process) and global (Redis, one atomic Lua script
// so every replica shares the budget). Both answer the same question the same
// way: `take` one or more tokens if there are enough, `check` that the bucket
// is not empty (token budgets: the cost is known only after the response),
// `charge` a cost afterwards (may go below zero: the next requests wait).

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

const MAX_LOCAL_KEYS = 65_536

interface State { tokens: number; at: number }

export class LocalBuckets {
  readonly #buckets = new Map<string, State>()

  // hot path
  decide(key: string, limit: BucketLimit, mode: BucketMode, cost: number): Decision {
    const now = performance.now()
    let s = this.#buckets.get(key)
    if (s === undefined) {
      if (this.#buckets.size >= MAX_LOCAL_KEYS) this.#evict()
      s = { tokens: limit.capacity, at: now }
      this.#buckets.set(key, s)
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
    return { allowed, remaining: Math.max(0, Math.floor(s.tokens)), waitMs: allowed ? 0 : waitFor(s.tokens, mode === 'take' ? cost : 1e-9, limit) }
  }

  /** Drop the oldest tenth of the keys (insertion order): idle keys lose their state, which refills anyway. */
  #evict(): void {
    let n = Math.ceil(MAX_LOCAL_KEYS / 10)
    for (const k of this.#buckets.keys()) {
      this.#buckets.delete(k)
      if (--n === 0) break
    }
  }
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
redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate) + 1000)
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
