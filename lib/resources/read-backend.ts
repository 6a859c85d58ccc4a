// Backend: four published shapes, one model (model.ts Backend).
//
//  XBackend       gateway.networking.x-k8s.io/v1alpha1 XBackend (experimental
//                 channel, apisx/v1alpha1/xbackend_types.go)
//  GEP4488        gateway.networking.k8s.io/v1alpha1 Backend with spec.type
//                 (GEP-4488 document; same spec as XBackend)
//  EgressProposal gateway.networking.k8s.io/v1alpha1 Backend with spec.destination
//                 (egress-gateways proposal, "Schema Definition")
//  EnvoyGateway   gateway.envoyproxy.io/v1alpha1 Backend (spec.endpoints)
//
// Common to all: spec.extensions (egress proposal), region from the label
// sallyport.io/region, and the TLS annotations documented in read-tls.ts.

import type { ObjectMeta, SourceRef } from './meta.ts'
import type {
  Backend, BackendDestination, BackendFlavor, BackendPortSpec, BackendProtocol, BackendStaticEndpoint,
  ExtensionSpec, MCPOptions, ObjectRef, UpstreamTLS,
} from './model.ts'
import {
  type Fields, boolAt, isFields, listAt, nonEmptyAt, numberAt, objectAt, readLabelSelector, readObjectRef,
  stringsAt, textAt,
} from './read-fields.ts'
import { apiVersionOf, groupOf, readMeta } from './read-meta.ts'
import {
  type TlsAnnotations, makeUpstreamTls, readAlpn, readCrlRefsField, readDataRefs, readMinVersion,
  readSecretRef, readSubjectAltNames, readTlsAnnotations, readValidation, validationOf, wellKnown,
} from './read-tls.ts'

export const REGION_LABEL = 'sallyport.io/region'

/** Normalize any Backend flavour (the caller has checked group and kind). */
export function readBackend(doc: Fields, source: SourceRef): Backend {
  const meta = readMeta(doc, 'Backend')
  const apiVersion = apiVersionOf(doc)
  const spec = objectAt(doc, 'spec')
  const ann = readTlsAnnotations(meta.annotations, meta.namespace)
  const flavor = flavorOf(doc, spec)
  let shape: { destination: BackendDestination; ports: BackendPortSpec[]; fallback: boolean }
  switch (flavor) {
    case 'EgressProposal': shape = readEgressProposal(spec, meta, ann); break
    case 'EnvoyGateway': shape = readEnvoyGateway(spec, meta, ann); break
    default: shape = readGep4488(spec, meta, ann); break
  }
  return {
    kind: 'Backend',
    apiVersion,
    meta,
    source,
    flavor,
    destination: shape.destination,
    ports: shape.ports,
    extensions: readExtensions(spec),
    fallback: shape.fallback,
    region: meta.labels[REGION_LABEL] ?? null,
  }
}

function flavorOf(doc: Fields, spec: Fields | null): BackendFlavor {
  if (textAt(doc, 'kind') === 'XBackend') return 'XBackend'
  const group = groupOf(apiVersionOf(doc))
  if (group === 'gateway.envoyproxy.io') return 'EnvoyGateway'
  // Both gateway.networking.k8s.io drafts use kind Backend/v1alpha1; the
  // egress proposal nests everything under spec.destination.
  if (objectAt(spec, 'destination') !== null) return 'EgressProposal'
  return group === 'gateway.networking.x-k8s.io' ? 'XBackend' : 'GEP4488'
}

// ───────────────────────────── XBackend / GEP-4488 ─────────────────────────────

function readGep4488(spec: Fields | null, meta: ObjectMeta, ann: TlsAnnotations) {
  const ns = meta.namespace
  const type = textAt(spec, 'type')
  let destination: BackendDestination
  if (type === 'EndpointSelector' || (type === null && objectAt(spec, 'endpointSelector') !== null)) {
    destination = readEndpointSelector(objectAt(spec, 'endpointSelector'), ns)
  } else {
    const hostname = textAt(objectAt(spec, 'externalHostname'), 'hostname') ?? ''
    destination = { type: 'ExternalHostname', hostname: hostname.toLowerCase() }
  }
  const tlsBlock = objectAt(spec, 'tls')
  const tls = readInlineTls(tlsBlock, ns, ann)
  const protocol = mapProtocol(textAt(spec, 'protocol'), tls !== null)
  const { name, port } = readPort(spec === null ? undefined : spec['port'])
  const portSpec: BackendPortSpec = { name, port, protocol, tls, mcp: protocol === 'MCP' ? readMcp(spec) : null }
  return { destination, ports: [portSpec], fallback: false }
}

/**
 * GEP-4488 EndpointSelectorBackend: either `selectorRef` (an ObjectReference to
 * the GEP-4731 EndpointSelector; the GEP's example points it at a Service,
 * so kind defaults to Service in the core group) or a label selector — written
 * as `selector`, or inline matchLabels/matchExpressions as the embedded
 * metav1.LabelSelector (and XBackend's LabelSelector) serialize.
 */
function readEndpointSelector(es: Fields | null, ns: string): BackendDestination {
  const ref = objectAt(es, 'selectorRef')
  const selectorRef: ObjectRef | null = ref === null ? null : readObjectRef(ref, 'Service', ns)
  let selector = null
  const written = objectAt(es, 'selector')
  if (written !== null) selector = readLabelSelector(written)
  else if (es !== null && (isFields(es['matchLabels']) || Array.isArray(es['matchExpressions']))) selector = readLabelSelector(es)
  return { type: 'EndpointSelector', selectorRef, selector }
}

/**
 * Inline TLS of XBackend / GEP-4488: mode None → null; ServerOnly /
 * ClientAndServer → UpstreamTLS. `validation` reuses BackendTLSPolicy's
 * validation type. SNI is not part of the shape; null lets compile derive it
 * (validation hostname, then the Backend hostname).
 */
function readInlineTls(tls: Fields | null, ns: string, ann: TlsAnnotations): UpstreamTLS | null {
  if (tls === null) return null
  const mode = textAt(tls, 'mode')
  if (mode === 'None') return null
  const v = readValidation(validationOf(tls), ns)
  const clientCertificateRef = readSecretRef(objectAt(tls, 'clientCertificateRef'), ns)
  return makeUpstreamTls({
    ...v,
    // A client certificate means mutual TLS even where mode was left out.
    mode: mode === 'ClientAndServer' || (mode === null && clientCertificateRef !== null) ? 'ClientAndServer' : 'ServerOnly',
    sni: nonEmptyAt(tls, 'sni'),
    clientCertificateRef,
    insecureSkipVerify: (v.insecureSkipVerify ?? false) || (boolAt(tls, 'insecureSkipVerify') ?? false),
    crlRefs: readCrlRefsField(tls, ns),
    minVersion: readMinVersion(tls),
    alpn: readAlpn(tls),
  }, ann)
}

/**
 * BackendPort in the shapes published so far: `{number}` (XBackend),
 * `{name, port}` (GEP-4488 schema), or a bare number (GEP-4488's example
 * writes `port: 443`).
 */
function readPort(raw: unknown): { name: string; port: number } {
  if (typeof raw === 'number') return { name: '', port: raw }
  if (typeof raw === 'string' && /^\d+$/.test(raw)) return { name: '', port: Number(raw) }
  if (!isFields(raw)) return { name: '', port: 0 }
  return { name: textAt(raw, 'name') ?? '', port: numberAt(raw, 'number') ?? numberAt(raw, 'port') ?? 0 }
}

function readMcp(spec: Fields | null): MCPOptions {
  const mcp = objectAt(spec, 'mcp') ?? objectAt(objectAt(spec, 'protocolOptions'), 'mcp')
  return { version: nonEmptyAt(mcp, 'version'), path: nonEmptyAt(mcp, 'path') ?? '/mcp' }
}

/**
 * Protocol names across the drafts. Unset: the route decides (XBackend doc),
 * which for an HTTP route is plain HTTP with the version negotiated. GRPC is
 * HTTP/2 (over TLS when TLS is on, else h2c); WSS is WebSocket over HTTP/1.1
 * with TLS. `TLS` (egress proposal example) is TCP with TLS origination.
 */
function mapProtocol(p: string | null, tls: boolean): BackendProtocol {
  switch (p) {
    case 'TCP': case 'HTTP': case 'HTTP2': case 'HTTP11': case 'H2C': case 'MCP': case 'TLS':
      return p
    case 'GRPC': return tls ? 'HTTP2' : 'H2C'
    case 'WSS': case 'WS': return 'HTTP11'
    default: return 'HTTP'
  }
}

// ───────────────────────────── egress proposal ─────────────────────────────

function readEgressProposal(spec: Fields | null, meta: ObjectMeta, ann: TlsAnnotations) {
  const ns = meta.namespace
  const dest = objectAt(spec, 'destination')
  const type = (textAt(dest, 'type') ?? '').toLowerCase()
  let destination: BackendDestination
  if (type === 'ip') {
    const one = textAt(dest, 'ip')
    destination = { type: 'Ip', addresses: one !== null && one !== '' ? [one] : readIpAddresses(objectAt(dest, 'ip')) }
  } else if (type === 'kubernetesservice' || type === 'service') {
    const svc = objectAt(dest, 'service') ?? objectAt(dest, 'kubernetesService') ?? {}
    destination = { type: 'Service', service: readObjectRef(svc, 'Service', ns) }
  } else {
    // Fqdn (schema) or FQDN (the proposal's own example).
    const hostname = textAt(objectAt(dest, 'fqdn'), 'hostname') ?? ''
    destination = { type: 'ExternalHostname', hostname: hostname.toLowerCase() }
  }
  const ports = listAt(dest, 'ports').map((p) => readEgressPort(p, ns, ann))
  return { destination, ports, fallback: false }
}

/** The proposal leaves IPBackend commented out; accept `addresses: [..]` or a single `address` (or, above, `ip: <address>`). */
function readIpAddresses(ip: Fields | null): string[] {
  const list = stringsAt(ip, 'addresses')
  const one = nonEmptyAt(ip, 'address')
  return one === null ? list : [...list, one]
}

function readEgressPort(p: Fields, ns: string, ann: TlsAnnotations): BackendPortSpec {
  const block = objectAt(p, 'tls')
  let tls = readEgressTls(block, ns, ann)
  const protocol = mapProtocol(textAt(p, 'protocol'), tls !== null)
  // protocol TLS is TCP with TLS origination: without a tls block it still
  // means verified TLS with system trust (an explicit mode None stays off).
  if (protocol === 'TLS' && block === null) tls = makeUpstreamTls({ mode: 'ServerOnly' }, ann)
  return {
    name: textAt(p, 'name') ?? '',
    port: numberAt(p, 'number') ?? numberAt(p, 'port') ?? 0,
    protocol,
    tls,
    mcp: protocol === 'MCP' ? readMcp(p) : null,
  }
}

/**
 * Egress proposal BackendTLS: Simple → ServerOnly, Mutual → ClientAndServer,
 * None → no TLS. A tls block whose mode is missing or unreadable (the
 * proposal's example literally writes `mode: None | Simple | Mutual`) is read
 * as Simple: a block that names an SNI and a CA asks for verified TLS, and
 * falling back to plaintext would be the unsafe reading.
 */
function readEgressTls(tls: Fields | null, ns: string, ann: TlsAnnotations): UpstreamTLS | null {
  if (tls === null) return null
  const mode = textAt(tls, 'mode')
  if (mode === 'None') return null
  const clientCertificateRef = readSecretRef(objectAt(tls, 'clientCertificateRef'), ns)
  return makeUpstreamTls({
    mode: mode === 'Mutual' || (mode !== 'Simple' && clientCertificateRef !== null) ? 'ClientAndServer' : 'ServerOnly',
    sni: nonEmptyAt(tls, 'sni'),
    // caBundleRef is a list in the schema, one object in the example.
    caCertificateRefs: readDataRefs(tls, 'caBundleRef', ns),
    subjectAltNames: readSubjectAltNames(tls),
    clientCertificateRef,
    insecureSkipVerify: boolAt(tls, 'insecureSkipVerify') ?? false,
    crlRefs: readCrlRefsField(tls, ns),
    minVersion: readMinVersion(tls),
    alpn: readAlpn(tls),
  }, ann)
}

// ───────────────────────────── Envoy Gateway ─────────────────────────────

const EG_H2C = 'gateway.envoyproxy.io/h2c'

function readEnvoyGateway(spec: Fields | null, meta: ObjectMeta, ann: TlsAnnotations) {
  const ns = meta.namespace
  const endpoints: BackendStaticEndpoint[] = []
  // type DynamicResolver (forward to whatever Host the request names) has no
  // endpoints; it normalizes to an empty list and compile reports it.
  for (const e of listAt(spec, 'endpoints')) {
    const fqdn = objectAt(e, 'fqdn')
    const ip = objectAt(e, 'ip')
    const unix = objectAt(e, 'unix')
    if (fqdn !== null) endpoints.push({ kind: 'fqdn', hostname: (textAt(fqdn, 'hostname') ?? '').toLowerCase(), port: numberAt(fqdn, 'port') ?? 0 })
    else if (ip !== null) endpoints.push({ kind: 'ip', address: textAt(ip, 'address') ?? '', port: numberAt(ip, 'port') ?? 0 })
    else if (unix !== null) endpoints.push({ kind: 'unix', path: textAt(unix, 'path') ?? '' })
  }
  const tls = readEnvoyGatewayTls(objectAt(spec, 'tls'), ns, ann)
  const appProtocols = stringsAt(spec, 'appProtocols')
  // h2c means HTTP/2 to the upstream; with TLS on that is HTTP/2 over TLS.
  // ws / wss are WebSocket upgrades over HTTP/1.1, which plain HTTP carries.
  const protocol: BackendProtocol = appProtocols.includes(EG_H2C) ? (tls !== null ? 'HTTP2' : 'H2C') : 'HTTP'
  const seen = new Set<number>()
  const ports: BackendPortSpec[] = []
  for (const e of endpoints) {
    if (e.kind === 'unix' || seen.has(e.port)) continue
    seen.add(e.port)
    ports.push({ name: '', port: e.port, protocol, tls, mcp: null })
  }
  // Unix sockets have no port; one port-0 entry still carries protocol and TLS.
  if (ports.length === 0 && endpoints.length > 0) ports.push({ name: '', port: 0, protocol, tls, mcp: null })
  return { destination: { type: 'Endpoints' as const, endpoints }, ports, fallback: boolAt(spec, 'fallback') ?? false }
}

/** Envoy Gateway BackendTLSSettings (+ BackendTLSConfig inline): any tls block means TLS on. */
function readEnvoyGatewayTls(tls: Fields | null, ns: string, ann: TlsAnnotations): UpstreamTLS | null {
  if (tls === null) return null
  const clientCertificateRef = readSecretRef(objectAt(tls, 'clientCertificateRef'), ns)
  return makeUpstreamTls({
    mode: clientCertificateRef !== null ? 'ClientAndServer' : 'ServerOnly',
    sni: nonEmptyAt(tls, 'sni'),
    // LocalObjectReference: always the Backend's namespace.
    caCertificateRefs: listAt(tls, 'caCertificateRefs').map((r) => ({ ...readObjectRef({ ...r, namespace: ns }, 'ConfigMap', ns), key: null })),
    wellKnownCACertificates: wellKnown(textAt(tls, 'wellKnownCACertificates')),
    subjectAltNames: readSubjectAltNames(tls),
    clientCertificateRef,
    insecureSkipVerify: boolAt(tls, 'insecureSkipVerify') ?? false,
    crlRefs: readCrlRefsField(tls, ns),
    minVersion: readMinVersion(tls),
    alpn: readAlpn(tls),
  }, ann)
}

// ───────────────────────────── extensions ─────────────────────────────

/** spec.extensions[] (egress proposal BackendExtension, plus the proposal example's phase/priority/failOpen/config). */
export function readExtensions(spec: Fields | null): ExtensionSpec[] {
  return listAt(spec, 'extensions').map(readExtension)
}

export function readExtension(e: Fields): ExtensionSpec {
  return {
    name: textAt(e, 'name') ?? '',
    type: textAt(e, 'type') ?? '',
    phase: nonEmptyAt(e, 'phase'),
    priority: numberAt(e, 'priority') ?? 0,
    failOpen: boolAt(e, 'failOpen') ?? false,
    config: objectAt(e, 'config') ?? objectAt(e, 'rawConfig') ?? {},
  }
}
