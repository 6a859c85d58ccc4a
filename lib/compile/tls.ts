// Upstream TLS: turn an UpstreamTLS (Backend inline, or a BackendTLSPolicy on a
// Service port) into ClusterTls with every reference resolved, and decide
// which BackendTLSPolicy applies to which Service port.

import { createHash } from 'node:crypto'
import type { BackendTLSPolicy, UpstreamTLS } from '../resources/model.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import type { ClusterTls, UpstreamProtocol } from './table.ts'
import { compareAge } from './conditions.ts'
import { isIpLiteral } from './hostnames.ts'
import type { From, Resolved } from './refs.ts'
import { fail, resolveBundle, resolveTlsSecret } from './refs.ts'

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
): Resolved<ClusterTls> {
  const ca = resolveBundle(snapshot, from, tls.caCertificateRefs, 'ca.crt', 'InvalidCACertificateRef')
  if (!ca.ok) return ca
  const crl = resolveBundle(snapshot, from, tls.crlRefs, 'ca.crl', 'InvalidCRLRef')
  if (!crl.ok) return crl
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
    minVersion: tls.minVersion,
    alpn: tls.alpn.length > 0 ? [...tls.alpn] : alpnFor(protocol),
  }
  const identityHash = createHash('sha256').update(JSON.stringify(fields)).digest('hex')
  return { ok: true, value: { ...fields, identityHash } }
}

export interface TlsPolicyPlan {
  /** `namespace/service` → policies targeting it, oldest first, each with its sectionName. */
  readonly byService: ReadonlyMap<string, ReadonlyArray<{ readonly policy: BackendTLSPolicy; readonly sectionName: string | null }>>
  /** Policies that lost to an older one on the same target: policy key → winner key. */
  readonly conflicted: ReadonlyMap<string, string>
  /** Policies targeting a Backend (not applied, GEP-4488) or an unsupported kind: key → message. */
  readonly invalid: ReadonlyMap<string, string>
}

export function planTlsPolicies(snapshot: Snapshot): TlsPolicyPlan {
  const byService = new Map<string, Array<{ policy: BackendTLSPolicy; sectionName: string | null }>>()
  const conflicted = new Map<string, string>()
  const invalid = new Map<string, string>()
  const owners = new Map<string, string>() // target+section → winning policy key
  const policies = [...snapshot.backendTLSPolicies.values()].sort(compareAge)
  for (const policy of policies) {
    const key = `${policy.meta.namespace}/${policy.meta.name}`
    for (const ref of policy.targetRefs) {
      if (ref.group === '' && ref.kind === 'Service') {
        const target = `${policy.meta.namespace}/${ref.name}`
        const slot = `${target}#${ref.sectionName ?? ''}`
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
  return { byService, conflicted, invalid }
}

/** The policy for one Service port: one naming the port wins over one for the whole Service. */
export function tlsPolicyFor(plan: TlsPolicyPlan, namespace: string, service: string, portName: string): BackendTLSPolicy | null {
  const list = plan.byService.get(`${namespace}/${service}`)
  if (list === undefined) return null
  const named = list.find(p => p.sectionName !== null && p.sectionName === portName)
  if (named !== undefined) return named.policy
  return list.find(p => p.sectionName === null)?.policy ?? null
}
