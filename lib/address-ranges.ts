// IP address ranges for destination safety (issue 5, DESIGN.md "Safety
// defaults"): CIDR parsing and matching, and the ranges an egress gateway must
// not reach unless the gateway admin allows them — GEP-4488's DNS trust model
// warns that a gateway resolving names for its clients is a confused deputy:
// a name that resolves to 169.254.169.254 or to a Pod IP turns "call
// api.example.com" into "call the cloud metadata service".
//
// Shared by compile/ (static Ip backends, annotations) and upstream/
// (resolved addresses), so it lives at the root like errors.ts. Not on the
// per-request path: addresses are checked when an answer arrives.

export interface Cidr {
  readonly family: 4 | 6
  /** Network address as an integer (IPv4 in the low 32 bits). */
  readonly network: bigint
  readonly prefix: number
  /** As written, normalized to `address/prefix`. */
  readonly text: string
}

const V4_MAPPED_PREFIX = 0xffffn << 32n

/** An IPv4 or IPv6 literal as a number; IPv4-mapped IPv6 (::ffff:a.b.c.d) is its IPv4. null: not an IP. */
export function parseIp(text: string): { readonly family: 4 | 6; readonly value: bigint } | null {
  const v4 = parseIpv4(text)
  if (v4 !== null) return { family: 4, value: v4 }
  const v6 = parseIpv6(text)
  if (v6 === null) return null
  // An attacker's AAAA record ::ffff:127.0.0.1 is loopback all the same.
  if (v6 >> 32n === 0xffffn) return { family: 4, value: v6 & 0xffffffffn }
  return { family: 6, value: v6 }
}

function parseIpv4(text: string): bigint | null {
  const parts = text.split('.')
  if (parts.length !== 4) return null
  let value = 0n
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p)) return null
    const n = Number(p)
    if (n > 255) return null
    value = (value << 8n) | BigInt(n)
  }
  return value
}

function parseIpv6(input: string): bigint | null {
  let text = input
  const zone = text.indexOf('%')
  if (zone !== -1) text = text.slice(0, zone)
  if (!text.includes(':')) return null
  let tail: bigint | null = null
  const lastColon = text.lastIndexOf(':')
  if (text.slice(lastColon + 1).includes('.')) {
    tail = parseIpv4(text.slice(lastColon + 1))
    if (tail === null) return null
    text = `${text.slice(0, lastColon + 1)}0:0`
  }
  const halves = text.split('::')
  if (halves.length > 2) return null
  const head = halves[0] === '' ? [] : halves[0].split(':')
  const rest = halves.length === 2 ? (halves[1] === '' ? [] : halves[1].split(':')) : []
  const missing = 8 - head.length - rest.length
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null
  const groups = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill('0'), ...rest]
  let value = 0n
  for (const g of groups) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null
    value = (value << 16n) | BigInt(parseInt(g, 16))
  }
  if (tail !== null) value = (value & ~0xffffffffn) | tail
  return value
}

/** `a.b.c.d/n`, `x::y/n`, or a bare address (a /32 or /128). null: not a CIDR. */
export function parseCidr(input: string): Cidr | null {
  const text = input.trim()
  const slash = text.indexOf('/')
  const ip = parseIp(slash === -1 ? text : text.slice(0, slash))
  if (ip === null) return null
  const mappedV4 = ip.family === 4 && parseIpv4(slash === -1 ? text : text.slice(0, slash)) === null
  const max = ip.family === 4 ? 32 : 128
  let prefix = max
  if (slash !== -1) {
    const p = text.slice(slash + 1)
    if (!/^\d{1,3}$/.test(p)) return null
    prefix = Number(p) - (mappedV4 ? 96 : 0)
    if (prefix < 0 || prefix > max) return null
  }
  const network = ip.value & maskOf(ip.family, prefix)
  return { family: ip.family, network, prefix, text: `${formatIp(ip.family, network)}/${prefix}` }
}

function maskOf(family: 4 | 6, prefix: number): bigint {
  const bits = family === 4 ? 32n : 128n
  const all = (1n << bits) - 1n
  return prefix === 0 ? 0n : (all << (bits - BigInt(prefix))) & all
}

function formatIp(family: 4 | 6, value: bigint): string {
  if (family === 4) return [24n, 16n, 8n, 0n].map(s => String((value >> s) & 0xffn)).join('.')
  const groups: string[] = []
  for (let s = 112n; s >= 0n; s -= 16n) groups.push(((value >> s) & 0xffffn).toString(16))
  return groups.join(':').replace(/(^|:)0(:0)+(:|$)/, '::')
}

export function cidrContains(cidr: Cidr, ip: { readonly family: 4 | 6; readonly value: bigint }): boolean {
  return cidr.family === ip.family && (ip.value & maskOf(cidr.family, cidr.prefix)) === cidr.network
}

/** The first CIDR of `list` containing `address`; null when none does (or it is no IP). */
export function matchCidr(list: readonly Cidr[], address: string): Cidr | null {
  const ip = parseIp(address)
  if (ip === null) return null
  for (const c of list) if (cidrContains(c, ip)) return c
  return null
}

/**
 * matchCidr for a deny-list: an IPv6 address that carries an IPv4 one (NAT64,
 * 6to4, IPv4-translated, IPv4-compatible; see embeddedIpv4) matches the IPv4
 * ranges its IPv4 address is in too. A DNS64 resolver answers every IPv4-only
 * name with 64:ff9b::<IPv4>, and the NAT64 gateway reaches that IPv4 address:
 * a denied 203.0.113.0/24 must not be reachable as 64:ff9b::cb00:7107.
 */
export function matchCidrCarried(list: readonly Cidr[], address: string): Cidr | null {
  const ip = parseIp(address)
  if (ip === null) return null
  for (const c of list) if (cidrContains(c, ip)) return c
  if (ip.family === 4) return null
  const v4 = embeddedIpv4(ip.value)
  if (v4 === null) return null
  const carried = { family: 4 as const, value: v4 }
  for (const c of list) if (cidrContains(c, carried)) return c
  return null
}

/** Parse a list; unparsable entries are returned in `invalid`. */
export function parseCidrList(entries: readonly string[]): { readonly cidrs: Cidr[]; readonly invalid: string[] } {
  const cidrs: Cidr[] = []
  const invalid: string[] = []
  for (const e of entries) {
    const c = parseCidr(e)
    if (c === null) invalid.push(e)
    else cidrs.push(c)
  }
  return { cidrs, invalid }
}

/**
 * Ranges refused for external destinations unless allowed, each with the
 * reason label used in metrics and logs. Order matters only for the label:
 * the most specific range is listed first (broadcast before multicast...).
 */
const GUARDED: ReadonlyArray<readonly [string, string]> = [
  ['0.0.0.0/8', 'unspecified'], // "this network" (RFC 1122); 0.0.0.0 reaches the local host on Linux
  ['127.0.0.0/8', 'loopback'],
  ['169.254.0.0/16', 'link-local'], // includes 169.254.169.254, the cloud metadata service
  ['10.0.0.0/8', 'private'], // RFC 1918
  ['172.16.0.0/12', 'private'],
  ['192.168.0.0/16', 'private'],
  ['100.64.0.0/10', 'cgnat'], // RFC 6598 carrier-grade NAT (also used by some clusters' Pod ranges)
  ['255.255.255.255/32', 'broadcast'],
  ['224.0.0.0/4', 'multicast'],
  ['240.0.0.0/4', 'reserved'], // RFC 1112 "future use": never a real destination
  ['::/128', 'unspecified'],
  ['::1/128', 'loopback'],
  ['fe80::/10', 'link-local'],
  ['fc00::/7', 'private'], // RFC 4193 unique local
  ['ff00::/8', 'multicast'],
  ['100::/64', 'reserved'], // RFC 6666 discard-only: routed to a black hole
  ['fd00:ec2::254/128', 'link-local'], // AWS IMDS over IPv6 (inside fc00::/7 too; named for clarity)
]

export const GUARDED_RANGES: ReadonlyArray<{ readonly cidr: Cidr; readonly reason: string }> =
  GUARDED.map(([text, reason]) => ({ cidr: parseCidr(text) as Cidr, reason }))

/** Reason label of the guarded range `address` is in; null when it is an ordinary public address. */
export function guardedRangeOf(address: string): string | null {
  const ip = parseIp(address)
  if (ip === null) return 'invalid'
  const hit = rangeOf(ip)
  if (hit !== null || ip.family === 4) return hit
  // An IPv6 address that carries an IPv4 destination reaches it: through a NAT64
  // gateway (an IPv6-only cluster's way out: 64:ff9b::a9fe:a9fe is the metadata
  // service), a 6to4 relay, or as the old IPv4-compatible form.
  const v4 = embeddedIpv4(ip.value)
  return v4 === null ? null : rangeOf({ family: 4, value: v4 })
}

function rangeOf(ip: { readonly family: 4 | 6; readonly value: bigint }): string | null {
  let hit: string | null = null
  for (const g of GUARDED_RANGES) {
    if (!cidrContains(g.cidr, ip)) continue
    // Prefer the most specific (the IMDS /128 over fc00::/7).
    if (hit === null || g.cidr.prefix === 128) hit = g.reason
  }
  return hit
}

const NAT64_WELL_KNOWN = 0x64ff9bn << 64n // 64:ff9b::/96 (RFC 6052), >> 32
const NAT64_LOCAL_USE = 0x64ff9b0001n // 64:ff9b:1::/48 (RFC 8215), >> 80; a /96 inside it, the IPv4 last
const SIX_TO_FOUR = 0x2002n // 2002::/16 (RFC 3056), >> 112; the IPv4 in bits 16-47
const IPV4_TRANSLATED = 0xffff0000n // ::ffff:0:0/96 (RFC 2765 SIIT), >> 32

/** The IPv4 address an IPv6 one carries (NAT64, 6to4, IPv4-translated, IPv4-compatible), or null. */
function embeddedIpv4(v6: bigint): bigint | null {
  const low = v6 & 0xffffffffn
  const high = v6 >> 32n
  if (high === NAT64_WELL_KNOWN || v6 >> 80n === NAT64_LOCAL_USE || high === IPV4_TRANSLATED || high === 0n) return low
  if (v6 >> 112n === SIX_TO_FOUR) return (v6 >> 80n) & 0xffffffffn
  return null
}
