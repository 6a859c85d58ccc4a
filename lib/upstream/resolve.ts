// Hostname → addresses for ExternalHostname endpoints. A deliberately small
// interface: the DNS issue replaces this with TTL-aware caching and the
// confused-deputy filters (DESIGN.md "Safety defaults"); until then a short
// fixed cache keeps one lookup per hostname per few seconds.

import { lookup } from 'node:dns/promises'

export interface Resolver {
  /** Addresses in preference order; rejects with the resolver's error (ENOTFOUND...). */
  resolve(hostname: string): Promise<string[]>
}

export type ResolveFn = (hostname: string) => Promise<string[]>

export async function systemResolve(hostname: string): Promise<string[]> {
  const records = await lookup(hostname, { all: true, order: 'ipv4first' })
  return records.map((r) => r.address)
}

interface CacheEntry {
  readonly expires: number
  readonly addresses: Promise<string[]>
}

const DEFAULT_TTL_MS = 5_000

class CachingResolver implements Resolver {
  readonly #resolve: ResolveFn
  readonly #ttlMs: number
  readonly #cache = new Map<string, CacheEntry>()

  constructor(resolve: ResolveFn, ttlMs: number) {
    this.#resolve = resolve
    this.#ttlMs = ttlMs
  }

  resolve(hostname: string): Promise<string[]> {
    const now = Date.now()
    const hit = this.#cache.get(hostname)
    if (hit !== undefined && hit.expires > now) return hit.addresses
    const addresses = this.#resolve(hostname)
    const entry: CacheEntry = { expires: now + this.#ttlMs, addresses }
    this.#cache.set(hostname, entry)
    // Failures are not cached: the next request asks again.
    addresses.catch(() => { if (this.#cache.get(hostname) === entry) this.#cache.delete(hostname) })
    return addresses
  }
}

export function createResolver(resolve: ResolveFn = systemResolve, ttlMs: number = DEFAULT_TTL_MS): Resolver {
  return new CachingResolver(resolve, ttlMs)
}
