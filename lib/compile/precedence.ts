// The one comparator that ranks route matches inside a virtual host.
//
// Gateway API HTTPRoute (spec.hostnames and HTTPRouteRule.matches):
//
//   "In the event that multiple HTTPRoutes specify intersecting hostnames
//    (e.g. overlapping wildcard matching and exact matching hostnames),
//    precedence must be given to rules from the HTTPRoute with the largest
//    number of:
//      * Characters in a matching non-wildcard hostname.
//      * Characters in a matching hostname.
//    If ties exist across multiple Routes, the matching precedence rules for
//    HTTPRouteMatches takes over."
//
//   "Proxy or Load Balancer routing configuration generated from HTTPRoutes
//    MUST prioritize matches based on the following criteria, continuing on
//    ties. Across all rules specified on applicable Routes, precedence must be
//    given to the match having:
//      * "Exact" path match.
//      * "Prefix" path match with largest number of characters.
//      * Method match.
//      * Largest number of header matches.
//      * Largest number of query param matches.
//    Note: The precedence of RegularExpression path matches are
//    implementation-specific.
//    If ties still exist across multiple Routes, matching precedence MUST be
//    determined in order of the following criteria, continuing on ties:
//      * The oldest Route based on creation timestamp.
//      * The Route appearing first in alphabetical order by
//        "{namespace}/{name}".
//    If ties still exist within an HTTPRoute, matching precedence MUST be
//    granted to the FIRST matching rule (in list order) with a match meeting
//    the above criteria."
//
// sallyport's choices where the spec is silent:
//   * RegularExpression paths rank after every Exact and PathPrefix match of
//     the same hostname tier; among regexes the longer pattern (characters)
//     ranks first, then the criteria above (method, headers, query, age, name,
//     rule order). A regex is opaque, so we never let it shadow a literal path.
//   * Within one rule, matches keep their list order (match index).
//   * GRPCRoute matches are compiled to paths ('/svc/m' Exact, '/svc/'
//     PathPrefix, otherwise RegularExpression) with method POST and ranked by
//     this same comparator; that keeps the GRPCRoute order "service characters,
//     then method characters, then header matches" for Exact matches. An
//     HTTPRoute and a GRPCRoute never share a hostname of a listener
//     (kind-conflicts.ts turns the younger away); should they tie anyway,
//     HTTPRoute first.

import type { ObjectBase } from '../resources/meta.ts'
import type { PathMatcher, HeaderMatcher, RouteRule } from './table.ts'
import { compareAge } from './conditions.ts'
import { ANY_HOST } from './hostnames.ts'

/** A match before ranking, with what the comparator needs. */
export interface MatchSpec {
  readonly path: PathMatcher
  readonly method: string | null
  readonly headers: readonly HeaderMatcher[] | null
  readonly query: readonly HeaderMatcher[] | null
  readonly rule: RouteRule
  readonly route: ObjectBase<string>
  readonly ruleIndex: number
  readonly matchIndex: number
  /** The hostname pattern (after listener intersection) the match is served under. */
  readonly hostname: string
}

const PATH_ORDER = { Exact: 0, PathPrefix: 1, RegularExpression: 2 } as const

/** hostSpecificity(pattern)[0]: 2 exact, 1 wildcard, 0 any. */
function hostTier(pattern: string): number {
  if (pattern === ANY_HOST) return 0
  return pattern.charCodeAt(0) === 42 && pattern.charCodeAt(1) === 46 ? 1 : 2
}

export function compareMatches(a: MatchSpec, b: MatchSpec): number {
  // 1-2. Hostname: non-wildcard beats wildcard beats any; more characters first.
  // (hostTier inlines hostSpecificity's first element without its tuple: this runs in every vhost sort, issue 11.)
  if (a.hostname !== b.hostname) {
    const ha = hostTier(a.hostname)
    const hb = hostTier(b.hostname)
    if (ha !== hb) return hb - ha
    if (a.hostname.length !== b.hostname.length) return b.hostname.length - a.hostname.length
  }
  // 3. Exact path, then PathPrefix, then RegularExpression (ours).
  const ta = PATH_ORDER[a.path.type]
  const tb = PATH_ORDER[b.path.type]
  if (ta !== tb) return ta - tb
  // 4. Longest prefix (characters); for regexes, the longer pattern (ours).
  if (a.path.value.length !== b.path.value.length && a.path.type !== 'Exact') return b.path.value.length - a.path.value.length
  // 5. Method match.
  const ma = a.method === null ? 0 : 1
  const mb = b.method === null ? 0 : 1
  if (ma !== mb) return mb - ma
  // 6. Largest number of header matches.
  const hca = a.headers?.length ?? 0
  const hcb = b.headers?.length ?? 0
  if (hca !== hcb) return hcb - hca
  // 7. Largest number of query param matches.
  const qa = a.query?.length ?? 0
  const qb = b.query?.length ?? 0
  if (qa !== qb) return qb - qa
  // 8-9. Oldest route, then "{namespace}/{name}".
  if (a.route !== b.route) {
    const age = compareAge(a.route, b.route)
    if (age !== 0) return age
    if (a.route.kind !== b.route.kind) return a.route.kind === 'HTTPRoute' ? -1 : 1
  }
  // 10. Rule order within the route, then match order within the rule.
  if (a.ruleIndex !== b.ruleIndex) return a.ruleIndex - b.ruleIndex
  return a.matchIndex - b.matchIndex
}
