// Gateway API HTTPRoute filters that compute something from the request:
// RequestRedirect (Location), URLRewrite (path), and the weighted backend pick.
// Header modifiers live in headers.ts.

import type { PathMatcher, PathRewrite, Redirect, RouteRule, WeightedCluster } from '../compile/table.ts'

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
