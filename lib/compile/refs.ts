// Reference checks shared by every step: ReferenceGrant for cross-namespace
// references, and reading PEM material out of Secrets, ConfigMaps and
// ClusterTrustBundles.

import type { ClusterTrustBundle, ConfigMap, DataRef, ObjectRef, ReferenceGrant, Secret } from '../resources/model.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import { tlsSecretFault } from './tls-material.ts'

export interface From { readonly group: string; readonly kind: string; readonly namespace: string }

/**
 * Gateway API ReferenceGrant: a reference into another namespace is allowed
 * only if a ReferenceGrant in the *target* namespace lists the referrer's
 * group/kind/namespace under `from` and the target's group/kind (and name, if
 * given) under `to`. Same-namespace references need no grant.
 */
export function isReferenceAllowed(snapshot: Snapshot, from: From, to: ObjectRef): boolean {
  if (from.namespace === to.namespace) return true
  for (const grant of grantsIn(snapshot.referenceGrants, to.namespace)) {
    const fromOk = grant.from.some(f => f.group === from.group && f.kind === from.kind && f.namespace === from.namespace)
    if (!fromOk) continue
    const toOk = grant.to.some(t => t.group === to.group && t.kind === to.kind && (t.name === null || t.name === to.name))
    if (toOk) return true
  }
  return false
}

// Issue 11: every cross-namespace reference of every route asks; the grants
// are grouped by namespace once per snapshot map (keyed by the map's identity,
// so this stays a pure function of the snapshot; a snapshot is never mutated,
// the size check only guards hand-built test snapshots).
const GRANTS_BY_NAMESPACE = new WeakMap<ReadonlyMap<string, ReferenceGrant>, { readonly size: number; readonly index: Map<string, ReferenceGrant[]> }>()
const NO_GRANTS: readonly ReferenceGrant[] = []

function grantsIn(grants: ReadonlyMap<string, ReferenceGrant>, namespace: string): readonly ReferenceGrant[] {
  if (grants.size === 0) return NO_GRANTS
  let cached = GRANTS_BY_NAMESPACE.get(grants)
  if (cached === undefined || cached.size !== grants.size) {
    const index = new Map<string, ReferenceGrant[]>()
    for (const g of grants.values()) {
      const list = index.get(g.meta.namespace)
      if (list === undefined) index.set(g.meta.namespace, [g])
      else list.push(g)
    }
    GRANTS_BY_NAMESPACE.set(grants, cached = { size: grants.size, index })
  }
  return cached.index.get(namespace) ?? NO_GRANTS
}

/**
 * Why a reference into another namespace is refused: with `--namespace`, a
 * target namespace that is not watched (its objects and ReferenceGrants are
 * never read, so a grant there cannot be seen), else no ReferenceGrant allows
 * it. `what` is `Kind namespace/name`.
 */
export function refNotPermitted(snapshot: Snapshot, what: string, namespace: string): string {
  const watched = snapshot.watchedNamespaces
  if (watched != null && !watched.has(namespace)) return `${what} is in namespace ${namespace}, which this gateway does not watch (--namespace)`
  return `${what} is in another namespace and no ReferenceGrant allows it`
}

export type Resolved<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly reason: string; readonly message: string }

export function fail<T>(reason: string, message: string): Resolved<T> {
  return { ok: false, reason, message }
}

/** Server/client certificate from a kubernetes.io/tls Secret. */
export function resolveTlsSecret(snapshot: Snapshot, from: From, ref: ObjectRef, reason: string): Resolved<{ certPem: string; keyPem: string }> {
  if (ref.group !== '' || ref.kind !== 'Secret') return fail(reason, `unsupported certificate reference kind ${ref.kind}`)
  if (!isReferenceAllowed(snapshot, from, ref)) return fail('RefNotPermitted', refNotPermitted(snapshot, `Secret ${ref.namespace}/${ref.name}`, ref.namespace))
  const secret = snapshot.secrets.get(`${ref.namespace}/${ref.name}`)
  if (secret === undefined) return fail(reason, `Secret ${ref.namespace}/${ref.name} not found`)
  if (secret.type !== 'kubernetes.io/tls') return fail(reason, `Secret ${ref.namespace}/${ref.name} is of type ${secret.type}, not kubernetes.io/tls`)
  const cert = secret.data['tls.crt']
  const key = secret.data['tls.key']
  if (cert === undefined || key === undefined) return fail(reason, `Secret ${ref.namespace}/${ref.name} lacks tls.crt or tls.key`)
  // Parsed and matched here, not at the first handshake (tls-material.ts).
  const fault = tlsSecretFault(secret)
  if (fault !== null) return fail(reason, `Secret ${ref.namespace}/${ref.name} ${fault.field}: ${fault.message}`)
  return { ok: true, value: { certPem: cert.toString('utf8'), keyPem: key.toString('utf8') } }
}

/** PEM text of a CA bundle / CRL reference; the key defaults to `defaultKey`. */
export function resolveDataRef(snapshot: Snapshot, from: From, ref: DataRef, defaultKey: string, reason: string): Resolved<string> {
  const key = ref.key ?? defaultKey
  if (ref.kind === 'ClusterTrustBundle') {
    const bundle = snapshot.clusterTrustBundles.get(ref.name)
    if (bundle === undefined) return fail(reason, `ClusterTrustBundle ${ref.name} not found`)
    return { ok: true, value: bundle.trustBundle }
  }
  if (ref.group !== '' || (ref.kind !== 'ConfigMap' && ref.kind !== 'Secret')) return fail(reason, `unsupported reference kind ${ref.kind}`)
  if (!isReferenceAllowed(snapshot, from, ref)) return fail('RefNotPermitted', refNotPermitted(snapshot, `${ref.kind} ${ref.namespace}/${ref.name}`, ref.namespace))
  let text: string | undefined
  if (ref.kind === 'ConfigMap') {
    const cm = snapshot.configMaps.get(`${ref.namespace}/${ref.name}`)
    if (cm === undefined) return fail(reason, `ConfigMap ${ref.namespace}/${ref.name} not found`)
    text = cm.data[key]
  } else {
    const secret = snapshot.secrets.get(`${ref.namespace}/${ref.name}`)
    if (secret === undefined) return fail(reason, `Secret ${ref.namespace}/${ref.name} not found`)
    text = secret.data[key]?.toString('utf8')
  }
  if (text === undefined) return fail(reason, `${ref.kind} ${ref.namespace}/${ref.name} has no key ${key}`)
  if (!text.includes('-----BEGIN')) return fail(reason, `${ref.kind} ${ref.namespace}/${ref.name} key ${key} is not PEM`)
  return { ok: true, value: text }
}

/**
 * Concatenated PEM of several refs; the first failure wins. `check` (null:
 * fine, else what is wrong) is asked about each ref's PEM, and a failure
 * names the ref and its key.
 */
export function resolveBundle(
  snapshot: Snapshot, from: From, refs: readonly DataRef[], defaultKey: string, reason: string,
  check: ((pem: string) => string | null) | null = null,
): Resolved<string | null> {
  if (refs.length === 0) return { ok: true, value: null }
  const parts: string[] = []
  for (const ref of refs) {
    const r = resolveDataRef(snapshot, from, ref, defaultKey, reason)
    if (!r.ok) return r
    const bad = check === null ? null : check(r.value)
    if (bad !== null) return fail(reason, `${describeDataRef(ref, defaultKey)}: ${bad}`)
    parts.push(r.value.trimEnd())
  }
  return { ok: true, value: parts.join('\n') + '\n' }
}

/** `ConfigMap ns/name key ca.crt`, `ClusterTrustBundle name`. */
function describeDataRef(ref: DataRef, defaultKey: string): string {
  return ref.kind === 'ClusterTrustBundle' ? `ClusterTrustBundle ${ref.name}` : `${ref.kind} ${ref.namespace}/${ref.name} key ${ref.key ?? defaultKey}`
}

/**
 * The object a PEM reference reads, the field of its PEM and the PEM; null
 * when there is none to read (the referrer's status says why).
 */
export function dataRefSource(snapshot: Snapshot, ref: DataRef, defaultKey: string): { readonly object: ConfigMap | Secret | ClusterTrustBundle; readonly field: string; readonly pem: string } | null {
  const key = ref.key ?? defaultKey
  if (ref.kind === 'ClusterTrustBundle') {
    const bundle = snapshot.clusterTrustBundles.get(ref.name)
    return bundle === undefined ? null : { object: bundle, field: 'spec.trustBundle', pem: bundle.trustBundle }
  }
  if (ref.group !== '') return null
  const object = ref.kind === 'ConfigMap' ? snapshot.configMaps.get(`${ref.namespace}/${ref.name}`) : ref.kind === 'Secret' ? snapshot.secrets.get(`${ref.namespace}/${ref.name}`) : undefined
  const value = object === undefined ? undefined : object.data[key]
  if (object === undefined || value === undefined) return null
  return { object, field: `data[${key}]`, pem: typeof value === 'string' ? value : value.toString('utf8') }
}
