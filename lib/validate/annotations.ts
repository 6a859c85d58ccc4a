// sallyport's own annotations on Gateway API objects, read the same way by
// `validate` (a warning per unreadable value: the object still serves, the
// annotation is ignored) and by compile (which reports the same text in
// status). Only annotations whose whole meaning is in their own value are
// checked here; those that name other objects (a proxy Secret) are checked by
// compile, where the other objects are known.

import { asObj, asStr } from './access.ts'
import { parseRedisAddress } from '../redis-address.ts'
import { parseCidr, type Cidr } from '../address-ranges.ts'
import { withoutTrailingDot } from '../hostname-index.ts'
import type { Obj } from './access.ts'
import { Findings, key } from './findings.ts'

export const ANNOTATIONS = {
  /** HTTPRoute: the ports CONNECT may ask for on its hostnames (issue 9). */
  CONNECT_PORTS: 'sallyport.io/connect-ports',
  /** HTTPRoute: the tunnelled ClientHello must name the requested host (issue 9). */
  CONNECT_VERIFY_SNI: 'sallyport.io/connect-verify-sni',
  /** Backend or Gateway: reach external destinations through this HTTP CONNECT proxy (issue 9). */
  UPSTREAM_PROXY: 'sallyport.io/upstream-proxy',
  /** Backend or Gateway: Secret (same namespace) with username and password for the proxy. */
  UPSTREAM_PROXY_SECRET: 'sallyport.io/upstream-proxy-secret',
  /** Backend: it is another egress gateway (issue 6). */
  PARENT_GATEWAY: 'sallyport.io/parent-gateway',
  /** BackendTrafficPolicy of rateLimit type Global: the Redis every replica shares (host:port, rediss://host:port for TLS). */
  RATE_LIMIT_REDIS: 'sallyport.io/rate-limit-redis',
  /** BackendTrafficPolicy: Secret (same namespace) with `password`, and `username` if an ACL user, for AUTH to that Redis. */
  RATE_LIMIT_REDIS_SECRET: 'sallyport.io/rate-limit-redis-secret',
  /** BackendTrafficPolicy: ConfigMap (same namespace) whose `ca.crt` holds the CAs a rediss:// Redis is verified against (instead of the system's). */
  RATE_LIMIT_REDIS_CA: 'sallyport.io/rate-limit-redis-ca',
  /** BackendTrafficPolicy: kubernetes.io/tls Secret (same namespace) presented to a rediss:// Redis as the client certificate. */
  RATE_LIMIT_REDIS_CLIENT_CERT: 'sallyport.io/rate-limit-redis-client-cert',
} as const

/** Gateway destination policy (compile/destination-policy.ts reads them; reverse-dns-suffixes also on a Backend). */
export const DESTINATION = {
  ALLOW_CIDRS: 'sallyport.io/allow-destination-cidrs',
  ALLOWLIST: 'sallyport.io/destination-allowlist',
  DENYLIST: 'sallyport.io/destination-denylist',
  REGIONS: 'sallyport.io/allowed-regions',
  REVERSE_DNS: 'sallyport.io/reverse-dns-suffixes',
} as const

/** HTTPRoute: failover order of its backendRefs, `name=N` (compile/rules.ts). */
const BACKEND_PRIORITY = 'sallyport.io/backend-priority'

export type Parsed<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly message: string }

/** Gateway listener `tls.options` sallyport reads (listeners that terminate TLS). */
export const TLS_OPTIONS = {
  /** Lowest TLS version a client of the listener may use (default TLSv1.2). */
  MIN_VERSION: 'sallyport.io/min-version',
  /** Highest TLS version the listener's port offers (default TLSv1.3). */
  MAX_VERSION: 'sallyport.io/max-version',
} as const

export type TlsVersion = 'TLSv1.2' | 'TLSv1.3'

/** `TLSv1.3`, `TLSv1.2` (also `1.3`, `TLS1.2`, `TLSv1_3`). */
export function parseTlsVersion(text: string): Parsed<TlsVersion> {
  const m = /^(?:tls\s*v?)?1[._]([0-3])$/i.exec(text.trim())
  if (m === null) return { ok: false, message: `${JSON.stringify(text)} is not a TLS version (TLSv1.2 or TLSv1.3)` }
  if (m[1] === '3') return { ok: true, value: 'TLSv1.3' }
  if (m[1] === '2') return { ok: true, value: 'TLSv1.2' }
  return { ok: false, message: 'TLS 1.2 is the lowest version sallyport serves' }
}

/** `"443"`, `"443, 8443"`: ports 1-65535, comma or space separated. */
export function parseConnectPorts(text: string): Parsed<number[]> {
  const parts = text.split(/[\s,]+/).filter((p) => p !== '')
  if (parts.length === 0) return { ok: false, message: 'lists no port' }
  const ports: number[] = []
  for (const p of parts) {
    const n = Number(p)
    if (!/^\d+$/.test(p) || n < 1 || n > 65535) return { ok: false, message: `${JSON.stringify(p)} is not a port (1-65535)` }
    ports.push(n)
  }
  return { ok: true, value: ports }
}

/** `"true"` or `"false"`. */
export function parseBool(text: string): Parsed<boolean> {
  if (text === 'true' || text === 'false') return { ok: true, value: text === 'true' }
  return { ok: false, message: `${JSON.stringify(text)} is not "true" or "false"` }
}

export interface ProxyAddress { readonly host: string; readonly port: number }

/**
 * `http://host[:port]` (port default 80), or `none`: no proxy (a Backend's way
 * out of its Gateway's proxy). Credentials go in the Secret, never the URL.
 */
export function parseUpstreamProxy(text: string): Parsed<ProxyAddress | 'none'> {
  if (text.trim() === 'none') return { ok: true, value: 'none' }
  const credentials = { ok: false, message: `credentials in the URL would show in status and dumps: put them in a Secret named by ${ANNOTATIONS.UPSTREAM_PROXY_SECRET}` } as const
  // Before anything that echoes the text: a URL that does not parse (no host, a bad port) may still hold a password.
  if (/^(?:[A-Za-z][A-Za-z0-9+.-]*:\/\/)?([^/?#\\]*)/.exec(text.trim())?.[1]?.includes('@') === true) return credentials
  let url: URL
  try { url = new URL(text.trim()) } catch { return { ok: false, message: `${JSON.stringify(text)} is not a URL (http://host:port or none)` } }
  if (url.protocol !== 'http:') return { ok: false, message: `scheme ${url.protocol.slice(0, -1)} is not supported: the proxy is spoken to in plain HTTP (http://host:port)` }
  if (url.hostname === '') return { ok: false, message: 'names no host' }
  if (url.username !== '' || url.password !== '') return credentials
  if (url.pathname !== '/' || url.search !== '' || url.hash !== '') return { ok: false, message: 'a proxy URL has no path, query or fragment' }
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  return { ok: true, value: { host, port: url.port === '' ? 80 : Number(url.port) } }
}

/** `name` or `namespace/name`; only the object's own namespace can be read (no ReferenceGrant for annotations). */
export function parseSecretRef(text: string, namespace: string): Parsed<string> {
  return parseLocalRef(text, namespace, 'Secret')
}

/** parseSecretRef for an object of another kind (a ConfigMap): `name` or `namespace/name`, the object's own namespace only. */
export function parseLocalRef(text: string, namespace: string, kind: 'Secret' | 'ConfigMap'): Parsed<string> {
  const parts = text.trim().split('/')
  const [ns, name] = parts.length === 2 ? parts as [string, string] : [namespace, parts[0] as string]
  if (parts.length > 2 || name === '') return { ok: false, message: `${JSON.stringify(text)} is not a ${kind} name` }
  if (ns !== namespace) return { ok: false, message: `${kind} ${ns}/${name} is in another namespace; only ${namespace} can be read` }
  return { ok: true, value: `${ns}/${name}` }
}

/** The entries of a list annotation (comma or space separated); null when it is absent. */
export function listEntries(value: string | undefined): string[] | null {
  if (value === undefined) return null
  return value.split(/[\s,]+/).map(s => s.trim()).filter(s => s !== '')
}

const HOSTNAME = /^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$/

/** A destination allow- or deny-list (Gateway annotations): hostnames, `*.suffix` wildcards and CIDRs. */
export interface HostList {
  readonly exact: ReadonlySet<string>
  /** '.example.com' for '*.example.com'. */
  readonly suffixes: readonly string[]
  readonly cidrs: readonly Cidr[]
}

/** The entries of a destination list; `problems`: the ones that are neither a hostname nor a CIDR (ignored). */
export function parseHostList(list: readonly string[]): { readonly list: HostList; readonly problems: string[] } {
  const exact = new Set<string>()
  const suffixes: string[] = []
  const cidrs: Cidr[] = []
  const problems: string[] = []
  for (const raw of list) {
    const e = raw.toLowerCase()
    if (/^[0-9.]+(\/\d+)?$/.test(e) || e.includes(':')) {
      const c = parseCidr(e)
      if (c === null) problems.push(`${JSON.stringify(raw)} is not a CIDR`)
      else cidrs.push(c)
    } else if (HOSTNAME.test(e)) {
      const name = withoutTrailingDot(e)
      if (name.startsWith('*.')) suffixes.push(name.slice(1))
      else exact.add(name)
    } else {
      problems.push(`${JSON.stringify(raw)} is neither a hostname nor a CIDR`)
    }
  }
  return { list: { exact, suffixes, cidrs }, problems }
}

/** A suffix list for PTR checks: '.amazonaws.com' (under it) or 'example.com' (it or under it); null when absent. */
export function parseDnsSuffixes(value: string | undefined): { readonly suffixes: string[] | null; readonly problems: string[] } {
  const list = listEntries(value)
  if (list === null) return { suffixes: null, problems: [] }
  const suffixes: string[] = []
  const problems: string[] = []
  for (const raw of list) {
    const e = raw.toLowerCase().replace(/\.$/, '')
    if (!HOSTNAME.test(e.startsWith('.') ? e.slice(1) : e) || e.startsWith('*')) problems.push(`${JSON.stringify(raw)} is not a DNS suffix`)
    else suffixes.push(e)
  }
  return { suffixes, problems }
}

/** Values compile reads in the TLS annotations (compile/tls.ts readTlsExtras keeps its default for any other). */
const OCSP_MODES = ['off', 'allow', 'must-staple', 'require']
const CRL_STALE_MODES = ['fail', 'allow']
const CRL_REF = /^(ConfigMap|Secret|ClusterTrustBundle)(\/[^/\s]+){1,2}$/
/** A base64 SHA-256 hash, optionally `sha256/`-prefixed, as upstream/tls.ts compares pins. */
const SPKI_PIN = /^(?:sha256\/)?[A-Za-z0-9+/]{43}=$/

const TLS_OWNERS = new Set(['Backend', 'XBackend', 'BackendTLSPolicy'])

/** Annotations of the object owning TLS settings (Backend kinds, BackendTLSPolicy). */
function checkTlsAnnotation(name: string, value: string, warn: (message: string) => void): void {
  const v = value.trim()
  switch (name) {
    case 'sallyport.io/ocsp':
      if (!OCSP_MODES.includes(v.toLowerCase())) warn(`${JSON.stringify(value)} is not off, allow, must-staple or require; the annotation is ignored (must-staple)`)
      break
    case 'sallyport.io/crl-stale':
      if (!CRL_STALE_MODES.includes(v.toLowerCase())) warn(`${JSON.stringify(value)} is not fail or allow; the annotation is ignored (fail)`)
      break
    case 'sallyport.io/crl-fetch': {
      const r = parseBool(v.toLowerCase())
      if (!r.ok) warn(`${r.message}; the annotation is ignored`)
      break
    }
    case 'sallyport.io/tls-min-version':
      if (!/1[._][23]$/.test(v)) warn(`${JSON.stringify(value)} is not 1.2 or 1.3; the annotation is ignored`)
      break
    case 'sallyport.io/spki-pins':
      for (const pin of value.split(',').map((s) => s.trim()).filter((s) => s !== '')) {
        if (!SPKI_PIN.test(pin)) warn(`${JSON.stringify(pin)} is not a base64 SHA-256 hash (44 characters); no certificate can match it`)
      }
      break
    case 'sallyport.io/crl-refs':
      for (const ref of value.split(',').map((s) => s.trim()).filter((s) => s !== '')) {
        if (!CRL_REF.test(ref)) warn(`${JSON.stringify(ref)} is not Kind/name or Kind/namespace/name (ConfigMap, Secret, ClusterTrustBundle); the entry is ignored`)
      }
      break
  }
}

const BACKEND_KINDS = new Set(['Backend', 'XBackend'])

/** Warnings for sallyport annotations with unreadable values on `obj` (any kind). */
export function checkAnnotations(kind: string, obj: Obj, f: Findings): void {
  const annotations = asObj(asObj(obj.metadata)?.annotations)
  if (annotations === null) return
  const namespace = asStr(asObj(obj.metadata)?.namespace) ?? 'default'
  const at = (name: string): string => key('metadata.annotations', name)
  const text = (name: string): string | null => asStr(annotations[name])
  const warn = (name: string, r: Parsed<unknown>): void => { if (!r.ok) f.warn(at(name), `${r.message}; the annotation is ignored`) }
  const isBackend = BACKEND_KINDS.has(kind)
  const proxyHolder = isBackend || kind === 'Gateway'
  for (const name of Object.keys(annotations)) {
    const value = text(name)
    if (value === null || !name.startsWith('sallyport.io/')) continue
    switch (name) {
      case ANNOTATIONS.CONNECT_PORTS:
        if (kind !== 'HTTPRoute') f.warn(at(name), 'applies to HTTPRoutes only; ignored here')
        else warn(name, parseConnectPorts(value))
        break
      case ANNOTATIONS.CONNECT_VERIFY_SNI:
        if (kind !== 'HTTPRoute') f.warn(at(name), 'applies to HTTPRoutes only; ignored here')
        else {
          warn(name, parseBool(value))
          if (text(ANNOTATIONS.CONNECT_PORTS) === null) f.warn(at(name), `has no effect without ${ANNOTATIONS.CONNECT_PORTS}`)
        }
        break
      case ANNOTATIONS.UPSTREAM_PROXY:
        if (!proxyHolder) f.warn(at(name), 'applies to Backends and Gateways only; ignored here')
        else {
          const r = parseUpstreamProxy(value)
          warn(name, r)
          if (r.ok && r.value === 'none' && !isBackend) f.warn(at(name), '"none" is for a Backend leaving its Gateway\'s proxy; a Gateway without a proxy leaves the annotation out')
        }
        break
      case ANNOTATIONS.UPSTREAM_PROXY_SECRET:
        if (!proxyHolder) f.warn(at(name), 'applies to Backends and Gateways only; ignored here')
        else {
          warn(name, parseSecretRef(value, namespace))
          if (text(ANNOTATIONS.UPSTREAM_PROXY) === null) f.warn(at(name), `has no effect without ${ANNOTATIONS.UPSTREAM_PROXY}`)
        }
        break
      case ANNOTATIONS.RATE_LIMIT_REDIS:
        if (kind !== 'BackendTrafficPolicy') f.warn(at(name), 'applies to BackendTrafficPolicies only; ignored here')
        else {
          const r = parseRedisAddress(value, `put them in a Secret named by ${ANNOTATIONS.RATE_LIMIT_REDIS_SECRET}`)
          if (!r.ok) f.warn(at(name), `${r.message}; the annotation is ignored and the limit counted per process`)
          else if (asStr(asObj(asObj(obj.spec)?.rateLimit)?.type) !== 'Global') f.warn(at(name), 'has no effect unless spec.rateLimit.type is Global')
        }
        break
      case ANNOTATIONS.RATE_LIMIT_REDIS_SECRET:
        if (kind !== 'BackendTrafficPolicy') f.warn(at(name), 'applies to BackendTrafficPolicies only; ignored here')
        else {
          const r = parseSecretRef(value, namespace)
          if (!r.ok) f.warn(at(name), `${r.message}; the annotation is ignored: no AUTH is sent`)
          if (text(ANNOTATIONS.RATE_LIMIT_REDIS) === null) f.warn(at(name), `has no effect without ${ANNOTATIONS.RATE_LIMIT_REDIS}`)
        }
        break
      case ANNOTATIONS.RATE_LIMIT_REDIS_CA:
      case ANNOTATIONS.RATE_LIMIT_REDIS_CLIENT_CERT:
        if (kind !== 'BackendTrafficPolicy') f.warn(at(name), 'applies to BackendTrafficPolicies only; ignored here')
        else {
          const r = parseLocalRef(value, namespace, name === ANNOTATIONS.RATE_LIMIT_REDIS_CA ? 'ConfigMap' : 'Secret')
          if (!r.ok) f.warn(at(name), `${r.message}; the annotation is ignored`)
          const redis = text(ANNOTATIONS.RATE_LIMIT_REDIS)
          const address = redis === null ? null : parseRedisAddress(redis)
          if (redis === null) f.warn(at(name), `has no effect without ${ANNOTATIONS.RATE_LIMIT_REDIS}`)
          else if (address?.ok === true && !address.value.tls) f.warn(at(name), `has no effect: ${ANNOTATIONS.RATE_LIMIT_REDIS} is plain TCP; TLS needs a rediss:// address`)
        }
        break
      case ANNOTATIONS.PARENT_GATEWAY:
        if (!isBackend) f.warn(at(name), 'applies to Backends only; ignored here')
        else warn(name, parseBool(value))
        break
      case DESTINATION.ALLOW_CIDRS:
        if (kind !== 'Gateway') break
        for (const e of listEntries(value) ?? []) {
          if (parseCidr(e) === null) f.warn(at(name), `${JSON.stringify(e)} is not a CIDR; the entry is ignored`)
        }
        break
      case DESTINATION.ALLOWLIST:
      case DESTINATION.DENYLIST:
        if (kind !== 'Gateway') break
        for (const m of parseHostList(listEntries(value) ?? []).problems) f.warn(at(name), `${m}; the entry is ignored`)
        break
      case DESTINATION.REGIONS:
        if (kind === 'Gateway' && listEntries(value)?.length === 0) f.warn(at(name), 'lists no region: every Backend is refused')
        break
      case DESTINATION.REVERSE_DNS:
        if (kind !== 'Gateway' && !isBackend) break
        for (const m of parseDnsSuffixes(value).problems) f.warn(at(name), `${m}; the entry is ignored`)
        break
      case BACKEND_PRIORITY:
        if (kind !== 'HTTPRoute') break
        for (const part of value.split(',').map((s) => s.trim()).filter((s) => s !== '')) {
          // compile/rules.ts backendPriorities reads `name=N`, N a whole number; it skips anything else.
          if (!/^[^=\s]+\s*=\s*\d+$/.test(part)) f.warn(at(name), `${JSON.stringify(part)} is not name=N (N a whole number, 0 first); the entry is ignored`)
        }
        break
      default:
        if (TLS_OWNERS.has(kind)) checkTlsAnnotation(name, value, (message) => f.warn(at(name), message))
    }
  }
}
