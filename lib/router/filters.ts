// Gateway API HTTPRoute filters that compute something from the request:
// RequestRedirect (Location), URLRewrite (path), and the weighted backend pick.
// Header modifiers live in headers.ts.

import type { Cluster, PathMatcher, PathRewrite, Redirect, RouteRule, RouteTable, WeightedCluster } from '../compile/table.ts'
import { TAG_LENGTH, isTagged } from '../upstream/mcp-session.ts'
import type { Upstreams } from '../upstream/types.ts'

// hot path
/**
 * Path after a ReplaceFullPath / ReplacePrefixMatch rewrite (query not included).
 * ReplacePrefixMatch is element-wise, as the match was: prefix '/foo' (or
 * '/foo/') on '/foo/bar' with '/xyz' gives '/xyz/bar', with '/' gives '/bar';
 * on '/foo' itself gives '/xyz' or '/'. A match that was not a PathPrefix
 * (compile should reject that) replaces the whole path.
 */
export function rewritePath(path: string, rewrite: PathRewrite, matched: PathMatcher): string {
  if (rewrite.type === 'ReplaceFullPath' || matched.type !== 'PathPrefix') return rewrite.value
  const prefix = trimSlash(matched.value)
  const rest = path.slice(prefix.length) // '' or '/…' (the match was element-wise)
  const result = trimSlash(rewrite.value) + rest
  if (result.length === 0) return '/'
  return result.charCodeAt(0) === 47 /* '/' */ ? result : '/' + result
}

function trimSlash(p: string): string {
  return p.length > 0 && p.charCodeAt(p.length - 1) === 47 ? p.slice(0, -1) : p
}

// hot path
/**
 * The Location of a RequestRedirect (Gateway API HTTPRequestRedirectFilter):
 * scheme and hostname default to the request's; the port is the configured
 * one, else the scheme's well-known port when the scheme is set, else the
 * listener's port; it is left out when it is the scheme's default. The query
 * string is kept.
 */
export function redirectLocation(
  redirect: Redirect, scheme: string, host: string, listenerPort: number,
  path: string, query: string | null, matched: PathMatcher,
): string {
  const outScheme = redirect.scheme ?? scheme
  const hostname = redirect.hostname ?? host
  const port = redirect.port ?? (redirect.scheme !== null ? defaultPort(outScheme) : listenerPort)
  const outPath = redirect.path === null ? path : rewritePath(path, redirect.path, matched)
  const showPort = port !== defaultPort(outScheme)
  const hostPart = hostname.indexOf(':') !== -1 ? '[' + hostname + ']' : hostname
  return outScheme + '://' + hostPart + (showPort ? ':' + port : '') + outPath + (query === null ? '' : '?' + query)
}

function defaultPort(scheme: string): number {
  return scheme === 'https' ? 443 : 80
}

/**
 * MCP session affinity across Backends: a rule splitting traffic between MCP
 * Backends (a canary) sends a request whose session id the gateway tagged to
 * the Backend one of whose endpoints issued it, whatever its weight (a Backend
 * weighted down to 0 still serves its sessions while it drains); within it,
 * the registry pins the endpoint. null: no tagged id, or no Backend of the
 * rule issued it (balanced as usual: the upstream's 404 starts a new session).
 */
export function sessionBackend(
  rule: RouteRule, table: RouteTable, sessionId: string | string[] | undefined, upstreams: Pick<Upstreams, 'issuedSession'>,
): { backend: WeightedCluster; cluster: Cluster } | null {
  if (typeof sessionId !== 'string' || upstreams.issuedSession === undefined || !isTagged(sessionId) || rule.backends === null) return null
  const tag = sessionId.slice(0, TAG_LENGTH)
  for (const b of rule.backends) {
    if (b.denied !== undefined || b.cluster === null) continue
    const cluster = table.clusters.get(b.cluster)
    if (cluster !== undefined && cluster.protocol === 'MCP' && upstreams.issuedSession(cluster, tag)) return { backend: b, cluster }
  }
  return null
}

// hot path
/**
 * One random number over the cumulative weights of the primary (priority 0)
 * backends. Returns null when no weight is left (Gateway API: 500).
 */
export function pickBackend(rule: RouteRule, random: number): WeightedCluster | null {
  const backends = rule.backends
  if (backends === null || rule.totalWeight <= 0) return null
  if (backends.length === 1) return backends[0].weight > 0 ? backends[0] : null
  let total = 0
  for (let i = 0; i < backends.length; i++) if (backends[i].priority === 0) total += backends[i].weight
  if (total <= 0) return null
  let point = random * total
  let last: WeightedCluster | null = null
  for (let i = 0; i < backends.length; i++) {
    const b = backends[i]
    if (b.priority !== 0 || b.weight <= 0) continue
    if (point < b.weight) return b
    point -= b.weight
    last = b
  }
  return last // float rounding at the top end
}
