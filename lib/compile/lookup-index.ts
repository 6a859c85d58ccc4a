// Step 6b: the compact lookup index of one port's HostIndex (table.ts
// LookupIndex, layout in lib/lookup-hash.ts).
//
// Why: on a 10,000-route table a request walked Map → bucket → key → vhost →
// Map → node → Map ... — ten or more dependent loads into objects scattered
// over the heap, each a likely cache (and TLB) miss once the hosts in use no
// longer fit in L2 (bench/compile.ts). Here the same keys sit in two
// open-addressing tables in typed arrays, probed by hashes the router computes
// from the request strings as it scans them; a path probe does not wait for the
// host probe (a path slot is keyed by the vhost's key hash, which for an exact
// host is the request host's own hash), so the CPU overlaps the misses.
//
// Built from the finished VirtualHosts (the trees stay for printing and for
// hand-built tables), so it changes no precedence: every list is a list the
// tree walk would read, in the same order.

import type { HostIndex, LookupIndex, PrefixNode, RouteMatch, VirtualHost } from './table.ts'
import {
  FLAG_EXACT, FLAG_QUERY, FLAG_REGEX, INFO_WORDS, KIND_EXACT, KIND_PREFIX, KIND_WILDCARD, MAX_KEY_LENGTH, SLOT_WORDS,
  hostHash, pathHash, slotHash,
} from '../lookup-hash.ts'

interface Key { readonly hash: number; readonly tag: number; readonly key: string; readonly value: number }

/** The index of `index`'s hosts and paths; null when some key is too long to index (the tree walk serves then). */
export function buildLookupIndex(index: HostIndex): LookupIndex | null {
  // Vhost ids: exact hosts, wildcards, then the catch-all. The pattern's hash
  // keys the vhost's paths; for an exact host that is the request host's hash,
  // which the router has before the host probe returns.
  const vhosts: VirtualHost[] = [...index.exact.values(), ...index.wildcards.map(w => w.vhost)]
  const patterns: string[] = [...index.exact.keys(), ...index.wildcards.map(w => `*${w.suffix}`)]
  if (index.fallback !== null) { vhosts.push(index.fallback); patterns.push('*') }
  const hostKeys: Key[] = []
  let vid = 0
  for (const [name] of index.exact) {
    hostKeys.push({ hash: slotHash(0, hostHash(name), KIND_EXACT), tag: vid++ << 1 | KIND_EXACT, key: name, value: 0 })
  }
  for (const w of index.wildcards) {
    hostKeys.push({ hash: slotHash(0, hostHash(w.suffix), KIND_WILDCARD), tag: vid++ << 1 | KIND_WILDCARD, key: w.suffix, value: 0 })
  }

  const matches: Array<RouteMatch | null> = []
  const addList = (list: readonly RouteMatch[]): number => {
    const start = matches.length
    matches.push(...list, null)
    return start
  }
  const pathKeys: Key[] = []
  const info = new Int32Array(Math.max(1, vhosts.length) * INFO_WORDS)
  let maxDepth = 0
  vhosts.forEach((v, id) => {
    const keyHash = hostHash(patterns[id])
    for (const [path, list] of v.exactPaths) {
      pathKeys.push({ hash: slotHash(keyHash, pathHash(path), KIND_EXACT), tag: id << 1 | KIND_EXACT, key: path, value: addList(list) })
    }
    let depth = 0
    let root = -1
    const walk = (node: PrefixNode, key: string, d: number): void => {
      if (node.matches.length > 0) {
        if (d === 0) root = addList(node.matches)
        else pathKeys.push({ hash: slotHash(keyHash, pathHash(key), KIND_PREFIX), tag: id << 1 | KIND_PREFIX, key, value: addList(node.matches) })
        if (d > depth) depth = d
      }
      for (const [seg, child] of node.children) walk(child, `${key}/${seg}`, d + 1)
    }
    walk(v.prefixes, '', 0)
    if (depth > maxDepth) maxDepth = depth
    const at = id * INFO_WORDS
    info[at] = keyHash
    info[at + 1] = root
    info[at + 2] = depth
    info[at + 3] = (v.exactPaths.size > 0 ? FLAG_EXACT : 0) | (v.regexes.length > 0 ? FLAG_REGEX : 0) | (v.needsQuery ? FLAG_QUERY : 0)
  })

  let charCount = 0
  for (const k of [...hostKeys, ...pathKeys]) {
    if (k.key.length > MAX_KEY_LENGTH) return null
    charCount += 1 + k.key.length
  }
  const chars = new Uint16Array(charCount)
  let offset = 0
  const place = (k: Key): number => {
    const at = offset
    chars[at] = k.key.length
    for (let i = 0; i < k.key.length; i++) chars[at + 1 + i] = k.key.charCodeAt(i)
    offset += 1 + k.key.length
    return at
  }
  const hosts = openTable(hostKeys, place)
  const paths = openTable(pathKeys, place)
  return {
    hostSlots: hosts.slots, hostMask: hosts.mask, pathSlots: paths.slots, pathMask: paths.mask, chars,
    vhostInfo: info, vhosts, matches, fallback: index.fallback === null ? -1 : vhosts.length - 1,
    wildcards: index.wildcards.length, maxDepth,
  }
}

/**
 * Linear probing at a load factor of at most 1/2: a miss usually ends on the
 * first slot (an empty one), and the 4 slots of a cache line absorb most
 * collisions. Keys are placed in input order, so the layout is deterministic.
 */
function openTable(keys: readonly Key[], place: (k: Key) => number): { slots: Int32Array; mask: number } {
  let capacity = 8
  while (capacity < keys.length * 2) capacity *= 2
  const slots = new Int32Array(capacity * SLOT_WORDS)
  const mask = capacity - 1
  for (const k of keys) {
    let i = k.hash & mask
    while (slots[i * SLOT_WORDS] !== 0) i = (i + 1) & mask
    const at = i * SLOT_WORDS
    slots[at] = k.hash
    slots[at + 1] = k.tag
    slots[at + 2] = place(k)
    slots[at + 3] = k.value
  }
  return { slots, mask }
}

/** Attaches the index as a non-enumerable property: not configuration, so not printed, dumped or frozen. */
export function withLookupIndex(index: HostIndex): HostIndex {
  const lookup = buildLookupIndex(index)
  if (lookup !== null) Object.defineProperty(index, 'lookup', { value: lookup, enumerable: false, writable: false })
  return index
}
