// Request matching against a compiled VirtualHost. Everything that can be
// decided from configuration was decided in compile/ (lowercased header names,
// anchored regexes, ranked matches, the prefix segment tree); this file only
// looks things up. Imports only types from the table (data-path rule).
//
// Data structures (bench/compile.ts; 2 vCPU Xeon, 2 MiB L2 per core, Node 24):
// hosts are one Map plus a short wildcard scan; paths are one Map for Exact
// and a segment tree of Maps for PathPrefix, so a lookup reads one Map per
// path segment whatever the number of routes. findVirtualHost + matchRequest,
// half Exact half PathPrefix, 1,000 pre-built inputs:
//   10 routes / 10 hosts                       2.5 - 6.3 M/s
//   10,000 routes / 1,000 hosts, all hosts hit 0.17 - 0.94 M/s
//   same table, inputs on 300 hosts            2.8 M/s
//   same table, inputs on 10 hosts             1.0 - 4.2 M/s  (0.6-0.8 of a 10-route table of the same vhost shape)
//   same table, 3,000 / 10,000 routes hit      0.91 / 0.86 M/s (vs 0.94 for 1,000)
// The cost does not grow with the number of routes; it steps down once the
// vhosts in use no longer fit in L2 (between 300 and 1,000 hot hosts here) and
// stays flat after that: every level of the walk is a dependent load
// (vhost → Map → table → key → node), and a miss costs more than the rest of
// the lookup. So the walk reads as few objects as it can (shared empty
// children/regex lists from compile, no recursion, rank-0 exact hits return at
// once); the ranges are run-to-run spread on a shared, loaded machine.

import type { HeaderMatcher, HostIndex, PrefixNode, RouteMatch, VirtualHost } from '../compile/table.ts'

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
  const exact = index.exact.get(host)
  if (exact !== undefined) return exact
  const wildcards = index.wildcards
  for (let i = 0; i < wildcards.length; i++) {
    const w = wildcards[i]
    if (host.length > w.suffix.length && host.endsWith(w.suffix)) return w.vhost
  }
  return index.fallback
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
  // The path starts with '/'; `start` is the offset of the next segment.
  for (let start = 1; start <= path.length;) {
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
