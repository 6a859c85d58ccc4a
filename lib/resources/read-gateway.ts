// GatewayClass and Gateway, any Gateway API version (v1alpha2, v1beta1, v1),
// with the API's defaults applied (the CRD would apply them on the API server;
// a file source has none).

import type { SourceRef } from './meta.ts'
import type {
  AllowedRoutes, DataRef, FrontendTLSValidation, Gateway, GatewayClass, GatewayMesh, Listener, ListenerTLS, RouteGroupKind,
} from './model.ts'
import {
  type Fields, labelSelectorAt, listAt, nonEmptyAt, numberAt, objectAt, readDataRef, readObjectRef, stringMapAt, textAt,
} from './read-fields.ts'
import { apiVersionOf, readMeta } from './read-meta.ts'

const GATEWAY_GROUP = 'gateway.networking.k8s.io'

export function readGatewayClass(doc: Fields, source: SourceRef): GatewayClass {
  const spec = objectAt(doc, 'spec')
  const params = objectAt(spec, 'parametersRef')
  return {
    kind: 'GatewayClass',
    apiVersion: apiVersionOf(doc),
    meta: readMeta(doc, 'GatewayClass'),
    source,
    controllerName: textAt(spec, 'controllerName') ?? '',
    // ParametersReference: namespace only for namespaced parameter kinds, '' otherwise.
    parametersRef: params === null ? null : { group: textAt(params, 'group') ?? '', kind: textAt(params, 'kind') ?? '', namespace: textAt(params, 'namespace') ?? '', name: textAt(params, 'name') ?? '' },
    description: nonEmptyAt(spec, 'description'),
  }
}

export function readGateway(doc: Fields, source: SourceRef): Gateway {
  const meta = readMeta(doc, 'Gateway')
  const ns = meta.namespace
  const spec = objectAt(doc, 'spec')
  const listenerDocs = listAt(spec, 'listeners')
  const infra = objectAt(spec, 'infrastructure')
  const infraParams = objectAt(infra, 'parametersRef')
  return {
    kind: 'Gateway',
    apiVersion: apiVersionOf(doc),
    meta,
    source,
    gatewayClassName: textAt(spec, 'gatewayClassName') ?? '',
    listeners: listenerDocs.map((l) => readListener(l, ns)),
    addresses: listAt(spec, 'addresses').map((a) => ({ type: textAt(a, 'type') ?? 'IPAddress', value: textAt(a, 'value') ?? '' })),
    frontendValidation: readFrontendValidation(objectAt(objectAt(spec, 'tls'), 'frontend'), listenerDocs, ns),
    mesh: readMesh(objectAt(spec, 'mesh'), ns),
    infrastructure: infra === null ? null : {
      labels: stringMapAt(infra, 'labels'),
      annotations: stringMapAt(infra, 'annotations'),
      // LocalParametersReference: the Gateway's namespace.
      parametersRef: infraParams === null ? null : { group: textAt(infraParams, 'group') ?? '', kind: textAt(infraParams, 'kind') ?? '', namespace: ns, name: textAt(infraParams, 'name') ?? '' },
    },
  }
}

function readListener(l: Fields, ns: string): Listener {
  const hostname = nonEmptyAt(l, 'hostname')
  return {
    name: textAt(l, 'name') ?? '',
    hostname: hostname === null ? null : hostname.toLowerCase(),
    port: numberAt(l, 'port') ?? 0,
    protocol: textAt(l, 'protocol') ?? '',
    tls: readListenerTls(objectAt(l, 'tls'), ns),
    allowedRoutes: readAllowedRoutes(objectAt(l, 'allowedRoutes')),
  }
}

/** GatewayTLSConfig: mode default Terminate; certificateRefs are SecretObjectReferences (group '', kind Secret, the Gateway's namespace). */
function readListenerTls(tls: Fields | null, ns: string): ListenerTLS | null {
  if (tls === null) return null
  return {
    mode: textAt(tls, 'mode') === 'Passthrough' ? 'Passthrough' : 'Terminate',
    certificateRefs: listAt(tls, 'certificateRefs').map((r) => readObjectRef(r, 'Secret', ns)),
    options: stringMapAt(tls, 'options'),
  }
}

const FROM = new Set(['All', 'Same', 'Selector', 'None'])

/** AllowedRoutes default: namespaces.from Same; kinds' group defaults to gateway.networking.k8s.io. */
function readAllowedRoutes(a: Fields | null): AllowedRoutes {
  const namespaces = objectAt(a, 'namespaces')
  const from = textAt(namespaces, 'from')
  const kinds: RouteGroupKind[] = listAt(a, 'kinds').map((k) => ({ group: textAt(k, 'group') ?? GATEWAY_GROUP, kind: textAt(k, 'kind') ?? '' }))
  return {
    namespacesFrom: (from !== null && FROM.has(from) ? from : 'Same') as AllowedRoutes['namespacesFrom'],
    namespaceSelector: labelSelectorAt(namespaces, 'selector'),
    kinds,
  }
}

type ValidationMode = FrontendTLSValidation['mode']

function modeOf(v: Fields | null): ValidationMode {
  return textAt(v, 'mode') === 'AllowInsecureFallback' ? 'AllowInsecureFallback' : 'AllowValidOnly'
}

/** caCertificateRefs are ObjectReferences; kind ConfigMap when left out, namespace the Gateway's. */
function caRefs(v: Fields | null, ns: string): DataRef[] {
  return listAt(v, 'caCertificateRefs').map((r) => readDataRef(r, 'ConfigMap', ns))
}

/**
 * Client certificate validation (GEP-91), in the shapes upstream has shipped:
 *  - Gateway.spec.tls.frontend {default: {validation}, perPort: [{port, tls: {validation}}]} (v1.3+);
 *  - the same with the validation fields directly under default / perPort[].tls;
 *  - the older per-listener listeners[].tls.frontendValidation {caCertificateRefs},
 *    read as a per-port override for that listener's port.
 */
function readFrontendValidation(frontend: Fields | null, listeners: Fields[], ns: string): FrontendTLSValidation | null {
  const perPort: Array<FrontendTLSValidation['perPort'][number]> = []
  for (const p of listAt(frontend, 'perPort')) {
    const tls = objectAt(p, 'tls')
    const v = objectAt(tls, 'validation') ?? tls
    perPort.push({ port: numberAt(p, 'port') ?? 0, caCertificateRefs: caRefs(v, ns), mode: modeOf(v) })
  }
  for (const l of listeners) {
    const v = objectAt(objectAt(l, 'tls'), 'frontendValidation')
    const port = numberAt(l, 'port')
    if (v === null || port === null || perPort.some((p) => p.port === port)) continue
    perPort.push({ port, caCertificateRefs: caRefs(v, ns), mode: modeOf(v) })
  }
  const def = objectAt(frontend, 'default')
  if (def === null && perPort.length === 0) return null
  const v = objectAt(def, 'validation') ?? def
  return { caCertificateRefs: caRefs(v, ns), mode: modeOf(v), perPort }
}

/**
 * GEP-3792 Gateway.spec.mesh. trustBundle is one TrustBundleReference in the
 * Go types and a list in the North/South example: both become a list. Kind
 * defaults to Secret ("The 'kind' defaults to Secret if not specified");
 * ClusterTrustBundle refs are cluster-scoped (group certificates.k8s.io,
 * namespace ''). "If [selector is] unspecified, all Routes attached to this
 * Gateway are considered meshed": an absent selector becomes the empty
 * selector, which selects everything.
 */
function readMesh(mesh: Fields | null, ns: string): GatewayMesh | null {
  if (mesh === null) return null
  const trustBundles = [...listAt(mesh, 'trustBundle'), ...listAt(mesh, 'trustBundles')].map((r) => readDataRef(r, 'Secret', ns))
  return { trustBundles, selector: labelSelectorAt(mesh, 'selector') ?? { matchLabels: {}, matchExpressions: [] } }
}
