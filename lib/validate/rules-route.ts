// HTTPRoute, GRPCRoute, TCPRoute and TLSRoute rules beyond the schema: the CEL
// of apis/v1/httproute_types.go and grpcroute_types.go, plus regexes that must
// compile as JS RegExp because that is what compile/ will build.
//
// What one error takes down (Gateway API RouteConditionPartiallyInvalid: a
// route with valid and invalid rules drops the invalid rules, Accepted=True,
// PartiallyInvalid=True "Dropped Rule ..."):
// - the whole object: what the CRD's schema and CEL refuse (path values, filter
//   unions and repeats, a redirect with backendRefs, ReplacePrefixMatch without
//   one PathPrefix match, timeouts, mirror fractions, gRPC method names, a
//   Service ref without port, parentRefs, hostnames, rule names). The API
//   server never admits such an object, so a controller never sees one from
//   the cluster; files are held to the same bar, as `kubectl apply` would be.
// - one rule (Findings.ruleError): what the API server admits and only the
//   gateway can judge — a RegularExpression (path, header, query parameter,
//   gRPC service or method) that JavaScript cannot compile, such as RE2's
//   `(?P<name>...)`; and the schema's own patterns the CRD does not have (a
//   header modifier value, a redirect or rewrite path: schema.ts
//   x-crd-admits). The rule is dropped, the route's other rules serve.

import { asArr, asNum, asStr, has, objAt, objsAt, strAt } from './access.ts'
import type { Obj } from './access.ts'
import { gatewayDurationMs, pathValueProblem, regexProblem } from './checks.ts'
import { Findings, child, item } from './findings.ts'
import { checkHostnames, checkParentRefs, checkRuleNames } from './rules-common.ts'

const HTTP_FILTER_FIELD: Readonly<Record<string, string>> = {
  RequestHeaderModifier: 'requestHeaderModifier',
  ResponseHeaderModifier: 'responseHeaderModifier',
  RequestMirror: 'requestMirror',
  RequestRedirect: 'requestRedirect',
  URLRewrite: 'urlRewrite',
  CORS: 'cors',
  ExternalAuth: 'externalAuth',
  ExtensionRef: 'extensionRef',
}
/** Filter types that may appear only once per list. */
const SINGLE = new Set(['RequestHeaderModifier', 'ResponseHeaderModifier', 'RequestRedirect', 'URLRewrite', 'CORS'])

export function checkHTTPRoute(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  checkParentRefs(spec, f)
  checkHostnames(spec, f)
  checkRuleNames(spec, f)
  for (const [rule, r] of objsAt(spec, 'rules')) {
    const at = item('spec.rules', r)
    objsAt(rule, 'matches').forEach(([m, i]) => checkHTTPMatch(m, item(child(at, 'matches'), i), r, f))
    const prefixOnly = isSinglePrefixMatch(rule)
    checkFilters(rule.filters, child(at, 'filters'), prefixOnly, f)
    const backends = objsAt(rule, 'backendRefs')
    for (const [ref, b] of backends) {
      const refAt = item(child(at, 'backendRefs'), b)
      checkBackendRefPort(ref, refAt, f)
      checkFilters(ref.filters, child(refAt, 'filters'), prefixOnly, f)
    }
    if (backends.length > 0 && asArr(rule.filters).some((x) => strAt(asObjOrNull(x), 'type') === 'RequestRedirect')) {
      f.error(child(at, 'filters'), 'a RequestRedirect filter cannot be used together with backendRefs')
    }
    checkTimeouts(objAt(rule, 'timeouts'), child(at, 'timeouts'), f)
    checkSessionPersistence(objAt(rule, 'sessionPersistence'), child(at, 'sessionPersistence'), f)
  }
}

function asObjOrNull(v: unknown): Obj | null {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Obj) : null
}

function checkHTTPMatch(m: Obj, at: string, rule: number, f: Findings): void {
  const path = objAt(m, 'path')
  if (path !== null) {
    const type = strAt(path, 'type') ?? 'PathPrefix'
    const value = strAt(path, 'value') ?? '/'
    if (type === 'RegularExpression') {
      const p = regexProblem(value)
      if (p !== null) f.ruleError(rule, child(at, 'path.value'), p)
    } else {
      const p = pathValueProblem(value) // the CRD's CEL (HTTPPathMatch)
      if (p !== null) f.error(child(at, 'path.value'), p)
    }
  }
  for (const key of ['headers', 'queryParams']) {
    const names = new Set<string>()
    const first = new Map<string, string>()
    for (const [h, i] of objsAt(m, key)) {
      const hAt = item(child(at, key), i)
      const name = strAt(h, 'name') ?? ''
      // The CRD's list map (listMapKey name) refuses one name twice: the whole object.
      if (names.has(name)) f.error(child(hAt, 'name'), `"${name}" is matched twice in one match`)
      else if (key === 'headers') {
        // Header names compare case-insensitively (query parameter names do not): of
        // equivalent ones the first counts and the rest are ignored (Gateway API
        // HTTPHeaderMatch.name; compile/rules.ts keeps the first).
        const earlier = first.get(name.toLowerCase())
        if (earlier === undefined) first.set(name.toLowerCase(), name)
        else f.warn(child(hAt, 'name'), `"${name}" repeats "${earlier}" (header names compare case-insensitively); this entry is ignored`)
      }
      names.add(name)
      if (strAt(h, 'type') === 'RegularExpression') {
        const p = regexProblem(strAt(h, 'value') ?? '')
        if (p !== null) f.ruleError(rule, child(hAt, 'value'), p)
      }
    }
  }
}

/** Rules with one PathPrefix match (or none: the default is PathPrefix "/"). */
function isSinglePrefixMatch(rule: Obj): boolean {
  const matches = objsAt(rule, 'matches')
  if (asArr(rule.matches).length === 0) return true
  if (matches.length !== 1) return false
  const path = objAt(matches[0]?.[0] ?? null, 'path')
  return path === null || (strAt(path, 'type') ?? 'PathPrefix') === 'PathPrefix'
}

function checkFilters(list: unknown, base: string, prefixOnly: boolean, f: Findings): void {
  const seen = new Set<string>()
  let redirect = -1
  let rewrite = -1
  asArr(list).forEach((v, i) => {
    const flt = asObjOrNull(v)
    if (flt === null) return
    const at = item(base, i)
    const type = strAt(flt, 'type') ?? ''
    checkFilterUnion(flt, type, at, HTTP_FILTER_FIELD, f)
    if (SINGLE.has(type)) {
      if (seen.has(type)) f.error(child(at, 'type'), `${type} filter cannot be repeated`)
      seen.add(type)
    }
    if (type === 'RequestRedirect') redirect = i
    if (type === 'URLRewrite') rewrite = i
    const mod = objAt(flt, type === 'RequestRedirect' ? 'requestRedirect' : 'urlRewrite')
    if (type === 'RequestRedirect' || type === 'URLRewrite') checkPathModifier(objAt(mod, 'path'), child(at, `${HTTP_FILTER_FIELD[type]}.path`), prefixOnly, f)
    if (type === 'RequestMirror') checkMirror(objAt(flt, 'requestMirror'), child(at, 'requestMirror'), f)
    if (type === 'CORS') checkCors(objAt(flt, 'cors'), child(at, 'cors'), f)
    if (type === 'ResponseHeaderModifier') checkResponseFraming(objAt(flt, 'responseHeaderModifier'), child(at, 'responseHeaderModifier'), f)
    if (type.endsWith('HeaderModifier')) checkRepeatedNames(objAt(flt, HTTP_FILTER_FIELD[type] ?? ''), child(at, HTTP_FILTER_FIELD[type] ?? ''), f)
  })
  if (redirect >= 0 && rewrite >= 0) f.error(item(base, Math.max(redirect, rewrite)), 'RequestRedirect and URLRewrite cannot both be used in one rule')
}

/**
 * A response's framing is the upstream's (router/headers.ts keepFraming): an edit of
 * Content-Length or Transfer-Encoding would desync the client's connection, so the
 * gateway ignores it, and says so here.
 */
function checkResponseFraming(mod: Obj | null, at: string, f: Findings): void {
  if (mod === null) return
  for (const op of ['set', 'add', 'remove'] as const) {
    asArr(mod[op]).forEach((v, i) => {
      const name = op === 'remove' ? asStr(v) : strAt(asObjOrNull(v), 'name')
      const lower = name?.toLowerCase()
      if (lower === 'content-length' || lower === 'transfer-encoding') {
        f.warn(item(child(at, op), i), `${name} frames the response and stays the upstream's; this edit is ignored`)
      }
    })
  }
}

/**
 * Gateway API HTTPHeader.name: of `set` or `add` entries with an equivalent
 * name ("foo", "Foo") only the first counts (compile/rules.ts keeps it).
 */
function checkRepeatedNames(mod: Obj | null, at: string, f: Findings): void {
  if (mod === null) return
  for (const op of ['set', 'add'] as const) {
    const first = new Map<string, string>()
    asArr(mod[op]).forEach((v, i) => {
      const name = strAt(asObjOrNull(v), 'name')
      if (name === null) return
      const earlier = first.get(name.toLowerCase())
      if (earlier === undefined) first.set(name.toLowerCase(), name)
      else f.warn(child(item(child(at, op), i), 'name'), `"${name}" repeats "${earlier}" (header names compare case-insensitively); this entry is ignored`)
    })
  }
}

/** Gateway API filters are unions: the field named by `type` is set, no other is. */
export function checkFilterUnion(flt: Obj, type: string, at: string, fields: Readonly<Record<string, string>>, f: Findings): void {
  const own = fields[type]
  if (own !== undefined && !has(flt, own)) f.error(child(at, own), `required when type is ${type}`)
  for (const [t, key] of Object.entries(fields)) {
    if (t !== type && has(flt, key)) f.error(child(at, key), `must not be set when type is ${type}`)
  }
}

function checkPathModifier(path: Obj | null, at: string, prefixOnly: boolean, f: Findings): void {
  if (path === null) return
  const type = strAt(path, 'type')
  for (const [t, key] of [['ReplaceFullPath', 'replaceFullPath'], ['ReplacePrefixMatch', 'replacePrefixMatch']] as const) {
    if (type === t && !has(path, key)) f.error(child(at, key), `required when type is ${t}`)
    if (type !== t && has(path, key)) f.error(child(at, key), `must not be set when type is ${type ?? ''}`)
    // A value must start with "/" (and be visible ASCII): the schema's httpPath pattern, a
    // check of sallyport's own (the CRD bounds the length only) that drops the rule alone.
  }
  if (type === 'ReplacePrefixMatch' && !prefixOnly) f.error(child(at, 'type'), 'ReplacePrefixMatch needs the rule to have exactly one PathPrefix match')
}

function checkMirror(mirror: Obj | null, at: string, f: Findings): void {
  if (mirror === null) return
  if (has(mirror, 'percent') && has(mirror, 'fraction')) f.error(child(at, 'fraction'), 'set percent or fraction, not both')
  const fr = objAt(mirror, 'fraction')
  const num = asNum(fr?.numerator)
  const den = asNum(fr?.denominator) ?? 100
  if (num !== null && num > den) f.error(child(at, 'fraction.numerator'), `${num} is greater than the denominator ${den}`)
  checkBackendRefPort(objAt(mirror, 'backendRef'), child(at, 'backendRef'), f)
}

function checkCors(cors: Obj | null, at: string, f: Findings): void {
  for (const key of ['allowOrigins', 'allowMethods', 'allowHeaders']) {
    const list = asArr(cors?.[key])
    if (list.includes('*') && list.length > 1) f.error(child(at, key), `"*" cannot be combined with other values`)
  }
}

/** A Service reference (core group, kind Service, the default) needs a port. */
export function checkBackendRefPort(ref: Obj | null, at: string, f: Findings): void {
  if (ref === null) return
  const group = strAt(ref, 'group') ?? ''
  const kind = strAt(ref, 'kind') ?? 'Service'
  if (group === '' && kind === 'Service' && !has(ref, 'port')) f.error(child(at, 'port'), 'required for a Service reference')
}

function checkTimeouts(t: Obj | null, at: string, f: Findings): void {
  if (t === null) return
  const request = gatewayDurationMs(strAt(t, 'request') ?? '')
  const backend = gatewayDurationMs(strAt(t, 'backendRequest') ?? '')
  if (request !== null && backend !== null && request !== 0 && backend > request) {
    f.error(child(at, 'backendRequest'), `${String(t.backendRequest)} is longer than the request timeout ${String(t.request)}`)
  }
}

function checkSessionPersistence(sp: Obj | null, at: string, f: Findings): void {
  if (sp === null) return
  // Not implemented: the rule serves, balanced as it would be without it
  // (compile/rules.ts unsupportedFields; the Accepted condition says so too).
  f.warn(at, 'not supported: the rule is served without session affinity (use a BackendTrafficPolicy loadBalancer ConsistentHash by Header or Cookie)')
  const type = strAt(sp, 'type') ?? 'Cookie'
  if (has(sp, 'header') && type !== 'Header') f.error(child(at, 'header'), `must not be set when type is ${type}`)
  if (has(sp, 'cookie') && type !== 'Cookie') f.error(child(at, 'cookie'), `must not be set when type is ${type}`)
  if (strAt(sp, 'type') === 'Header' && !has(sp, 'header') && !has(sp, 'sessionName')) f.error(child(at, 'header'), 'required when type is Header')
  const lifetime = strAt(objAt(sp, 'cookieConfig'), 'lifetimeType') ?? strAt(objAt(sp, 'cookie'), 'lifetimeType')
  if (lifetime === 'Permanent' && !has(sp, 'absoluteTimeout')) f.error(child(at, 'absoluteTimeout'), 'required when the cookie lifetimeType is Permanent')
}

const GRPC_FILTER_FIELD: Readonly<Record<string, string>> = {
  RequestHeaderModifier: 'requestHeaderModifier',
  ResponseHeaderModifier: 'responseHeaderModifier',
  RequestMirror: 'requestMirror',
  ExtensionRef: 'extensionRef',
}
const GRPC_SERVICE = /^\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$/i
const GRPC_METHOD = /^[A-Za-z_][A-Za-z_0-9]*$/

export function checkGRPCRoute(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  checkParentRefs(spec, f)
  checkHostnames(spec, f)
  checkRuleNames(spec, f)
  for (const [rule, r] of objsAt(spec, 'rules')) {
    const at = item('spec.rules', r)
    for (const [m, i] of objsAt(rule, 'matches')) {
      const mAt = item(child(at, 'matches'), i)
      const method = objAt(m, 'method')
      if (method !== null) checkGRPCMethod(method, child(mAt, 'method'), r, f)
      for (const [h, j] of objsAt(m, 'headers')) {
        if (strAt(h, 'type') !== 'RegularExpression') continue
        const p = regexProblem(strAt(h, 'value') ?? '')
        if (p !== null) f.ruleError(r, child(item(child(mAt, 'headers'), j), 'value'), p)
      }
    }
    const lists: Array<[unknown, string]> = [[rule.filters, child(at, 'filters')]]
    for (const [ref, b] of objsAt(rule, 'backendRefs')) {
      const refAt = item(child(at, 'backendRefs'), b)
      checkBackendRefPort(ref, refAt, f)
      lists.push([ref.filters, child(refAt, 'filters')])
    }
    for (const [list, base] of lists) {
      const seen = new Set<string>()
      asArr(list).forEach((v, i) => {
        const flt = asObjOrNull(v)
        if (flt === null) return
        const type = strAt(flt, 'type') ?? ''
        checkFilterUnion(flt, type, item(base, i), GRPC_FILTER_FIELD, f)
        if (type.endsWith('HeaderModifier') && seen.has(type)) f.error(child(item(base, i), 'type'), `${type} filter cannot be repeated`)
        if (type.endsWith('HeaderModifier')) checkRepeatedNames(objAt(flt, GRPC_FILTER_FIELD[type] ?? ''), child(item(base, i), GRPC_FILTER_FIELD[type] ?? ''), f)
        seen.add(type)
        if (type === 'RequestMirror') checkMirror(objAt(flt, 'requestMirror'), child(item(base, i), 'requestMirror'), f)
      })
    }
    checkSessionPersistence(objAt(rule, 'sessionPersistence'), child(at, 'sessionPersistence'), f)
  }
}

function checkGRPCMethod(method: Obj, at: string, rule: number, f: Findings): void {
  const type = strAt(method, 'type') ?? 'Exact'
  const service = asStr(method.service)
  const name = asStr(method.method)
  if (service === null && name === null) {
    f.error(at, 'one or both of service and method must be set')
    return
  }
  if (type === 'Exact') {
    if (service !== null && !GRPC_SERVICE.test(service)) f.error(child(at, 'service'), `"${service}" is not a valid gRPC service name`)
    if (name !== null && !GRPC_METHOD.test(name)) f.error(child(at, 'method'), `"${name}" is not a valid gRPC method name`)
    return
  }
  for (const [key, value] of [['service', service], ['method', name]] as const) {
    if (value === null) continue
    const p = regexProblem(value)
    if (p !== null) f.ruleError(rule, child(at, key), p)
  }
}

/** TCPRoute and TLSRoute: parents, hostnames (TLS), rule names, Service ports. */
export function checkL4Route(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  checkParentRefs(spec, f)
  checkHostnames(spec, f)
  checkRuleNames(spec, f)
  for (const [rule, r] of objsAt(spec, 'rules')) {
    for (const [ref, b] of objsAt(rule, 'backendRefs')) checkBackendRefPort(ref, item(child(item('spec.rules', r), 'backendRefs'), b), f)
  }
}
