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
  readonly a4: CachedAnswer | null
  readonly a6: CachedAnswer | null
  done: Resolution | null
  readonly pending: Promise<Resolution>
}

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
    const a4 = this.#cache.peek(hostname, 4)
    if (a4 === null) return null
    let a6: CachedAnswer | null = null
    if (cluster.enableIPv6) {
      a6 = this.#cache.peek(hostname, 6)
      if (a6 === null) return null
    }
    const slot = this.#slots.get(cluster)?.get(hostname)
    if (slot === undefined || slot.a4 !== a4 || slot.a6 !== a6) return null
    return slot.done
  }

  /** Resolve (querying as needed) and check. Never rejects: failures are in `error`. */
  async resolve(cluster: Cluster, hostname: string): Promise<Resolution> {
    // An address in a name's place (a CONNECT to a requested IP, issue 9): no DNS, the same checks.
    if (isIP(hostname) !== 0) return this.#check(cluster, hostname, { addresses: [hostname], error: null }, null)
    const [r4, r6] = await Promise.allSettled([
      this.#cache.lookup(hostname, 4),
      cluster.enableIPv6 ? this.#cache.lookup(hostname, 6) : Promise.resolve(null),
    ])
    const a4 = r4.status === 'fulfilled' ? r4.value : null
    const a6 = r6.status === 'fulfilled' ? r6.value : null
    if (a4 === null && a6 === null) {
      return { addresses: [], error: dnsFailure(hostname, r4.status === 'rejected' ? r4.reason : null) }
    }
    let slots = this.#slots.get(cluster)
    if (slots === undefined) this.#slots.set(cluster, slots = new Map())
    const slot = slots.get(hostname)
    if (slot !== undefined && slot.a4 === a4 && slot.a6 === a6) return slot.done ?? slot.pending
    const pending = this.#check(cluster, hostname, a4, a6)
    const next: Slot = { a4, a6, done: null, pending }
    slots.set(hostname, next)
    const done = await pending
    next.done = done
    return done
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

  async #check(cluster: Cluster, hostname: string, a4: CachedAnswer | null, a6: CachedAnswer | null): Promise<Resolution> {
    const raw = [...(a4?.addresses ?? []), ...(a6?.addresses ?? [])]
    if (raw.length === 0) return { addresses: [], error: dnsFailure(hostname, a4?.error ?? a6?.error ?? null) }
    if (!this.#guard.applies(cluster)) return { addresses: raw, error: null }
    const usable: string[] = []
    const refused: Array<{ address: string; reason: string }> = []
    const ptr = reverseDnsRequirements(cluster)
    for (const address of raw) {
      let reason = this.#guard.check(cluster, address)
      if (reason === null && ptr.length > 0) {
        const names = await this.#reverse.verifiedNames(address)
        if (!ptr.every(suffixes => names.some(n => isUnderSuffixes(n, suffixes)))) reason = RefusalReason.REVERSE_DNS
      }
      if (reason === null) usable.push(address)
      else refused.push({ address, reason })
    }
    for (const r of refused) {
      destinationRefusals.inc({ backend: cluster.id, reason: r.reason })
      log.warn({ backend: cluster.id, hostname, address: r.address, reason: r.reason }, 'destination address refused')
    }
    if (usable.length > 0) return { addresses: usable, error: null }
    const list = refused.map(r => `${r.address} (${r.reason})`).join(', ')
    return { addresses: [], error: new SallyportError(ErrorCode.DESTINATION_REFUSED, `destination refused: ${hostname} resolves only to refused addresses: ${list}`) }
  }
}

function dnsFailure(hostname: string, err: unknown): SallyportError {
  const what = err instanceof DnsError
    ? err.kind === 'nxdomain' ? `${hostname} does not exist (NXDOMAIN)` : `DNS lookup of ${hostname} failed: ${err.kind}`
    : `DNS lookup of ${hostname} failed`
  return new SallyportError(ErrorCode.UPSTREAM_CONNECT, what, { cause: err ?? undefined })
}
