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
//   fail; they are cached, refreshed and served stale like any answer — a
//   missing AAAA record must not hold up the A answer of the name while the
//   resolver is down. RFC 2308 would keep them for the SOA minimum of the
//   authority section, but node's Resolver rejects them with a bare code
//   (ENOTFOUND, ENODATA) and no SOA, so they are kept for minTtl.
// - A failure is cached too (RFC 9520 §3.2: at least 1 s): with nothing to
//   serve, requests get the last failure at once for FAILURE_HOLD_MS, and the
//   name is asked again after that — one query in flight per name, never one
//   per request (a SERVFAIL resolver got 2000 queries for 2000 requests).
// - At most `maxEntries` names (× family) are kept, least recently used
//   evicted first (Envoy's dynamic forward proxy caps its DNS cache at 1024
//   hosts): the names are the configuration's, except a forward proxy's
//   requested hosts, which clients choose — one asking for ever new names
//   (random subdomains under an allowed wildcard, each NXDOMAIN) must not grow
//   the cache for as long as each answer is kept. Order is kept by the Map:
//   a name moves to its end when stored and, once the cache is half full,
//   when used.
// - An answer object keeps its identity while its addresses are unchanged, so
//   consumers detect a change by reference (the registry rotates pools then).

import { DnsError, type DnsAnswer } from './dns.ts'
import { dnsCacheEvictions, dnsStaleAnswers } from '../observe/dns-metrics.ts'

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
  /** Names (× family) kept at most, least recently used evicted first; default MAX_ENTRIES. */
  readonly maxEntries?: number
}

/** What the cache knows about one name and family. `error` set: no addresses (NXDOMAIN / NODATA). */
export interface CachedAnswer {
  readonly addresses: readonly string[]
  readonly error: DnsError | null
}

interface Entry {
  readonly name: string
  readonly family: 4 | 6
  /** The last answer; null: none yet, or none servable any more. */
  answer: CachedAnswer | null
  expiresAt: number
  staleUntil: number
  /** The last query failed (SERVFAIL, REFUSED, timeout, unreachable); null once one succeeds. */
  failure: DnsError | null
  /** No query before this (the hold-down after a failure). */
  retryAt: number
  /** Used since the timer last looked (or since the entry was made for a request). */
  used: boolean
  timer: NodeJS.Timeout | null
}

const REFRESH_AT = 0.8

/**
 * After a failed query, how long requests with nothing to serve get that failure
 * at once, and no new query is sent. Short: the first query after it succeeds
 * when the resolver is back (RFC 9520 §3.2 asks for at least 1 s).
 */
export const FAILURE_HOLD_MS = 1000

/** Names (× family) the cache keeps at most (about 0.8 KB each). */
export const MAX_ENTRIES = 10_000

function keyOf(name: string, family: 4 | 6): string {
  return family === 4 ? name : `${name}|6`
}

function newEntry(name: string, family: 4 | 6): Entry {
  return { name, family, answer: null, expiresAt: 0, staleUntil: 0, failure: null, retryAt: 0, used: true, timer: null }
}

export class DnsCache {
  readonly #querier: DnsQuerier
  readonly #minTtlMs: number
  readonly #maxTtlMs: number
  readonly #staleMs: number
  readonly #maxEntries: number
  readonly #entries = new Map<string, Entry>()
  readonly #inflight = new Map<string, Promise<CachedAnswer>>()
  #closed = false

  constructor(querier: DnsQuerier, options: DnsCacheOptions = {}) {
    this.#querier = querier
    this.#minTtlMs = options.minTtlMs ?? 5_000
    this.#maxTtlMs = Math.max(this.#minTtlMs, options.maxTtlMs ?? 300_000)
    this.#staleMs = options.staleMs ?? 60_000
    this.#maxEntries = Math.max(1, options.maxEntries ?? MAX_ENTRIES)
  }

  /** Names (× family) cached, for tests. */
  get size(): number { return this.#entries.size }

  /**
   * The current answer without waiting, or null when a query is needed. An
   * expired answer is served and starts its refresh; with nothing servable, the
   * name is asked again in the background once a failure's hold-down is over.
   */
  // hot path (once per request per hostname endpoint)
  peek(name: string, family: 4 | 6): CachedAnswer | null {
    const key = keyOf(name, family)
    const entries = this.#entries
    const e = entries.get(key)
    if (e === undefined) return null
    e.used = true
    // Recently used last (eviction takes the first); only when eviction may come, so a
    // cache of the configuration's names pays one comparison.
    if (entries.size * 2 > this.#maxEntries) { entries.delete(key); entries.set(key, e) }
    const answer = e.answer
    const now = Date.now()
    if (answer !== null) {
      if (now < e.expiresAt) return answer
      if (now < e.staleUntil) {
        // Served as it is; the refresh (one per name) replaces it when it succeeds.
        this.#refresh(e, now)
        dnsStaleAnswers.inc()
        return answer
      }
    }
    this.#refresh(e, now)
    return null
  }

  /**
   * Nothing to wait for now: a query of this name and family is under way, or
   * the last one failed a moment ago (FAILURE_HOLD_MS) and nothing is servable.
   */
  isPending(name: string, family: 4 | 6): boolean {
    const key = keyOf(name, family)
    if (this.#inflight.has(key)) return true
    const e = this.#entries.get(key)
    return e !== undefined && e.answer === null && e.failure !== null && Date.now() < e.retryAt
  }

  /**
   * The answer, querying when nothing fresh (or servable stale) is cached.
   * Rejects with a DnsError: the query's, or during the hold-down the last one.
   */
  lookup(name: string, family: 4 | 6): Promise<CachedAnswer> {
    const hit = this.peek(name, family)
    if (hit !== null) return Promise.resolve(hit)
    const key = keyOf(name, family)
    const running = this.#inflight.get(key)
    if (running !== undefined) return running
    const e = this.#entries.get(key)
    if (e !== undefined && e.failure !== null && Date.now() < e.retryAt) return Promise.reject(e.failure)
    return this.#fetch(name, family)
  }

  /**
   * An expired answer's refresh (started if none is under way and no hold-down
   * stops it): what a request that found every stale address refusing waits for.
   * Null while the answer is current, or when there is no answer to refresh.
   * Settles with the new answer, or the stale one when the refresh failed.
   */
  refreshed(name: string, family: 4 | 6): Promise<CachedAnswer> | null {
    const key = keyOf(name, family)
    const e = this.#entries.get(key)
    const now = Date.now()
    if (e === undefined || e.answer === null || now < e.expiresAt) return null
    const running = this.#inflight.get(key)
    if (running !== undefined) return running
    return now < e.retryAt || this.#closed ? null : this.#fetch(name, family)
  }

  close(): void {
    this.#closed = true
    for (const e of this.#entries.values()) if (e.timer !== null) clearTimeout(e.timer)
    this.#entries.clear()
  }

  #fetch(name: string, family: 4 | 6): Promise<CachedAnswer> {
    const key = keyOf(name, family)
    const running = this.#inflight.get(key)
    if (running !== undefined) return running
    const p = this.#querier.query(name, family).then(
      (answer) => this.#store(name, family, answer.addresses, null, answer.ttlSec * 1000),
      (err: unknown) => this.#failed(name, family, err),
    ).finally(() => this.#inflight.delete(key))
    this.#inflight.set(key, p)
    return p
  }

  /** A background query of an entry's name, unless one is under way or held down; nothing waits on it. */
  #refresh(e: Entry, now: number): void {
    if (this.#closed || now < e.retryAt || this.#inflight.has(keyOf(e.name, e.family))) return
    this.#fetch(e.name, e.family).catch(noop) // #failed keeps the failure in the entry
  }

  #store(name: string, family: 4 | 6, addresses: readonly string[], error: DnsError | null, ttlMs: number): CachedAnswer {
    const key = keyOf(name, family)
    const now = Date.now()
    const ttl = Math.min(this.#maxTtlMs, Math.max(this.#minTtlMs, ttlMs))
    const old = this.#entries.get(key)
    const kept = old?.answer ?? null
    const answer: CachedAnswer = kept !== null && sameAnswer(kept, addresses, error) ? kept : { addresses, error }
    if (this.#closed) return answer
    const e = old ?? newEntry(name, family)
    e.answer = answer
    e.expiresAt = now + ttl
    e.staleUntil = e.expiresAt + this.#staleMs
    e.failure = null
    e.retryAt = 0
    this.#put(key, e)
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
    if (this.#closed) throw error
    const key = keyOf(name, family)
    const now = Date.now()
    let e = this.#entries.get(key)
    if (e === undefined) this.#put(key, e = newEntry(name, family))
    e.failure = error
    e.retryAt = now + FAILURE_HOLD_MS
    // Asked again after the hold-down while the name is in use; forgotten when it is not.
    this.#schedule(key, e, FAILURE_HOLD_MS)
    if (e.answer !== null && now < e.staleUntil) return e.answer
    e.answer = null
    throw error
  }

  /** Stores `e` as the most recently used; past maxEntries, the least recently used go. */
  #put(key: string, e: Entry): void {
    const entries = this.#entries
    entries.delete(key)
    entries.set(key, e)
    while (entries.size > this.#maxEntries) {
      const [oldKey, old] = entries.entries().next().value as [string, Entry]
      if (old.timer !== null) clearTimeout(old.timer)
      old.timer = null
      entries.delete(oldKey)
      dnsCacheEvictions.inc()
    }
  }

  #schedule(key: string, e: Entry, delayMs: number): void {
    if (e.timer !== null) clearTimeout(e.timer)
    e.timer = setTimeout(() => this.#tick(key, e), delayMs)
    e.timer.unref()
  }

  /** Refresh-ahead and retry timer: names in use are asked again, the rest evicted once nothing of theirs is servable. */
  #tick(key: string, e: Entry): void {
    e.timer = null
    if (this.#closed || this.#entries.get(key) !== e) return
    const now = Date.now()
    // Use since the last look, the request that created the entry included: its
    // answer arrived after the request, and is still refreshed ahead once.
    const used = e.used
    e.used = false
    if (!used) {
      // Not in use: no query, but an answer stays until its stale window closes, so a
      // later request during a resolver outage still finds it (RFC 8767).
      if (e.answer !== null && now < e.staleUntil) this.#schedule(key, e, e.staleUntil - now)
      else this.#entries.delete(key)
      return
    }
    if (now < e.retryAt) {
      e.used = true
      this.#schedule(key, e, e.retryAt - now)
      return
    }
    // The outcome reschedules (#store, #failed); nothing waits on this promise.
    if (!this.#inflight.has(key)) this.#fetch(e.name, e.family).catch(noop)
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
