// Hostname rules shared by listeners, routes and SNI. Gateway API: a wildcard
// `*.example.com` matches one or more DNS labels in place of the `*`, so it
// covers a.example.com and a.b.example.com but not example.com.

import { ANY_HOST } from '../hostname-index.ts'

/** The pattern of a listener or route that accepts any hostname (defined with the lookup it serves). */
export { ANY_HOST }

export function isWildcard(hostname: string): boolean {
  return hostname.startsWith('*.')
}

/** Does `pattern` (exact, `*.suffix` or ANY_HOST) cover every name `other` (same forms) covers? */
export function covers(pattern: string, other: string): boolean {
  if (pattern === ANY_HOST) return true
  if (other === ANY_HOST) return false
  if (!isWildcard(pattern)) return pattern === other
  const suffix = pattern.slice(1) // '.example.com'
  if (isWildcard(other)) return other.slice(1).endsWith(suffix)
  return other.length > suffix.length && other.endsWith(suffix)
}

/**
 * Hostnames a route serves through a listener (HTTPRoute / TLSRoute spec,
 * "hostnames"): the listener's hostname when the route names none, else the
 * route hostnames that intersect the listener's, each narrowed to the more
 * specific of the two. Empty: no intersection (NoMatchingListenerHostname).
 */
export function intersectHostnames(listener: string | null, route: readonly string[]): string[] {
  const l = listener === null ? ANY_HOST : listener.toLowerCase()
  if (route.length === 0) return [l]
  if (route.length === 1) { // the common case: one exact-size list, no growth (issue 11)
    const h = route[0].toLowerCase()
    return covers(l, h) ? [h] : covers(h, l) ? [l] : []
  }
  const out: string[] = []
  for (const raw of route) {
    const h = raw.toLowerCase()
    let hit: string | null = null
    if (covers(l, h)) hit = h
    else if (covers(h, l)) hit = l
    if (hit !== null && !out.includes(hit)) out.push(hit)
  }
  return out
}

/** Specificity for hostname precedence: exact names first (longest first), then wildcards (longest first), then any. */
export function hostSpecificity(pattern: string): [number, number] {
  if (pattern === ANY_HOST) return [0, 0]
  if (isWildcard(pattern)) return [1, pattern.length]
  return [2, pattern.length]
}

export function isIpLiteral(host: string): boolean {
  return /^\d{1,3}(\.\d{1,3}){3}$/.test(host) || host.includes(':')
}
