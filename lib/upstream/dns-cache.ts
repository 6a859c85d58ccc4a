// TTL-honouring cache of A / AAAA answers for backend hostnames (issue 5).
//
// - TTLs are clamped to [minTtl, maxTtl]: a TTL of 0 would mean a query per
//   request, a TTL of a week would pin an address long after the name moved.
// - Names in use are refreshed in the background ahead of expiry (at 80% of
//   the TTL), so requests rarely wait for DNS; a name unused for a while is
//   not refreshed, and is evicted when its stale window closes.
// - An expired answer is served at once while one refresh of the name runs in
//   the background (Envoy's DNS cache and CoreDNS serve_stale do the same; RFC
//   8767 "serve-stale"): a request never waits on a refresh when something is
//   cached, so a resolver that stops answering — a query then takes the whole
//   c-ares timeout, about 6 s — does not stall traffic. The refresh replaces
//   the answer when it succeeds; while refreshes fail (SERVFAIL, REFUSED,
//   timeout, unreachable) the last answer is served for at most `staleMs` past
//   its expiry, then no more (a resolver outage should not become an egress
//   outage, nor pin an address for ever).
// - NXDOMAIN and NODATA are answers, not failures: the name is gone, requests
//   fail; they are cached for minTtl (RFC 2308 negative caching, clamped),
//   refreshed and served stale like any answer — a missing AAAA record must not
//   hold up the A answer of the name while the resolver is down.
// - An answer object keeps its identity while its addresses are unchanged, so
//   consumers detect a change by reference (the registry rotates pools then).

import { DnsError, type DnsAnswer } from './dns.ts'
import { dnsStaleAnswers } from '../observe/dns-metrics.ts'

export interface DnsQuerier {
  query(name: string, family: 4 | 6): Promise<DnsAnswer>
}

export interface DnsCacheOptions {
  /** Default 5 s. */
  readonly minTtlMs?: number
  /** Default 300 s. */
  readonly maxTtlMs?: number
  /** How long past expiry the last answer may be served (while it is refreshed, or refreshes fail); default 60 s. 0: never. */
  readonly staleMs?: number
}

/** What the cache knows about one name and family. `error` set: no addresses (NXDOMAIN / NODATA). */
export interface CachedAnswer {
  readonly addresses: readonly string[]
  readonly error: DnsError | null
}

interface Entry {
  readonly name: string
  readonly family: 4 | 6
  answer: CachedAnswer
  expiresAt: number
  staleUntil: number
  ttlMs: number
  /** Used since the refresh timer last looked. */
  used: boolean
  timer: NodeJS.Timeout | null
}

const REFRESH_AT = 0.8

export class DnsCache {
  readonly #querier: DnsQuerier
  readonly #minTtlMs: number
  readonly #maxTtlMs: number
  readonly #staleMs: number
  readonly #entries = new Map<string, Entry>()
  readonly #inflight = new Map<string, Promise<CachedAnswer>>()
  #closed = false

  constructor(querier: DnsQuerier, options: DnsCacheOptions = {}) {
    this.#querier = querier
    this.#minTtlMs = options.minTtlMs ?? 5_000
    this.#maxTtlMs = Math.max(this.#minTtlMs, options.maxTtlMs ?? 300_000)
    this.#staleMs = options.staleMs ?? 60_000
  }

  /** The current answer without waiting, or null when a query is needed. An expired answer starts its refresh. */
  // hot path (once per request per hostname endpoint)
  peek(name: string, family: 4 | 6): CachedAnswer | null {
    const e = this.#entries.get(family === 4 ? name : `${name}|6`)
    if (e === undefined) return null
    const now = Date.now()
    if (now < e.expiresAt) {
      e.used = true
      return e.answer
    }
    if (now < e.staleUntil) {
      // Served as it is; the refresh (one per name) replaces it when it succeeds.
      e.used = true
      this.#refresh(e)
      dnsStaleAnswers.inc()
      return e.answer
    }
    return null
  }

  /** A query of this name and family is under way: asking now would only wait for it. */
  isPending(name: string, family: 4 | 6): boolean {
    return this.#inflight.has(family === 4 ? name : `${name}|6`)
  }

  /** The answer, querying when nothing fresh (or servable stale) is cached. Rejects with a DnsError. */
  lookup(name: string, family: 4 | 6): Promise<CachedAnswer> {
    const hit = this.peek(name, family)
    if (hit !== null) return Promise.resolve(hit)
    return this.#fetch(name, family)
  }

  close(): void {
    this.#closed = true
    for (const e of this.#entries.values()) if (e.timer !== null) clearTimeout(e.timer)
    this.#entries.clear()
  }

  #fetch(name: string, family: 4 | 6): Promise<CachedAnswer> {
    const key = family === 4 ? name : `${name}|6`
    const running = this.#inflight.get(key)
    if (running !== undefined) return running
    const p = this.#querier.query(name, family).then(
      (answer) => this.#store(name, family, answer.addresses, null, answer.ttlSec * 1000),
      (err: unknown) => this.#failed(name, family, err),
    ).finally(() => this.#inflight.delete(key))
    this.#inflight.set(key, p)
    return p
  }

  /** A background query of an entry's name, unless one is under way; nothing waits on it. */
  #refresh(e: Entry): void {
    if (this.#closed || this.#inflight.has(e.family === 4 ? e.name : `${e.name}|6`)) return
    this.#fetch(e.name, e.family).catch(noop) // #failed has kept the entry (or dropped it)
  }

  #store(name: string, family: 4 | 6, addresses: readonly string[], error: DnsError | null, ttlMs: number): CachedAnswer {
    const key = family === 4 ? name : `${name}|6`
    const now = Date.now()
    const ttl = Math.min(this.#maxTtlMs, Math.max(this.#minTtlMs, ttlMs))
    const old = this.#entries.get(key)
    const same = old !== undefined && sameAnswer(old.answer, addresses, error)
    const answer: CachedAnswer = same ? (old as Entry).answer : { addresses, error }
    if (this.#closed) return answer
    const e: Entry = old ?? { name, family, answer, expiresAt: 0, staleUntil: 0, ttlMs: ttl, used: true, timer: null }
    e.answer = answer
    e.expiresAt = now + ttl
    e.staleUntil = e.expiresAt + this.#staleMs
    e.ttlMs = ttl
    this.#entries.set(key, e)
    // Negative answers too: a name in use whose AAAA is NODATA is asked again ahead, like its A.
    this.#schedule(key, e, Math.floor(ttl * REFRESH_AT))
    return answer
  }

  #failed(name: string, family: 4 | 6, err: unknown): CachedAnswer {
    const error = err instanceof DnsError ? err : new DnsError('EOTHER', 'other', String(err), { cause: err })
    if (error.authoritative) {
      // The name is gone (or has no records of this family): that is the answer, cached briefly.
      return this.#store(name, family, [], error, this.#minTtlMs)
    }
    const key = family === 4 ? name : `${name}|6`
    const e = this.#entries.get(key)
    if (e !== undefined && Date.now() < e.staleUntil && !this.#closed) {
      // The last answer stays servable; asked again soon while the name is in use.
      this.#schedule(key, e, Math.min(Math.max(500, Math.floor(this.#minTtlMs / 2)), 5_000))
      return e.answer
    }
    throw error
  }

  #schedule(key: string, e: Entry, delayMs: number): void {
    if (e.timer !== null) clearTimeout(e.timer)
    e.used = false
    e.timer = setTimeout(() => this.#tick(key, e), delayMs)
    e.timer.unref()
  }

  /** Refresh-ahead timer: refresh names in use, evict the rest once their stale window closes. */
  #tick(key: string, e: Entry): void {
    e.timer = null
    if (this.#closed || this.#entries.get(key) !== e) return
    const now = Date.now()
    if (now >= e.staleUntil) {
      this.#entries.delete(key)
      return
    }
    if (!e.used) {
      // Not in use: no refresh, but the answer stays until its stale window closes, so
      // a later request during a resolver outage still finds it (RFC 8767).
      this.#schedule(key, e, e.staleUntil - now)
      return
    }
    // Failures are handled in #failed (stale window, retry timer); nothing waits on this promise.
    this.#fetch(e.name, e.family).catch(() => { if (this.#entries.get(key) === e && e.timer === null) this.#entries.delete(key) })
  }
}

function noop(): void {}

function sameAnswer(a: CachedAnswer, addresses: readonly string[], error: DnsError | null): boolean {
  if ((a.error === null) !== (error === null)) return false
  if (a.error !== null && error !== null) return a.error.kind === error.kind
  if (a.addresses.length !== addresses.length) return false
  const set = new Set(a.addresses)
  for (const x of addresses) if (!set.has(x)) return false
  return true
}
