// Upstream TLS: turn an UpstreamTLS (Backend inline, or a BackendTLSPolicy on a
// Service port) into ClusterTls with every reference resolved, and decide
// which BackendTLSPolicy applies to which Service port. Also the GEP-3792 mesh
// identity (bare mTLS to meshed workloads).
//
// sallyport annotations read here (on a Backend of any flavour, or on a
// BackendTLSPolicy; spki-pins and crl-refs are read in resources/read-tls.ts):
//
//   sallyport.io/crl-stale: fail | allow        (default fail)
//       A CRL past its nextUpdate refuses the connection (fail closed) or is still used.
//   sallyport.io/crl-fetch: "true" | "false"    (default false)
//       Fetch CRLs from the certificates' http(s) CRL distribution points (cached
//       until their nextUpdate) for issuers no configured CRL covers.
//   sallyport.io/ocsp: off | allow | must-staple | require   (default must-staple)
//       Stapled OCSP is requested and verified (revoked refuses) unless off; without
//       a good staple: allow accepts, must-staple refuses RFC 7633 must-staple
//       certificates only, require refuses every certificate.
//   sallyport.io/tls-min-version: "1.2" | "1.3"  (default 1.2; a Backend's tls.minVersion field also works)
//
// Mesh identity (GEP-3792): the client certificate the gateway presents to meshed
// workloads is the kubernetes.io/tls Secret named by the Gateway's
// spec.infrastructure.parametersRef, else by its GatewayClass's parametersRef
// (group "", kind Secret); verification is against Gateway.spec.mesh.trustBundle.

import { createHash } from 'node:crypto'
import type { BackendTLSPolicy, Gateway, UpstreamTLS } from '../resources/model.ts'
import { keyOfBackend } from '../resources/model.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import type { ClusterTls, UpstreamProtocol } from './table.ts'
import type { ObjectStatus } from './status.ts'
import { compareAge, condition, statusKey } from './conditions.ts'
import { isIpLiteral } from './hostnames.ts'
import type { From, Resolved } from './refs.ts'
import { fail, resolveBundle, resolveTlsSecret } from './refs.ts'
import { checkCertificates } from './tls-material.ts'

export const CRL_STALE_ANNOTATION = 'sallyport.io/crl-stale'
export const CRL_FETCH_ANNOTATION = 'sallyport.io/crl-fetch'
export const OCSP_ANNOTATION = 'sallyport.io/ocsp'
export const TLS_MIN_VERSION_ANNOTATION = 'sallyport.io/tls-min-version'

/** Revocation and version settings from the annotations of the object owning the TLS settings. */
export interface TlsExtras {
  readonly crlStale: ClusterTls['crlStale']
  readonly crlFetch: boolean
  readonly ocsp: ClusterTls['ocsp']
  readonly minVersion: ClusterTls['minVersion'] | null
}

const OCSP_MODES: ReadonlySet<string> = new Set(['off', 'allow', 'must-staple', 'require'])

/** Unknown values keep the safe default (validate/ names them). */
export function readTlsExtras(annotations: Readonly<Record<string, string>>): TlsExtras {
  const stale = annotations[CRL_STALE_ANNOTATION]?.trim().toLowerCase()
  const fetch = annotations[CRL_FETCH_ANNOTATION]?.trim().toLowerCase()
  const ocsp = annotations[OCSP_ANNOTATION]?.trim().toLowerCase()
  const min = annotations[TLS_MIN_VERSION_ANNOTATION]?.trim()
  return {
    crlStale: stale === 'allow' ? 'allow' : 'fail',
    crlFetch: fetch === 'true',
    ocsp: ocsp !== undefined && OCSP_MODES.has(ocsp) ? ocsp as ClusterTls['ocsp'] : 'must-staple',
    minVersion: min === undefined ? null : /1[._]3$/.test(min) ? 'TLSv1.3' : /1[._]2$/.test(min) ? 'TLSv1.2' : null,
  }
}

const NO_ANNOTATIONS: Readonly<Record<string, string>> = {}

function alpnFor(protocol: UpstreamProtocol): string[] {
  switch (protocol) {
    case 'HTTP': return ['h2', 'http/1.1'] // HTTP over TLS: negotiate by ALPN
    case 'HTTP2': return ['h2']
    case 'HTTP11': case 'MCP': return ['http/1.1']
    default: return []
  }
}

/**
 * GEP-1897 / GEP-4488: the SNI is tls.sni, else the validation hostname, else
 * the Backend's external hostname; never an IP literal (RFC 6066 forbids IPs
 * in SNI). Referenced CA bundles replace system trust.
 */
export function buildClusterTls(
  snapshot: Snapshot, from: From, tls: UpstreamTLS, backendHostname: string | null, protocol: UpstreamProtocol,
  annotations: Readonly<Record<string, string>> = NO_ANNOTATIONS,
): Resolved<ClusterTls> {
  const ca = resolveBundle(snapshot, from, tls.caCertificateRefs, 'ca.crt', 'InvalidCACertificateRef')
  if (!ca.ok) return ca
  if (ca.value !== null) {
    const bad = checkCertificates(ca.value)
    if (bad !== null) return fail('InvalidCACertificateRef', `CA bundle: ${bad}`)
  }
  const crl = resolveBundle(snapshot, from, tls.crlRefs, 'ca.crl', 'InvalidCRLRef')
  if (!crl.ok) return crl
  if (crl.value !== null) {
    const bad = checkCrls(crl.value)
    if (bad !== null) return fail('InvalidCRLRef', `CRL bundle: ${bad}`)
  }
  const extras = readTlsExtras(annotations)
  let certPem: string | null = null
  let keyPem: string | null = null
  if (tls.clientCertificateRef !== null) {
    const r = resolveTlsSecret(snapshot, from, tls.clientCertificateRef, 'InvalidClientCertificateRef')
    if (!r.ok) return r
    certPem = r.value.certPem
    keyPem = r.value.keyPem
  } else if (tls.mode === 'ClientAndServer') {
    return fail('InvalidClientCertificateRef', 'mode ClientAndServer needs a clientCertificateRef')
  }
  const candidate = tls.sni ?? tls.hostname ?? backendHostname
  const servername = candidate === null || isIpLiteral(candidate) ? null : candidate.toLowerCase()
  const fields = {
    servername,
    verifyHostname: tls.hostname ?? servername,
    caPem: ca.value,
    subjectAltNames: tls.subjectAltNames.map(s => ({ type: s.type, value: s.value })),
    certPem,
    keyPem,
    insecureSkipVerify: tls.insecureSkipVerify,
    spkiPins: [...tls.spkiPins],
    crlPem: crl.value,
    minVersion: extras.minVersion ?? tls.minVersion,
    alpn: tls.alpn.length > 0 ? [...tls.alpn] : alpnFor(protocol),
    crlStale: extras.crlStale,
    crlFetch: extras.crlFetch,
    ocsp: extras.ocsp,
    verifyName: true,
  }
  return { ok: true, value: withIdentity(fields) }
}

function withIdentity(fields: Omit<ClusterTls, 'identityHash'>): ClusterTls {
  const identityHash = createHash('sha256').update(JSON.stringify(fields)).digest('hex')
  return { ...fields, identityHash }
}

/** Every X509 CRL block parses; at least one. */
function checkCrls(pem: string): string | null {
  const blocks = pem.match(/-----BEGIN X509 CRL-----[\s\S]*?-----END X509 CRL-----/g) ?? []
  if (blocks.length === 0) return 'no PEM X509 CRL in it'
  // A shape check only (DER SEQUENCE of a plausible length): the data path parses
  // CRLs fully and refuses connections (crl_invalid) should one still be broken.
  for (const block of blocks) {
    const der = Buffer.from(block.replace(/-----(BEGIN|END) X509 CRL-----|\s+/g, ''), 'base64')
    if (der.length < 32 || der[0] !== 0x30) return 'a CRL cannot be parsed'
  }
  return null
}

/**
 * GEP-3792 bare mTLS to meshed workloads: the gateway's identity certificate,
 * verification of the chain against the mesh trust bundle (workload identities
 * are SPIFFE IDs, not names we could predict, so no name check), no SNI and no
 * mesh-specific ALPN (the protocol's own ALPN only).
 */
export function buildMeshTls(snapshot: Snapshot, gateway: Gateway, protocol: UpstreamProtocol): Resolved<ClusterTls> {
  const mesh = gateway.mesh
  if (mesh === null) return fail('InvalidMeshConfig', `Gateway ${gateway.meta.namespace}/${gateway.meta.name} has no spec.mesh`)
  const from = { group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: gateway.meta.namespace }
  if (mesh.trustBundles.length === 0) return fail('InvalidMeshConfig', 'spec.mesh has no trustBundle: meshed routes cannot verify workloads')
  const ca = resolveBundle(snapshot, from, mesh.trustBundles, 'ca.crt', 'InvalidMeshTrustBundle')
  if (!ca.ok) return ca
  const bad = ca.value === null ? 'empty' : checkCertificates(ca.value)
  if (bad !== null) return fail('InvalidMeshTrustBundle', `mesh trust bundle: ${bad}`)
  const ref = meshIdentityRef(snapshot, gateway)
  if (ref === null) {
    return fail('InvalidMeshIdentity', 'meshed routes need the gateway identity: a kubernetes.io/tls Secret named by the Gateway spec.infrastructure.parametersRef or the GatewayClass parametersRef')
  }
  // The identity is the admin's own configuration (GatewayClass / Gateway infrastructure): no ReferenceGrant needed.
  const identity = resolveTlsSecret(snapshot, { ...from, namespace: ref.namespace }, ref, 'InvalidMeshIdentity')
  if (!identity.ok) return identity
  return {
    ok: true,
    value: withIdentity({
      servername: null, verifyHostname: null, caPem: ca.value, subjectAltNames: [],
      certPem: identity.value.certPem, keyPem: identity.value.keyPem, insecureSkipVerify: false, spkiPins: [],
      crlPem: null, minVersion: 'TLSv1.2', alpn: alpnFor(protocol), crlStale: 'fail', crlFetch: false, ocsp: 'off',
      verifyName: false,
    }),
  }
}

function meshIdentityRef(snapshot: Snapshot, gateway: Gateway): { group: string; kind: string; namespace: string; name: string } | null {
  const infra = gateway.infrastructure?.parametersRef ?? null
  if (infra !== null && infra.group === '' && infra.kind === 'Secret') return { ...infra, namespace: gateway.meta.namespace }
  const cls = snapshot.gatewayClasses.get(gateway.gatewayClassName)
  const p = cls?.parametersRef ?? null
  if (p !== null && p.group === '' && p.kind === 'Secret' && p.namespace !== '') return p
  return null
}

export interface TlsPolicyPlan {
  /** `namespace/service` → policies targeting it, oldest first, each with its sectionName. */
  readonly byService: ReadonlyMap<string, ReadonlyArray<{ readonly policy: BackendTLSPolicy; readonly sectionName: string | null }>>
  /** Policies that lost to an older one on the same target: policy key → winner key. */
  readonly conflicted: ReadonlyMap<string, string>
  /** Policies targeting a Backend (not applied, GEP-4488) or an unsupported kind: key → message. */
  readonly invalid: ReadonlyMap<string, string>
  /**
   * `namespace/service#sectionName` → every policy targeting it, the winner
   * first, then those conflicted there: a Gateway whose routes reach the
   * Service port is an ancestor of each (Gateway API PolicyAncestorStatus),
   * so the losers' Accepted=False has an entry to be written in.
   */
  readonly contenders: ReadonlyMap<string, readonly string[]>
}

export function planTlsPolicies(snapshot: Snapshot): TlsPolicyPlan {
  const byService = new Map<string, Array<{ policy: BackendTLSPolicy; sectionName: string | null }>>()
  const conflicted = new Map<string, string>()
  const invalid = new Map<string, string>()
  const owners = new Map<string, string>() // target+section → winning policy key
  const contenders = new Map<string, string[]>()
  const policies = [...snapshot.backendTLSPolicies.values()].sort(compareAge)
  for (const policy of policies) {
    const key = `${policy.meta.namespace}/${policy.meta.name}`
    for (const ref of policy.targetRefs) {
      if (ref.group === '' && ref.kind === 'Service') {
        const target = `${policy.meta.namespace}/${ref.name}`
        const slot = `${target}#${ref.sectionName ?? ''}`
        const all = contenders.get(slot)
        if (all === undefined) contenders.set(slot, [key])
        else if (!all.includes(key)) all.push(key)
        const owner = owners.get(slot)
        if (owner !== undefined && owner !== key) { conflicted.set(key, owner); continue }
        owners.set(slot, key)
        const list = byService.get(target) ?? []
        list.push({ policy, sectionName: ref.sectionName })
        byService.set(target, list)
      } else if (ref.kind === 'Backend' || ref.kind === 'XBackend') {
        // GEP-4488: Backend carries its TLS inline; Backends are explicitly not valid BackendTLSPolicy targets.
        invalid.set(key, `targetRef ${ref.kind} ${ref.name} is not applied: Backend resources configure TLS inline and are not valid BackendTLSPolicy targets (GEP-4488)`)
      } else {
        invalid.set(key, `targetRef kind ${ref.kind} is not supported (Service only)`)
      }
    }
  }
  return { byService, conflicted, invalid, contenders }
}

/** The policy for one Service port: one naming the port wins over one for the whole Service. */
export function tlsPolicyFor(plan: TlsPolicyPlan, namespace: string, service: string, portName: string): BackendTLSPolicy | null {
  const list = plan.byService.get(`${namespace}/${service}`)
  if (list === undefined) return null
  const named = list.find(p => p.sectionName !== null && p.sectionName === portName)
  if (named !== undefined) return named.policy
  return list.find(p => p.sectionName === null)?.policy ?? null
}

/** The policies contending for one Service port (tlsPolicyFor's slot): the applied one first, then the conflicted ones. */
export function tlsPolicyContenders(plan: TlsPolicyPlan, namespace: string, service: string, portName: string): readonly string[] {
  const list = plan.byService.get(`${namespace}/${service}`)
  if (list === undefined) return []
  const named = list.find(p => p.sectionName !== null && p.sectionName === portName)
  const section = named !== undefined ? named.sectionName : list.some(p => p.sectionName === null) ? '' : null
  return section === null ? [] : plan.contenders.get(`${namespace}/${service}#${section}`) ?? []
}

/**
 * DESIGN.md safety defaults: verification turned off shows in status. Every
 * Backend (any port) and BackendTLSPolicy with insecureSkipVerify gets a
 * `sallyport.io/InsecureSkipVerify` condition (the log line is the upstream
 * registry's, at every load).
 */
export function addTlsWarnings(snapshot: Snapshot, objects: Map<string, ObjectStatus>): void {
  const warn = (key: string, generation: number): void => {
    const s = objects.get(key)
    if (s === undefined) return
    const c = condition('sallyport.io/InsecureSkipVerify', true, 'VerificationDisabled',
      'insecureSkipVerify is set: the upstream certificate chain and name are NOT verified', generation)
    objects.set(key, { ...s, conditions: [...s.conditions, c] })
  }
  for (const b of snapshot.backends.values()) {
    if (b.ports.some(p => p.tls !== null && p.tls.insecureSkipVerify)) warn(keyOfBackend(b), b.meta.generation)
  }
  for (const p of snapshot.backendTLSPolicies.values()) {
    if (p.tls.insecureSkipVerify) warn(statusKey('BackendTLSPolicy', p.meta.namespace, p.meta.name), p.meta.generation)
  }
}
