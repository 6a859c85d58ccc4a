// A slow reference matcher written straight from the HTTPRoute spec, working
// on the model routes (no compiled table): used by the conformance cases.
import type { HTTPRoute, HTTPRouteMatch } from '../../lib/resources/model.ts'

export interface RefRequest { host: string; method: string; path: string; query: Record<string, string>; headers: Record<string, string> }

function hostMatches(pattern: string, host: string): boolean {
  if (pattern.startsWith('*.')) return host.endsWith(pattern.slice(1)) && host.length > pattern.length - 1
  return pattern === host
}

function pathMatches(m: HTTPRouteMatch, path: string): boolean {
  const v = m.path.value
  if (m.path.type === 'Exact') return path === v
  if (m.path.type === 'RegularExpression') return new RegExp(`^(?:${v})$`).test(path)
  const prefix = v.endsWith('/') ? v.slice(0, -1) : v
  return path === prefix || path.startsWith(prefix + '/') || prefix === ''
}

function fits(m: HTTPRouteMatch, r: RefRequest): boolean {
  if (!pathMatches(m, r.path)) return false
  if (m.method !== null && m.method !== r.method) return false
  for (const h of m.headers) {
    const got = r.headers[h.name.toLowerCase()]
    if (got === undefined) return false
    if (h.type === 'Exact' ? got !== h.value : !new RegExp(`^(?:${h.value})$`).test(got)) return false
  }
  for (const q of m.queryParams) {
    const got = r.query[q.name]
    if (got === undefined) return false
    if (q.type === 'Exact' ? got !== q.value : !new RegExp(`^(?:${q.value})$`).test(got)) return false
  }
  return true
}

/** Returns `ns/name/ruleIndex` of the winner, or null. */
export function referenceMatch(routes: readonly HTTPRoute[], r: RefRequest): string | null {
  type C = { route: HTTPRoute; host: string | null; rule: number; idx: number; m: HTTPRouteMatch }
  const cands: C[] = []
  for (const route of routes) {
    const hosts = route.hostnames.length === 0 ? [null] : route.hostnames.filter(h => hostMatches(h, r.host))
    if (hosts.length === 0) continue
    // the most specific of the route's hostnames that matches
    const host = hosts.sort((a, b) => hostScore(b) - hostScore(a))[0]
    route.rules.forEach((rule, i) => {
      const ms = rule.matches.length === 0 ? [{ path: { type: 'PathPrefix' as const, value: '/' }, headers: [], queryParams: [], method: null }] : rule.matches
      ms.forEach((m, j) => { if (fits(m, r)) cands.push({ route, host, rule: i, idx: j, m }) })
    })
  }
  const typeRank = { Exact: 0, PathPrefix: 1, RegularExpression: 2 }
  cands.sort((a, b) =>
    hostScore(b.host) - hostScore(a.host) ||
    typeRank[a.m.path.type] - typeRank[b.m.path.type] ||
    (a.m.path.type === 'Exact' ? 0 : b.m.path.value.length - a.m.path.value.length) ||
    Number(b.m.method !== null) - Number(a.m.method !== null) ||
    b.m.headers.length - a.m.headers.length ||
    b.m.queryParams.length - a.m.queryParams.length ||
    a.route.meta.creationTimestamp.localeCompare(b.route.meta.creationTimestamp) ||
    `${a.route.meta.namespace}/${a.route.meta.name}`.localeCompare(`${b.route.meta.namespace}/${b.route.meta.name}`) ||
    a.rule - b.rule || a.idx - b.idx)
  const w = cands[0]
  return w === undefined ? null : `${w.route.meta.namespace}/${w.route.meta.name}/${w.rule}`
}

function hostScore(h: string | null): number {
  if (h === null) return 0
  return h.startsWith('*.') ? 1000 + h.length : 100000 + h.length
}
