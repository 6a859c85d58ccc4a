// The DNS client for backend hostnames: node:dns `Resolver` (c-ares), so
// answers carry their TTLs and the servers are ours to choose (--dns-server),
// unlike getaddrinfo. With no servers configured it asks the system's
// nameservers (/etc/resolv.conf); /etc/hosts is not consulted — backend names
// are DNS names.
//
// Failures are classified once, here, from the c-ares code (never the message):
// NXDOMAIN and NODATA are answers ("the name is gone"), the others are resolver
// trouble, for which the cache may serve the last answer (dns-cache.ts).

import { Resolver } from 'node:dns/promises'
import { isIP } from 'node:net'
import { parseIp } from '../address-ranges.ts'
import { dnsFailures, dnsLookups } from '../observe/dns-metrics.ts'

export type DnsFailureKind = 'nxdomain' | 'nodata' | 'servfail' | 'refused' | 'timeout' | 'unreachable' | 'other'

const KINDS: Readonly<Record<string, DnsFailureKind>> = {
  ENOTFOUND: 'nxdomain',
  ENODATA: 'nodata',
  ESERVFAIL: 'servfail',
  EREFUSED: 'refused',
  ETIMEOUT: 'timeout',
  ECONNREFUSED: 'unreachable',
  ECANCELLED: 'other',
}

/** A failed query; `code` stays the c-ares code so normalize-error.ts maps it (ENOTFOUND → dns). */
export class DnsError extends Error {
  readonly code: string
  readonly kind: DnsFailureKind
  constructor(code: string, kind: DnsFailureKind, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'DnsError'
    this.code = code
    this.kind = kind
  }

  /** NXDOMAIN / NODATA: the name (or its records of that family) does not exist. Never served stale. */
  get authoritative(): boolean {
    return this.kind === 'nxdomain' || this.kind === 'nodata'
  }
}

export function dnsFailureKind(code: string): DnsFailureKind {
  return KINDS[code] ?? 'other'
}

export interface DnsAnswer {
  readonly addresses: readonly string[]
  /** Smallest TTL of the records, seconds. */
  readonly ttlSec: number
}

export interface DnsClientOptions {
  /** `ADDR`, `ADDR:PORT` or `[V6]:PORT`; empty: the system's nameservers. */
  readonly servers?: readonly string[]
  /** Per try; default 2000 ms. */
  readonly timeoutMs?: number
  /** Tries per server; default 2. */
  readonly tries?: number
}

/** `ADDR[:PORT]` as node:dns wants it; throws on anything else (CLI flags are checked with it). */
export function parseDnsServer(text: string): string {
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(text)
  const [host, port] = v6 !== null ? [v6[1], v6[2]] : isIP(text) === 6 ? [text, undefined] : text.split(':') as [string, string | undefined]
  if (host === undefined || isIP(host) === 0) throw new Error(`DNS server ${JSON.stringify(text)} is not ADDR[:PORT] with an IP address`)
  if (port !== undefined && (!/^\d+$/.test(port) || Number(port) < 1 || Number(port) > 65535)) throw new Error(`DNS server ${JSON.stringify(text)} has a bad port`)
  if (port === undefined) return host
  return isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`
}

/** `4.3.2.1.in-addr.arpa` / the ip6.arpa nibble name of an address; null when it is not one. */
export function arpaName(address: string): string | null {
  const ip = parseIp(address)
  if (ip === null) return null
  if (ip.family === 4) {
    const v = ip.value
    return `${v & 255n}.${(v >> 8n) & 255n}.${(v >> 16n) & 255n}.${v >> 24n}.in-addr.arpa`
  }
  return `${[...ip.value.toString(16).padStart(32, '0')].reverse().join('.')}.ip6.arpa`
}

export class DnsClient {
  readonly #resolver: Resolver
  readonly servers: readonly string[]

  constructor(options: DnsClientOptions = {}) {
    this.#resolver = new Resolver({ timeout: options.timeoutMs ?? 2000, tries: options.tries ?? 2 })
    const servers = (options.servers ?? []).map(parseDnsServer)
    if (servers.length > 0) this.#resolver.setServers(servers)
    this.servers = this.#resolver.getServers()
  }

  /** A or AAAA records of `name`; rejects with a DnsError. */
  async query(name: string, family: 4 | 6): Promise<DnsAnswer> {
    const type = family === 4 ? 'A' : 'AAAA'
    try {
      const records = family === 4
        ? await this.#resolver.resolve4(name, { ttl: true })
        : await this.#resolver.resolve6(name, { ttl: true })
      if (records.length === 0) throw Object.assign(new Error(`no ${type} records for ${name}`), { code: 'ENODATA' })
      dnsLookups.inc({ type, result: 'ok' })
      let ttl = Number.POSITIVE_INFINITY
      for (const r of records) ttl = Math.min(ttl, r.ttl)
      return { addresses: records.map(r => r.address), ttlSec: ttl }
    } catch (err) {
      throw this.#failed(err, type, name)
    }
  }

  /**
   * PTR names of an address (lowercased, no trailing dot); rejects with a DnsError.
   * A PTR query of the arpa name rather than Resolver#reverse: that one (c-ares
   * gethostbyaddr) turns every failure into ENOTFOUND, so a SERVFAIL or a
   * timeout would read as "no PTR record" (dns-reverse.ts keeps that verdict long).
   */
  async reverse(address: string): Promise<string[]> {
    try {
      const arpa = arpaName(address)
      if (arpa === null) throw Object.assign(new Error(`${address} is not an IP address`), { code: 'EBADNAME' })
      const names = await this.#resolver.resolvePtr(arpa)
      dnsLookups.inc({ type: 'PTR', result: 'ok' })
      return names.map(n => n.toLowerCase().replace(/\.$/, ''))
    } catch (err) {
      throw this.#failed(err, 'PTR', address)
    }
  }

  #failed(err: unknown, type: string, name: string): DnsError {
    if (err instanceof DnsError) return err
    const code = typeof (err as { code?: unknown })?.code === 'string' ? (err as { code: string }).code : 'EOTHER'
    const kind = dnsFailureKind(code)
    dnsLookups.inc({ type, result: 'failure' })
    dnsFailures.inc({ type, kind })
    return new DnsError(code, kind, `${type} lookup of ${name} failed: ${kind} (${code})`, { cause: err })
  }

  cancel(): void {
    this.#resolver.cancel()
  }
}
