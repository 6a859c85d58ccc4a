// BackendTLSPolicy (both published shapes) and sallyport's EgressExtension.
//
// BackendTLSPolicy shapes:
//  - v1 / v1alpha3: spec.targetRefs[] (with sectionName), spec.validation
//    {caCertificateRefs, wellKnownCACertificates, hostname, subjectAltNames},
//    spec.options.
//  - v1alpha2: GEP-1897 as written (spec.targetRef singular; spec.tls
//    {certRefs, standardCerts, hostname}) and as released in Gateway API
//    v1.0 (spec.tls {caCertRefs, wellKnownCACerts, hostname}).
// Both become one UpstreamTLS: mode ServerOnly (the policy has no client
// certificate; Gateway.spec.tls.backend owns that), SNI and verified name =
// hostname (GEP-1897: "Hostname ... is to be used to configure the SNI").
// The TLS annotations (sallyport.io/spki-pins, sallyport.io/crl-refs) are
// documented in read-tls.ts.

import type { SourceRef } from './meta.ts'
import type { BackendTLSPolicy, EgressExtension, StatusAncestor, UpstreamTLS } from './model.ts'
import { type Fields, listAt, objectAt, readDataRef, readTargetRefs, textAt } from './read-fields.ts'
import { apiVersionOf, readMeta } from './read-meta.ts'
import { readExtension } from './read-backend.ts'
import { type TlsAnnotations, makeUpstreamTls, readTlsAnnotations, readValidation, wellKnown } from './read-tls.ts'

export function readBackendTLSPolicy(doc: Fields, source: SourceRef): BackendTLSPolicy {
  const meta = readMeta(doc, 'BackendTLSPolicy')
  const spec = objectAt(doc, 'spec')
  const ann = readTlsAnnotations(meta.annotations, meta.namespace)
  const validation = objectAt(spec, 'validation')
  const legacy = objectAt(spec, 'tls')
  const tls = validation !== null || legacy === null
    ? readCurrent(validation, meta.namespace, ann)
    : readGep1897(legacy, meta.namespace, ann)
  const statusAncestors = source.file.startsWith('kube:') ? readStatusAncestors(doc, meta.namespace) : []
  return { kind: 'BackendTLSPolicy', apiVersion: apiVersionOf(doc), meta, source, targetRefs: readTargetRefs(spec), tls, statusAncestors }
}

/**
 * The Gateway entries of a policy's status.ancestors with their controllerName
 * (compile counts the slots other controllers hold). Only for objects read from
 * the API server (SourceRef `kube:...`): nobody writes the status of a file
 * document, so one copied into a file says nothing about who holds slots.
 */
export function readStatusAncestors(doc: Fields, namespace: string): StatusAncestor[] {
  const out: StatusAncestor[] = []
  for (const e of listAt(objectAt(doc, 'status'), 'ancestors')) {
    const ref = objectAt(e, 'ancestorRef')
    const name = textAt(ref, 'name')
    if (name === null || (textAt(ref, 'group') ?? GATEWAY_GROUP) !== GATEWAY_GROUP || (textAt(ref, 'kind') ?? 'Gateway') !== 'Gateway') continue
    out.push({ controllerName: textAt(e, 'controllerName') ?? '', namespace: textAt(ref, 'namespace') || namespace, name })
  }
  return out
}

const GATEWAY_GROUP = 'gateway.networking.k8s.io'

function readCurrent(validation: Fields | null, ns: string, ann: TlsAnnotations): UpstreamTLS {
  const v = readValidation(validation, ns)
  return makeUpstreamTls({ ...v, mode: 'ServerOnly', sni: v.hostname ?? null }, ann)
}

/**
 * GEP-1897 v1alpha2: certRefs / caCertRefs are ConfigMapObjectReferences
 * (group '', kind ConfigMap by default; "references to a resource in a
 * different namespace are invalid" — the namespace is kept as written so
 * compile can report it); standardCerts / wellKnownCACerts "System".
 */
function readGep1897(tls: Fields, ns: string, ann: TlsAnnotations): UpstreamTLS {
  const refs = listAt(tls, 'certRefs').length > 0 ? listAt(tls, 'certRefs') : listAt(tls, 'caCertRefs')
  const hostname = textAt(tls, 'hostname')
  return makeUpstreamTls({
    mode: 'ServerOnly',
    sni: hostname,
    hostname,
    caCertificateRefs: refs.map((r) => readDataRef(r, 'ConfigMap', ns)),
    wellKnownCACertificates: wellKnown(textAt(tls, 'standardCerts') ?? textAt(tls, 'wellKnownCACerts')),
  }, ann)
}

/** sallyport.io/v1alpha1 EgressExtension: extensions attached to Routes or Gateways. */
export function readEgressExtension(doc: Fields, source: SourceRef): EgressExtension {
  const meta = readMeta(doc, 'EgressExtension')
  const spec = objectAt(doc, 'spec')
  return {
    kind: 'EgressExtension',
    apiVersion: apiVersionOf(doc),
    meta,
    source,
    targetRefs: readTargetRefs(spec),
    extensions: listAt(spec, 'extensions').map(readExtension),
  }
}
