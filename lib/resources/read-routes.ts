// HTTPRoute, GRPCRoute, TCPRoute, TLSRoute and ReferenceGrant in any Gateway
// API version, with the API's defaults applied (httproute_types.go,
// grpcroute_types.go). Shared parts are in read-route-parts.ts.

import type { SourceRef } from './meta.ts'
import type {
  GRPCRoute, GRPCRouteMatch, GRPCRouteRule, HTTPHeaderMatch, HTTPPathMatch, HTTPRoute, HTTPRouteFilter, HTTPRouteMatch,
  HTTPRouteRule, L4RouteRule, ReferenceGrant, TCPRoute, TLSRoute,
} from './model.ts'
import { type Fields, durationAt, listAt, nonEmptyAt, numberAt, numbersAt, objectAt, stringsAt, textAt } from './read-fields.ts'
import { apiVersionOf, readMeta } from './read-meta.ts'
import { readBackendRef, readFilter, readParentRef, readSessionPersistence } from './read-route-parts.ts'

type RouteKind = 'HTTPRoute' | 'GRPCRoute' | 'TCPRoute' | 'TLSRoute'

function readCommon(doc: Fields, kind: RouteKind) {
  const meta = readMeta(doc, kind)
  const spec = objectAt(doc, 'spec')
  return {
    meta,
    spec,
    apiVersion: apiVersionOf(doc),
    parentRefs: listAt(spec, 'parentRefs').map((p) => readParentRef(p, meta.namespace)),
  }
}

function hostnamesOf(spec: Fields | null): string[] {
  return stringsAt(spec, 'hostnames').map((h) => h.toLowerCase())
}

function filtersOf(o: Fields, ns: string): HTTPRouteFilter[] {
  return listAt(o, 'filters').map((f) => readFilter(f, ns)).filter((f): f is HTTPRouteFilter => f !== null)
}

// ───────────────────────────── HTTPRoute ─────────────────────────────

export function readHTTPRoute(doc: Fields, source: SourceRef): HTTPRoute {
  const { meta, spec, apiVersion, parentRefs } = readCommon(doc, 'HTTPRoute')
  const ns = meta.namespace
  // The v1 CRD defaults an absent spec.rules to one rule matching PathPrefix
  // "/" (with no backendRefs, which the API answers with 404/500 at compile).
  const ruleDocs = listAt(spec, 'rules')
  const rules = (ruleDocs.length > 0 ? ruleDocs : [{}]).map((r) => readHTTPRule(r, ns))
  // Rules validation found invalid are marked by the snapshot builder (config/snapshot-builder.ts withDroppedRules).
  return { kind: 'HTTPRoute', apiVersion, meta, source, parentRefs, hostnames: hostnamesOf(spec), rules, droppedRules: [] }
}

const MATCH_ALL: HTTPRouteMatch = { path: { type: 'PathPrefix', value: '/' }, headers: [], queryParams: [], method: null }

function readHTTPRule(r: Fields, ns: string): HTTPRouteRule {
  const matchDocs = listAt(r, 'matches')
  const timeouts = objectAt(r, 'timeouts')
  const retry = objectAt(r, 'retry')
  return {
    name: nonEmptyAt(r, 'name'),
    // Gateway API default: a rule without matches has one match of PathPrefix "/".
    matches: matchDocs.length === 0 ? [MATCH_ALL] : matchDocs.map(readHTTPMatch),
    filters: filtersOf(r, ns),
    backendRefs: listAt(r, 'backendRefs').map((b) => readBackendRef(b, ns)),
    timeouts: timeouts === null ? null : { request: durationAt(timeouts, 'request'), backendRequest: durationAt(timeouts, 'backendRequest') },
    retry: retry === null ? null : { codes: numbersAt(retry, 'codes'), attempts: numberAt(retry, 'attempts'), backoff: durationAt(retry, 'backoff') },
    sessionPersistence: readSessionPersistence(objectAt(r, 'sessionPersistence')),
  }
}

const PATH_TYPES = new Set(['Exact', 'PathPrefix', 'RegularExpression'])

/** A match without a path matches PathPrefix "/"; a path without type is PathPrefix, without value "/". */
function readHTTPMatch(m: Fields): HTTPRouteMatch {
  const p = objectAt(m, 'path')
  let path: HTTPPathMatch = MATCH_ALL.path
  if (p !== null) {
    const type = textAt(p, 'type')
    path = { type: (type !== null && PATH_TYPES.has(type) ? type : 'PathPrefix') as HTTPPathMatch['type'], value: textAt(p, 'value') ?? '/' }
  }
  return {
    path,
    headers: readHeaderMatches(m, 'headers'),
    queryParams: readHeaderMatches(m, 'queryParams'),
    method: nonEmptyAt(m, 'method'),
  }
}

/** Header and query-param matches; type default Exact. */
function readHeaderMatches(m: Fields, key: string): HTTPHeaderMatch[] {
  return listAt(m, key).map((h) => ({
    type: textAt(h, 'type') === 'RegularExpression' ? 'RegularExpression' : 'Exact',
    name: textAt(h, 'name') ?? '',
    value: textAt(h, 'value') ?? '',
  }))
}

// ───────────────────────────── GRPCRoute ─────────────────────────────

export function readGRPCRoute(doc: Fields, source: SourceRef): GRPCRoute {
  const { meta, spec, apiVersion, parentRefs } = readCommon(doc, 'GRPCRoute')
  const ns = meta.namespace
  const rules: GRPCRouteRule[] = listAt(spec, 'rules').map((r) => ({
    name: nonEmptyAt(r, 'name'),
    // Empty matches are kept empty: for GRPCRoute that means "every gRPC request".
    matches: listAt(r, 'matches').map(readGRPCMatch),
    filters: filtersOf(r, ns),
    backendRefs: listAt(r, 'backendRefs').map((b) => readBackendRef(b, ns)),
    sessionPersistence: readSessionPersistence(objectAt(r, 'sessionPersistence')),
  }))
  return { kind: 'GRPCRoute', apiVersion, meta, source, parentRefs, hostnames: hostnamesOf(spec), rules, droppedRules: [] }
}

/** GRPCMethodMatch type default Exact. */
function readGRPCMatch(m: Fields): GRPCRouteMatch {
  const method = objectAt(m, 'method')
  return {
    method: method === null ? null : {
      type: textAt(method, 'type') === 'RegularExpression' ? 'RegularExpression' : 'Exact',
      service: nonEmptyAt(method, 'service'),
      method: nonEmptyAt(method, 'method'),
    },
    headers: readHeaderMatches(m, 'headers'),
  }
}

// ───────────────────────────── TCPRoute / TLSRoute ─────────────────────────────

function readL4Rules(spec: Fields | null, ns: string): L4RouteRule[] {
  return listAt(spec, 'rules').map((r) => ({ name: nonEmptyAt(r, 'name'), backendRefs: listAt(r, 'backendRefs').map((b) => readBackendRef(b, ns)) }))
}

export function readTCPRoute(doc: Fields, source: SourceRef): TCPRoute {
  const { meta, spec, apiVersion, parentRefs } = readCommon(doc, 'TCPRoute')
  return { kind: 'TCPRoute', apiVersion, meta, source, parentRefs, rules: readL4Rules(spec, meta.namespace) }
}

export function readTLSRoute(doc: Fields, source: SourceRef): TLSRoute {
  const { meta, spec, apiVersion, parentRefs } = readCommon(doc, 'TLSRoute')
  return { kind: 'TLSRoute', apiVersion, meta, source, parentRefs, hostnames: hostnamesOf(spec), rules: readL4Rules(spec, meta.namespace) }
}

// ───────────────────────────── ReferenceGrant ─────────────────────────────

export function readReferenceGrant(doc: Fields, source: SourceRef): ReferenceGrant {
  const meta = readMeta(doc, 'ReferenceGrant')
  const spec = objectAt(doc, 'spec')
  return {
    kind: 'ReferenceGrant',
    apiVersion: apiVersionOf(doc),
    meta,
    source,
    from: listAt(spec, 'from').map((f) => ({ group: textAt(f, 'group') ?? '', kind: textAt(f, 'kind') ?? '', namespace: textAt(f, 'namespace') ?? '' })),
    to: listAt(spec, 'to').map((t) => ({ group: textAt(t, 'group') ?? '', kind: textAt(t, 'kind') ?? '', name: nonEmptyAt(t, 'name') })),
  }
}
