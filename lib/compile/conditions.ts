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
 * Oldest creationTimestamp first, then alphabetical `namespace/name`.
 * An absent timestamp ('') sorts as newest, so objects without one lose ties.
 * RFC 3339 timestamps in UTC compare correctly as strings; others are parsed.
 */
export function compareAge(a: ObjectBase<string>, b: ObjectBase<string>): number {
  const ta = timestampOf(a.meta.creationTimestamp)
  const tb = timestampOf(b.meta.creationTimestamp)
  if (ta !== tb) return ta < tb ? -1 : 1
  const na = `${a.meta.namespace}/${a.meta.name}`
  const nb = `${b.meta.namespace}/${b.meta.name}`
  return na < nb ? -1 : na > nb ? 1 : 0
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
