// Hostname → usable addresses for a cluster's hostname endpoints (issue 5).
// DNS (dns.ts, TTL-aware cache in dns-cache.ts), then the destination guard
// (destination-guard.ts) and, when asked for, the reverse-DNS check
// (dns-reverse.ts). The registry turns the addresses into endpoints with a
// pool each, and asks again on every request: `peek` is a cache read, and the
// Resolution object keeps its identity until the DNS answer changes — that is
// how the registry notices it must rotate pools.
//
// Refusals are decided once per answer, logged and counted then (not per
// request). A name whose every address is refused fails with
// SP_ERR_DESTINATION_REFUSED (502): the route is fine, where the name points
// is not — a gateway error, distinct from the 403 of a policy denial that
// compile can see.

import { isIP } from 'node:net'
import { ErrorCode, SallyportError } from '../errors.ts'
import type { Cluster } from '../compile/table.ts'
import { logger } from '../observe/log.ts'
import { destinationRefusals } from '../observe/dns-metrics.ts'
import { DnsClient, DnsError, type DnsAnswer, type DnsClientOptions } from './dns.ts'
import { DnsCache, type CachedAnswer, type DnsCacheOptions, type DnsQuerier } from './dns-cache.ts'
import { DestinationGuard, RefusalReason, reverseDnsRequirements, type GuardOptions } from './destination-guard.ts'
import { ReverseDnsChecker, isUnderSuffixes } from './dns-reverse.ts'

const log = logger('dns')

/** What connect.ts needs for hostname endpoints it resolves itself. */
export interface Resolver {
  /** Addresses in preference order; rejects with the resolver's error (ENOTFOUND...). */
  resolve(hostname: string): Promise<string[]>
}

/** A plain lookup function (tests, embedding): answers are cached for the minimum TTL. */
export type ResolveFn = (hostname: string) => Promise<string[]>

export interface DnsSettings extends DnsClientOptions, DnsCacheOptions {}

export interface DestinationResolverOptions {
  readonly dns?: DnsSettings
  readonly guard?: GuardOptions
  /** Replaces DNS queries (A/AAAA from one function); PTR checks then find no names. */
  readonly resolve?: ResolveFn
}

/** Usable addresses of one hostname for one cluster; `error` set when there are none. */
export interface Resolution {
  /** IPv4 first, then IPv6 (when the cluster enables it), in answer order. */
  readonly addresses: readonly string[]
  readonly error: SallyportError | null
}

interface Slot {
  /** The answers it was checked from; null: that family failed, or was not waited for. */
  readonly a4: CachedAnswer | null
  readonly a6: CachedAnswer | null
  /** With no address from either family: the kind of failure reported (`''` otherwise). */
  readonly failure: string
  /** An address in a name's place: judged once, no DNS answer to follow. */
  readonly literal: boolean
  /** When a reverse-DNS verdict it used expires (Date.now()): checked again then; Infinity without one. */
  recheckAt: number
  done: Resolution | null
  readonly pending: Promise<Resolution>
}

/** What one family's lookup came to: an answer (maybe NXDOMAIN / NODATA), or the resolver's failure. */
type Outcome = CachedAnswer | DnsError

/**
 * RFC 8305 §3 "Resolution Delay": once one family has answered with addresses,
 * the other is waited for this long at most, then the addresses at hand are
 * used (its answer is cached when it comes). A resolver that drops AAAA queries,
 * or a name whose AAAA side times out, must not hold up the A answer.
 */
const RESOLUTION_DELAY_MS = 50

/**
 * How long a connect whose every address of an expired DNS answer refused waits
 * for that answer's refresh (`refreshed`). A resolver that answers at all
 * answers in milliseconds; one that stopped answering is not waited for to its
 * query timeout (2 s × 2 tries): the connect failure is the answer then.
 */
export const STALE_REFRESH_WAIT_MS = 1000

const V4 = /^[\d.]+$/

/** Adapts a ResolveFn to the querier interface: A from its IPv4 results, AAAA from its IPv6 ones. */
function functionQuerier(fn: ResolveFn): DnsQuerier & Pick<DnsClient, 'reverse' | 'query'> {
  const query = async (name: string, family: 4 | 6): Promise<DnsAnswer> => {
    const all = await fn(name)
    const addresses = all.filter(a => V4.test(a) === (family === 4))
    if (addresses.length === 0) throw new DnsError('ENODATA', 'nodata', `no ${family === 4 ? 'A' : 'AAAA'} records for ${name}`)
    return { addresses, ttlSec: 0 }
  }
  return { query, reverse: async () => [] }
}

export class DestinationResolver {
  readonly #cache: DnsCache
  readonly #guard: DestinationGuard
  readonly #reverse: ReverseDnsChecker
  readonly #client: DnsClient | null
  readonly #slots = new WeakMap<Cluster, Map<string, Slot>>()

  constructor(options: DestinationResolverOptions = {}) {
    const dns = options.dns ?? {}
    this.#client = options.resolve === undefined ? new DnsClient(dns) : null
    const querier = this.#client ?? functionQuerier(options.resolve as ResolveFn)
    this.#cache = new DnsCache(querier, dns)
    this.#guard = new DestinationGuard(options.guard)
    this.#reverse = new ReverseDnsChecker(querier, dns.maxTtlMs ?? 300_000)
  }

  /** The DNS servers asked ([] with a custom resolve function). */
  get servers(): readonly string[] {
    return this.#client?.servers ?? []
  }

  /** The current resolution without waiting; null when DNS (or a check) must be waited for. */
  // hot path
  peek(cluster: Cluster, hostname: string): Resolution | null {
    const slot = this.#slots.get(cluster)?.get(hostname)
    if (slot !== undefined && slot.recheckAt !== Infinity && Date.now() >= slot.recheckAt) return null
    if (slot !== undefined && slot.literal) return slot.done
    const a4 = this.#cache.peek(hostname, 4)
    let a6: CachedAnswer | null = null
    if (cluster.enableIPv6) {
      a6 = this.#cache.peek(hostname, 6)
      // One family's addresses are used while the other's query is still out (RESOLUTION_DELAY_MS).
      if (a4 === null ? !(hasAddresses(a6) && this.#cache.isPending(hostname, 4)) : a6 === null && !(hasAddresses(a4) && this.#cache.isPending(hostname, 6))) return null
    } else if (a4 === null) return null
    if (slot === undefined || slot.a4 !== a4 || slot.a6 !== a6) return null
    return slot.done
  }

  /** Resolve (querying as needed) and check. Never rejects: failures are in `error`. */
  async resolve(cluster: Cluster, hostname: string): Promise<Resolution> {
    let slots = this.#slots.get(cluster)
    if (slots === undefined) this.#slots.set(cluster, slots = new Map())
    // An address in a name's place (an ExternalName Service's, a CONNECT to a requested IP,
    // issue 9): no DNS, the same checks — once per cluster, like an answer's, so requests
    // reuse the registry's endpoint list and a refusal is logged and counted once.
    if (isIP(hostname) !== 0) {
      const known = slots.get(hostname)
      if (known !== undefined && known.literal && isCurrent(known)) return known.done ?? known.pending
      return this.#settle(cluster, slots, hostname, null, null, '', true, { addresses: [hostname], error: null }, null, null)
    }
    const p4 = outcome(this.#cache.lookup(hostname, 4))
    const [o4, o6] = cluster.enableIPv6 ? await bothFamilies(p4, outcome(this.#cache.lookup(hostname, 6))) : [await p4, null]
    const a4 = o4 instanceof DnsError ? null : o4
    const a6 = o6 instanceof DnsError ? null : o6
    const failure = hasAddresses(a4) || hasAddresses(a6) ? null : failureOf(o4, o6)
    const kind = failure === null ? '' : failure.kind
    // The same answers (or the same kind of failure) give the same Resolution object: the registry rebuilds on a new one.
    const slot = slots.get(hostname)
    if (slot !== undefined && slot.a4 === a4 && slot.a6 === a6 && slot.failure === kind && isCurrent(slot)) return slot.done ?? slot.pending
    return this.#settle(cluster, slots, hostname, a4, a6, kind, false, a4, a6, failure)
  }

  /** Checks the answers into a new slot; a re-check (reverse-DNS verdicts expired) that comes to the same keeps the Resolution object. */
  async #settle(cluster: Cluster, slots: Map<string, Slot>, hostname: string, a4: CachedAnswer | null, a6: CachedAnswer | null, kind: string, literal: boolean,
    c4: CachedAnswer | null, c6: CachedAnswer | null, failure: DnsError | null): Promise<Resolution> {
    const previous = slots.get(hostname)
    const same = previous !== undefined && previous.a4 === a4 && previous.a6 === a6 && previous.failure === kind && previous.literal === literal ? previous.done : null
    let resolve!: (r: Resolution) => void
    const next: Slot = { a4, a6, failure: kind, literal, recheckAt: Infinity, done: null, pending: new Promise<Resolution>((r) => { resolve = r }) }
    slots.set(hostname, next)
    const checked = await this.#check(cluster, hostname, c4, c6, failure)
    const done = same !== null && sameResolution(same, checked.resolution) ? same : checked.resolution
    next.recheckAt = checked.recheckAt
    next.done = done
    resolve(done)
    return done
  }

  /**
   * The resolution after the refresh of an expired answer of `hostname`, or null
   * when its answers are current (nothing newer to wait for). Waits at most
   * STALE_REFRESH_WAIT_MS for the refresh: a resolver that stopped answering is
   * not waited for to its query timeout, the answer at hand stays.
   */
  refreshed(cluster: Cluster, hostname: string): Promise<Resolution> | null {
    if (isIP(hostname) !== 0) return null
    const p4 = this.#cache.refreshed(hostname, 4)
    const p6 = cluster.enableIPv6 ? this.#cache.refreshed(hostname, 6) : null
    if (p4 === null && p6 === null) return null
    const refreshes = [p4, p6].filter((p) => p !== null).map((p) => p.then(noop, noop))
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, STALE_REFRESH_WAIT_MS)
      Promise.all(refreshes).then(() => { clearTimeout(timer); resolve() }, noop)
    }).then(() => this.resolve(cluster, hostname))
  }

  /** For connections outside the request path (active health checks): `cluster`'s addresses, guarded as its requests' are. */
  guardedResolver(cluster: Cluster): Resolver {
    return {
      resolve: async (hostname: string) => {
        const r = await this.resolve(cluster, hostname)
        if (r.error !== null) throw r.error
        return [...r.addresses]
      },
    }
  }

  /** For connect.ts (hostname endpoints not expanded by the registry): DNS only, no guard. */
  connectorResolver(): Resolver {
    return {
      resolve: async (hostname: string) => {
        const a = await this.#cache.lookup(hostname, 4)
        if (a.error !== null) throw a.error
        return [...a.addresses]
      },
    }
  }

  close(): void {
    this.#cache.close()
    this.#client?.cancel()
  }

  async #check(cluster: Cluster, hostname: string, a4: CachedAnswer | null, a6: CachedAnswer | null, failure: DnsError | null): Promise<{ resolution: Resolution; recheckAt: number }> {
    const raw = [...(a4?.addresses ?? []), ...(a6?.addresses ?? [])]
    if (raw.length === 0) return { resolution: { addresses: [], error: dnsFailure(hostname, failure) }, recheckAt: Infinity }
    if (!this.#guard.applies(cluster)) return { resolution: { addresses: raw, error: null }, recheckAt: Infinity }
    let recheckAt = Infinity
    const usable: string[] = []
    const refused: Array<{ address: string; reason: string }> = []
    const ptr = reverseDnsRequirements(cluster)
    for (const address of raw) {
      let reason = this.#guard.check(cluster, address)
      if (reason === null && ptr.length > 0) {
        const names = await this.#reverse.verifiedNames(address)
        recheckAt = Math.min(recheckAt, this.#reverse.expiresAt(address))
        if (!ptr.every(suffixes => names.some(n => isUnderSuffixes(n, suffixes)))) reason = RefusalReason.REVERSE_DNS
      }
      if (reason === null) usable.push(address)
      else refused.push({ address, reason })
    }
    for (const r of refused) {
      destinationRefusals.inc({ backend: cluster.id, reason: r.reason })
      log.warn({ backend: cluster.id, hostname, address: r.address, reason: r.reason }, 'destination address refused')
    }
    if (usable.length > 0) return { resolution: { addresses: usable, error: null }, recheckAt }
    const list = refused.map(r => `${r.address} (${r.reason})`).join(', ')
    return { resolution: { addresses: [], error: new SallyportError(ErrorCode.DESTINATION_REFUSED, `destination refused: ${hostname} resolves only to refused addresses: ${list}`) }, recheckAt }
  }
}

/** A slot whose reverse-DNS verdicts (if any) are still good. */
function isCurrent(slot: Slot): boolean {
  return slot.recheckAt === Infinity || Date.now() < slot.recheckAt
}

/** Same addresses in the same order, or the same refusal. */
function sameResolution(a: Resolution, b: Resolution): boolean {
  if ((a.error === null) !== (b.error === null)) return false
  if (a.error !== null && b.error !== null) return a.error.message === b.error.message
  return a.addresses.length === b.addresses.length && a.addresses.every((x, i) => x === b.addresses[i])
}

function hasAddresses(o: Outcome | null | undefined): boolean {
  return o !== null && o !== undefined && !(o instanceof DnsError) && o.addresses.length > 0
}

function outcome(p: Promise<CachedAnswer>): Promise<Outcome> {
  return p.then((a) => a, (err: unknown) => err instanceof DnsError ? err : new DnsError('EOTHER', 'other', String(err), { cause: err }))
}

/**
 * Both families' outcomes. Once one has addresses the other is waited for
 * RESOLUTION_DELAY_MS at most (null: not waited for); with none yet, both are
 * waited for.
 */
function bothFamilies(p4: Promise<Outcome>, p6: Promise<Outcome>): Promise<[Outcome | null, Outcome | null]> {
  return new Promise((resolve) => {
    let o4: Outcome | null = null
    let o6: Outcome | null = null
    let settled = 0
    let timer: NodeJS.Timeout | null = null
    const settle = (): void => {
      if (++settled === 2) {
        if (timer !== null) clearTimeout(timer)
        resolve([o4, o6])
      } else if (hasAddresses(o4) || hasAddresses(o6)) {
        timer = setTimeout(() => resolve([o4, o6]), RESOLUTION_DELAY_MS)
      }
    }
    p4.then((o) => { o4 = o; settle() }, noop)
    p6.then((o) => { o6 = o; settle() }, noop)
  })
}

/** Why neither family gave an address: NXDOMAIN first (the name is gone), then a resolver failure, then NODATA; IPv4 first. */
function failureOf(o4: Outcome | null, o6: Outcome | null): DnsError | null {
  const errors: DnsError[] = []
  for (const o of [o4, o6]) {
    if (o instanceof DnsError) errors.push(o)
    else if (o !== null && o.error !== null) errors.push(o.error)
  }
  return errors.find((e) => e.kind === 'nxdomain') ?? errors.find((e) => !e.authoritative) ?? errors[0] ?? null
}

function noop(): void {}

/**
 * SP_ERR_UPSTREAM_DNS (503): the detail names the host and what DNS said
 * (`api.example.com: SERVFAIL`), so the client's body and the access line tell
 * a DNS failure from a refused connection (`upstream DNS lookup failed: ...`).
 */
function dnsFailure(hostname: string, err: DnsError | null): SallyportError {
  const said = err === null ? 'ERROR' : err.kind === 'other' ? err.code : err.kind.toUpperCase()
  const what = err !== null && err.kind === 'nxdomain' ? `${hostname} does not exist (NXDOMAIN)` : `DNS lookup of ${hostname} failed: ${said}`
  return new SallyportError(ErrorCode.UPSTREAM_DNS, what, { cause: err ?? undefined, detail: `${hostname}: ${said}` })
}
