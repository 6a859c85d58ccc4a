// Core and discovery kinds sallyport reads for references and endpoints:
// Secret, ConfigMap, Service, EndpointSlice, Namespace, Pod, ClusterTrustBundle.

import type { SourceRef } from './meta.ts'
import type { ClusterTrustBundle, ConfigMap, EndpointSlice, Namespace, Pod, Secret, Service, ServicePort } from './model.ts'
import {
  type Fields, boolAt, isFields, listAt, nonEmptyAt, numberAt, objectAt, stringMapAt, stringsAt, textAt,
} from './read-fields.ts'
import { apiVersionOf, readMeta } from './read-meta.ts'
import { readStatusAncestors } from './read-policies.ts'

type CoreObject = Secret | ConfigMap | Service | EndpointSlice | Namespace | Pod | ClusterTrustBundle

/** Normalize a core/discovery kind; null for any other kind. */
export function readCore(doc: Fields, kind: string, source: SourceRef): CoreObject | null {
  const apiVersion = apiVersionOf(doc)
  switch (kind) {
    case 'Secret': return readSecret(doc, apiVersion, source)
    case 'ConfigMap': {
      // binaryData is ignored: CA bundles and CRLs we read are PEM text.
      return { kind, apiVersion, meta: readMeta(doc, kind), source, data: stringMapAt(doc, 'data') }
    }
    case 'Service': return readService(doc, apiVersion, source)
    case 'EndpointSlice': return readEndpointSlice(doc, apiVersion, source)
    case 'Namespace': return { kind, apiVersion, meta: readMeta(doc, kind), source }
    case 'Pod': return readPod(doc, apiVersion, source)
    case 'ClusterTrustBundle': {
      const spec = objectAt(doc, 'spec')
      return { kind, apiVersion, meta: readMeta(doc, kind), source, signerName: nonEmptyAt(spec, 'signerName'), trustBundle: textAt(spec, 'trustBundle') ?? '' }
    }
    default: return null
  }
}

/** data is base64 (as the API stores it); stringData is plain text and wins on a shared key, as the API server merges it. */
function readSecret(doc: Fields, apiVersion: string, source: SourceRef): Secret {
  const data: Record<string, Buffer> = {}
  const encoded = stringMapAt(doc, 'data')
  for (const key of Object.keys(encoded)) data[key] = Buffer.from((encoded[key] as string).replace(/\s+/g, ''), 'base64')
  const plain = stringMapAt(doc, 'stringData')
  for (const key of Object.keys(plain)) data[key] = Buffer.from(plain[key] as string, 'utf8')
  return { kind: 'Secret', apiVersion, meta: readMeta(doc, 'Secret'), source, type: textAt(doc, 'type') ?? 'Opaque', data }
}

function readService(doc: Fields, apiVersion: string, source: SourceRef): Service {
  const spec = objectAt(doc, 'spec')
  const clusterIP = nonEmptyAt(spec, 'clusterIP')
  // A headless Service has clusterIP (and clusterIPs) "None": no address.
  const clusterIPs = stringsAt(spec, 'clusterIPs').filter((ip) => ip !== '' && ip !== 'None')
  const ports: ServicePort[] = listAt(spec, 'ports').map((p) => {
    const target = p['targetPort']
    return {
      name: textAt(p, 'name') ?? '',
      port: numberAt(p, 'port') ?? 0,
      targetPort: typeof target === 'number' || typeof target === 'string' ? target : null,
      protocol: textAt(p, 'protocol') ?? 'TCP',
      appProtocol: nonEmptyAt(p, 'appProtocol'),
    }
  })
  return {
    kind: 'Service',
    apiVersion,
    meta: readMeta(doc, 'Service'),
    source,
    type: textAt(spec, 'type') ?? 'ClusterIP',
    // Kept as written: "None" marks a headless Service.
    clusterIP,
    clusterIPs: clusterIPs.length > 0 || clusterIP === null || clusterIP === 'None' ? clusterIPs : [clusterIP],
    loadBalancerIngress: loadBalancerIngress(doc),
    externalIPs: stringsAt(spec, 'externalIPs').filter((ip) => ip !== ''),
    externalName: nonEmptyAt(spec, 'externalName'),
    ports,
    selector: stringMapAt(spec, 'selector'),
  }
}

/** status.loadBalancer.ingress[]: the addresses a load balancer controller gave a LoadBalancer Service. */
function loadBalancerIngress(doc: Fields): Service['loadBalancerIngress'] {
  return listAt(objectAt(objectAt(doc, 'status'), 'loadBalancer'), 'ingress')
    .map((i) => ({ ip: nonEmptyAt(i, 'ip'), hostname: nonEmptyAt(i, 'hostname') }))
    .filter((i) => i.ip !== null || i.hostname !== null)
}

const ADDRESS_TYPES = new Set(['IPv4', 'IPv6', 'FQDN'])

/**
 * discovery.k8s.io/v1 EndpointSlice. Conditions follow the API's reading of
 * absent values: ready unknown → ready; serving unknown → same as ready;
 * terminating unknown → not terminating.
 */
function readEndpointSlice(doc: Fields, apiVersion: string, source: SourceRef): EndpointSlice {
  const meta = readMeta(doc, 'EndpointSlice')
  const addressType = textAt(doc, 'addressType')
  const endpoints = listAt(doc, 'endpoints').map((e) => {
    const c = objectAt(e, 'conditions')
    const ready = boolAt(c, 'ready') ?? true
    return {
      addresses: stringsAt(e, 'addresses'),
      ready,
      serving: boolAt(c, 'serving') ?? ready,
      terminating: boolAt(c, 'terminating') ?? false,
      zone: nonEmptyAt(e, 'zone'),
    }
  })
  const ports = listAt(doc, 'ports').map((p) => ({
    name: textAt(p, 'name') ?? '',
    port: numberAt(p, 'port'),
    protocol: textAt(p, 'protocol') ?? 'TCP',
    appProtocol: nonEmptyAt(p, 'appProtocol'),
  }))
  return {
    kind: 'EndpointSlice',
    apiVersion,
    meta,
    source,
    serviceName: meta.labels['kubernetes.io/service-name'] ?? null,
    addressType: (addressType !== null && ADDRESS_TYPES.has(addressType) ? addressType : 'IPv4') as EndpointSlice['addressType'],
    endpoints,
    ports,
  }
}

function readPod(doc: Fields, apiVersion: string, source: SourceRef): Pod {
  const spec = objectAt(doc, 'spec')
  const status = objectAt(doc, 'status')
  const ips: string[] = []
  // A Pod that has run to completion keeps its IP in status, but the IP is
  // released to the node's pool and may already be another Pod's.
  const phase = nonEmptyAt(status, 'phase')
  const terminal = phase === 'Succeeded' || phase === 'Failed'
  const raw = status === null || terminal ? undefined : status['podIPs']
  if (Array.isArray(raw)) {
    for (const item of raw) {
      const ip = isFields(item) ? textAt(item, 'ip') : null
      if (ip !== null && ip !== '') ips.push(ip)
    }
  }
  const single = terminal ? null : nonEmptyAt(status, 'podIP')
  if (ips.length === 0 && single !== null) ips.push(single)
  return {
    kind: 'Pod',
    apiVersion,
    meta: readMeta(doc, 'Pod'),
    source,
    podIPs: ips,
    hostNetwork: boolAt(spec, 'hostNetwork') === true,
    ready: podReady(doc, status),
    // spec.serviceAccount is the deprecated spelling of the same field.
    serviceAccountName: nonEmptyAt(spec, 'serviceAccountName') ?? nonEmptyAt(spec, 'serviceAccount') ?? 'default',
    nodeName: nonEmptyAt(spec, 'nodeName'),
  }
}

/**
 * Serving, as a Service counts it: not being deleted, and its Ready condition
 * True. A Pod with an IP and no conditions at all (written by hand in a file,
 * never by a kubelet) counts as ready.
 */
function podReady(doc: Fields, status: Fields | null): boolean {
  if (nonEmptyAt(objectAt(doc, 'metadata'), 'deletionTimestamp') !== null) return false
  const ready = readyCondition(status)
  return ready === null || ready === 'True'
}

/** The status of a Pod's Ready condition, or null when it has none. */
function readyCondition(status: Fields | null): string | null {
  const conditions = status === null ? undefined : status['conditions']
  if (!Array.isArray(conditions)) return null
  for (const c of conditions) if (isFields(c) && c['type'] === 'Ready') return textAt(c, 'status') ?? ''
  return null
}

/**
 * The part of an object's status the model reads (null: none). A watch event
 * that changes only status is handed on when this changes: a Pod's addresses
 * are written by the kubelet, in status, after the Pod is created; a
 * LoadBalancer Service's by its load balancer controller, once it has one.
 * A BackendTLSPolicy's ancestor entries (who holds which slot): compile leaves
 * the policy to as many Gateways as the slots other controllers hold allow.
 */
export function statusRead(kind: string, doc: Fields): unknown {
  if (kind === 'BackendTLSPolicy') {
    const meta = objectAt(doc, 'metadata')
    const ancestors = readStatusAncestors(doc, textAt(meta, 'namespace') ?? 'default')
    return ancestors.length === 0 ? null : ancestors.map((a) => [a.controllerName, a.namespace, a.name])
  }
  if (kind === 'Service') {
    const ingress = loadBalancerIngress(doc)
    return ingress.length === 0 ? null : ingress.map((i) => [i.ip, i.hostname])
  }
  if (kind !== 'Pod') return null
  const status = objectAt(doc, 'status')
  return status === null ? null : [status['phase'] ?? null, status['podIP'] ?? null, status['podIPs'] ?? null, readyCondition(status)]
}

/**
 * The fields of a Pod that readPod reads, and nothing else: what a cluster-wide
 * Pod watch keeps of each Pod (about a twentieth of a running Pod's object:
 * managed fields, containers, volumes and conditions but Ready are never read).
 */
export function podFieldsRead(doc: Fields): Fields {
  const meta = objectAt(doc, 'metadata')
  const spec = objectAt(doc, 'spec')
  const status = objectAt(doc, 'status')
  const readyOnly = (st: Record<string, unknown>): Fields => {
    const ready = readyCondition(st)
    const { conditions: _all, ...rest } = st
    return ready === null ? rest : { ...rest, conditions: [{ type: 'Ready', status: ready }] }
  }
  return {
    apiVersion: doc['apiVersion'], kind: doc['kind'],
    metadata: pick(meta, ['name', 'namespace', 'uid', 'generation', 'resourceVersion', 'creationTimestamp', 'deletionTimestamp', 'labels']),
    spec: pick(spec, ['serviceAccountName', 'serviceAccount', 'nodeName', 'hostNetwork']),
    ...(status === null ? {} : { status: readyOnly(pick(status, ['phase', 'podIP', 'podIPs', 'conditions'])) }),
  }
}

/** The fields of `from` named by `keys` that it has. */
function pick(from: Fields | null, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  if (from !== null) for (const k of keys) if (from[k] !== undefined) out[k] = from[k]
  return out
}

const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration'

/** metadata as the model reads it: no managed fields, no kubectl copy of the whole object. */
function metadataRead(doc: Fields): Record<string, unknown> {
  const meta = objectAt(doc, 'metadata')
  if (meta === null) return {}
  const { managedFields: _mf, annotations, ...rest } = meta as Record<string, unknown>
  if (annotations === null || typeof annotations !== 'object' || !Object.hasOwn(annotations, LAST_APPLIED)) return annotations === undefined ? rest : { ...rest, annotations }
  const { [LAST_APPLIED]: _copy, ...kept } = annotations as Record<string, unknown>
  return { ...rest, annotations: kept }
}

/**
 * What a cluster-wide ConfigMap watch keeps of each ConfigMap. sallyport reads
 * ConfigMaps only for PEM (CA bundles, CRLs: compile/refs.ts refuses a value
 * without '-----BEGIN'), and clusters hold large ones it never reads
 * (dashboards, rendered charts): a value that is no PEM is kept as its key
 * with an empty value, so "has no key" and "is not PEM" stay apart. binaryData
 * is not read.
 */
export function configMapFieldsRead(doc: Fields): Fields {
  const data = stringMapAt(doc, 'data')
  const kept: Record<string, string> = {}
  for (const key of Object.keys(data)) {
    const value = data[key] as string
    kept[key] = value.includes('-----BEGIN') ? value : ''
  }
  return { apiVersion: doc['apiVersion'], kind: doc['kind'], metadata: metadataRead(doc), data: kept }
}

/** What a cluster-wide Secret watch keeps of each Secret: its data whole, without managed fields or kubectl's plain-text copy. */
export function secretFieldsRead(doc: Fields): Fields {
  const { metadata: _m, ...rest } = doc as Record<string, unknown>
  return { ...rest, metadata: metadataRead(doc) }
}

/**
 * What a cluster-wide EndpointSlice watch keeps of each slice: its addresses,
 * their conditions and zone, and its ports. A slice names each endpoint's Pod
 * (targetRef), node and topology hints too, none of which is read.
 */
export function endpointSliceFieldsRead(doc: Fields): Fields {
  const endpoints = listAt(doc, 'endpoints').map((e) => pick(e, ['addresses', 'conditions', 'zone']))
  const { managedFields: _mf, annotations: _a, ownerReferences: _o, ...meta } = (objectAt(doc, 'metadata') ?? {}) as Record<string, unknown>
  return { apiVersion: doc['apiVersion'], kind: doc['kind'], metadata: meta, addressType: doc['addressType'], endpoints, ports: doc['ports'] }
}

/** The cut-down object the Kubernetes source keeps of a kind (null: the whole object). */
export function fieldsReadOf(modelKind: string): ((doc: Fields) => Fields) | null {
  switch (modelKind) {
    case 'Pod': return podFieldsRead
    case 'ConfigMap': return configMapFieldsRead
    case 'Secret': return secretFieldsRead
    case 'EndpointSlice': return endpointSliceFieldsRead
    default: return null
  }
}
