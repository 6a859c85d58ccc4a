// Step 5b (issue 7): extension chains. For each rule × cluster the extensions of
// three scopes are merged — Route (the route's EgressExtension and its
// ExtensionRef filters), Backend (spec.extensions) and Gateway (EgressExtension
// targeting the Gateway or a listener) — and sorted once, here, so the data
// path runs a ready list (egress proposal, "Policy Application Scopes").
//
// Precedence (egress proposal, Conflict Resolution): Route > Backend > Gateway
// for the same extension, where "the same" is the same `name`, or the same
// type for types of which only one may apply (credential injection,
// authorization). Within a scope the oldest declaring object wins and the
// others are reported Conflicted; a less specific loser is Overridden.
//
// Secret references (`secretRef`, `oauth2.secretRef`, `awsSigV4.secretRef`,
// and the Redis AUTH Secret of a global rate limit: `global.secretRef`,
// `rules[i].global.secretRef`, `budget.global.secretRef`, or a
// BackendTrafficPolicy's sallyport.io/rate-limit-redis-secret) are resolved
// here into the table, so the data path never reads sources; a
// changed Secret recompiles into new values (rotation without restart). The
// TLS material of a global limit's rediss:// Redis (`global.tls`: CA bundles
// from ConfigMaps or Secrets, a kubernetes.io/tls client certificate; or the
// policy annotations sallyport.io/rate-limit-redis-ca and -client-cert) is
// resolved the same way, with the helpers of backend TLS (refs.ts), into
// `secrets['global.tls']` (`ca.crt`, `tls.crt`, `tls.key`): redacted in
// /config_dump like any Secret value, and part of the extension's key.

import { createHmac } from 'node:crypto'
import type { Backend, BackendTrafficPolicy, EgressExtension, ExtensionSpec } from '../resources/model.ts'
import { backendKey, groupKindOf, keyOfBackend } from '../resources/model.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import { ExtensionType, SINGLETON_TYPES, canonicalType, defaultPhases, effectiveType, type Phase } from '../extension-types.ts'
import type { CompiledExtension, ExtensionChain } from './table.ts'
import { isReferenceAllowed, refNotPermitted, resolveBundle, resolveTlsSecret, type From } from './refs.ts'
import { checkCertificates } from './tls-material.ts'
import type { ObjectStatus } from './status.ts'
import { condition, statusKey } from './conditions.ts'
import { ANNOTATIONS, parseLocalRef, parseSecretRef } from '../validate/annotations.ts'
import { key as mapKey } from '../validate/findings.ts'
import { parseRedisAddress } from '../redis-address.ts'

/** Where a list of extensions was declared. */
export interface ExtensionOwner {
  readonly kind: 'EgressExtension' | 'Backend' | 'XBackend' | 'BackendTrafficPolicy'
  /** The owner's API group: with the kind, whom a ReferenceGrant `from` must name. */
  readonly group: string
  readonly namespace: string
  readonly name: string
  /** RFC 3339 or '' (sorts newest). */
  readonly createdAt: string
  /** ObjectMeta.firstSeen: orders equal createdAt. */
  readonly firstSeen: number
}

export interface ScopedExtensions {
  readonly scope: CompiledExtension['scope']
  readonly owner: ExtensionOwner
  readonly list: readonly ExtensionSpec[]
}

/** What precedence decided, for status: `loser` lost to `winner` (same scope: Conflicted; wider scope: Overridden). */
export interface ExtensionVerdict {
  readonly loser: ExtensionOwner
  readonly winner: ExtensionOwner
  readonly extension: string
  readonly sameScope: boolean
}

const SCOPE_RANK: Record<CompiledExtension['scope'], number> = { Route: 0, Backend: 1, Gateway: 2 }
/** Equal priority: the wider scope runs first (a Gateway authorization before a Backend credential). */
const RUN_RANK: Record<CompiledExtension['scope'], number> = { Gateway: 0, Backend: 1, Route: 2 }

const SECRET_PATHS = ['secretRef', 'oauth2.secretRef', 'awsSigV4.secretRef'] as const

/**
 * The config paths of the `global` blocks of the types that talk to Redis
 * (RateLimit: the config's and each rule's own; AIUsage: its budget's).
 */
function redisGlobalPaths(type: string, config: Readonly<Record<string, unknown>>): readonly string[] {
  switch (type) {
    case ExtensionType.RATE_LIMIT: {
      const rules = Array.isArray(config.rules) ? config.rules as unknown[] : []
      const own = rules.flatMap((r, i) => r !== null && typeof r === 'object' && (r as Record<string, unknown>).global !== undefined ? [`rules[${i}].global`] : [])
      return ['global', ...own]
    }
    case ExtensionType.AI_USAGE: return ['budget.global']
    default: return []
  }
}

/** The config paths of an extension's Secret references: the common ones, and the `secretRef` of each Redis `global`. */
function secretPaths(type: string, config: Readonly<Record<string, unknown>>): readonly string[] {
  const globals = redisGlobalPaths(type, config)
  return globals.length === 0 ? SECRET_PATHS : [...SECRET_PATHS, ...globals.map(g => `${g}.secretRef`)]
}

/** `Kind namespace/name`: the owner in messages, dumps and Events (chain.ts reads it back). */
function ownerKey(o: ExtensionOwner): string {
  return `${o.kind} ${o.namespace}/${o.name}`
}

/** ownerKey with the group: a gateway.networking.k8s.io and a gateway.envoyproxy.io Backend of one name are two owners. */
function ownerId(o: ExtensionOwner): string {
  return `${o.group}/${ownerKey(o)}`
}

function olderThan(a: ExtensionOwner, b: ExtensionOwner): boolean {
  const ta = a.createdAt === '' ? '\uffff' : a.createdAt
  const tb = b.createdAt === '' ? '\uffff' : b.createdAt
  if (ta !== tb) return ta < tb
  if (a.firstSeen !== b.firstSeen) return a.firstSeen < b.firstSeen
  return ownerKey(a) < ownerKey(b)
}

/** The value at a config path: dotted fields, `[i]` for list items (`rules[0].global`). */
function at(config: Readonly<Record<string, unknown>>, path: string): unknown {
  let v: unknown = config
  for (const part of path.replace(/\[(\d+)\]/g, '.$1').split('.')) {
    if (v === null || typeof v !== 'object') return undefined
    v = (v as Record<string, unknown>)[part]
  }
  return v
}

/** A Secret (or CA ConfigMap) reference of an extension that cannot be used: its config path, a ResolvedRefs reason, a message. */
export interface SecretRefError {
  readonly path: string
  readonly reason: 'RefNotPermitted' | 'InvalidSecretRef' | 'InvalidCACertificateRef' | 'InvalidClientCertificateRef'
  readonly message: string
  /** The kind of the object that is not in the snapshot at all; null: it is there (it lacks the key, no grant allows it...). */
  readonly missing: 'Secret' | 'ConfigMap' | null
}

/**
 * The Secret keys a built-in must find at `path`, as [key field of the ref,
 * default key, whether the only key of the Secret stands in for the default]
 * (lib/extensions/credential-injector.ts secretValue: the named key, else the
 * only key, else the default; extensions/rate-limit.ts redisCredentials: the
 * named key, else the default, and a username only if it names one). Other
 * types read what they like.
 */
function keysRead(type: string, config: Readonly<Record<string, unknown>>, path: string): ReadonlyArray<readonly [string, string, boolean]> {
  switch (type) {
    case ExtensionType.CREDENTIAL_INJECTOR: return path === 'secretRef' ? [['key', 'token', true]] : []
    case ExtensionType.OAUTH2: return path === (config.oauth2 !== undefined ? 'oauth2.secretRef' : 'secretRef') ? [['clientIdKey', 'client_id', true], ['clientSecretKey', 'client_secret', true]] : []
    case ExtensionType.AWS_SIGV4: return path === (config.awsSigV4 !== undefined ? 'awsSigV4.secretRef' : 'secretRef') ? [['accessKeyIdKey', 'AWS_ACCESS_KEY_ID', true], ['secretAccessKeyKey', 'AWS_SECRET_ACCESS_KEY', true]] : []
    case ExtensionType.RATE_LIMIT:
    case ExtensionType.AI_USAGE: {
      if (!path.endsWith('global.secretRef')) return []
      const named = typeof (at(config, path) as Record<string, unknown>).usernameKey === 'string'
      return [['passwordKey', 'password', false], ...(named ? [['usernameKey', 'username', false] as const] : [])]
    }
    default: return []
  }
}

/**
 * Resolves the Secret references of one extension of type `type`; returns the
 * data by config path, or the first reference that cannot be used (another
 * namespace without a grant, no such Secret, or not the key the extension reads).
 */
function resolveSecrets(snapshot: Snapshot, owner: ExtensionOwner, type: string, config: Readonly<Record<string, unknown>>): { secrets: Record<string, Record<string, string>>; error: SecretRefError | null } {
  const secrets: Record<string, Record<string, string>> = {}
  for (const path of secretPaths(type, config)) {
    const ref = at(config, path)
    if (ref === undefined) continue
    if (ref === null || typeof ref !== 'object' || typeof (ref as Record<string, unknown>).name !== 'string') return { secrets, error: { path, reason: 'InvalidSecretRef', message: `${path} must name a Secret`, missing: null } }
    const r = ref as Record<string, unknown>
    const namespace = typeof r.namespace === 'string' ? r.namespace : owner.namespace
    const name = r.name as string
    const from: From = { group: owner.group, kind: owner.kind, namespace: owner.namespace }
    // Gateway API ReferenceGrant: a Secret in another namespace only with a grant there.
    if (!isReferenceAllowed(snapshot, from, { group: '', kind: 'Secret', namespace, name })) {
      return { secrets, error: { path, reason: 'RefNotPermitted', message: refNotPermitted(snapshot, `Secret ${namespace}/${name}`, namespace), missing: null } }
    }
    const secret = snapshot.secrets.get(`${namespace}/${name}`)
    if (secret === undefined) return { secrets, error: { path, reason: 'InvalidSecretRef', message: `Secret ${namespace}/${name} not found`, missing: 'Secret' } }
    const keys = Object.keys(secret.data).sort()
    for (const [field, fallback, onlyKey] of keysRead(type, config, path)) {
      const key = typeof r[field] === 'string' ? r[field] as string : onlyKey && keys.length === 1 ? keys[0] as string : fallback
      if (secret.data[key] === undefined) return { secrets, error: { path, reason: 'InvalidSecretRef', message: `Secret ${namespace}/${name} has no key ${key}`, missing: null } }
    }
    const data: Record<string, string> = {}
    for (const k of keys) data[k] = (secret.data[k] as Buffer).toString('utf8')
    secrets[path] = data
  }
  for (const g of redisGlobalPaths(type, config)) {
    const error = resolveRedisTls(snapshot, owner, at(config, `${g}.tls`), `${g}.tls`, secrets)
    if (error !== null) return { secrets, error }
  }
  return { secrets, error: null }
}

/**
 * The TLS material of a Redis `global.tls` at `path`, into `secrets[path]`:
 * `ca.crt`, the CA bundles of caCertificateRefs (ConfigMap or Secret, key
 * ca.crt, every block a certificate: refs.ts and tls-material.ts, as for a
 * BackendTLSPolicy), and `tls.crt` / `tls.key` of clientCertificateRef (a
 * kubernetes.io/tls Secret whose key matches its certificate). Another
 * namespace needs a ReferenceGrant. Returns the first reference that cannot
 * be used, naming its field; nothing when the block has no references.
 */
function resolveRedisTls(snapshot: Snapshot, owner: ExtensionOwner, tls: unknown, path: string, secrets: Record<string, Record<string, string>>): SecretRefError | null {
  if (tls === null || typeof tls !== 'object') return null
  const t = tls as Record<string, unknown>
  const from: From = { group: owner.group, kind: owner.kind, namespace: owner.namespace }
  const data: Record<string, string> = {}
  const refOf = (v: unknown, kind: string): { group: string; kind: string; namespace: string; name: string } => {
    const r = (v !== null && typeof v === 'object' ? v : {}) as Record<string, unknown>
    return { group: typeof r.group === 'string' ? r.group : '', kind: typeof r.kind === 'string' ? r.kind : kind, namespace: typeof r.namespace === 'string' ? r.namespace : owner.namespace, name: typeof r.name === 'string' ? r.name : '' }
  }
  const missing = (kind: string, namespace: string, name: string): SecretRefError['missing'] =>
    kind === 'ConfigMap' ? (snapshot.configMaps.has(`${namespace}/${name}`) ? null : 'ConfigMap') : kind === 'Secret' ? (snapshot.secrets.has(`${namespace}/${name}`) ? null : 'Secret') : null
  const cas = Array.isArray(t.caCertificateRefs) ? t.caCertificateRefs as unknown[] : []
  const bundles: string[] = []
  for (let i = 0; i < cas.length; i++) {
    const ref = refOf(cas[i], '')
    const r = resolveBundle(snapshot, from, [{ ...ref, key: null }], 'ca.crt', 'InvalidCACertificateRef', checkCertificates)
    if (!r.ok) return { path: `${path}.caCertificateRefs[${i}]`, reason: r.reason as SecretRefError['reason'], message: r.message, missing: r.reason === 'RefNotPermitted' ? null : missing(ref.kind, ref.namespace, ref.name) }
    if (r.value !== null) bundles.push(r.value)
  }
  if (bundles.length > 0) data['ca.crt'] = bundles.join('')
  if (t.clientCertificateRef !== undefined) {
    const ref = refOf(t.clientCertificateRef, 'Secret')
    const r = resolveTlsSecret(snapshot, from, ref, 'InvalidClientCertificateRef')
    if (!r.ok) return { path: `${path}.clientCertificateRef`, reason: r.reason as SecretRefError['reason'], message: r.message, missing: r.reason === 'RefNotPermitted' ? null : missing(ref.kind, ref.namespace, ref.name) }
    data['tls.crt'] = r.value.certPem
    data['tls.key'] = r.value.keyPem
  }
  if (Object.keys(data).length > 0) secrets[path] = data
  return null
}

/**
 * Identifies an extension instance: owner, name, and a digest of everything it
 * is built from, Secret values included, so a rotated Secret gives a new key and
 * the data path a new instance (extensions/chain.ts keeps state by key). The
 * key is printed in /config_dump and logs next to the type, phase and config:
 * a plain hash let anyone who reads them test guesses of the Secret values
 * offline. An HMAC under `secret` (a random per-process key by default) does
 * not; keys are compared only within the process that compiled them.
 */
function stateKey(owner: ExtensionOwner, spec: ExtensionSpec, secrets: Readonly<Record<string, unknown>>, secret: Uint8Array): string {
  const h = createHmac('sha256', secret).update(JSON.stringify([spec.type, spec.phase, spec.config, secrets])).digest('hex').slice(0, 16)
  return `${ownerId(owner)}/${spec.name}#${h}`
}

/**
 * An extension's canonical type (null: unknown), and the type it runs as: the
 * canonical one as its config selects it (OAuth2 in a CredentialInjector...),
 * or as written when unknown.
 */
function typesOf(spec: ExtensionSpec): { readonly canonical: ReturnType<typeof canonicalType>; readonly type: string } {
  const canonical = canonicalType(spec.type)
  return { canonical, type: canonical === null ? spec.type : effectiveType(canonical, spec.config) }
}

/** Compiles one extension: canonical type, phases, secrets; `keySecret` keys its `key` (stateKey). Pure. */
export function compileExtension(snapshot: Snapshot, scope: CompiledExtension['scope'], owner: ExtensionOwner, spec: ExtensionSpec, keySecret: Uint8Array): CompiledExtension {
  const { canonical, type } = typesOf(spec)
  const { secrets, error } = resolveSecrets(snapshot, owner, type, spec.config)
  const phases: Phase[] = spec.phase !== null ? [spec.phase as Phase] : defaultPhases(canonical === null ? null : type as never, spec.config)
  return {
    key: stateKey(owner, spec, secrets, keySecret), name: spec.name, type, phases, priority: spec.priority, failOpen: spec.failOpen,
    scope, source: ownerKey(owner), namespace: owner.namespace, config: spec.config, secrets,
    error: error?.message ?? (canonical === null ? `unknown extension type ${spec.type}` : null),
  }
}

/** Annotation on a BackendTrafficPolicy of type Global: the Redis (host:port, rediss://host:port for TLS) every replica shares. */
export const RATE_LIMIT_REDIS = ANNOTATIONS.RATE_LIMIT_REDIS
/** With it: the Secret (the policy's namespace) whose `password`, and `username` if it has one, AUTH to that Redis. */
export const RATE_LIMIT_REDIS_SECRET = ANNOTATIONS.RATE_LIMIT_REDIS_SECRET
/** With a rediss:// address: the ConfigMap (the policy's namespace) whose `ca.crt` is the only trust for that Redis. */
export const RATE_LIMIT_REDIS_CA = ANNOTATIONS.RATE_LIMIT_REDIS_CA
/** With a rediss:// address: the kubernetes.io/tls Secret (the policy's namespace) presented to that Redis. */
export const RATE_LIMIT_REDIS_CLIENT_CERT = ANNOTATIONS.RATE_LIMIT_REDIS_CLIENT_CERT

/**
 * Envoy Gateway BackendTrafficPolicy.rateLimit as a RateLimit extension (one
 * machinery for both). Each rule's clientSelectors must all hold (AND); a
 * header or sourceCIDR of type Distinct gives each value its own bucket, the
 * others select which requests share the rule's one bucket per route. Global
 * rules use the Redis of the RATE_LIMIT_REDIS annotation, with AUTH from the
 * Secret RATE_LIMIT_REDIS_SECRET names (as `global.secretRef`: resolved like
 * any extension Secret), and for a rediss:// one the CA ConfigMap and client
 * certificate Secret of RATE_LIMIT_REDIS_CA and RATE_LIMIT_REDIS_CLIENT_CERT
 * (as `global.tls`); without a usable address they are counted per process
 * (Local) — the status of the policy does not change; validate warns. So does
 * a TLS annotation on a plain-TCP address, which is ignored.
 */
export function rateLimitExtension(policy: BackendTrafficPolicy): ExtensionSpec | null {
  const rl = policy.rateLimit
  if (rl === null || rl.rules.length === 0) return null
  const rules = rl.rules.map((r) => {
    // Envoy Gateway: a rule counts per route unless `shared`, one bucket for every route the policy covers.
    const key: unknown[] = r.shared ? [] : ['route']
    const headers: Array<Record<string, unknown>> = []
    // Every selector's range must hold (AND), as its headers do: none is dropped for the next.
    const ranges: string[] = []
    for (const sel of r.clientSelectors) {
      for (const h of Array.isArray(sel.headers) ? sel.headers as Array<Record<string, unknown>> : []) {
        const name = String(h.name ?? '')
        // Distinct: a bucket per value, for requests that carry the header at all (Envoy's descriptor is absent otherwise).
        if (h.type === 'Distinct') { key.push({ header: name }); headers.push({ name }) }
        else headers.push({ name, ...(typeof h.value === 'string' ? { value: h.value } : {}), type: h.type === 'RegularExpression' ? 'RegularExpression' : 'Exact', ...(h.invert === true ? { invert: true } : {}) })
      }
      const cidr = sel.sourceCIDR as Record<string, unknown> | undefined
      if (cidr !== undefined && cidr !== null && typeof cidr.value === 'string') {
        ranges.push(cidr.value)
        if (cidr.type === 'Distinct' && !key.includes('client')) key.push('client')
      }
    }
    const sourceCIDR = ranges.length === 0 ? undefined : ranges.length === 1 ? ranges[0] : ranges
    const match = headers.length + ranges.length === 0 ? undefined : { ...(headers.length > 0 ? { headers } : {}), ...(sourceCIDR === undefined ? {} : { sourceCIDR }) }
    return { requests: r.requests, unit: r.unit, key, ...(r.cost === 1 ? {} : { cost: r.cost }), ...(match === undefined ? {} : { match }) }
  })
  const config: Record<string, unknown> = { rules }
  const redis = policy.meta.annotations[RATE_LIMIT_REDIS]
  // An address with credentials (or none at all) is ignored: it would show in /config_dump (validate warns).
  const address = redis === undefined ? null : parseRedisAddress(redis)
  if (rl.type === 'Global' && redis !== undefined && address?.ok === true) {
    const annotations = policy.meta.annotations
    const nameIn = (annotation: string, kind: 'Secret' | 'ConfigMap'): string | null => {
      const text = annotations[annotation]
      const r = text === undefined ? null : parseLocalRef(text, policy.meta.namespace, kind)
      return r?.ok === true ? r.value.slice(r.value.indexOf('/') + 1) : null
    }
    const name = nameIn(RATE_LIMIT_REDIS_SECRET, 'Secret')
    const ca = address.value.tls ? nameIn(RATE_LIMIT_REDIS_CA, 'ConfigMap') : null
    const cert = address.value.tls ? nameIn(RATE_LIMIT_REDIS_CLIENT_CERT, 'Secret') : null
    const tls = { ...(ca === null ? {} : { caCertificateRefs: [{ kind: 'ConfigMap', name: ca }] }), ...(cert === null ? {} : { clientCertificateRef: { name: cert } }) }
    config.global = { redis: redis.trim(), ...(name === null ? {} : { secretRef: { name } }), ...(ca === null && cert === null ? {} : { tls }) }
  }
  return { name: 'rate-limit', type: 'RateLimit', phase: null, priority: 0, failOpen: false, config }
}

/** The owner record of a Backend's spec.extensions: its own group and kind, which a ReferenceGrant for its Secrets must name. */
export function backendExtensionOwner(b: Backend): ExtensionOwner {
  return { ...groupKindOf(b), namespace: b.meta.namespace, name: b.meta.name, createdAt: b.meta.creationTimestamp, firstSeen: b.meta.firstSeen }
}

/** The owner record of the RateLimit a BackendTrafficPolicy's rateLimit runs as (rateLimitExtension). */
export function trafficPolicyOwner(policy: BackendTrafficPolicy): ExtensionOwner {
  return { kind: 'BackendTrafficPolicy', group: 'gateway.envoyproxy.io', namespace: policy.meta.namespace, name: policy.meta.name, createdAt: policy.meta.creationTimestamp, firstSeen: policy.meta.firstSeen }
}

export function egressExtensionOwner(ext: EgressExtension): ExtensionOwner {
  return { kind: 'EgressExtension', group: 'sallyport.io', namespace: ext.meta.namespace, name: ext.meta.name, createdAt: ext.meta.creationTimestamp, firstSeen: ext.meta.firstSeen }
}

/** An owner's extension Secret reference that cannot be used, where it is written, and the status key of the owner. */
export interface SecretRefProblem { readonly statusKey: string; readonly reason: SecretRefError['reason']; readonly problem: ConfigProblem }

/** The annotation of a BackendTrafficPolicy that wrote the config path of a reference (rateLimitExtension). */
function annotationOf(path: string): string {
  if (path.includes('.caCertificateRefs')) return RATE_LIMIT_REDIS_CA
  if (path.endsWith('.clientCertificateRef')) return RATE_LIMIT_REDIS_CLIENT_CERT
  return RATE_LIMIT_REDIS_SECRET
}

/**
 * Every Backend's, EgressExtension's and BackendTrafficPolicy's (its
 * rate-limit-redis-secret, -ca and -client-cert annotations) Secret and CA
 * references that cannot be used, whether or not a route uses the owner yet:
 * the requests through such an extension fail (500; never sent without the
 * credential), and this says why, naming the file, the object and the field
 * (status, /config_dump, validate). `missingSecrets: false` leaves out Secrets
 * that are not in the snapshot at all (`sallyport validate` of a set that
 * holds no Secrets), `missingConfigMaps: false` the same of ConfigMaps
 * (default: as missingSecrets).
 */
export function secretRefProblems(snapshot: Snapshot, options: { readonly missingSecrets: boolean; readonly missingConfigMaps?: boolean } = { missingSecrets: true }): SecretRefProblem[] {
  const out: SecretRefProblem[] = []
  const skipped = (error: SecretRefError): boolean =>
    error.missing === 'Secret' ? !options.missingSecrets : error.missing === 'ConfigMap' ? !(options.missingConfigMaps ?? options.missingSecrets) : false
  const check = (owner: ExtensionOwner, statusKey: string, source: ConfigProblem['source'], list: readonly ExtensionSpec[]): void => {
    list.forEach((spec, i) => {
      const { error } = resolveSecrets(snapshot, owner, typesOf(spec).type, spec.config)
      if (error === null || skipped(error)) return
      out.push({
        statusKey, reason: error.reason,
        problem: {
          source, kind: owner.kind, namespace: owner.namespace, name: owner.name, field: `spec.extensions[${i}].config.${error.path}`,
          message: `${error.message}; requests through extension ${spec.name} fail`, severity: 'error',
        },
      })
    })
  }
  for (const b of snapshot.backends.values()) check(backendExtensionOwner(b), keyOfBackend(b), b.source, b.extensions)
  for (const e of snapshot.egressExtensions.values()) check(egressExtensionOwner(e), statusKey('EgressExtension', e.meta.namespace, e.meta.name), e.source, e.extensions)
  for (const p of snapshot.backendTrafficPolicies.values()) {
    const spec = rateLimitExtension(p)
    if (spec === null) continue
    const { error } = resolveSecrets(snapshot, trafficPolicyOwner(p), ExtensionType.RATE_LIMIT, spec.config)
    if (error === null || skipped(error)) continue
    out.push({
      statusKey: statusKey('BackendTrafficPolicy', p.meta.namespace, p.meta.name), reason: error.reason,
      problem: {
        source: p.source, kind: 'BackendTrafficPolicy', namespace: p.meta.namespace, name: p.meta.name, field: mapKey('metadata.annotations', annotationOf(error.path)),
        message: `${error.message}; requests this policy's rate limit applies to fail`, severity: 'error',
      },
    })
  }
  return out.sort((a, b) => a.problem.source.file < b.problem.source.file ? -1 : a.problem.source.file > b.problem.source.file ? 1 : a.problem.source.doc - b.problem.source.doc)
}

/** ResolvedRefs=False on each owner with an unusable extension Secret reference (the fields and messages joined). */
export function addSecretRefConditions(objects: Map<string, ObjectStatus>, problems: readonly SecretRefProblem[]): void {
  const byOwner = new Map<string, SecretRefProblem[]>()
  for (const p of problems) {
    const list = byOwner.get(p.statusKey) ?? []
    list.push(p)
    byOwner.set(p.statusKey, list)
  }
  for (const [key, list] of byOwner) {
    const s = objects.get(key)
    if (s === undefined) continue
    const message = list.map(p => `${p.problem.field}: ${p.problem.message}`).join('; ')
    objects.set(key, { ...s, conditions: [...s.conditions, condition('ResolvedRefs', false, (list[0] as SecretRefProblem).reason, message, s.generation)] })
  }
}

/** Memoizes compiled extensions by owner and name (one object per extension in the table). */
export class ExtensionCompiler {
  readonly #snapshot: Snapshot
  readonly #keySecret: Uint8Array
  readonly #cache = new Map<string, CompiledExtension>()
  readonly #chains = new Map<string, ExtensionChain>()
  readonly verdicts: ExtensionVerdict[] = []
  readonly #seenVerdicts = new Set<string>()

  #handedOut = 0

  constructor(snapshot: Snapshot, keySecret: Uint8Array) {
    this.#snapshot = snapshot
    this.#keySecret = keySecret
  }

  /** Chains handed out so far (new or shared): compile-cache.ts reuses only routes that took none. */
  get handedOut(): number { return this.#handedOut }

  #compiled(s: ScopedExtensions, spec: ExtensionSpec): CompiledExtension {
    const k = `${s.scope}|${ownerId(s.owner)}|${spec.name}`
    let c = this.#cache.get(k)
    if (c === undefined) this.#cache.set(k, c = compileExtension(this.#snapshot, s.scope, s.owner, spec, this.#keySecret))
    return c
  }

  /** The chain of one rule × cluster, or null when no scope has extensions. Identical chains are shared. */
  chain(id: string, scopes: readonly ScopedExtensions[]): ExtensionChain | null {
    interface Entry { ext: CompiledExtension; owner: ExtensionOwner; order: number }
    const byName = new Map<string, Entry>()
    const byType = new Map<string, Entry>()
    let order = 0
    // Most specific scope first, oldest owner first within a scope: the first entry for a name/type wins.
    const sorted = [...scopes].sort((a, b) => SCOPE_RANK[a.scope] - SCOPE_RANK[b.scope] || (olderThan(a.owner, b.owner) ? -1 : olderThan(b.owner, a.owner) ? 1 : 0))
    for (const s of sorted) {
      for (const spec of s.list) {
        const ext = this.#compiled(s, spec)
        const winner = byName.get(ext.name) ?? (SINGLETON_TYPES.has(ext.type) ? byType.get(ext.type) : undefined)
        if (winner !== undefined) {
          if (winner.owner !== s.owner) this.#verdict(s.owner, winner.owner, ext.name, winner.ext.scope === ext.scope)
          continue
        }
        const entry = { ext, owner: s.owner, order: order++ }
        byName.set(ext.name, entry)
        if (SINGLETON_TYPES.has(ext.type)) byType.set(ext.type, entry)
      }
    }
    if (byName.size === 0) return null
    this.#handedOut++
    const list = [...byName.values()]
      .sort((a, b) => b.ext.priority - a.ext.priority || RUN_RANK[a.ext.scope] - RUN_RANK[b.ext.scope] || a.order - b.order)
      .map(e => e.ext)
    const shareKey = list.map(e => `${e.scope}|${e.key}`).join('\n')
    const shared = this.#chains.get(shareKey)
    if (shared !== undefined) return shared
    const chain: ExtensionChain = { id, extensions: list }
    this.#chains.set(shareKey, chain)
    return chain
  }

  #verdict(loser: ExtensionOwner, winner: ExtensionOwner, extension: string, sameScope: boolean): void {
    const k = `${ownerId(loser)}|${ownerId(winner)}|${extension}`
    if (this.#seenVerdicts.has(k)) return
    this.#seenVerdicts.add(k)
    this.verdicts.push({ loser, winner, extension, sameScope })
  }

  /** The owner record of the Backend with this key (backendKey), or null. */
  backendOwner(key: string): ExtensionOwner | null {
    const b = this.#snapshot.backends.get(key)
    return b === undefined ? null : backendExtensionOwner(b)
  }

  /** Every distinct chain compiled, for RouteTable.extensionChains. */
  chains(): ExtensionChain[] {
    return [...this.#chains.values()]
  }
}

/**
 * Status for precedence decisions: a loser at the same scope is Conflicted
 * (the oldest wins), a loser at a wider scope Overridden. Appended to the
 * status objects compile already built (EgressExtension, Backend).
 */
export function addExtensionVerdicts(objects: Map<string, ObjectStatus>, verdicts: readonly ExtensionVerdict[]): void {
  const byLoser = new Map<string, ExtensionVerdict[]>()
  for (const v of verdicts) {
    const l = v.loser
    const key = l.kind === 'Backend' || l.kind === 'XBackend' ? backendKey(l.group, l.kind, l.namespace, l.name) : statusKey(l.kind, l.namespace, l.name)
    const list = byLoser.get(key) ?? []
    list.push(v)
    byLoser.set(key, list)
  }
  for (const [key, list] of byLoser) {
    const s = objects.get(key)
    if (s === undefined) continue
    const conflicted = list.filter(v => v.sameScope).map(v => `${v.extension}: ${ownerKey(v.winner)} is older at the same scope`)
    const overridden = list.filter(v => !v.sameScope).map(v => `${v.extension}: ${ownerKey(v.winner)} is more specific`)
    const conditions = [...s.conditions]
    if (conflicted.length > 0) conditions.push(condition('Conflicted', true, 'Conflicted', `extensions not applied: ${[...new Set(conflicted)].sort().join('; ')}`, s.generation))
    if (overridden.length > 0) {
      // The policy index may already say Overridden (whole-policy precedence): name the extensions in the same condition.
      const detail = `extensions overridden: ${[...new Set(overridden)].sort().join('; ')}`
      const at = conditions.findIndex(c => c.type === 'Overridden')
      if (at === -1) conditions.push(condition('Overridden', true, 'Overridden', detail, s.generation))
      else conditions[at] = { ...conditions[at] as typeof conditions[number], message: `${(conditions[at] as typeof conditions[number]).message}; ${detail}` }
    }
    objects.set(key, { ...s, conditions })
  }
}
