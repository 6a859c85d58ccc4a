// Reverse-DNS mapping check (issue 5), opt-in per Backend or Gateway
// (annotation sallyport.io/reverse-dns-suffixes): an address a backend name
// resolved to is used only if its PTR names one host under an allowed suffix
// AND that host resolves back to the same address (forward-confirmed reverse
// DNS, FCrDNS). The PTR alone proves nothing — whoever controls the address
// block writes it — but the round trip ties the address to a name in a zone
// the admin trusts. Verdicts are cached per address.

import { parseIp } from '../address-ranges.ts'
import type { DnsClient } from './dns.ts'

interface Verified {
  readonly names: Promise<readonly string[]>
  readonly expiresAt: number
}

/** `name` equals a suffix written without a leading dot, or lies under any suffix. */
export function isUnderSuffixes(name: string, suffixes: readonly string[]): boolean {
  for (const s of suffixes) {
    if (s.startsWith('.')) { if (name.length > s.length && name.endsWith(s)) return true }
    else if (name === s || name.endsWith(`.${s}`)) return true
  }
  return false
}

/** Addresses whose verdicts are kept at most (each new address past it sweeps). */
const MAX_VERDICTS = 10_000

export class ReverseDnsChecker {
  readonly #client: Pick<DnsClient, 'reverse' | 'query'>
  readonly #ttlMs: number
  readonly #cache = new Map<string, Verified>()

  constructor(client: Pick<DnsClient, 'reverse' | 'query'>, ttlMs: number) {
    this.#client = client
    this.#ttlMs = ttlMs
  }

  /** PTR names of `address` that forward-confirm; [] when there are none or DNS fails (fail closed). */
  verifiedNames(address: string): Promise<readonly string[]> {
    const now = Date.now()
    const hit = this.#cache.get(address)
    if (hit !== undefined && now < hit.expiresAt) return hit.names
    const names = this.#verify(address)
    this.#cache.set(address, { names, expiresAt: now + this.#ttlMs })
    if (this.#cache.size > MAX_VERDICTS) this.#sweep(now)
    return names
  }

  async #verify(address: string): Promise<readonly string[]> {
    let ptrs: string[]
    try {
      ptrs = await this.#client.reverse(address)
    } catch {
      return []
    }
    const ip = parseIp(address)
    if (ip === null) return []
    const confirmed: string[] = []
    for (const name of ptrs.slice(0, 8)) {
      try {
        const answer = await this.#client.query(name, ip.family)
        if (answer.addresses.some(a => sameIp(a, address))) confirmed.push(name)
      } catch {
        // a PTR name that does not resolve does not confirm
      }
    }
    return confirmed
  }

  /** Expired verdicts go; if none had expired, the oldest, down to 3/4 of the bound (not one sweep per new address). */
  #sweep(now: number): void {
    const cache = this.#cache
    for (const [k, v] of cache) if (v.expiresAt <= now) cache.delete(k)
    if (cache.size <= MAX_VERDICTS) return
    for (const k of cache.keys()) {
      if (cache.size <= MAX_VERDICTS * 0.75) break
      cache.delete(k)
    }
  }
}

function sameIp(a: string, b: string): boolean {
  const x = parseIp(a)
  const y = parseIp(b)
  return x !== null && y !== null && x.family === y.family && x.value === y.value
}
