// Upstream TLS pieces shared by every Backend flavour and both BackendTLSPolicy
// shapes: they all normalize to one UpstreamTLS (model.ts).
//
// sallyport annotations (on a Backend of any flavour, or on a BackendTLSPolicy):
//
//   sallyport.io/spki-pins: "<b64>,<b64>"
//       Comma-separated base64 SHA-256 digests of the server's
//       SubjectPublicKeyInfo (the HPKP / `openssl pkey -pubin -outform der |
//       openssl dgst -sha256 -binary | base64` form). Whitespace around items is
//       ignored; empty items are dropped.
//
//   sallyport.io/crl-refs: "ConfigMap/my-crl,Secret/pki/ca-crl"
//       Comma-separated `Kind/name` (namespace of the annotated object) or
//       `Kind/namespace/name`. Kind is ConfigMap, Secret or ClusterTrustBundle
//       (the latter cluster-scoped, namespace ignored). Malformed items are
//       skipped here; validate/ reports them.
//
// The annotations apply only where TLS is on: a pin on a plaintext backend
// means nothing.

import type { DataRef, ObjectRef, SubjectAltName, UpstreamTLS } from './model.ts'
import {
  type Fields, boolAt, listAt, nonEmptyAt, objectAt, readDataRef, readObjectRef, stringsAt, textAt,
} from './read-fields.ts'

export const SPKI_PINS_ANNOTATION = 'sallyport.io/spki-pins'
export const CRL_REFS_ANNOTATION = 'sallyport.io/crl-refs'

/** Pins and CRLs declared by annotation on the object owning the TLS settings. */
export interface TlsAnnotations {
  readonly spkiPins: readonly string[]
  readonly crlRefs: readonly DataRef[]
}

export function readTlsAnnotations(annotations: Readonly<Record<string, string>>, namespace: string): TlsAnnotations {
  return {
    spkiPins: splitList(annotations[SPKI_PINS_ANNOTATION]),
    crlRefs: splitList(annotations[CRL_REFS_ANNOTATION]).map((item) => parseCrlRef(item, namespace)).filter((r): r is DataRef => r !== null),
  }
}

function splitList(value: string | undefined): string[] {
  if (value === undefined) return []
  return value.split(',').map((s) => s.trim()).filter((s) => s !== '')
}

const CRL_KINDS = new Set(['ConfigMap', 'Secret', 'ClusterTrustBundle'])

/** `Kind/name` or `Kind/namespace/name`; null when malformed. */
export function parseCrlRef(item: string, namespace: string): DataRef | null {
  const parts = item.split('/').map((s) => s.trim())
  if (parts.length < 2 || parts.length > 3 || parts.some((p) => p === '')) return null
  const kind = parts[0] as string
  if (!CRL_KINDS.has(kind)) return null
  const name = parts[parts.length - 1] as string
  const ns = kind === 'ClusterTrustBundle' ? '' : parts.length === 3 ? parts[1] as string : namespace
  return { group: kind === 'ClusterTrustBundle' ? 'certificates.k8s.io' : '', kind, namespace: ns, name, key: null }
}

/** Everything of UpstreamTLS but the mode may be left out; absent fields get the model's neutral values. */
export type TlsFields = Partial<UpstreamTLS> & Pick<UpstreamTLS, 'mode'>

/** One UpstreamTLS with every field set (one object shape), annotations merged in. */
export function makeUpstreamTls(f: TlsFields, ann: TlsAnnotations): UpstreamTLS {
  return {
    mode: f.mode,
    sni: lowerOrNull(f.sni ?? null),
    hostname: lowerOrNull(f.hostname ?? null),
    caCertificateRefs: f.caCertificateRefs ?? [],
    wellKnownCACertificates: f.wellKnownCACertificates ?? null,
    subjectAltNames: f.subjectAltNames ?? [],
    clientCertificateRef: f.clientCertificateRef ?? null,
    insecureSkipVerify: f.insecureSkipVerify ?? false,
    spkiPins: [...(f.spkiPins ?? []), ...ann.spkiPins],
    crlRefs: [...(f.crlRefs ?? []), ...ann.crlRefs],
    minVersion: f.minVersion ?? 'TLSv1.2',
    alpn: f.alpn ?? [],
  }
}

function lowerOrNull(s: string | null): string | null {
  return s === null || s === '' ? null : s.toLowerCase()
}

/**
 * Gateway API BackendTLSPolicyValidation (v1 / v1alpha3), as used by
 * BackendTLSPolicy.spec.validation and inline by XBackend / GEP-4488
 * `tls.validation`. caCertificateRefs are LocalObjectReferences: namespace is
 * always the referrer's.
 */
export function readValidation(v: Fields | null, namespace: string): Partial<UpstreamTLS> {
  if (v === null) return {}
  return {
    caCertificateRefs: listAt(v, 'caCertificateRefs').map((r) => readDataRef({ ...r, namespace }, 'ConfigMap', namespace)),
    wellKnownCACertificates: wellKnown(textAt(v, 'wellKnownCACertificates')),
    hostname: nonEmptyAt(v, 'hostname'),
    subjectAltNames: readSubjectAltNames(v),
    insecureSkipVerify: boolAt(v, 'insecureSkipVerify') ?? false,
  }
}

export function wellKnown(v: string | null): 'System' | null {
  return v === 'System' ? 'System' : null
}

/**
 * subjectAltNames in either published form: Gateway API v1
 * `[{type: Hostname, hostname} | {type: URI, uri}]`, or the egress proposal's
 * plain strings (a string containing "://" is a URI, anything else a hostname).
 */
export function readSubjectAltNames(o: Fields): SubjectAltName[] {
  const raw = o['subjectAltNames']
  if (!Array.isArray(raw)) return []
  const out: SubjectAltName[] = []
  for (const item of raw) {
    if (typeof item === 'string') {
      if (item === '') continue
      out.push(item.includes('://') ? { type: 'URI', value: item } : { type: 'Hostname', value: item.toLowerCase() })
      continue
    }
    if (typeof item !== 'object' || item === null) continue
    const san = item as Fields
    const type = textAt(san, 'type')
    const uri = nonEmptyAt(san, 'uri')
    const hostname = nonEmptyAt(san, 'hostname')
    if (type === 'URI' && uri !== null) out.push({ type: 'URI', value: uri })
    else if (hostname !== null) out.push({ type: 'Hostname', value: hostname.toLowerCase() })
    else if (uri !== null) out.push({ type: 'URI', value: uri })
  }
  return out
}

/** A Secret reference for a client certificate (SecretObjectReference: group '', kind Secret, namespace of the referrer). */
export function readSecretRef(o: Fields | null, namespace: string): ObjectRef | null {
  return o === null ? null : readObjectRef(o, 'Secret', namespace)
}

/** A list of CA-bundle references (a single object is read as a one-item list); kind defaults to ConfigMap. */
export function readDataRefs(o: Fields | null, key: string, namespace: string): DataRef[] {
  return listAt(o, key).map((r) => readDataRef(r, 'ConfigMap', namespace))
}

/** `crlRefs` written as a field (sallyport extension on inline Backend TLS). */
export function readCrlRefsField(tls: Fields | null, namespace: string): DataRef[] {
  return readDataRefs(tls, 'crlRefs', namespace)
}

/** Minimum TLS version from `minVersion` written as "1.3", "TLSv1.3" or "TLS1_3"; default TLSv1.2. */
export function readMinVersion(tls: Fields | null): 'TLSv1.2' | 'TLSv1.3' {
  const v = textAt(tls, 'minVersion')
  return v !== null && /1[._]3$/.test(v) ? 'TLSv1.3' : 'TLSv1.2'
}

/** ALPN protocols offered, from `alpnProtocols` (Envoy Gateway) or `alpn`. */
export function readAlpn(tls: Fields | null): string[] {
  const a = stringsAt(tls, 'alpnProtocols')
  return a.length > 0 ? a : stringsAt(tls, 'alpn')
}

/** The `validation` object of an inline TLS block, if any. */
export function validationOf(tls: Fields | null): Fields | null {
  return objectAt(tls, 'validation')
}
