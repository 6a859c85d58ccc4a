// Small, defensive accessors over a parsed manifest. Readers receive documents
// that passed schema validation, but schemas differ between the published
// variants we accept, so every accessor tolerates a missing or mistyped field
// and answers null / [] / {} instead of throwing.

import type { LabelSelector, LabelSelectorRequirement } from './meta.ts'
import type { DataRef, ObjectRef, PolicyTargetRef } from './model.ts'
import { parseDuration } from './duration.ts'

export type Fields = Readonly<Record<string, unknown>>

export function isFields(v: unknown): v is Fields {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** An object-valued field, or null. */
export function objectAt(o: Fields | null, key: string): Fields | null {
  if (o === null) return null
  const v = o[key]
  return isFields(v) ? v : null
}

/** A list of objects; non-object items are skipped. A single object is read as a one-item list. */
export function listAt(o: Fields | null, key: string): Fields[] {
  if (o === null) return []
  const v = o[key]
  if (isFields(v)) return [v]
  if (!Array.isArray(v)) return []
  return v.filter(isFields)
}

export function textAt(o: Fields | null, key: string): string | null {
  if (o === null) return null
  const v = o[key]
  return typeof v === 'string' ? v : null
}

/** A string field that must be non-empty to count (Kubernetes treats "" as unset for most optional strings). */
export function nonEmptyAt(o: Fields | null, key: string): string | null {
  const v = textAt(o, key)
  return v === null || v === '' ? null : v
}

/** A number field; numeric strings are accepted (YAML authors quote ports). */
export function numberAt(o: Fields | null, key: string): number | null {
  if (o === null) return null
  const v = o[key]
  if (typeof v === 'number' && Number.isFinite(v)) return v
  if (typeof v === 'string' && /^-?\d+(\.\d+)?$/.test(v.trim())) return Number(v)
  return null
}

export function boolAt(o: Fields | null, key: string): boolean | null {
  if (o === null) return null
  const v = o[key]
  if (typeof v === 'boolean') return v
  if (v === 'true') return true
  if (v === 'false') return false
  return null
}

export function stringsAt(o: Fields | null, key: string): string[] {
  if (o === null) return []
  const v = o[key]
  if (typeof v === 'string') return [v]
  if (!Array.isArray(v)) return []
  return v.filter((x): x is string => typeof x === 'string')
}

export function numbersAt(o: Fields | null, key: string): number[] {
  if (o === null) return []
  const v = o[key]
  if (!Array.isArray(v)) return []
  const out: number[] = []
  for (const x of v) {
    if (typeof x === 'number' && Number.isFinite(x)) out.push(x)
    else if (typeof x === 'string' && /^\d+$/.test(x)) out.push(Number(x))
  }
  return out
}

/** A map of string values (labels, annotations, ConfigMap data); non-string values are skipped. */
export function stringMapAt(o: Fields | null, key: string): Record<string, string> {
  const out: Record<string, string> = {}
  const m = objectAt(o, key)
  if (m === null) return out
  for (const k of Object.keys(m)) {
    const v = m[k]
    if (typeof v === 'string') out[k] = v
    else if (typeof v === 'number' || typeof v === 'boolean') out[k] = String(v)
  }
  return out
}

/** A duration field in milliseconds, or null when absent or malformed. */
export function durationAt(o: Fields | null, key: string): number | null {
  const v = textAt(o, key)
  return v === null ? null : parseDuration(v)
}

const OPERATORS = new Set(['In', 'NotIn', 'Exists', 'DoesNotExist'])

/** metav1.LabelSelector read from an object holding matchLabels / matchExpressions. */
export function readLabelSelector(o: Fields): LabelSelector {
  const matchExpressions: LabelSelectorRequirement[] = []
  for (const e of listAt(o, 'matchExpressions')) {
    const key = textAt(e, 'key')
    const operator = textAt(e, 'operator')
    if (key === null || operator === null || !OPERATORS.has(operator)) continue
    matchExpressions.push({ key, operator: operator as LabelSelectorRequirement['operator'], values: stringsAt(e, 'values') })
  }
  return { matchLabels: stringMapAt(o, 'matchLabels'), matchExpressions }
}

/** A LabelSelector field, or null when absent. */
export function labelSelectorAt(o: Fields | null, key: string): LabelSelector | null {
  const s = objectAt(o, key)
  return s === null ? null : readLabelSelector(s)
}

/**
 * An object reference with Gateway API defaulting: group '' (core) unless
 * written, kind `defaultKind` unless written, namespace of the referrer unless
 * written (cluster-scoped referents get '').
 */
export function readObjectRef(o: Fields, defaultKind: string, namespace: string, defaultGroup = ''): ObjectRef {
  const kind = nonEmptyAt(o, 'kind') ?? defaultKind
  return {
    group: textAt(o, 'group') ?? groupOfKind(kind, defaultGroup),
    kind,
    namespace: kind === 'ClusterTrustBundle' ? '' : nonEmptyAt(o, 'namespace') ?? namespace,
    name: textAt(o, 'name') ?? '',
  }
}

/** A reference to a CA bundle / CRL holder (ConfigMap, Secret, ClusterTrustBundle); key null = the kind's default. */
export function readDataRef(o: Fields, defaultKind: string, namespace: string): DataRef {
  return { ...readObjectRef(o, defaultKind, namespace), key: nonEmptyAt(o, 'key') }
}

/** ClusterTrustBundle lives in certificates.k8s.io; everything else we reference by default is core. */
function groupOfKind(kind: string, fallback: string): string {
  return kind === 'ClusterTrustBundle' ? 'certificates.k8s.io' : fallback
}

/** Gateway API PolicyTargetReference(WithSectionName); group and kind as written ('' when absent). */
export function readPolicyTargetRef(o: Fields): PolicyTargetRef {
  return {
    group: textAt(o, 'group') ?? '',
    kind: textAt(o, 'kind') ?? '',
    name: textAt(o, 'name') ?? '',
    sectionName: nonEmptyAt(o, 'sectionName'),
  }
}

/** `targetRefs` (current policies) or the older singular `targetRef`, normalized to a list. */
export function readTargetRefs(spec: Fields | null): PolicyTargetRef[] {
  const refs = listAt(spec, 'targetRefs').map(readPolicyTargetRef)
  const single = objectAt(spec, 'targetRef')
  if (single !== null) refs.unshift(readPolicyTargetRef(single))
  return refs
}
