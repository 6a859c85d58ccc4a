// Step 6b: the compact lookup index of one port's HostIndex (table.ts
// LookupIndex, layout in lib/lookup-hash.ts).
//
// Why: on a 10,000-route table a request walked Map → bucket → key → vhost →
// Map → node → Map ... — ten or more dependent loads into objects scattered
// over the heap, each a likely cache (and TLB) miss once the hosts in use no
// longer fit in L2 (bench/compile.ts). Here the same keys sit in two
// open-addressing tables in flat arrays, probed by hashes the router computes
// from the request strings as it scans them; a path probe does not wait for the
// host probe (a path slot is keyed by the vhost's key hash, which for an exact
// host is the request host's own hash), so the CPU overlaps the misses.
//
// Built from the finished VirtualHosts (the trees stay for printing and for
// hand-built tables), so it changes no precedence: every list is a list the
// tree walk would read, in the same order.

import type { HostIndex, LookupIndex, LookupSlot, PrefixNode, RouteMatch, RouteTable, VirtualHost } from './table.ts'
import {
  FLAG_EXACT, FLAG_QUERY, FLAG_REGEX, INFO_WORDS, KIND_EXACT, KIND_PREFIX, KIND_WILDCARD, SLOT_WORDS,
  hostHash, packHead, packInfo, pathHash, slotHash, storedHash,
} from '../lookup-hash.ts'
import { prefixKey } from './vhosts.ts'
import { ANY_HOST, isWildcard } from './hostnames.ts'

/** A slot to place: `list` is where a path key's match list starts in `matches` (-1 for a host); `value` is the slot's last word. */
interface Key { readonly hash: number; readonly tag: number; readonly key: string; readonly list: number; readonly value: number }

/**
 * What a vhost contributes to the index apart from its id and where its lists
 * land: its key hash, root list, depth and flags, its host key and its path
 * keys (hash, flat key copy, list, head word). A function of the vhost and its
 * pattern, kept per VirtualHost object (issue 11): a reload reuses the vhosts
 * of unchanged routes (compile-cache.ts), and their keys are not hashed and
 * copied again.
 */
interface VhostKeys {
  readonly pattern: string
  readonly keyHash: number
  readonly root: readonly RouteMatch[] | null
  readonly depth: number
  readonly flags: number
  /** The host slot's key: the name, or a wildcard's suffix ('.example.com'); '' for the catch-all. */
  readonly hostKey: string
  readonly paths: ReadonlyArray<{ readonly hash: number; readonly kind: number; readonly key: string; readonly list: readonly RouteMatch[]; readonly value: number }>
}

const VHOST_KEYS = new WeakMap<VirtualHost, VhostKeys>()

function vhostKeys(v: VirtualHost, pattern: string): VhostKeys {
  const known = VHOST_KEYS.get(v)
  if (known !== undefined && known.pattern === pattern) return known
  // The pattern's hash keys the vhost's paths; for an exact host that is the
  // request host's hash, which the router has before the host probe returns.
  const keyHash = hostHash(pattern)
  const paths: Array<VhostKeys['paths'][number]> = []
  let depth = 0
  let root: readonly RouteMatch[] | null = null
  // The best rank of any list but the exact ones: an exact list whose first
  // match ranks before it ends the lookup when that match fits.
  let otherBest = v.regexes.length > 0 ? v.regexes[0].rank : Infinity
  const walk = (node: PrefixNode, d: number): void => {
    if (node.matches.length > 0) {
      if (node.matches[0].rank < otherBest) otherBest = node.matches[0].rank
      if (d === 0) root = node.matches
      else {
        // The node's key ('/foo/bar') is its matches' PathPrefix key (the
        // value vhosts.ts placed the node by); the index stores a flat copy,
        // which the router compares with the request path in place.
        const key = prefixKey(node.matches[0].path.value)
        paths.push({ hash: slotHash(keyHash, pathHash(key), KIND_PREFIX), kind: KIND_PREFIX, key: flatCopy(key), list: node.matches, value: headWord(node.matches[0], false) })
      }
      if (d > depth) depth = d
    }
    for (const child of node.children.values()) walk(child, d + 1)
  }
  walk(v.prefixes, 0)
  for (const [path, list] of v.exactPaths) {
    paths.push({ hash: slotHash(keyHash, pathHash(path), KIND_EXACT), kind: KIND_EXACT, key: flatCopy(path), list, value: headWord(list[0] as RouteMatch, (list[0] as RouteMatch).rank < otherBest) })
  }
  const flags = (v.exactPaths.size > 0 ? FLAG_EXACT : 0) | (v.regexes.length > 0 ? FLAG_REGEX : 0) | (v.needsQuery ? FLAG_QUERY : 0)
  const hostKey = pattern === ANY_HOST ? '' : flatCopy(isWildcard(pattern) ? pattern.slice(1) : pattern)
  const keys: VhostKeys = { pattern, keyHash, root, depth, flags, hostKey, paths }
  VHOST_KEYS.set(v, keys)
  return keys
}

/** The index of `index`'s hosts and paths. */
export function buildLookupIndex(index: HostIndex): LookupIndex {
  // Vhost ids: exact hosts, wildcards, then the catch-all.
  const vhosts: VirtualHost[] = [...index.exact.values(), ...index.wildcards.map(w => w.value)]
  const patterns: string[] = [...index.exact.keys(), ...index.wildcards.map(w => `*${w.suffix}`)]
  if (index.fallback !== null) { vhosts.push(index.fallback); patterns.push(ANY_HOST) }
  const matches: Array<RouteMatch | null> = []
  const addList = (list: readonly RouteMatch[]): number => {
    const start = matches.length
    for (const m of list) matches.push(m)
    matches.push(null)
    return start
  }
  const pathKeys: Key[] = []
  const hostKeys: Key[] = []
  const info = new Int32Array(Math.max(1, vhosts.length) * INFO_WORDS)
  const exactCount = index.exact.size
  let maxDepth = 0
  vhosts.forEach((v, id) => {
    const k = vhostKeys(v, patterns[id] as string)
    const root = k.root === null ? -1 : addList(k.root)
    for (const p of k.paths) pathKeys.push({ hash: p.hash, tag: id << 1 | p.kind, key: p.key, list: addList(p.list), value: p.value })
    if (k.depth > maxDepth) maxDepth = k.depth
    const at = id * INFO_WORDS
    info[at] = k.keyHash
    info[at + 1] = root
    info[at + 2] = k.depth
    info[at + 3] = k.flags
    // Host slots carry their vhost's info (root, depth, flags), saving a load per lookup.
    if (k.hostKey !== '') {
      const kind = id < exactCount ? KIND_EXACT : KIND_WILDCARD
      hostKeys.push({ hash: slotHash(0, hostHash(k.hostKey), kind), tag: id << 1 | kind, key: k.hostKey, list: -1, value: packInfo(root, k.depth, k.flags) })
    }
  })
  const hosts = openTable(hostKeys, matches)
  const paths = openTable(pathKeys, matches)
  return {
    hostSlots: hosts.slots, hostMask: hosts.mask, pathSlots: paths.slots, pathMask: paths.mask, pathLists: paths.lists,
    vhostInfo: info, vhosts, matches, fallback: index.fallback === null ? -1 : vhosts.length - 1,
    wildcards: index.wildcards.length, maxDepth,
  }
}

/**
 * `n` small-integer zeros in a packed array (no holes, no boxed numbers), by
 * doubling: log2(n) bulk copies instead of n pushes (a 10,000-route port has
 * 327,680 slot words).
 */
function zeros(n: number): Array<number | string | RouteMatch> {
  let out: Array<number | string | RouteMatch> = [0]
  while (out.length * 2 <= n) out = out.concat(out)
  return out.length === n ? out : out.concat(out.slice(0, n - out.length))
}

/**
 * Linear probing at a load factor of at most 1/2: a miss usually ends on the
 * first slot (an empty one), and a neighbour slot often shares the cache line.
 * Keys are placed in input order, so the layout is deterministic. Slots start
 * as small integers and stay a packed array (no holes, no boxed numbers).
 */
function openTable(keys: readonly Key[], matches: ReadonlyArray<RouteMatch | null>): { slots: Array<number | string | RouteMatch>; mask: number; lists: Int32Array } {
  let capacity = 8
  while (capacity < keys.length * 2) capacity *= 2
  const slots: Array<number | string | RouteMatch> = zeros(capacity * SLOT_WORDS)
  const lists = new Int32Array(capacity).fill(-1)
  const mask = capacity - 1
  for (const k of keys) {
    let i = k.hash & mask
    while (slots[i * SLOT_WORDS] !== 0) i = (i + 1) & mask
    const at = i * SLOT_WORDS
    slots[at] = storedHash(k.hash)
    slots[at + 1] = k.tag
    slots[at + 2] = k.key // a flat copy already (vhostKeys)
    slots[at + 3] = k.value
    slots[at + 4] = k.list >= 0 ? matches[k.list] as RouteMatch : 0
    lists[i] = k.list
  }
  return { slots, mask, lists }
}

let codes = new Uint16Array(256)

/**
 * A fresh sequential copy of `s`. Every lookup compares the request with the
 * keys it probes, so the index keeps its own copies: flat (a key parsed from
 * YAML can be a slice of the whole file, one built by concatenation a rope,
 * either an indirection per compare) and allocated one after another, so a
 * port's keys sit in a few hundred pages instead of across the configuration's
 * heap: on a 10,000-route table, fewer TLB and cache misses per lookup
 * (bench/compile.ts, as it was before names had one width: big/small
 * 0.64-0.69 without the copies, 0.75-0.83 with).
 */
function flatCopy(s: string): string {
  if (s.length > 4096) return s // not a key Gateway API allows; compared as it is
  if (s.length > codes.length) codes = new Uint16Array(4096)
  for (let i = 0; i < s.length; i++) codes[i] = s.charCodeAt(i)
  return String.fromCharCode.apply(null, codes.subarray(0, s.length) as unknown as number[])
}

/**
 * A path slot's head word (lookup-hash.ts packHead), from the first match of
 * its list: its rank, whether it fits every request (no method, header or query
 * condition), and whether, when it fits, nothing else of the vhost can rank
 * before it. The router ranks candidates by it without reading a RouteMatch.
 */
function headWord(m: RouteMatch, final: boolean): number {
  return packHead(m.rank, m.method === null && (m.headers?.length ?? 0) === 0 && (m.query?.length ?? 0) === 0, final)
}

/**
 * Attaches an empty slot for the index as a non-enumerable property: not
 * configuration, so not printed, dumped or frozen. ensureLookupIndexes fills it.
 */
export function withLookupIndex(index: HostIndex): HostIndex {
  const slot: LookupSlot = { index: undefined }
  Object.defineProperty(index, 'lookup', { value: slot, enumerable: false, writable: false })
  return index
}

/** Builds the lookup index of every HTTP port of `table` that lacks one. */
export function ensureLookupIndexes(table: RouteTable): void {
  for (const entry of table.ports.values()) {
    const hosts = entry.http
    if (hosts === null) continue
    const slot = hosts.lookup
    if (slot !== undefined && slot.index === undefined) slot.index = buildLookupIndex(hosts)
  }
}
