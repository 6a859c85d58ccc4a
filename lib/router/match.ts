// Request matching against a compiled VirtualHost. Everything that can be
// decided from configuration was decided in compile/ (lowercased header names,
// anchored regexes, ranked matches, the prefix segment tree); this file only
// looks things up. Imports only types from the table (data-path rule).
//
// Data structures (bench/compile.ts; 2 vCPU Xeon, 2 MiB L2 per core, Node 24,
// a shared machine at load 5-18). Two matchers give the same answers:
//
// - The tree walk (findVirtualHost + matchRequest): hosts in one Map plus a
//   short wildcard scan; per vhost a Map for Exact paths and a segment tree of
//   Maps for PathPrefix. Every level is a dependent load (vhost → Map → table →
//   key → node → ...), ten or more per lookup, each a likely cache/TLB miss once
//   the hosts in use no longer fit in L2. It serves hand-built tables, and its
//   structures stay in the table for printing.
// - The lookup index (matchOnPort, what forward.ts calls): per port two
//   open-addressing tables in flat arrays (lib/compile/lookup-index.ts, layout
//   in lib/lookup-hash.ts): host → vhost id, and (vhost, Exact path) /
//   (vhost, PathPrefix) → the ranked list's head. The request's host
//   and path are hashed (FNV-1a, no allocation) in one pass each, which yields
//   the hash of every path prefix ending at a segment boundary and of every host
//   suffix starting at a '.'. A path slot is keyed by the vhost's key hash,
//   which for an exact host is the request host's own hash, so the path probes
//   do not wait for the host probe. A slot holds its key, the rank of its
//   list's first match, whether that match has conditions and whether it ends
//   the lookup, and the match itself: a hit on a match without conditions
//   reads the host slot and key, the path slot and key, and nothing else.
//
// Lookups per CPU-second, half Exact half PathPrefix, 1,000 pre-built inputs,
// names of one width in both tables, medians of rounds, walk → index (two runs):
//   10 routes / 10 hosts                         5.8-9.1 M  → 3.1-3.7 M
//   10 routes / 1 host (big table's vhost shape) 4.1-6.5 M  → 3.2-4.6 M
//   10,000 routes / 1,000 hosts, all hosts hit   1.1-1.3 M  → 2.7-3.8 M
//   same table, inputs on 300 / 100 / 30 / 10 hosts
//                      1.5-2.3 / 2.5-2.7 / 2.8-3.0 / 3.1-3.4 M → 3.0-4.0 / 3.1-4.2 / 3.3-4.7 / 3.2-4.9 M
// big/small (same-round ratios): walk 0.15-0.19, index 0.86-0.94 over seven
// runs (target 0.8); on 10 hot hosts the big table's index runs at 0.97-1.04
// of the small one's, so what is left is the working set, not the lookup.
// Below 30-100 hot hosts the walk is faster: the bench reuses its input
// strings, whose hashes V8 caches, so the walk's Map lookups hash nothing while
// the index hashes ~35 chars in JS. In production both hash fresh strings.
// Tried and not kept: keys inline in the slot (an Int32Array, 8 words a slot,
// compared a word at a time) lost more in the compare than it saved in misses;
// a 64-bit per-vhost filter of Exact keys (to skip the Exact probe of a
// PathPrefix request) measured no gain.

import type { HeaderMatcher, HostIndex, LookupIndex, PrefixNode, RouteMatch, VirtualHost } from '../compile/table.ts'
import { lookupHostname } from '../hostname-index.ts'
import { FLAG_EXACT, FLAG_QUERY, FLAG_REGEX, FNV_OFFSET, FNV_PRIME, HEAD_FINAL, HEAD_FITS_ALL, INFO_WORDS, KIND_EXACT, KIND_PREFIX, KIND_WILDCARD, SLOT_WORDS, slotHash, storedHash } from '../lookup-hash.ts'

export interface MatchInput {
  /** Uppercase. */
  readonly method: string
  /** Raw path without the query, as received (not percent-decoded). */
  readonly path: string
  /** Raw query string without '?', null if none. */
  readonly query: string | null
  /** Lowercase name; repeated headers joined with ','. */
  header(name: string): string | undefined
}

// hot path
/**
 * Exact map, then wildcard suffixes longest first, then the catch-all (Envoy's
 * RouteMatcher in source/common/router/config_impl.h). `host` is lowercased,
 * without port. Gateway API: `*.example.com` matches one or more labels, so
 * `a.b.example.com` matches but `example.com` does not.
 */
export function findVirtualHost(index: HostIndex, host: string): VirtualHost | null {
  return lookupHostname(index, host)
}

// Scratch for matchOnPort: hashes and end offsets of the path's prefixes at
// segment boundaries, and hashes and offsets of the host's '.' suffixes.
// Matching is synchronous and never re-entered, so module-level arrays save an
// allocation per request; they grow (rarely) for deeper paths and hosts.
let boundaryHash: Int32Array = new Int32Array(16)
let boundaryEnd: Int32Array = new Int32Array(16)
let suffixHash: Int32Array = new Int32Array(16)
let suffixStart: Int32Array = new Int32Array(16)

// hot path
/**
 * findVirtualHost + matchRequest through the port's compact lookup index
 * (table.ts LookupIndex): the same answer, with a handful of probes into typed
 * arrays instead of a walk over Maps and tree nodes. Hand-built tables without
 * an index are walked.
 *
 * The request strings are hashed first (no memory but the strings), then the
 * host slot and the path slots are probed. A path slot is keyed by the vhost's
 * key hash, which for an exact host is the request host's hash, so the path
 * probes do not wait for the host probe and the CPU overlaps their misses; only
 * a wildcard or catch-all vhost re-keys them once the host probe has answered.
 */
export function matchOnPort(hosts: HostIndex, host: string, input: MatchInput): RouteMatch | null {
  const ix = hosts.lookup?.index
  if (ix === undefined) {
    const vhost = findVirtualHost(hosts, host)
    return vhost === null ? null : matchRequest(vhost, input)
  }
  let hh = FNV_OFFSET
  for (let i = host.length - 1; i >= 0; i--) hh = Math.imul(hh ^ host.charCodeAt(i), FNV_PRIME)
  const path = input.path
  const depth = hashBoundaries(path, ix.maxDepth)
  const exactHash = path.charCodeAt(0) === 47 /* '/' */ ? boundaryHash[depth] : pathHashOf(path)

  const slots = ix.hostSlots
  let slot = probeHost(ix, slotHash(0, hh, KIND_EXACT), KIND_EXACT, host, 0)
  if (slot >= 0) return matchIndexed(ix, (slots[slot * SLOT_WORDS + 1] as number) >> 1, hh, input, depth, exactHash, slots[slot * SLOT_WORDS + 3] as number)
  // A wildcard or the catch-all: its paths are keyed by its pattern's hash.
  slot = ix.wildcards > 0 ? probeSuffixes(ix, host) : -1
  const vid = slot >= 0 ? (slots[slot * SLOT_WORDS + 1] as number) >> 1 : ix.fallback
  if (vid < 0) return null
  return matchIndexed(ix, vid, ix.vhostInfo[vid * INFO_WORDS], input, depth, exactHash, slot >= 0 ? slots[slot * SLOT_WORDS + 3] as number : -1)
}

/**
 * Hashes '/' + path[1..j) for each segment boundary j (a '/' at j, or the end),
 * shallowest first, up to `maxDepth` of them, into boundaryHash / boundaryEnd,
 * and the whole path's hash into boundaryHash[depth]. Returns the count. A path
 * that does not start with '/' ('*', authority-form) has no prefix but the root.
 */
function hashBoundaries(path: string, maxDepth: number): number {
  const n = path.length
  if (maxDepth + 1 > boundaryHash.length) { boundaryHash = new Int32Array(maxDepth + 1); boundaryEnd = new Int32Array(maxDepth + 1) }
  let h = Math.imul(FNV_OFFSET ^ 47, FNV_PRIME)
  let depth = 0
  const cap = path.charCodeAt(0) === 47 ? maxDepth : 0
  for (let i = 1; i < n; i++) {
    const c = path.charCodeAt(i)
    if (c === 47 && depth < cap) { boundaryHash[depth] = h; boundaryEnd[depth] = i; depth++ }
    h = Math.imul(h ^ c, FNV_PRIME)
  }
  if (n > 0 && depth < cap) { boundaryHash[depth] = h; boundaryEnd[depth] = n; depth++ }
  boundaryHash[depth] = h
  return depth
}

function pathHashOf(s: string): number {
  let h = FNV_OFFSET
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME)
  return h
}

// hot path
/**
 * The host slot holding key `host[start..)` of this kind (its tag gives the
 * vhost id, its value the vhost's packed info), or -1. A slot hash match is
 * confirmed on the stored key, compared in place.
 */
function probeHost(ix: LookupIndex, hash: number, kind: number, host: string, start: number): number {
  const slots = ix.hostSlots
  const mask = ix.hostMask
  const stored = storedHash(hash)
  for (let i = hash & mask; ; i = (i + 1) & mask) {
    const at = i * SLOT_WORDS
    const h = slots[at]
    if (h === 0) return -1
    if (h !== stored) continue
    const tag = slots[at + 1] as number
    if ((tag & 1) !== kind) continue
    const key = slots[at + 2] as string
    if (start === 0 ? key === host : key.length === host.length - start && sameTail(key, host, start)) return i
  }
}

/** key === text.slice(start), without the slice (key.length is checked by the caller). */
function sameTail(key: string, text: string, start: number): boolean {
  for (let k = 0; k < key.length; k++) {
    if (key.charCodeAt(k) !== text.charCodeAt(start + k)) return false
  }
  return true
}

// hot path
/**
 * The path slot of key `path[0..end)` with this tag whose list can rank before
 * `limit`, or -1. A slot that cannot (its head word's rank, which is its list's
 * best) is passed over without reading its key: it could not change the answer.
 * A slot hash match is confirmed on the stored key.
 */
function probePath(ix: LookupIndex, hash: number, tag: number, path: string, end: number, limit: number): number {
  const slots = ix.pathSlots
  const mask = ix.pathMask
  const stored = storedHash(hash)
  for (let i = hash & mask; ; i = (i + 1) & mask) {
    const at = i * SLOT_WORDS
    const h = slots[at]
    if (h === 0) return -1
    if (h !== stored || slots[at + 1] !== tag || (slots[at + 3] as number) >> 2 >= limit) continue
    const key = slots[at + 2] as string
    if (end === path.length ? key === path : key.length === end && samePrefix(key, path)) return i
  }
}

/** path starts with key (key.length is checked by the caller); key[0] and path[0] are both '/'. */
function samePrefix(key: string, path: string): boolean {
  for (let k = key.length - 1; k > 0; k--) {
    if (key.charCodeAt(k) !== path.charCodeAt(k)) return false
  }
  return true
}

// hot path
/**
 * The host slot of the longest wildcard suffix of `host` in the index, or -1.
 * Suffixes, longest first: '.b.example.com', '.example.com', '.com' for
 * 'a.b.example.com'. Their hashes come from one pass from the right (hostHash
 * runs right to left). A suffix must leave at least one char before it:
 * '*.example.com' does not match 'example.com' nor '.example.com'.
 */
function probeSuffixes(ix: LookupIndex, host: string): number {
  let h = FNV_OFFSET
  let count = 0
  for (let i = host.length - 1; i >= 1; i--) {
    const c = host.charCodeAt(i)
    h = Math.imul(h ^ c, FNV_PRIME)
    if (c === 46 /* '.' */) {
      if (count === suffixHash.length) { suffixHash = grow(suffixHash); suffixStart = grow(suffixStart) }
      suffixHash[count] = h
      suffixStart[count] = i
      count++
    }
  }
  for (let k = count - 1; k >= 0; k--) {
    const slot = probeHost(ix, slotHash(0, suffixHash[k], KIND_WILDCARD), KIND_WILDCARD, host, suffixStart[k])
    if (slot >= 0) return slot
  }
  return -1
}

function grow(a: Int32Array): Int32Array {
  const out = new Int32Array(a.length * 2)
  out.set(a)
  return out
}

// hot path
/**
 * matchRequest over the index: the exact list, then the prefix lists from the
 * deepest boundary to the root, then the regexes; lowest rank wins, as in
 * matchRequest (whose comment explains the skips).
 */
function matchIndexed(ix: LookupIndex, vid: number, owner: number, input: MatchInput, depth: number, exactHash: number, packed: number): RouteMatch | null {
  const info = ix.vhostInfo
  const at = vid * INFO_WORDS
  const flags = packed >= 0 ? packed & 7 : info[at + 3]
  const query = (flags & FLAG_QUERY) !== 0 ? new QueryCache(input.query) : null
  const path = input.path
  const matches = ix.matches
  const slots = ix.pathSlots
  const lists = ix.pathLists
  const tag = vid << 1
  let best: RouteMatch | null = null
  let bestRank = Infinity // best's rank, read from the slot's head word while best is a list's first match

  if ((flags & FLAG_EXACT) !== 0) {
    const slot = probePath(ix, slotHash(owner, exactHash, KIND_EXACT), tag | KIND_EXACT, path, path.length, Infinity)
    if (slot >= 0) {
      const head = slots[slot * SLOT_WORDS + 3] as number
      const first = slots[slot * SLOT_WORDS + 4] as RouteMatch
      if ((head & HEAD_FITS_ALL) !== 0 || fits(first, input, query)) {
        best = first
        if ((head & HEAD_FINAL) !== 0) return best // nothing else of the vhost ranks before it
        bestRank = head >> 2
      } else {
        best = firstFitAt(matches, lists[slot] + 1, input, query, Infinity)
        if (best !== null) bestRank = best.rank
      }
      if (bestRank === 0) return best // nothing ranks before it
    }
  }
  const deepest = packed >= 0 ? packed >> 3 & 15 : info[at + 2]
  for (let d = (depth < deepest ? depth : deepest) - 1; d >= 0; d--) {
    const slot = probePath(ix, slotHash(owner, boundaryHash[d], KIND_PREFIX), tag | KIND_PREFIX, path, boundaryEnd[d], bestRank)
    if (slot < 0) continue
    const head = slots[slot * SLOT_WORDS + 3] as number
    const first = slots[slot * SLOT_WORDS + 4] as RouteMatch
    if ((head & HEAD_FITS_ALL) !== 0 || fits(first, input, query)) {
      best = first
      bestRank = head >> 2
    } else {
      const found = firstFitAt(matches, lists[slot] + 1, input, query, bestRank)
      if (found !== null) { best = found; bestRank = found.rank }
    }
  }
  const root = packed >= 0 ? (packed >> 7) - 1 : info[at + 1]
  if (root >= 0) {
    const found = firstFitAt(matches, root, input, query, bestRank)
    if (found !== null) { best = found; bestRank = found.rank }
  }
  if ((flags & FLAG_REGEX) !== 0) {
    const regexes = ix.vhosts[vid].regexes
    for (let i = 0; i < regexes.length; i++) {
      const m = regexes[i]
      if (m.rank >= bestRank) break
      if (m.path.regex !== null && m.path.regex.test(path) && fits(m, input, query)) return m
    }
  }
  return best
}

// hot path
/** firstFit over a null-terminated list in ix.matches starting at `start`. */
function firstFitAt(list: ReadonlyArray<RouteMatch | null>, start: number, input: MatchInput, query: QueryCache | null, limit: number): RouteMatch | null {
  for (let i = start; ; i++) {
    const m = list[i]
    if (m === null || m.rank >= limit) return null
    if (fits(m, input, query)) return m
  }
}

/**
 * Lazily parsed query string: parsed on the first match that tests it, and only
 * when the vhost says some match needs it.
 */
class QueryCache {
  readonly raw: string | null
  #params: Map<string, string> | null = null
  constructor(raw: string | null) { this.raw = raw }
  get(name: string): string | undefined {
    if (this.#params === null) this.#params = parseQuery(this.raw)
    return this.#params.get(name)
  }
}

// hot path
/**
 * The matching RouteMatch with the lowest rank, or null.
 *
 * Candidates come from three places: the exact-path list for the path, the
 * prefix-tree nodes on the path's segment chain (deepest first), and the regex
 * list. Each list is in rank order, so its first fully matching entry is its
 * best; we keep the lowest rank over the lists and skip a list (or stop
 * scanning one) once its entries rank after the best found. Within one
 * hostname tier the walk order already is the rank order, so the skip usually
 * ends the search early; a vhost that also carries wildcard / catch-all matches
 * (ranked after its own, per the HTTPRoute hostname precedence) stays correct
 * without falling through.
 *
 * Cost is a Map lookup plus one node per path segment; it does not grow with
 * the number of routes for Exact and PathPrefix matches.
 */
export function matchRequest(vhost: VirtualHost, input: MatchInput): RouteMatch | null {
  const query = vhost.needsQuery ? new QueryCache(input.query) : null
  let best: RouteMatch | null = null

  const exact = vhost.exactPaths.get(input.path)
  if (exact !== undefined) {
    best = firstFit(exact, input, query, Infinity)
    if (best !== null && best.rank === 0) return best // nothing ranks before it
  }

  best = matchPrefixes(vhost.prefixes, input, query, best)

  const regexes = vhost.regexes
  const limit = best === null ? Infinity : best.rank
  for (let i = 0; i < regexes.length; i++) {
    const m = regexes[i]
    if (m.rank >= limit) break
    if (m.path.regex !== null && m.path.regex.test(input.path) && fits(m, input, query)) return m
  }
  return best
}

// Nodes on the path's segment chain, root first. Reused across calls: matching
// is synchronous and never re-entered, so one module-level array saves an
// allocation per request.
const chain: PrefixNode[] = []

// hot path
/**
 * Walks the prefix tree along the path's segments, then consults the nodes
 * deepest first. Gateway API PathPrefix is element-wise: '/foo' matches '/foo'
 * and '/foo/bar' but not '/foobar'; a trailing slash in the prefix is ignored
 * (compile puts '/foo/' on the node of 'foo'). Deeper nodes hold longer
 * prefixes, which rank first; a shallower node is still consulted because a
 * vhost also carries lower-tier (wildcard / catch-all) matches whose ranks
 * interleave.
 */
function matchPrefixes(root: PrefixNode, input: MatchInput, query: QueryCache | null, best: RouteMatch | null): RouteMatch | null {
  const path = input.path
  let depth = 0
  let node = root
  chain[depth++] = node
  // `start` is the offset of the next segment. A path that does not start with
  // '/' ('*', authority-form) has no segments: only the root '/' prefix matches.
  for (let start = path.charCodeAt(0) === 47 ? 1 : path.length + 1; start <= path.length;) {
    const children = node.children
    if (children.size === 0) break
    let end = path.indexOf('/', start)
    if (end === -1) end = path.length
    const child = children.get(path.slice(start, end))
    if (child === undefined) break
    node = child
    chain[depth++] = node
    start = end + 1
  }
  for (let i = depth - 1; i >= 0; i--) {
    const matches = chain[i].matches
    chain[i] = root // drop the reference so an old table is not kept alive
    if (matches.length === 0) continue
    const found = firstFit(matches, input, query, best === null ? Infinity : best.rank)
    if (found !== null) best = found
  }
  return best
}

// hot path
/** First entry of a rank-ordered list that matches and ranks before `limit`, or null. */
function firstFit(list: readonly RouteMatch[], input: MatchInput, query: QueryCache | null, limit: number): RouteMatch | null {
  for (let i = 0; i < list.length; i++) {
    const m = list[i]
    if (m.rank >= limit) return null
    if (fits(m, input, query)) return m
  }
  return null
}

// hot path
/** Method, headers and query params (the path already matched). All must match (AND). */
function fits(m: RouteMatch, input: MatchInput, query: QueryCache | null): boolean {
  if (m.method !== null && m.method !== input.method) return false
  const headers = m.headers
  if (headers !== null) {
    for (let i = 0; i < headers.length; i++) {
      if (!valueMatches(headers[i], input.header(headers[i].name))) return false
    }
  }
  const params = m.query
  if (params !== null) {
    if (query === null) return false // compile sets needsQuery whenever a match tests the query
    for (let i = 0; i < params.length; i++) {
      if (!valueMatches(params[i], query.get(params[i].name))) return false
    }
  }
  return true
}

function valueMatches(matcher: HeaderMatcher, value: string | undefined): boolean {
  if (value === undefined) return false
  if (matcher.exact !== null) return matcher.exact === value
  if (matcher.regex !== null) return matcher.regex.test(value)
  return true
}

/**
 * Query params by name, first value wins: Gateway API leaves repeated params
 * undefined and recommends matching the first value. Names and values are
 * percent-decoded ('+' is a space, as in forms); a malformed escape keeps the
 * raw text so it can still match literally.
 */
export function parseQuery(raw: string | null): Map<string, string> {
  const params = new Map<string, string>()
  if (raw === null || raw.length === 0) return params
  let start = 0
  while (start <= raw.length) {
    let end = raw.indexOf('&', start)
    if (end === -1) end = raw.length
    if (end > start) {
      const eq = raw.indexOf('=', start)
      const hasValue = eq !== -1 && eq < end
      const name = decode(raw.slice(start, hasValue ? eq : end))
      if (!params.has(name)) params.set(name, hasValue ? decode(raw.slice(eq + 1, end)) : '')
    }
    start = end + 1
  }
  return params
}

function decode(text: string): string {
  if (text.indexOf('%') === -1 && text.indexOf('+') === -1) return text
  const spaced = text.replaceAll('+', ' ')
  try {
    return decodeURIComponent(spaced)
  } catch {
    return spaced
  }
}
