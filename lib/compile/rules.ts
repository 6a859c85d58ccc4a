// Step 5: HTTPRoute / GRPCRoute rules → RouteRule plus their (unranked)
// matches. Header names are lowercased and regexes anchored here, once.

import type {
  BackendRef, BackendTrafficPolicy, EgressExtension, GRPCRoute, GRPCRouteMatch, HTTPHeaderMatch, HTTPPathModifier,
  HTTPRoute, HTTPRouteFilter, HTTPRouteMatch, HeaderModifier,
} from '../resources/model.ts'
import { ErrorCode } from '../errors.ts'
import type { Cluster, HeaderEdits, HeaderMatcher, Mirror, PathMatcher, PathRewrite, Redirect, RetrySpec, RouteRule, RouteTimeouts, WeightedCluster } from './table.ts'
import { GATEWAY_GROUP } from './conditions.ts'
import { isBackendKind, type BackendResolver } from './backends.ts'
import { backendKey } from '../resources/model.ts'
import type { PolicyIndex } from './policies.ts'
import { backendSlot, mergeExtensions } from './policies.ts'
import type { MatchSpec } from './precedence.ts'
import { egressExtensionOwner, rateLimitExtension, trafficPolicyOwner, type ExtensionCompiler, type ScopedExtensions } from './extensions.ts'
import { ANNOTATIONS, parseBool, parseConnectPorts } from '../validate/annotations.ts'

export interface RuleContext {
  readonly resolver: BackendResolver
  readonly traffic: PolicyIndex<BackendTrafficPolicy>
  readonly extensions: PolicyIndex<EgressExtension>
  readonly egressExtensions: ReadonlyMap<string, EgressExtension>
  readonly gatewayKey: string
  readonly listenerName: string
  readonly meshed: boolean
  /** Issue 7: builds the rule × cluster extension chains (absent: no chains, as before). */
  readonly extensionCompiler?: ExtensionCompiler
}

/** `field`: where in the route the reference is, from the object root (`spec.rules[0].backendRefs[1]`), for `sallyport validate`. */
export interface RefProblem { readonly reason: string; readonly message: string; readonly field: string }

/** A rule compile could not build (a match whose regular expression does not compile), so does not serve. */
export interface RuleDrop {
  readonly index: number
  readonly name: string | null
  /** The field at fault, from the object root (`spec.rules[1].matches[0].path.value`). */
  readonly field: string
  readonly message: string
}

export interface CompiledRoute {
  readonly rules: readonly RouteRule[]
  /** Matches without hostname (the caller adds one per served hostname). */
  readonly matches: ReadonlyArray<Omit<MatchSpec, 'hostname'>>
  /** ResolvedRefs problems (first one per backendRef). */
  readonly refProblems: readonly RefProblem[]
  /** Rules dropped here (PartiallyInvalid; validation's are the route's droppedRules). */
  readonly droppedRules: readonly RuleDrop[]
}

export function compileHttpLikeRoute(route: HTTPRoute | GRPCRoute, ctx: RuleContext): CompiledRoute {
  const rules: RouteRule[] = []
  const matches: Array<Omit<MatchSpec, 'hostname'>> = []
  const refProblems: RefProblem[] = []
  const droppedRules: RuleDrop[] = []
  const grpc = route.kind === 'GRPCRoute'
  const dropped = route.droppedRules.length === 0 ? null : new Set(route.droppedRules.map(d => d.index))
  const { policy, routeExt, rulePolicies } = routePolicies(route, ctx.traffic, ctx.extensions, ctx.gatewayKey, ctx.listenerName)
  const gatewayExt = ctx.extensions.get(`Gateway/${ctx.gatewayKey}`)

  route.rules.forEach((r, ruleIndex) => {
    // Gateway API PartiallyInvalid: a rule validation found invalid is dropped, the others serve.
    if (dropped?.has(ruleIndex) === true) return
    // Every match first: a rule one of whose matches cannot be built is
    // dropped whole (the spec's unit is the rule). Serving it with its other
    // matches would send traffic the rule was written to leave alone — or to
    // catch — somewhere else.
    const list: ReadonlyArray<HTTPRouteMatch | GRPCRouteMatch> = r.matches.length > 0 ? r.matches : [grpc ? { method: null, headers: [] } : defaultMatch]
    const built: Array<Pick<MatchSpec, 'path' | 'method' | 'headers' | 'query'>> = []
    for (let matchIndex = 0; matchIndex < list.length; matchIndex++) {
      const m = list[matchIndex] as HTTPRouteMatch | GRPCRouteMatch
      try {
        built.push(grpc ? compileGrpcMatch(m as GRPCRouteMatch) : compileHttpMatch(m as HTTPRouteMatch))
      } catch (err) {
        droppedRules.push({ index: ruleIndex, name: r.name, field: matchField(m, ruleIndex, matchIndex, grpc), message: (err as Error).message })
        return
      }
    }
    const rule = compileRule(route, ruleIndex, r.name, r.filters, r.backendRefs, grpc ? null : (r as HTTPRoute['rules'][number]).timeouts,
      grpc ? null : (r as HTTPRoute['rules'][number]).retry, rulePolicies?.[ruleIndex] ?? policy, [gatewayExt?.extensions ?? null, routeExt !== gatewayExt ? routeExt?.extensions ?? null : null], ctx, refProblems)
    rules.push(rule)
    built.forEach((compiled, matchIndex) => matches.push({ ...compiled, rule, route, ruleIndex, matchIndex }))
  })
  return { rules, matches, refProblems, droppedRules }
}

/** The field of a match that did not compile: its regular expression (the only thing that throws). */
function matchField(m: HTTPRouteMatch | GRPCRouteMatch, ruleIndex: number, matchIndex: number, grpc: boolean): string {
  const at = `spec.rules[${ruleIndex}].matches[${matchIndex}]`
  if (grpc) return `${at}.method` // service and method are one pattern once composed
  const hm = m as HTTPRouteMatch
  if (hm.path.type === 'RegularExpression' && !compiles(hm.path.value)) return `${at}.path.value`
  for (const key of ['headers', 'queryParams'] as const) {
    const i = hm[key].findIndex(h => h.type === 'RegularExpression' && !compiles(h.value))
    if (i >= 0) return `${at}.${key}[${i}].value`
  }
  return at
}

function compiles(pattern: string): boolean {
  try {
    anchored(pattern)
    return true
  } catch {
    return false
  }
}

/**
 * Issue 6: Gateway API sessionPersistence is not implemented (a rule-level
 * cookie or header affinity needs the gateway to issue the session cookie).
 * The rule serves all the same, balanced as without it: dropping it, as
 * PartiallyInvalid would, turns a missing optimisation into an outage. The
 * route's Accepted message names each such field (assemble-status.ts), and
 * `validate` warns (validate/rules-route.ts). Empty for most routes.
 */
export function unsupportedFields(route: HTTPRoute | GRPCRoute): string[] {
  const out: string[] = []
  route.rules.forEach((r, i) => {
    if (r.sessionPersistence !== null && !route.droppedRules.some(d => d.index === i)) out.push(`spec.rules[${i}].sessionPersistence`)
  })
  return out
}

/**
 * The BackendTrafficPolicy and EgressExtension policy of a route through one
 * listener. Besides the answer, each lookup marks the policies it passes over
 * Overridden (status), so a route reused from the previous compile (issue 11)
 * calls this again.
 */
export function routePolicies(
  route: HTTPRoute | GRPCRoute, traffic: PolicyIndex<BackendTrafficPolicy>, extensions: PolicyIndex<EgressExtension>, gatewayKey: string, listenerName: string,
): { policy: BackendTrafficPolicy | null; routeExt: EgressExtension | null; rulePolicies: ReadonlyArray<BackendTrafficPolicy | null> | null } {
  const policy = traffic.forRoute(route.kind, route.meta.namespace, route.meta.name, gatewayKey, listenerName)
  // A rule sending only to Backends under one policy takes that policy's rule-scope fields (unless the route has its own).
  const own = policy !== null && traffic.get(`${route.kind}/${route.meta.namespace}/${route.meta.name}`) === policy
  const rulePolicies = traffic.winners.size === 0 || own ? null
    : route.rules.map(r => traffic.forRule(route.kind, route.meta.namespace, route.meta.name, gatewayKey, listenerName, backendSlots(r.backendRefs)))
  return { policy, routeExt: extensions.forRoute(route.kind, route.meta.namespace, route.meta.name, gatewayKey, listenerName), rulePolicies }
}

/** The policy slots of a rule's backendRefs when every one names a Backend; null otherwise (none, or a Service among them). */
function backendSlots(refs: readonly BackendRef[]): string[] | null {
  if (refs.length === 0) return null
  const out: string[] = []
  for (const ref of refs) {
    if (!isBackendKind(ref.group, ref.kind)) return null
    out.push(backendSlot(backendKey(ref.group, ref.kind, ref.namespace, ref.name)))
  }
  return out
}

/**
 * Issue 6: failover levels by backendRef name, on the route —
 * `sallyport.io/backend-priority: "openai=0, anthropic=1"` (0 primary, 1
 * secondary…). A name not listed keeps the ref's own `priority` (default 0);
 * an unreadable entry is skipped.
 */
export const BACKEND_PRIORITY = 'sallyport.io/backend-priority'

const NO_PRIORITIES: ReadonlyMap<string, number> = new Map()

export function backendPriorities(text: string | undefined): ReadonlyMap<string, number> {
  if (text === undefined) return NO_PRIORITIES // the common case: no Map per rule (issue 11)
  const out = new Map<string, number>()
  for (const part of text.split(',')) {
    const eq = part.indexOf('=')
    if (eq === -1) continue
    const n = Number(part.slice(eq + 1).trim())
    if (Number.isInteger(n) && n >= 0) out.set(part.slice(0, eq).trim(), n)
  }
  return out
}

const defaultMatch: HTTPRouteMatch = { path: { type: 'PathPrefix', value: '/' }, headers: [], queryParams: [], method: null }

function anchored(pattern: string): RegExp {
  return new RegExp(`^${group(pattern)}$`)
}

/**
 * A Gateway API (RE2-flavoured) pattern as one JS group. A leading `(?i)`,
 * which validate accepts and the README promises as the case-insensitive flag,
 * is not JS syntax: it becomes a modifier group `(?i:...)`, which also keeps
 * it to its own part of a composed pattern (a GRPCRoute service or method).
 */
function group(pattern: string): string {
  return pattern.startsWith('(?i)') ? `(?i:${pattern.slice(4)})` : `(?:${pattern})`
}

/** Gateway API: of several entries with an equivalent name only the first is considered. */
function headerMatchers(list: readonly HTTPHeaderMatch[], lowercase: boolean): HeaderMatcher[] | null {
  const out: HeaderMatcher[] = []
  for (const h of list) {
    const name = lowercase ? h.name.toLowerCase() : h.name
    if (out.some(o => o.name === name)) continue
    out.push(h.type === 'RegularExpression' ? { name, exact: null, regex: anchored(h.value) } : { name, exact: h.value, regex: null })
  }
  return out.length > 0 ? out : null
}

function compileHttpMatch(m: HTTPRouteMatch): Pick<MatchSpec, 'path' | 'method' | 'headers' | 'query'> {
  const path: PathMatcher = m.path.type === 'RegularExpression'
    ? { type: 'RegularExpression', value: m.path.value, regex: anchored(m.path.value) }
    : { type: m.path.type, value: m.path.value, regex: null }
  return {
    path,
    method: m.method === null ? null : m.method.toUpperCase(),
    headers: headerMatchers(m.headers, true),
    query: headerMatchers(m.queryParams, false), // query param names are case-sensitive
  }
}

function escapeRegex(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')
}

/** GRPCRoute: a method match is a match on the HTTP/2 :path `/{service}/{method}`, always POST. */
function compileGrpcMatch(m: GRPCRouteMatch): Pick<MatchSpec, 'path' | 'method' | 'headers' | 'query'> {
  const headers = headerMatchers(m.headers, true)
  const mm = m.method
  let path: PathMatcher
  if (mm === null || (mm.service === null && mm.method === null)) {
    path = { type: 'PathPrefix', value: '/', regex: null }
  } else if (mm.type === 'Exact' && mm.service !== null && mm.method !== null) {
    path = { type: 'Exact', value: `/${mm.service}/${mm.method}`, regex: null }
  } else if (mm.type === 'Exact' && mm.service !== null) {
    path = { type: 'PathPrefix', value: `/${mm.service}/`, regex: null }
  } else {
    const svc = mm.service === null ? '[^/]+' : mm.type === 'Exact' ? escapeRegex(mm.service) : mm.service
    const method = mm.method === null ? '[^/]+' : mm.type === 'Exact' ? escapeRegex(mm.method) : mm.method
    // Each pattern grouped: an alternation in one (`Get|List`) must not split the whole path.
    const value = `/${group(svc)}/${group(method)}`
    path = { type: 'RegularExpression', value, regex: anchored(value) }
  }
  return { path, method: 'POST', headers, query: null }
}

function headerEdits(mod: HeaderModifier): HeaderEdits {
  return { set: firstOfEachName(mod.set), add: firstOfEachName(mod.add), remove: mod.remove.map(n => n.toLowerCase()) }
}

/**
 * Gateway API HTTPHeader.name: of entries with an equivalent name ("foo" and
 * "Foo") the first counts and the others are ignored; the CRD's list-map key
 * is case-sensitive, so the API server lets such lists through.
 */
function firstOfEachName(list: HeaderModifier['set']): Array<readonly [string, string]> {
  const out: Array<readonly [string, string]> = []
  for (const h of list) {
    const name = h.name.toLowerCase()
    if (!out.some(o => o[0] === name)) out.push([name, h.value])
  }
  return out
}

function pathRewrite(p: HTTPPathModifier | null): PathRewrite | null {
  if (p === null) return null
  return p.type === 'ReplaceFullPath' ? { type: 'ReplaceFullPath', value: p.replaceFullPath ?? '/' } : { type: 'ReplacePrefixMatch', value: p.replacePrefixMatch ?? '/' }
}

function compileRule(
  route: HTTPRoute | GRPCRoute, ruleIndex: number, ruleName: string | null, filters: readonly HTTPRouteFilter[],
  backendRefs: readonly BackendRef[], timeouts: HTTPRoute['rules'][number]['timeouts'], retry: HTTPRoute['rules'][number]['retry'],
  policy: BackendTrafficPolicy | null, extScopes: ReadonlyArray<readonly import('../resources/model.ts').ExtensionSpec[] | null>,
  ctx: RuleContext, refProblems: RefProblem[],
): RouteRule {
  const from = { group: GATEWAY_GROUP, kind: route.kind, namespace: route.meta.namespace, name: route.meta.name }
  let requestHeaders: HeaderEdits | null = null
  let responseHeaders: HeaderEdits | null = null
  let redirect: Redirect | null = null
  let rewriteHost: string | null = null
  let rewritePath: PathRewrite | null = null
  const mirrors: Mirror[] = []
  const refExtensions: import('../resources/model.ts').ExtensionSpec[] = []
  const refScopes: ScopedExtensions[] = []
  let badFilter: string | null = null
  filters.forEach((f, filterIndex) => {
    switch (f.type) {
      case 'RequestHeaderModifier': requestHeaders = headerEdits(f.requestHeaderModifier); break
      case 'ResponseHeaderModifier': responseHeaders = headerEdits(f.responseHeaderModifier); break
      case 'RequestRedirect': {
        const rr = f.requestRedirect
        redirect = { scheme: rr.scheme, hostname: rr.hostname, port: rr.port, path: pathRewrite(rr.path), statusCode: rr.statusCode }
        break
      }
      case 'URLRewrite': rewriteHost = f.urlRewrite.hostname; rewritePath = pathRewrite(f.urlRewrite.path); break
      case 'RequestMirror': {
        const r = ctx.resolver.resolve(f.requestMirror.backendRef, from, route.kind, ctx.gatewayKey)
        if (!r.ok) refProblems.push({ reason: r.reason, message: r.message, field: `spec.rules[${ruleIndex}].filters[${filterIndex}].requestMirror.backendRef` })
        // A mirror to a destination the Gateway denies is not sent (issue 5).
        const mirrorDenied = r.ok && ctx.resolver.denial(r.value, ctx.gatewayKey) !== null
        mirrors.push({ cluster: r.ok && !mirrorDenied ? r.value : null, percent: f.requestMirror.percent ?? 100 })
        break
      }
      case 'CORS': break // not compiled yet (see report); the rule still routes
      case 'ExtensionRef': {
        const ref = f.extensionRef
        const ext = ref.group === 'sallyport.io' && ref.kind === 'EgressExtension' ? ctx.egressExtensions.get(`${route.meta.namespace}/${ref.name}`) : undefined
        if (ext === undefined) {
          badFilter = `ExtensionRef ${ref.group}/${ref.kind} ${ref.name} cannot be resolved`
          refProblems.push({ reason: ref.kind === 'EgressExtension' ? 'BackendNotFound' : 'InvalidKind', message: badFilter, field: `spec.rules[${ruleIndex}].filters[${filterIndex}].extensionRef` })
        } else {
          refExtensions.push(...ext.extensions)
          refScopes.push({ scope: 'Route', owner: egressExtensionOwner(ext), list: ext.extensions })
        }
        break
      }
    }
  })

  const ruleId = `${route.kind.toLowerCase()}/${route.meta.namespace}/${route.meta.name}/rule/${ruleIndex}`
  const scopes = ctx.extensionCompiler === undefined ? [] : ruleScopes(route, ctx, refScopes)
  // Issue 7: BackendTrafficPolicy.rateLimit runs as a RateLimit extension (Route scope when the policy targets the route).
  const limit = policy === null || ctx.extensionCompiler === undefined ? null : rateLimitExtension(policy)
  if (limit !== null && policy !== null) {
    const own = policy.targetRefs.some(r => r.kind === route.kind && r.name === route.meta.name)
    scopes.push({ scope: own ? 'Route' : 'Gateway', owner: trafficPolicyOwner(policy), list: [limit] })
  }

  // Backends. Gateway API: invalid refs get 500 for their share; all invalid → 500.
  const priorities = backendPriorities(route.meta.annotations[BACKEND_PRIORITY])
  let backends: WeightedCluster[] | null = null // exact size for the usual single backendRef (kept in the table)
  let totalWeight = 0
  let valid = 0
  let denied: RouteRule['direct'] = null
  let deniedCount = 0
  backendRefs.forEach((ref, refIndex) => {
    const r = ctx.resolver.resolve(ref, from, route.kind, ctx.gatewayKey, ctx.meshed)
    if (!r.ok) refProblems.push({ reason: r.reason, message: r.message, field: `spec.rules[${ruleIndex}].backendRefs[${refIndex}]` })
    else valid++
    // Issue 5: a backend the Gateway's destination policy denies answers 403 for its share.
    const denial = r.ok ? ctx.resolver.denial(r.value, ctx.gatewayKey) : null
    if (denial !== null) { denied = denial.direct; deniedCount++ }
    let req: HeaderEdits | null = null
    let res: HeaderEdits | null = null
    for (const f of ref.filters) {
      if (f.type === 'RequestHeaderModifier') req = headerEdits(f.requestHeaderModifier)
      if (f.type === 'ResponseHeaderModifier') res = headerEdits(f.responseHeaderModifier)
    }
    const wc: WeightedCluster = { cluster: r.ok ? r.value : null, weight: ref.weight, priority: priorities.get(ref.name) ?? ref.priority, requestHeaders: req, responseHeaders: res }
    const chain = r.ok && ctx.extensionCompiler !== undefined ? clusterChain(ctx, ctx.extensionCompiler, ruleId, r.value, scopes) : null
    const withChain = chain === null ? wc : { ...wc, extensions: chain }
    const b = denial === null ? withChain : { ...withChain, denied: denial.direct }
    if (backends === null) backends = [b]; else backends.push(b)
    totalWeight += ref.weight
  })

  let direct: RouteRule['direct'] = null
  if (badFilter !== null) direct = { status: 500, code: ErrorCode.BACKEND_INVALID, body: 'route filter cannot be resolved' }
  else if (redirect === null && backendRefs.length > 0 && valid === 0) direct = { status: 500, code: ErrorCode.BACKEND_INVALID, body: 'no valid backend' }
  else if (redirect === null && totalWeight === 0) direct = { status: 500, code: ErrorCode.BACKEND_INVALID, body: 'no backend with weight' }
  else if (redirect === null && valid > 0 && deniedCount === valid) direct = denied

  const t: RouteTimeouts = {
    requestMs: timeouts?.request ?? policy?.timeout?.requestMs ?? null,
    backendRequestMs: timeouts?.backendRequest ?? null,
    connectMs: policy?.timeout?.connectMs ?? null,
    idleMs: policy?.timeout?.idleMs ?? null,
  }
  let retrySpec: RetrySpec | null = null
  if (retry !== null || policy?.retry != null) {
    const p = policy?.retry ?? null
    retrySpec = {
      attempts: retry?.attempts ?? p?.numRetries ?? 1,
      codes: retry !== null && retry.codes.length > 0 ? retry.codes : p?.httpStatusCodes ?? [],
      backoffMs: retry?.backoff ?? null,
      policy: p,
    }
  }
  const answered = direct !== null || redirect !== null
  return {
    id: ruleId,
    route: { kind: route.kind, namespace: route.meta.namespace, name: route.meta.name },
    ruleIndex, ruleName, gateway: `${ctx.gatewayKey}/${ctx.listenerName}`,
    requestHeaders, responseHeaders, redirect, rewriteHost, rewritePath,
    mirrors: mirrors.length > 0 ? mirrors : null,
    direct,
    backends: answered ? null : backends ?? [],
    totalWeight,
    timeouts: t,
    retry: retrySpec,
    extensions: mergeExtensions([...extScopes, refExtensions]),
    meshed: ctx.meshed,
    grpc: route.kind === 'GRPCRoute',
    ...connectPolicyOf(route, backendRefs.length === 0 && redirect === null && badFilter === null ? ctx : null, ruleIndex),
  }
}

/**
 * Issue 9, forward-proxy mode: an HTTPRoute opts its hostnames into HTTP
 * CONNECT with `sallyport.io/connect-ports: "443"` (and asks for the SNI check
 * with `sallyport.io/connect-verify-sni: "true"`). Without the annotation the
 * rule has no `connect` field (CONNECT refused), so tables stay as they were.
 */
/**
 * Issue 9, forward-proxy mode: an HTTPRoute opts its hostnames into HTTP
 * CONNECT with `sallyport.io/connect-ports: "443"` (and asks for the SNI check
 * with `sallyport.io/connect-verify-sni: "true"`). Without the annotation the
 * rule has no `connect` field (CONNECT refused), so tables stay as they were.
 * A rule without backendRefs (`requestedFrom` set) tunnels to the requested
 * host itself, under its Gateway's destination policy and upstream proxy.
 */
const NO_CONNECT: { connect?: RouteRule['connect'] } = Object.freeze({})
function connectPolicyOf(route: HTTPRoute | GRPCRoute, requestedFrom: RuleContext | null, ruleIndex: number): { connect?: RouteRule['connect'] } {
  const text = route.kind === 'HTTPRoute' ? route.meta.annotations[ANNOTATIONS.CONNECT_PORTS] : undefined
  if (text === undefined) return NO_CONNECT
  // An unreadable value is ignored (CONNECT stays refused); validate says why.
  const ports = parseConnectPorts(text)
  if (!ports.ok) return NO_CONNECT
  const sni = parseBool(route.meta.annotations[ANNOTATIONS.CONNECT_VERIFY_SNI] ?? 'false')
  const verifySni = sni.ok && sni.value
  if (requestedFrom === null) return { connect: { ports: ports.value, verifySni } }
  const { resolver, gatewayKey } = requestedFrom
  const ns = route.meta.namespace
  const template: Cluster = {
    id: `CONNECT/${ns}/${route.meta.name}/${ruleIndex}`, kind: 'Backend', namespace: ns, name: route.meta.name, port: 0, protocol: 'TCP',
    hostname: null, endpoints: [], tls: null, mcpPath: null, extensions: null, lb: null, circuitBreaker: null, healthCheck: null,
    fallback: false, region: null, enableIPv6: false, destination: null, upstreamProxy: resolver.proxies.forGateway(gatewayKey),
  }
  return { connect: { ports: ports.value, verifySni, requested: resolver.destinations.requested(gatewayKey, template) } }
}

// ── extension scopes (issue 7) ──

/** Route scope (the route's EgressExtension and ExtensionRef filters) and Gateway scope (listener, else whole Gateway). */
function ruleScopes(route: HTTPRoute | GRPCRoute, ctx: RuleContext, refScopes: readonly ScopedExtensions[]): ScopedExtensions[] {
  const out: ScopedExtensions[] = [...refScopes]
  if (ctx.extensions.winners.size === 0) return out // no EgressExtension policy at all: no keys to build per rule (issue 11)
  const own = ctx.extensions.get(`${route.kind}/${route.meta.namespace}/${route.meta.name}`)
  if (own !== null && !refScopes.some(s => s.owner.namespace === own.meta.namespace && s.owner.name === own.meta.name)) out.push({ scope: 'Route', owner: egressExtensionOwner(own), list: own.extensions })
  const gw = ctx.extensions.get(`Listener/${ctx.gatewayKey}/${ctx.listenerName}`) ?? ctx.extensions.get(`Gateway/${ctx.gatewayKey}`)
  if (gw !== null) out.push({ scope: 'Gateway', owner: egressExtensionOwner(gw), list: gw.extensions })
  return out
}

function clusterChain(ctx: RuleContext, compiler: ExtensionCompiler, ruleId: string, clusterId: string, scopes: readonly ScopedExtensions[]): import('./table.ts').ExtensionChain | null {
  const cluster = ctx.resolver.cluster(clusterId)
  const list = scopes.slice()
  if (cluster !== null && cluster.extensions !== null && cluster.backendKey !== undefined) {
    const owner = compiler.backendOwner(cluster.backendKey)
    if (owner !== null) list.push({ scope: 'Backend', owner, list: cluster.extensions })
  }
  if (list.length === 0) return null
  return compiler.chain(`${ruleId} → ${clusterId}`, list)
}
