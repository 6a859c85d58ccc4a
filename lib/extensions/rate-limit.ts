// RateLimit: token buckets keyed by any of namespace, serviceAccount, route,
// backend, client address or a request header; local per process, or global
// through Redis so every replica shares one budget. Over the limit: 429 with
// Retry-After (RFC 9110 §10.2.3) and the IETF RateLimit / RateLimit-Policy
// fields (draft-ietf-httpapi-ratelimit-headers: `"name";q=<quota>;w=<window s>`
// and `"name";r=<remaining>;t=<reset s>`). Redis unreachable: failureMode
// open (default: let it through) or closed (429), counted either way.

import type { CompiledExtension } from '../compile/table.ts'
import { rateLimitBackendErrors } from '../observe/extension-metrics.ts'
import { logger } from '../observe/log.ts'
import type { ExtensionHooks, HookResult, RequestView } from './plugin-api.ts'
import type { RedisPool } from './redis-client.ts'
import { LocalBuckets, decideGlobal, type BucketLimit, type BucketMode, type Decision } from './token-bucket.ts'

const log = logger('rate-limit')

export const UNIT_MS: Readonly<Record<string, number>> = { Second: 1000, Minute: 60_000, Hour: 3_600_000, Day: 86_400_000 }

export type KeyPart = 'namespace' | 'serviceAccount' | 'route' | 'backend' | 'client' | { readonly header: string }

/** Shared by every RateLimit / AIUsage of this process (state survives reloads; keys carry the extension key). */
const local = new LocalBuckets()

function keyParts(list: unknown): KeyPart[] {
  if (!Array.isArray(list) || list.length === 0) return ['namespace']
  const out: KeyPart[] = []
  for (const k of list) {
    if (k === 'namespace' || k === 'serviceAccount' || k === 'route' || k === 'backend' || k === 'client') out.push(k)
    else if (k !== null && typeof k === 'object' && typeof (k as { header?: unknown }).header === 'string') out.push({ header: ((k as { header: string }).header).toLowerCase() })
  }
  return out
}

// hot path
function partValue(req: RequestView, p: KeyPart): string {
  switch (p) {
    case 'namespace': return req.client.namespace ?? '-'
    case 'serviceAccount': return req.client.namespace === null ? '-' : `${req.client.namespace}/${req.client.serviceAccount ?? '-'}`
    case 'route': return req.route
    case 'backend': return req.backend
    case 'client': return req.client.address
    default: {
      const v = req.headers[p.header]
      return v === undefined ? '-' : Array.isArray(v) ? v.join(',') : v
    }
  }
}

export interface LimiterConfig {
  readonly limit: BucketLimit
  readonly quota: number
  readonly windowSeconds: number
  readonly name: string
}

/** A bucket family: key builder + local or Redis store + failure mode. */
export class Limiter {
  readonly config: LimiterConfig
  readonly #prefix: string
  readonly #parts: readonly KeyPart[]
  readonly #redis: ReturnType<RedisPool['get']> | null
  readonly #failOpen: boolean

  constructor(spec: CompiledExtension, block: Readonly<Record<string, unknown>>, redis: RedisPool, amountField: 'requests' | 'tokens') {
    const amount = Number(block[amountField])
    if (!(amount > 0)) throw new Error(`${amountField} must be a positive number`)
    const unitMs = UNIT_MS[String(block.unit ?? 'Minute')]
    if (unitMs === undefined) throw new Error('unit must be Second, Minute, Hour or Day')
    const burst = typeof block.burst === 'number' && block.burst > 0 ? block.burst : amount
    this.config = { limit: { capacity: burst, perMs: amount / unitMs }, quota: amount, windowSeconds: unitMs / 1000, name: spec.name }
    this.#prefix = `sallyport:rl:${spec.source}/${spec.name}:`
    this.#parts = keyParts(block.key)
    const global = block.global as Record<string, unknown> | undefined
    if (global !== undefined && global !== null) {
      const address = typeof global.redis === 'string' ? global.redis : String((global.redis as Record<string, unknown> | undefined)?.address ?? '')
      if (address === '') throw new Error('global.redis must be host:port')
      this.#redis = redis.get(address.replace(/^redis:\/\//, ''), { timeoutMs: typeof global.timeoutMs === 'number' ? global.timeoutMs : 250 })
    } else {
      this.#redis = null
    }
    this.#failOpen = (block.failureMode ?? global?.failureMode ?? 'open') !== 'closed'
  }

  // hot path
  key(req: RequestView): string {
    let k = this.#prefix
    const parts = this.#parts
    for (let i = 0; i < parts.length; i++) k += (i === 0 ? '' : '|') + partValue(req, parts[i] as KeyPart)
    return k
  }

  // hot path
  decide(key: string, mode: BucketMode, cost: number): Decision | Promise<Decision> {
    if (this.#redis === null) return local.decide(key, this.config.limit, mode, cost)
    return decideGlobal(this.#redis, key, this.config.limit, mode, cost).catch((err: unknown) => {
      rateLimitBackendErrors.inc({ outcome: this.#failOpen ? 'open' : 'closed' })
      log.warn({ limit: this.config.name, error: err instanceof Error ? err.message : String(err), failOpen: this.#failOpen }, 'global rate limit unavailable')
      return { allowed: this.#failOpen, remaining: 0, waitMs: this.#failOpen ? 0 : 1000 }
    })
  }

  /** 429 with Retry-After and the RateLimit fields. */
  deny(d: Decision, reason: string): HookResult {
    const c = this.config
    const reset = Math.max(1, Math.ceil(d.waitMs / 1000))
    return {
      deny: {
        status: 429, reason,
        headers: {
          'retry-after': String(reset),
          'ratelimit-policy': `"${c.name}";q=${c.quota};w=${c.windowSeconds}`,
          ratelimit: `"${c.name}";r=${d.remaining};t=${reset}`,
        },
      },
    }
  }
}

export function rateLimit(spec: CompiledExtension, redis: RedisPool): ExtensionHooks {
  const limiter = new Limiter(spec, spec.config, redis, 'requests')
  const cost = typeof spec.config.cost === 'number' && spec.config.cost > 0 ? spec.config.cost : 1
  const onDecision = (d: Decision): HookResult => d.allowed ? undefined : limiter.deny(d, 'rate limit exceeded')
  return {
    requestHeaders(req: RequestView) {
      const d = limiter.decide(limiter.key(req), 'take', cost)
      return d instanceof Promise ? d.then(onDecision) : onDecision(d)
    },
  }
}
