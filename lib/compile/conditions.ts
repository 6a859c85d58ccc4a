// Small shared helpers for compile steps: conditions in Gateway API's
// vocabulary and the "oldest first, then namespace/name" order that every
// tie-break in Gateway API and Envoy Gateway uses.

import type { ObjectBase } from '../resources/meta.ts'
import type { Condition, ParentStatus } from './status.ts'

export const GATEWAY_GROUP = 'gateway.networking.k8s.io'

export function condition(type: string, ok: boolean, reason: string, message: string, generation: number): Condition {
  return { type, status: ok ? 'True' : 'False', reason, message, observedGeneration: generation }
}

/**
 * Oldest creationTimestamp first, then the first seen (file mode: an object
 * added since startup is newer than one that was serving), then alphabetical
 * `namespace/name`. An absent timestamp ('') sorts as newest, so objects
 * without one lose ties. RFC 3339 timestamps in UTC compare correctly as
 * strings; others are parsed.
 */
export function compareAge(a: ObjectBase<string>, b: ObjectBase<string>): number {
  const sa = a.meta.creationTimestamp
  const sb = b.meta.creationTimestamp
  if (sa !== sb) {
    // Hot in every sort of routes and matches (issue 11): Kubernetes writes
    // second-precision UTC ('2024-01-01T00:00:00Z'), which compares as a
    // string; anything else is parsed.
    if (isUtcSeconds(sa) && isUtcSeconds(sb)) return sa < sb ? -1 : 1
    const ta = timestampOf(sa)
    const tb = timestampOf(sb)
    if (ta !== tb) return ta < tb ? -1 : 1
  }
  if (a.meta.firstSeen !== b.meta.firstSeen) return a.meta.firstSeen < b.meta.firstSeen ? -1 : 1
  return compareJoined(a.meta.namespace, a.meta.name, b.meta.namespace, b.meta.name)
}

/** `${na}/${ma}` against `${nb}/${mb}` as strings, without building them. */
function compareJoined(na: string, ma: string, nb: string, mb: string): number {
  if (na === nb) return ma < mb ? -1 : ma > mb ? 1 : 0
  const la = na.length + 1 + ma.length
  const lb = nb.length + 1 + mb.length
  const n = la < lb ? la : lb
  for (let i = 0; i < n; i++) {
    const ca = i < na.length ? na.charCodeAt(i) : i === na.length ? 47 : ma.charCodeAt(i - na.length - 1)
    const cb = i < nb.length ? nb.charCodeAt(i) : i === nb.length ? 47 : mb.charCodeAt(i - nb.length - 1)
    if (ca !== cb) return ca < cb ? -1 : 1
  }
  return la - lb < 0 ? -1 : la === lb ? 0 : 1
}

/** 'YYYY-MM-DDTHH:MM:SSZ' by shape (length, separators, 'Z'). */
function isUtcSeconds(t: string): boolean {
  return t.length === 20 && t.charCodeAt(19) === 90 && t.charCodeAt(10) === 84 && t.charCodeAt(4) === 45 && t.charCodeAt(13) === 58
}

function timestampOf(text: string): number {
  if (text === '') return Number.POSITIVE_INFINITY
  const ms = Date.parse(text) // parsing a given string: no clock involved
  return Number.isNaN(ms) ? Number.POSITIVE_INFINITY : ms
}

export function statusKey(kind: string, namespace: string, name: string): string {
  return `${kind}/${namespace}/${name}`
}

export function gatewayParent(namespace: string, name: string, sectionName: string | null, controllerName: string, conditions: readonly Condition[]): ParentStatus {
  return {
    parentRef: { group: GATEWAY_GROUP, kind: 'Gateway', namespace, name, sectionName, port: null },
    controllerName,
    conditions,
  }
}

/** Kubernetes sorts maps of objects nowhere; we do, so output never depends on input order. */
export function sortedValues<T extends ObjectBase<string>>(map: ReadonlyMap<string, T>): T[] {
  return [...map.values()].sort(compareAge)
}
