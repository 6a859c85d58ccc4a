// Small builders for model objects, so compile tests do not need the readers.
import type {
  Backend, BackendRef, BackendTLSPolicy, BackendTrafficPolicy, EndpointSlice, Gateway, GatewayClass, HTTPRoute,
  HTTPRouteMatch, HTTPRouteRule, Listener, Namespace, ReferenceGrant, Secret, Service, UpstreamTLS,
} from '../../lib/resources/model.ts'
import type { ObjectMeta } from '../../lib/resources/meta.ts'
import { MAP_OF_KIND, emptySnapshot } from '../../lib/resources/snapshot.ts'
import { snapshotKeyOf } from '../../lib/resources/model.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { createCa, serverCert } from '../helpers/pki.ts'

export const G = 'gateway.networking.k8s.io'

export function meta(name: string, namespace = 'default', extra: Partial<ObjectMeta> = {}): ObjectMeta {
  return { name, namespace, uid: `${namespace}/${name}`, generation: 1, resourceVersion: '1', creationTimestamp: '2024-01-01T00:00:00Z', firstSeen: 0, labels: {}, annotations: {}, ...extra }
}
const source = { file: 'test.yaml', doc: 0 }

export function gatewayClass(name = 'sallyport', controllerName = 'sallyport.io/gateway-controller'): GatewayClass {
  return { kind: 'GatewayClass', apiVersion: `${G}/v1`, meta: meta(name, ''), source, controllerName, parametersRef: null, description: null }
}

export function listener(name: string, port: number, protocol = 'HTTP', extra: Partial<Listener> = {}): Listener {
  return { name, port, protocol, hostname: null, tls: null, allowedRoutes: { namespacesFrom: 'Same', namespaceSelector: null, kinds: [] }, ...extra }
}

export function gateway(name: string, listeners: Listener[], extra: Partial<Gateway> = {}, m: Partial<ObjectMeta> = {}): Gateway {
  return {
    kind: 'Gateway', apiVersion: `${G}/v1`, meta: meta(name, 'default', m), source, gatewayClassName: 'sallyport', listeners,
    addresses: [], frontendValidation: null, mesh: null, infrastructure: null, ...extra,
  }
}

export function backendRef(name: string, port: number | null = 80, extra: Partial<BackendRef> = {}): BackendRef {
  return { group: '', kind: 'Service', namespace: 'default', name, port, weight: 1, filters: [], priority: 0, ...extra }
}

export function match(path: string, type: HTTPRouteMatch['path']['type'] = 'PathPrefix', extra: Partial<HTTPRouteMatch> = {}): HTTPRouteMatch {
  return { path: { type, value: path }, headers: [], queryParams: [], method: null, ...extra }
}

export function rule(matches: HTTPRouteMatch[], backendRefs: BackendRef[] = [backendRef('svc')], extra: Partial<HTTPRouteRule> = {}): HTTPRouteRule {
  return { name: null, matches, filters: [], backendRefs, timeouts: null, retry: null, sessionPersistence: null, ...extra }
}

export function httpRoute(name: string, rules: HTTPRouteRule[], extra: Partial<HTTPRoute> = {}, m: Partial<ObjectMeta> = {}): HTTPRoute {
  return {
    kind: 'HTTPRoute', apiVersion: `${G}/v1`, meta: meta(name, m.namespace ?? 'default', m), source,
    parentRefs: [{ group: G, kind: 'Gateway', namespace: 'default', name: 'gw', sectionName: null, port: null }], hostnames: [], rules, droppedRules: [], ...extra,
  }
}

export function service(name: string, ports: Array<{ name: string; port: number; appProtocol?: string }> = [{ name: 'http', port: 80 }], extra: Partial<Service> = {}): Service {
  return {
    kind: 'Service', apiVersion: 'v1', meta: meta(name), source, type: 'ClusterIP', clusterIP: '10.0.0.1', clusterIPs: ['10.0.0.1'], loadBalancerIngress: [], externalIPs: [], externalName: null,
    ports: ports.map(p => ({ name: p.name, port: p.port, targetPort: null, protocol: 'TCP', appProtocol: p.appProtocol ?? null })), selector: {}, ...extra,
  }
}

export function slice(name: string, serviceName: string, ports: Array<{ name: string; port: number }>, addresses: Array<{ ip: string; ready?: boolean }>): EndpointSlice {
  return {
    kind: 'EndpointSlice', apiVersion: 'discovery.k8s.io/v1', meta: meta(name), source, serviceName, addressType: 'IPv4',
    endpoints: addresses.map(a => ({ addresses: [a.ip], ready: a.ready ?? true, serving: true, terminating: false, zone: null })),
    ports: ports.map(p => ({ name: p.name, port: p.port, protocol: 'TCP', appProtocol: null })),
  }
}

export function upstreamTls(extra: Partial<UpstreamTLS> = {}): UpstreamTLS {
  return {
    mode: 'ServerOnly', sni: null, hostname: null, caCertificateRefs: [], wellKnownCACertificates: 'System', subjectAltNames: [],
    clientCertificateRef: null, insecureSkipVerify: false, spkiPins: [], crlRefs: [], minVersion: 'TLSv1.2', alpn: [], ...extra,
  }
}

export function externalBackend(name: string, hostname: string, port = 443, tls: UpstreamTLS | null = upstreamTls()): Backend {
  return {
    kind: 'Backend', apiVersion: 'gateway.networking.x-k8s.io/v1alpha1', meta: meta(name), source, flavor: 'XBackend',
    destination: { type: 'ExternalHostname', hostname }, ports: [{ name: '', port, protocol: 'HTTP', tls, mcp: null }],
    extensions: [], fallback: false, region: null,
  }
}

export function tlsPolicy(name: string, targetKind: string, targetName: string, sectionName: string | null, tls: UpstreamTLS, m: Partial<ObjectMeta> = {}, extra: Partial<BackendTLSPolicy> = {}): BackendTLSPolicy {
  return {
    kind: 'BackendTLSPolicy', apiVersion: `${G}/v1`, meta: meta(name, 'default', m), source,
    targetRefs: [{ group: targetKind === 'Service' ? '' : 'gateway.networking.x-k8s.io', kind: targetKind, name: targetName, sectionName }], tls, statusAncestors: [], ...extra,
  }
}

export function trafficPolicy(name: string, target: { group?: string; kind: string; name: string; sectionName?: string }, extra: Partial<BackendTrafficPolicy> = {}, m: Partial<ObjectMeta> = {}): BackendTrafficPolicy {
  return {
    kind: 'BackendTrafficPolicy', apiVersion: 'gateway.envoyproxy.io/v1alpha1', meta: meta(name, 'default', m), source,
    targetRefs: [{ group: target.group ?? G, kind: target.kind, name: target.name, sectionName: target.sectionName ?? null }],
    enableIPv6: null, retry: null, timeout: null, circuitBreaker: null, healthCheck: null, loadBalancer: null, rateLimit: null, ...extra,
  }
}

export function referenceGrant(name: string, namespace: string, from: { kind: string; namespace: string }, to: { group: string; kind: string }): ReferenceGrant {
  return { kind: 'ReferenceGrant', apiVersion: `${G}/v1beta1`, meta: meta(name, namespace), source, from: [{ group: G, ...from }], to: [{ ...to, name: null }] }
}

export function namespace(name: string, labels: Record<string, string> = {}): Namespace {
  return { kind: 'Namespace', apiVersion: 'v1', meta: meta(name, '', { labels }), source }
}

let keyPair: { readonly certPem: string; readonly keyPem: string } | null = null

/** A real certificate and its key (minted once per test process, never committed): compile checks that they parse and match. */
export function testKeyPair(): { readonly certPem: string; readonly keyPem: string } {
  // Valid from before opts.now (a fixed date) to tomorrow: compile warns about a listener
  // certificate outside its dates at `now`.
  return keyPair ??= serverCert(createCa('builders CA'), ['builders.example.test'], { notBefore: new Date(FIXED_NOW - 86400_000) })
}

/** A Secret of `type` holding testKeyPair(), or the PEM given for tls.crt / tls.key. */
export function tlsSecret(name: string, ns = 'default', type = 'kubernetes.io/tls', pem: { readonly cert?: string; readonly key?: string } = {}): Secret {
  const pair = pem.cert !== undefined && pem.key !== undefined ? null : testKeyPair()
  return {
    kind: 'Secret', apiVersion: 'v1', meta: meta(name, ns), source, type,
    data: { 'tls.crt': Buffer.from(pem.cert ?? pair?.certPem ?? ''), 'tls.key': Buffer.from(pem.key ?? pair?.keyPem ?? '') },
  }
}

type Obj = GatewayClass | Gateway | HTTPRoute | Service | EndpointSlice | Backend | BackendTLSPolicy | BackendTrafficPolicy | ReferenceGrant | Namespace | Secret | import('../../lib/resources/model.ts').ModelObject


/** A snapshot holding these objects (keyed like the sources key them). */
export function snapshotOf(objects: Obj[], problems: Snapshot['problems'] = []): Snapshot {
  const s = emptySnapshot() as unknown as Record<string, Map<string, Obj> | Snapshot['problems']>
  for (const o of objects) {
    const key = snapshotKeyOf(o as import('../../lib/resources/model.ts').ModelObject)
    ;(s[MAP_OF_KIND[o.kind]] as Map<string, Obj>).set(key, o)
  }
  s.problems = problems
  return s as unknown as Snapshot
}

const FIXED_NOW = 1700000000000
export const opts = { now: FIXED_NOW, version: 1, gatewayClass: 'sallyport', controllerName: 'sallyport.io/gateway-controller' }
