// RateLimit: token buckets keyed by any of namespace, serviceAccount, route,
// backend, client address or a request header; local per process, or global
// through Redis so every replica shares one budget (`global.redis`: host:port,
// rediss:// for TLS; AUTH with the Secret of `global.secretRef`; the CAs,
// client certificate and server name of `global.tls`). Over the
// limit: 429 with Retry-After (RFC 9110 §10.2.3) and the IETF RateLimit / RateLimit-Policy
// fields (draft-ietf-httpapi-ratelimit-headers: `"name";q=<quota>;w=<window s>`
// and `"name";r=<remaining>;t=<reset s>`). Redis unreachable: failureMode
// open (default: let it through, with RateLimit-Policy but no RateLimit field:
// the count is unknown) or closed (429), counted either way.

import { hash } from 'node:crypto'
import type { CompiledExtension } from '../compile/table.ts'
import { rateLimitBackendErrors } from '../observe/extension-metrics.ts'
import { logger } from '../observe/log.ts'
import { RepeatThrottle } from '../observe/repeat-throttle.ts'
import type { ExtensionHooks, HookResult, RequestView } from './plugin-api.ts'
import { RedisError, type RedisPool } from './redis-client.ts'
import { parseRedisAddress } from '../redis-address.ts'
import { matchCidr, parseCidr } from '../address-ranges.ts'
import { LocalBuckets, decideGlobal, type BucketFamily, type BucketLimit, type BucketMode, type Decision } from './token-bucket.ts'

const log = logger('rate-limit')

export const UNIT_MS: Readonly<Record<string, number>> = { Second: 1000, Minute: 60_000, Hour: 3_600_000, Day: 86_400_000 }

export type KeyPart = 'namespace' | 'serviceAccount' | 'route' | 'backend' | 'client' | { readonly header: string }

/** Shared by every RateLimit / AIUsage of this process (state survives reloads: a limit's family is found again by its key prefix). */
const local = new LocalBuckets()

/** A key part longer than this counts by its digest, so a key's size is bounded whatever clients send. */
const MAX_KEY_PART = 64
const DIGEST_MARK = 35 // '#'

// hot path
/** A header the request does not carry, as a key part: no value is stored as a bare `#` (boundPart). */
const ABSENT = '#'

/**
 * A key part as stored: as it is, or `#` and its SHA-256 (base64url) when it
 * is long, starts with `#` (a short value never reads as the digest of a long
 * one, nor as a header left out) or holds the `|` that joins the parts (`a|b`
 * + `c` and `a` + `b|c` were one key). Values are latin1 header text, so length
 * is bytes.
 */
function boundPart(v: string | null): string {
  if (v === null) return ABSENT
  return v.length <= MAX_KEY_PART && v.charCodeAt(0) !== DIGEST_MARK && !v.includes('|') ? v : '#' + hash('sha256', v, 'base64url')
}

function keyParts(list: unknown): KeyPart[] {
  // No key: a bucket per client namespace. An empty one, `key: []`: one bucket for every request.
  if (!Array.isArray(list)) return ['namespace']
  const out: KeyPart[] = []
  for (const k of list) {
    if (k === 'namespace' || k === 'serviceAccount' || k === 'route' || k === 'backend' || k === 'client') out.push(k)
    else if (k !== null && typeof k === 'object' && typeof (k as { header?: unknown }).header === 'string') out.push({ header: ((k as { header: string }).header).toLowerCase() })
  }
  return out
}

// hot path
/** The request's value of a key part; null: a header it does not carry. */
function partValue(req: RequestView, p: KeyPart): string | null {
  switch (p) {
    case 'namespace': return req.client.namespace ?? '-'
    case 'serviceAccount': return req.client.namespace === null ? '-' : `${req.client.namespace}/${req.client.serviceAccount ?? '-'}`
    case 'route': return req.route
    case 'backend': return req.backend
    case 'client': return req.client.address
    default: {
      const v = req.headers[p.header]
      return v === undefined ? null : Array.isArray(v) ? v.join(',') : v
    }
  }
}

export interface LimiterConfig {
  readonly limit: BucketLimit
  readonly quota: number
  readonly windowSeconds: number
  readonly name: string
  /** The RateLimit-Policy field value. */
  readonly policy: string
}

/**
 * The AUTH credentials of a `global.secretRef`, from the Secret compile
 * resolved into `spec.secrets[path]` (compile/extensions.ts): `password` (or
 * the key `passwordKey` names), and `username` (or `usernameKey`) if the
 * Secret has it, for a Redis 6 ACL user. A trailing newline, as a hand-written
 * Secret often has, is not part of either.
 */
export function redisCredentials(spec: CompiledExtension, global: Readonly<Record<string, unknown>>, path: string): { username: string | null; password: string | null } {
  const ref = global.secretRef
  if (ref === undefined || ref === null || typeof ref !== 'object') return { username: null, password: null }
  const r = ref as Record<string, unknown>
  const data = spec.secrets[path]
  if (data === undefined) throw new Error(`the Secret of ${path} is not resolved`)
  const passwordKey = typeof r.passwordKey === 'string' ? r.passwordKey : 'password'
  const usernameKey = typeof r.usernameKey === 'string' ? r.usernameKey : null
  const password = data[passwordKey]
  if (password === undefined) throw new Error(`the Secret of ${path} has no key ${passwordKey}`)
  const username = data[usernameKey ?? 'username']
  if (username === undefined && usernameKey !== null) throw new Error(`the Secret of ${path} has no key ${usernameKey}`)
  const trim = (v: string): string => v.replace(/[\r\n]+$/, '')
  return { username: username === undefined ? null : trim(username), password: trim(password) }
}

/**
 * The TLS options of a `global.tls` (a rediss:// Redis): the CA bundle and the
 * client certificate and key compile resolved into `spec.secrets[path]`
 * (compile/extensions.ts: `ca.crt`, `tls.crt`, `tls.key`), and `serverName`.
 * None without the block; a block on a plain-TCP address is refused (validate
 * refuses it first).
 */
export function redisTls(spec: CompiledExtension, global: Readonly<Record<string, unknown>>, path: string, tls: boolean): { ca?: string; cert?: string; key?: string; servername?: string } {
  const block = global.tls
  if (block === undefined || block === null || typeof block !== 'object') return {}
  if (!tls) throw new Error(`${path}: needs a rediss:// address`)
  const b = block as Record<string, unknown>
  const data = spec.secrets[path] ?? {}
  const ca = data['ca.crt']
  const cert = data['tls.crt']
  const key = data['tls.key']
  if (b.caCertificateRefs !== undefined && ca === undefined) throw new Error(`the CA certificates of ${path} are not resolved`)
  if (b.clientCertificateRef !== undefined && (cert === undefined || key === undefined)) throw new Error(`the client certificate of ${path} is not resolved`)
  return {
    ...(ca === undefined ? {} : { ca }),
    ...(cert === undefined || key === undefined ? {} : { cert, key }),
    ...(typeof b.serverName === 'string' ? { servername: b.serverName.toLowerCase().replace(/\.$/, '') } : {}),
  }
}

/** A limit's Redis failing with the same error is logged again at most this often. */
const FAILURE_LOG_EVERY_MS = 10_000

/** Redis unreachable, failureMode open: allowed, the count unknown (no RateLimit field). */
const UNKNOWN: Decision = Object.freeze({ allowed: true, remaining: 0, waitMs: 0 })
/** Redis unreachable, failureMode closed: 429, retry in a second. */
const CLOSED: Decision = Object.freeze({ allowed: false, remaining: 0, waitMs: 1000 })

/** A bucket family: key builder + local or Redis store + failure mode. */
export class Limiter {
  readonly config: LimiterConfig
  readonly #prefix: string
  readonly #parts: readonly KeyPart[]
  readonly #redis: ReturnType<RedisPool['get']> | null
  readonly #pool: RedisPool
  #released = false
  /** Redis failures, per error code: logged once, then at most every FAILURE_LOG_EVERY_MS. */
  readonly #failures = new RepeatThrottle(FAILURE_LOG_EVERY_MS)
  /** Local store (no Redis): the process's buckets (tests: their own) and this limit's family in them. */
  readonly #local: LocalBuckets
  readonly #family: BucketFamily
  readonly #failOpen: boolean
  /** The last key built and the part values it came from: a key of route, backend or namespace repeats, so no string is built or hashed again. */
  #last0: string | null | undefined = undefined
  #last1: string | null | undefined = undefined
  #lastKey = ''
  /** The last success fields, reused while remaining and reset repeat (a bucket far from empty). */
  #lastAllow: HookResult = undefined
  #lastRemaining = -1
  #lastReset = -1
  /** `requests: 0`: every decision is this refusal (no bucket is kept). */
  readonly #nothing: Decision | null
  /** The success fields when the count is unknown (Redis down, failureMode open). */
  #policyOnly: HookResult = undefined

  /**
   * `block` is the limit's config; `options.globalAt` the config path of the
   * `global` that applies to it (its Secret is `spec.secrets[globalAt + '.secretRef']`,
   * its TLS material `spec.secrets[globalAt + '.tls']`).
   */
  constructor(spec: CompiledExtension, block: Readonly<Record<string, unknown>>, redis: RedisPool, amountField: 'requests' | 'tokens', options: { readonly globalAt?: string; readonly buckets?: LocalBuckets } = {}) {
    const buckets = options.buckets ?? local
    this.#pool = redis
    const amount = Number(block[amountField])
    const unitMs = UNIT_MS[String(block.unit ?? 'Minute')]
    if (unitMs === undefined) throw new Error('unit must be Second, Minute, Hour or Day')
    // A BackendTrafficPolicy rule of `requests: 0` (its schema allows it; a RateLimit's own
    // needs 1) admits nothing it selects, as Envoy's rate limit service reads 0 per unit.
    this.#nothing = amount === 0 && amountField === 'requests' ? Object.freeze({ allowed: false, remaining: 0, waitMs: unitMs }) : null
    if (!(amount > 0) && this.#nothing === null) throw new Error(`${amountField} must be a positive number`)
    const burst = typeof block.burst === 'number' && block.burst > 0 ? block.burst : amount
    const name = typeof block.name === 'string' ? block.name : spec.name
    this.config = { limit: { capacity: burst, perMs: amount / unitMs }, quota: amount, windowSeconds: unitMs / 1000, name, policy: `"${name}";q=${amount};w=${unitMs / 1000}` }
    this.#prefix = `sallyport:rl:${spec.source}/${spec.name}${name === spec.name ? '' : '/' + name}:`
    this.#parts = keyParts(block.key)
    const global = block.global as Record<string, unknown> | undefined
    if (global !== undefined && global !== null) {
      const address = typeof global.redis === 'string' ? global.redis : String((global.redis as Record<string, unknown> | undefined)?.address ?? '')
      const target = parseRedisAddress(address)
      if (!target.ok) throw new Error(`global.redis: ${target.message}`)
      const globalAt = options.globalAt ?? 'global'
      this.#redis = redis.get(target.value, {
        ...redisCredentials(spec, global, `${globalAt}.secretRef`),
        ...redisTls(spec, global, `${globalAt}.tls`, target.value.tls),
        timeoutMs: typeof global.timeoutMs === 'number' ? global.timeoutMs : 250,
      })
    } else {
      this.#redis = null
    }
    this.#local = buckets
    this.#family = buckets.family(this.#prefix)
    this.#failOpen = (block.failureMode ?? global?.failureMode ?? 'open') !== 'closed'
  }

  /**
   * A failed decision, logged: a new error (code) at once, the same one again at
   * most every FAILURE_LOG_EVERY_MS with how many failures it stands for
   * (observe/repeat-throttle.ts). With
   * Redis down every request fails, and each was a warn line (the metric
   * sallyport_rate_limit_redis_errors_total counts them all).
   */
  #logFailure(err: unknown): void {
    const noted = this.#failures.note(err instanceof RedisError ? err.code : 'error')
    if (!noted.log) return
    log.warn({ limit: this.config.name, code: err instanceof RedisError ? err.code : undefined, error: err instanceof Error ? err.message : String(err), failOpen: this.#failOpen, ...(noted.repeats === null || noted.repeats === 0 ? {} : { repeats: noted.repeats }) }, 'global rate limit unavailable')
  }

  /** Gives the Redis client back to the pool and the bucket family back to the local store (the extension left the table); once. */
  close(): void {
    if (this.#released) return
    this.#released = true
    this.#local.release(this.#family)
    if (this.#redis !== null) this.#pool.release(this.#redis)
  }

  // hot path
  key(req: RequestView): string {
    const parts = this.#parts
    if (parts.length === 1 || parts.length === 2) {
      const v0 = partValue(req, parts[0] as KeyPart)
      const v1 = parts.length === 2 ? partValue(req, parts[1] as KeyPart) : undefined
      if (v0 !== this.#last0 || v1 !== this.#last1) {
        this.#last0 = v0
        this.#last1 = v1
        this.#lastKey = v1 === undefined ? this.#prefix + boundPart(v0) : this.#prefix + boundPart(v0) + '|' + boundPart(v1)
      }
      return this.#lastKey
    }
    let k = this.#prefix
    for (let i = 0; i < parts.length; i++) k += (i === 0 ? '' : '|') + boundPart(partValue(req, parts[i] as KeyPart))
    return k
  }

  // hot path
  decide(key: string, mode: BucketMode, cost: number): Decision | Promise<Decision> {
    if (this.#nothing !== null) return this.#nothing
    if (this.#redis === null) return this.#local.decide(this.#family, key, this.config.limit, mode, cost)
    return decideGlobal(this.#redis, key, this.config.limit, mode, cost).catch((err: unknown) => {
      rateLimitBackendErrors.inc({ outcome: this.#failOpen ? 'open' : 'closed' })
      this.#logFailure(err)
      return this.#failOpen ? UNKNOWN : CLOSED
    })
  }

  /** An allowed request: the RateLimit fields for the answer (IETF draft: remaining quota, seconds until full). */
  allow(d: Decision): HookResult {
    const c = this.config
    // Failed open: the limiter is off, not exhausted; r=0 would tell clients to stop.
    if (d === UNKNOWN) return this.#policyOnly ??= { responseHeaders: Object.freeze({ 'ratelimit-policy': c.policy }) }
    const reset = Math.ceil((c.limit.capacity - d.remaining) / c.limit.perMs / 1000)
    if (d.remaining === this.#lastRemaining && reset === this.#lastReset) return this.#lastAllow
    this.#lastRemaining = d.remaining
    this.#lastReset = reset
    // Frozen: the flow keeps the first reply-headers object without copying it.
    return this.#lastAllow = { responseHeaders: Object.freeze({ 'ratelimit-policy': c.policy, ratelimit: `"${c.name}";r=${d.remaining};t=${reset}` }) }
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
          'ratelimit-policy': c.policy,
          ratelimit: `"${c.name}";r=${d.remaining};t=${reset}`,
        },
      },
    }
  }
}

/**
 * One limit of a RateLimit: `config` itself, or each of `config.rules` (the
 * BackendTrafficPolicy rateLimit shape: every rule whose `match` selects the
 * request takes a token; the first that refuses answers 429).
 */
interface Rule { readonly limiter: Limiter; readonly match: RequestMatch | null; /** Tokens a request takes; 0: only checks the bucket. */ readonly cost: number }

export function rateLimit(spec: CompiledExtension, redis: RedisPool): ExtensionHooks {
  const blocks = Array.isArray(spec.config.rules) ? spec.config.rules as Array<Record<string, unknown>> : [spec.config]
  const rules: Rule[] = []
  try {
    blocks.forEach((b, i) => {
      const block: Record<string, unknown> = { ...(Array.isArray(spec.config.rules) ? { global: spec.config.global, failureMode: spec.config.failureMode, name: `${spec.name}-${i}` } : {}), ...b }
      // A rule's own `global` (its own Redis and Secret), else the one of the whole config.
      const globalAt = Array.isArray(spec.config.rules) && b.global !== undefined ? `rules[${i}].global` : 'global'
      const match = compileMatch(block.match)
      rules.push({ limiter: new Limiter(spec, block, redis, 'requests', { globalAt }), match, cost: typeof block.cost === 'number' && block.cost >= 0 ? block.cost : 1 })
    })
  } catch (err) {
    // A rule that cannot run: the extension fails (builtins.ts); the rules built so far give their clients back.
    for (const r of rules) r.limiter.close()
    throw err
  }
  const close = (): void => { for (const r of rules) r.limiter.close() }
  const headersOnSuccess = spec.config.responseHeaders !== false
  if (rules.length === 1 && rules[0]?.match === null) {
    const { limiter, cost } = rules[0]
    const onDecision = (d: Decision): HookResult => d.allowed ? (headersOnSuccess ? limiter.allow(d) : undefined) : limiter.deny(d, 'rate limit exceeded')
    return {
      requestHeaders(req: RequestView) {
        const d = limiter.decide(limiter.key(req), cost === 0 ? 'check' : 'take', cost)
        return d instanceof Promise ? d.then(onDecision) : onDecision(d)
      },
      close,
    }
  }
  return {
    close,
    async requestHeaders(req: RequestView): Promise<HookResult> {
      let tightest: { limiter: Limiter; d: Decision } | null = null
      for (const r of rules) {
        if (r.match !== null && !r.match(req)) continue
        // cost 0 (a BackendTrafficPolicy rule's `cost.request.number: 0`): the bucket is checked, nothing taken.
        const d = await r.limiter.decide(r.limiter.key(req), r.cost === 0 ? 'check' : 'take', r.cost)
        if (!d.allowed) return r.limiter.deny(d, 'rate limit exceeded')
        // The field names the tightest known count; an unknown one (failed open) only when none is known.
        if (tightest === null || (d !== UNKNOWN && (tightest.d === UNKNOWN || d.remaining < tightest.d.remaining))) tightest = { limiter: r.limiter, d }
      }
      return tightest === null || !headersOnSuccess ? undefined : tightest.limiter.allow(tightest.d)
    },
  }
}

export type RequestMatch = (req: RequestView) => boolean

/**
 * `match: { headers: [{ name, value?, type?: Exact | RegularExpression, invert? }], sourceCIDR: "10.0.0.0/8" }`:
 * every header condition and the source range must hold (Envoy Gateway
 * clientSelectors); `invert` selects the requests whose header does not match
 * (a header left out included, as Envoy's invert_match). `sourceCIDR` may be a
 * list (several BackendTrafficPolicy selectors, each must hold).
 */
export function compileMatch(m: unknown): RequestMatch | null {
  if (m === undefined || m === null || typeof m !== 'object') return null
  const o = m as Record<string, unknown>
  const tests: RequestMatch[] = []
  for (const h of Array.isArray(o.headers) ? o.headers as Array<Record<string, unknown>> : []) {
    const name = String(h.name ?? '').toLowerCase()
    const value = typeof h.value === 'string' ? h.value : null
    const read = (req: RequestView): string | undefined => { const v = req.headers[name]; return Array.isArray(v) ? v.join(',') : v }
    let test: RequestMatch
    if (value === null) test = req => read(req) !== undefined
    else if (h.type === 'RegularExpression') { const re = new RegExp(`^(?:${value})$`); test = req => { const v = read(req); return v !== undefined && re.test(v) } }
    else test = req => read(req) === value
    tests.push(h.invert === true ? req => !test(req) : test)
  }
  const ranges = typeof o.sourceCIDR === 'string' ? [o.sourceCIDR] : Array.isArray(o.sourceCIDR) ? o.sourceCIDR.filter((c): c is string => typeof c === 'string') : []
  for (const text of ranges) {
    const cidr = parseCidr(text)
    // Validate refuses a range that does not parse; one here matches nobody, never everybody.
    if (cidr === null) tests.push(() => false)
    else { const list = [cidr]; tests.push(req => matchCidr(list, req.client.address) !== null) }
  }
  return tests.length === 0 ? null : (req) => tests.every(f => f(req))
}
