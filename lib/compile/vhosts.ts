// Step 6: ranked matches → HostIndex of VirtualHosts for one port, plus its
// compact lookup index (lookup-index.ts).
//
// Every vhost carries, ranked after its own, the matches of the wildcard and
// catch-all patterns that cover its hostname (compareMatches puts less
// specific hostnames later), so a request never falls through to another
// vhost. Matches are only merged from the listener that is the most specific
// for the vhost's hostname: Gateway API sends a request to the most specific
// matching listener, so routes of '*.example.com' do not answer for
// 'a.example.com' when a listener for 'a.example.com' exists on the port.

import type { HostIndex, PrefixNode, RouteMatch, VirtualHost } from './table.ts'
import type { MatchSpec } from './precedence.ts'
import { compareMatches } from './precedence.ts'
import { ANY_HOST, covers, hostSpecificity, isWildcard } from './hostnames.ts'
import { withLookupIndex } from './lookup-index.ts'
import { buildHostnameIndex } from '../hostname-index.ts'

export interface PlacedMatch {
  readonly spec: MatchSpec
  /** Hostname pattern of the listener the route attached through (ANY_HOST for none). */
  readonly listenerHost: string
}

/** The most specific of `listenerHosts` that covers `pattern` (no intermediate list: one call per vhost, issue 11). */
function mostSpecificCovering(listenerHosts: readonly string[], pattern: string): string | null {
  let best: string | null = null
  for (const p of listenerHosts) {
    if (!covers(p, pattern)) continue
    if (best === null) { best = p; continue }
    const [a, la] = hostSpecificity(p)
    const [b, lb] = hostSpecificity(best)
    if (a > b || (a === b && la > lb)) best = p
  }
  return best
}

/**
 * The routes' matches on patterns that cover `pattern`, in this order: itself,
 * wildcards of its parent domains (nearest first), ANY_HOST. Issue 11: only
 * patterns some route uses are tested for covering (5,000 hosts per reload).
 */
function coveringLists(pattern: string, byPattern: ReadonlyMap<string, PlacedMatch[]>, out: PlacedMatch[][], anyWildcard: boolean): void {
  out.length = 0
  const own = byPattern.get(pattern)
  if (own !== undefined) out.push(own)
  if (pattern === ANY_HOST) return
  if (!anyWildcard) { const any = byPattern.get(ANY_HOST); if (any !== undefined) out.push(any); return }
  let rest = isWildcard(pattern) ? pattern.slice(2) : pattern
  for (let dot = rest.indexOf('.'); dot !== -1; dot = rest.indexOf('.')) {
    rest = rest.slice(dot + 1)
    const wildcard = `*.${rest}`
    const list = byPattern.get(wildcard)
    if (list !== undefined && wildcard !== pattern && covers(wildcard, pattern)) out.push(list)
  }
  const any = byPattern.get(ANY_HOST)
  if (any !== undefined) out.push(any)
}

/**
 * Issue 11: VirtualHosts of the previous compile, by host pattern. A vhost is
 * a function of its pattern and its list of matches, so one built from the
 * same match objects in the same order is reused as it is.
 */
export interface VhostCache {
  get(pattern: string, specs: readonly MatchSpec[]): VirtualHost | null
  set(pattern: string, specs: readonly MatchSpec[], vhost: VirtualHost): void
}

export function buildHostIndex(placed: readonly PlacedMatch[], listenerHosts: readonly string[], cache?: VhostCache): HostIndex {
  const byPattern = new Map<string, PlacedMatch[]>()
  let anyWildcard = false
  for (const p of placed) {
    const list = byPattern.get(p.spec.hostname)
    if (list !== undefined) list.push(p)
    else { byPattern.set(p.spec.hostname, [p]); if (isWildcard(p.spec.hostname)) anyWildcard = true }
  }
  const patterns = new Set<string>([...byPattern.keys(), ...listenerHosts])
  const vhosts: Array<[string, VirtualHost]> = []
  const covering: PlacedMatch[][] = []
  for (const pattern of [...patterns].sort()) {
    const listener = mostSpecificCovering(listenerHosts, pattern)
    const specs: MatchSpec[] = []
    coveringLists(pattern, byPattern, covering, anyWildcard)
    for (const list of covering) {
      for (const p of list) if (p.listenerHost === listener) specs.push(p.spec)
    }
    let vhost = cache?.get(pattern, specs) ?? null
    if (vhost === null) {
      vhost = buildVirtualHost(pattern, cache === undefined ? specs : specs.slice()) // it ranks the list in place
      cache?.set(pattern, specs, vhost)
    }
    vhosts.push([pattern, vhost])
  }
  // The patterns come sorted: wildcards of one length stay in code-unit order.
  return withLookupIndex(buildHostnameIndex(vhosts))
}

interface MutableNode { children: Map<string, MutableNode> | null; matches: RouteMatch[] | null }

/** Prefix '/foo/bar/' sits on the node of segments ['foo', 'bar']; '/' on the root. */
export function prefixSegments(value: string): string[] {
  const trimmed = prefixKey(value)
  return trimmed === '' ? [] : trimmed.slice(1).split('/')
}

/** The key of a PathPrefix value: '/foo/bar/' and '/foo/bar' are both '/foo/bar' ('/' is ''). */
export function prefixKey(value: string): string {
  return value.endsWith('/') ? value.slice(0, -1) : value
}

export function buildVirtualHost(hostname: string, specs: MatchSpec[]): VirtualHost {
  specs.sort(compareMatches)
  let exactPaths: Map<string, RouteMatch[]> | null = null
  const root: MutableNode = { children: null, matches: null }
  let regexes: RouteMatch[] | null = null
  let needsQuery = false
  specs.forEach((s, rank) => {
    const m: RouteMatch = { path: s.path, method: s.method, headers: s.headers, query: s.query, rule: s.rule, rank }
    if (s.query !== null) needsQuery = true
    switch (s.path.type) {
      case 'Exact': {
        exactPaths ??= new Map()
        const list = exactPaths.get(s.path.value)
        if (list !== undefined) list.push(m)
        else exactPaths.set(s.path.value, [m])
        break
      }
      case 'PathPrefix': {
        let node = root
        for (const seg of prefixSegments(s.path.value)) {
          node.children ??= new Map()
          let child = node.children.get(seg)
          if (child === undefined) { child = { children: null, matches: null }; node.children.set(seg, child) }
          node = child
        }
        if (node.matches === null) node.matches = [m]
        else node.matches.push(m)
        break
      }
      case 'RegularExpression': if (regexes === null) regexes = [m]; else regexes.push(m); break
    }
  })
  return { hostname, exactPaths: exactPaths ?? NO_PATHS, prefixes: compactNode(root), regexes: regexes ?? NO_MATCHES, needsQuery }
}

// Empty parts of every vhost share one instance. On a large table the lookup
// cost is set by cache misses, not instructions (bench/compile.ts): a leaf
// node's children, an empty regex list or exact-path map are read on every
// request, and sharing them keeps those reads in cache.
const NO_MATCHES: readonly RouteMatch[] = Object.freeze([])
const NO_CHILDREN: ReadonlyMap<string, PrefixNode> = new Map()
const NO_PATHS: ReadonlyMap<string, readonly RouteMatch[]> = new Map()

function compactNode(node: MutableNode): PrefixNode {
  let children: ReadonlyMap<string, PrefixNode> = NO_CHILDREN
  if (node.children !== null) {
    // Compacted in place: each key's value is replaced (insertion order kept), no second Map.
    const out = node.children as unknown as Map<string, PrefixNode | MutableNode>
    for (const [seg, child] of out) out.set(seg, compactNode(child as MutableNode))
    children = out as Map<string, PrefixNode>
  }
  return { children, matches: node.matches ?? NO_MATCHES }
}
