// Reverse-DNS mapping check (issue 5), opt-in per Backend or Gateway
// (annotation sallyport.io/reverse-dns-suffixes): an address a backend name
// resolved to is used only if its PTR names one host under an allowed suffix
// AND that host resolves back to the same address (forward-confirmed reverse
// DNS, FCrDNS). The PTR alone proves nothing — whoever controls the address
// block writes it — but the round trip ties the address to a name in a zone
// the admin trusts. Verdicts are cached per address; a verdict the resolver
// kept us from reaching (SERVFAIL, timeout on the PTR or the forward query) is
// a refusal too (fail closed), but kept only FAILURE_HOLD_MS, as the DNS cache
// keeps a failure: a resolver blip must not refuse an address for the max TTL.

import { parseIp } from '../address-ranges.ts'
import { DnsError, type DnsClient } from './dns.ts'
import { FAILURE_HOLD_MS } from './dns-cache.ts'

interface Verified {
  readonly names: Promise<readonly string[]>
  expiresAt: number
}

/** A lookup that failed for want of an answer (not NXDOMAIN / NODATA). */
function isTransient(err: unknown): boolean {
  return !(err instanceof DnsError) || !err.authoritative
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
    const verdict = this.#verify(address)
    const entry: Verified = {
      names: verdict.then((v) => {
        if (v.transient) entry.expiresAt = Math.min(entry.expiresAt, Date.now() + FAILURE_HOLD_MS)
        return v.names
      }),
      expiresAt: now + this.#ttlMs,
    }
    this.#cache.set(address, entry)
    if (this.#cache.size > MAX_VERDICTS) this.#sweep(now)
    return entry.names
  }

  /** When the verdict of `address` (once settled) is to be taken again; 0 when none is cached. */
  expiresAt(address: string): number {
    return this.#cache.get(address)?.expiresAt ?? 0
  }

  async #verify(address: string): Promise<{ names: readonly string[]; transient: boolean }> {
    let ptrs: string[]
    try {
      ptrs = await this.#client.reverse(address)
    } catch (err) {
      return { names: [], transient: isTransient(err) }
    }
    const ip = parseIp(address)
    if (ip === null) return { names: [], transient: false }
    const confirmed: string[] = []
    let transient = false
    for (const name of ptrs.slice(0, 8)) {
      try {
        const answer = await this.#client.query(name, ip.family)
        if (answer.addresses.some(a => sameIp(a, address))) confirmed.push(name)
      } catch (err) {
        // a PTR name that does not resolve does not confirm; one the resolver failed on may yet
        if (isTransient(err)) transient = true
      }
    }
    return { names: confirmed, transient: transient && confirmed.length === 0 }
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
