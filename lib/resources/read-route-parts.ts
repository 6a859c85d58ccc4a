// The pieces routes share: ParentReference, BackendRef and HTTPRouteFilter,
// with Gateway API defaults applied (apis/v1/shared_types.go,
// httproute_types.go).

import type {
  BackendRef, CORSFilter, HeaderModifier, HTTPHeader, HTTPPathModifier, HTTPRouteFilter, ParentRef, RequestMirror,
  SessionPersistence,
} from './model.ts'
import {
  type Fields, boolAt, durationAt, listAt, nonEmptyAt, numberAt, objectAt, stringsAt, textAt,
} from './read-fields.ts'

const GATEWAY_GROUP = 'gateway.networking.k8s.io'

/** ParentReference: group gateway.networking.k8s.io, kind Gateway, namespace of the route. */
export function readParentRef(p: Fields, ns: string): ParentRef {
  return {
    group: textAt(p, 'group') ?? GATEWAY_GROUP,
    kind: nonEmptyAt(p, 'kind') ?? 'Gateway',
    namespace: nonEmptyAt(p, 'namespace') ?? ns,
    name: textAt(p, 'name') ?? '',
    sectionName: nonEmptyAt(p, 'sectionName'),
    port: numberAt(p, 'port'),
  }
}

/**
 * BackendRef: group '' (core), kind Service, namespace of the route, weight 1.
 * `priority` is not a Gateway API field: an extra `priority` on the ref is
 * read when present, else 0 (primary). Issue 6 will define failover priority
 * properly; until then this keeps the slot in the model.
 */
export function readBackendRef(b: Fields, ns: string): BackendRef {
  const kind = nonEmptyAt(b, 'kind') ?? 'Service'
  return {
    group: textAt(b, 'group') ?? defaultGroupOf(kind),
    kind,
    namespace: nonEmptyAt(b, 'namespace') ?? ns,
    name: textAt(b, 'name') ?? '',
    port: numberAt(b, 'port'),
    weight: numberAt(b, 'weight') ?? 1,
    filters: listAt(b, 'filters').map((f) => readFilter(f, ns)).filter((f): f is HTTPRouteFilter => f !== null),
    priority: numberAt(b, 'priority') ?? 0,
  }
}

/**
 * The API default group is '' (core), but the core group has no Backend or
 * XBackend, and GEP-4488's own HTTPRoute example writes `kind: Backend`
 * without a group: for those two kinds the Gateway API group is meant.
 */
function defaultGroupOf(kind: string): string {
  if (kind === 'Backend') return GATEWAY_GROUP
  if (kind === 'XBackend') return 'gateway.networking.x-k8s.io'
  return ''
}

/** One HTTPRoute / GRPCRoute filter; null for a type the model does not know (validate/ reports it). */
export function readFilter(f: Fields, ns: string): HTTPRouteFilter | null {
  switch (textAt(f, 'type')) {
    case 'RequestHeaderModifier':
      return { type: 'RequestHeaderModifier', requestHeaderModifier: readHeaderModifier(objectAt(f, 'requestHeaderModifier')) }
    case 'ResponseHeaderModifier':
      return { type: 'ResponseHeaderModifier', responseHeaderModifier: readHeaderModifier(objectAt(f, 'responseHeaderModifier')) }
    case 'RequestRedirect': {
      const r = objectAt(f, 'requestRedirect')
      const scheme = textAt(r, 'scheme')
      return {
        type: 'RequestRedirect',
        requestRedirect: {
          scheme: scheme === 'http' || scheme === 'https' ? scheme : null,
          hostname: lowerOrNull(nonEmptyAt(r, 'hostname')),
          path: readPathModifier(objectAt(r, 'path')),
          port: numberAt(r, 'port'),
          statusCode: numberAt(r, 'statusCode') ?? 302,
        },
      }
    }
    case 'URLRewrite': {
      const u = objectAt(f, 'urlRewrite')
      return { type: 'URLRewrite', urlRewrite: { hostname: lowerOrNull(nonEmptyAt(u, 'hostname')), path: readPathModifier(objectAt(u, 'path')) } }
    }
    case 'RequestMirror': return { type: 'RequestMirror', requestMirror: readMirror(objectAt(f, 'requestMirror') ?? {}, ns) }
    case 'CORS': return { type: 'CORS', cors: readCors(objectAt(f, 'cors')) }
    case 'ExtensionRef': {
      // LocalObjectReference: the route's namespace.
      const ref = objectAt(f, 'extensionRef') ?? {}
      return { type: 'ExtensionRef', extensionRef: { group: textAt(ref, 'group') ?? '', kind: textAt(ref, 'kind') ?? '', namespace: ns, name: textAt(ref, 'name') ?? '' } }
    }
    default: return null
  }
}

function lowerOrNull(s: string | null): string | null {
  return s === null ? null : s.toLowerCase()
}

function readHeaders(o: Fields | null, key: string): HTTPHeader[] {
  return listAt(o, key).map((h) => ({ name: textAt(h, 'name') ?? '', value: textAt(h, 'value') ?? '' }))
}

function readHeaderModifier(m: Fields | null): HeaderModifier {
  return { set: readHeaders(m, 'set'), add: readHeaders(m, 'add'), remove: stringsAt(m, 'remove') }
}

function readPathModifier(p: Fields | null): HTTPPathModifier | null {
  if (p === null) return null
  const type = textAt(p, 'type') === 'ReplacePrefixMatch' ? 'ReplacePrefixMatch' : 'ReplaceFullPath'
  return { type, replaceFullPath: textAt(p, 'replaceFullPath'), replacePrefixMatch: textAt(p, 'replacePrefixMatch') }
}

/**
 * HTTPRequestMirrorFilter: `percent` (0..100) or `fraction` {numerator,
 * denominator default 100}, normalized to a percent; neither = every request.
 */
function readMirror(m: Fields, ns: string): RequestMirror {
  let percent = numberAt(m, 'percent')
  const fraction = objectAt(m, 'fraction')
  if (percent === null && fraction !== null) {
    const numerator = numberAt(fraction, 'numerator') ?? 0
    const denominator = numberAt(fraction, 'denominator') ?? 100
    percent = denominator > 0 ? Math.min(100, (numerator / denominator) * 100) : 0
  }
  // The mirror's backendRef carries no weight or filters of its own.
  return { backendRef: readBackendRef(objectAt(m, 'backendRef') ?? {}, ns), percent }
}

/** HTTPCORSFilter; maxAge default 5 (seconds), allowCredentials default false. */
function readCors(c: Fields | null): CORSFilter {
  return {
    allowOrigins: stringsAt(c, 'allowOrigins'),
    allowCredentials: boolAt(c, 'allowCredentials') ?? false,
    allowMethods: stringsAt(c, 'allowMethods'),
    allowHeaders: stringsAt(c, 'allowHeaders'),
    exposeHeaders: stringsAt(c, 'exposeHeaders'),
    maxAge: numberAt(c, 'maxAge') ?? 5,
  }
}

/** SessionPersistence; type default Cookie, timeouts as durations in ms. */
export function readSessionPersistence(s: Fields | null): SessionPersistence | null {
  if (s === null) return null
  return {
    sessionName: nonEmptyAt(s, 'sessionName'),
    type: textAt(s, 'type') === 'Header' ? 'Header' : 'Cookie',
    absoluteTimeout: durationAt(s, 'absoluteTimeout'),
    idleTimeout: durationAt(s, 'idleTimeout'),
  }
}
