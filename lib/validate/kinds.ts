// The kinds sallyport reads: for each (apiVersion, kind), the schema and the
// semantic rules that apply, and how the object's name is checked.
//
// Shape detection for kinds published in several shapes:
// - Backend, gateway.envoyproxy.io/v1alpha1          → Envoy Gateway (backend.json#/$defs/envoyGateway)
// - Backend, gateway.networking.k8s.io/v1alpha1
//     with spec.destination                          → egress gateways proposal (backend.json#/$defs/egress)
//     otherwise (spec.type ExternalHostname|...)     → GEP-4488 (backend.json#/$defs/gep4488)
// - XBackend, gateway.networking.x-k8s.io/v1alpha1   → GEP-4488's spec (xbackend.json)
// - BackendTLSPolicy v1 / v1alpha3                   → backendtlspolicy.json#/$defs/v1
// - BackendTLSPolicy v1alpha2 with spec.targetRefs
//     or spec.validation (v1.1-era v1alpha2)         → backendtlspolicy.json#/$defs/v1
//   other v1alpha2 (GEP-1897: targetRef + tls)       → backendtlspolicy.json#/$defs/v1alpha2

import { asObj } from './access.ts'
import type { Obj } from './access.ts'
import type { Findings } from './findings.ts'
import { checkEgressBackend, checkEnvoyBackend, checkGep4488Backend } from './rules-backend.ts'
import { checkConfigMap, checkEndpointSlice, checkNothing, checkPod, checkSecret, checkService } from './rules-core.ts'
import { checkGateway, checkGatewayClass } from './rules-gateway.ts'
import { checkBackendTLSPolicy, checkBackendTLSPolicyV1alpha2, checkBackendTrafficPolicy, checkEgressExtension } from './rules-policy.ts'
import { checkGRPCRoute, checkHTTPRoute, checkL4Route } from './rules-route.ts'

export type Rules = (doc: Obj, f: Findings) => void

/** How metadata.name is checked: DNS subdomain, DNS label, or any path-safe name (ClusterTrustBundle names contain ':'). */
export type NameRule = 'subdomain' | 'label' | 'path'

export interface Shape {
  /** Schema reference relative to schemas/, e.g. `backend.json#/$defs/egress`. */
  readonly schema: string
  readonly rules: Rules
}

export interface KindEntry {
  readonly clusterScoped: boolean
  readonly name: NameRule
  /** Values never to print in messages (top-level keys). */
  readonly redact: readonly string[]
  readonly shape: (doc: Obj) => Shape
}

const GW = 'gateway.networking.k8s.io'
const fixed = (schema: string, rules: Rules) => (): Shape => ({ schema, rules })

function entry(shape: (doc: Obj) => Shape, opts: Partial<Omit<KindEntry, 'shape'>> = {}): KindEntry {
  return { clusterScoped: opts.clusterScoped ?? false, name: opts.name ?? 'subdomain', redact: opts.redact ?? [], shape }
}

const registry = new Map<string, KindEntry>()
/** kind → the apiVersions it is read in, in registry order. */
const apiVersionsOf = new Map<string, string[]>()
/** group → the kinds read in it, in registry order. */
const kindsOf = new Map<string, string[]>()

function add(group: string, versions: readonly string[], kind: string, e: KindEntry): void {
  for (const v of versions) {
    const apiVersion = group === '' ? v : `${group}/${v}`
    registry.set(`${apiVersion}|${kind}`, e)
    apiVersionsOf.set(kind, [...apiVersionsOf.get(kind) ?? [], apiVersion])
  }
  const kinds = kindsOf.get(group) ?? []
  if (!kinds.includes(kind)) kindsOf.set(group, [...kinds, kind])
}

/**
 * Groups made only of kinds sallyport is meant to read: any other kind in them
 * is most likely a typo. The other groups it reads from (core, discovery,
 * certificates) hold many kinds that live beside a gateway's configuration.
 */
const GATEWAY_GROUPS: ReadonlySet<string> = new Set([GW, 'gateway.networking.x-k8s.io', 'gateway.envoyproxy.io', 'sallyport.io'])

const btpV1: Shape = { schema: 'backendtlspolicy.json#/$defs/v1', rules: checkBackendTLSPolicy }
const btpV1alpha2: Shape = { schema: 'backendtlspolicy.json#/$defs/v1alpha2', rules: checkBackendTLSPolicyV1alpha2 }

add(GW, ['v1', 'v1beta1', 'v1alpha2'], 'GatewayClass', entry(fixed('gatewayclass.json', checkGatewayClass), { clusterScoped: true }))
add(GW, ['v1', 'v1beta1', 'v1alpha2'], 'Gateway', entry(fixed('gateway.json', checkGateway)))
add(GW, ['v1', 'v1beta1', 'v1alpha2'], 'HTTPRoute', entry(fixed('httproute.json', checkHTTPRoute)))
add(GW, ['v1', 'v1alpha2'], 'GRPCRoute', entry(fixed('grpcroute.json', checkGRPCRoute)))
add(GW, ['v1', 'v1alpha2'], 'TCPRoute', entry(fixed('tcproute.json', checkL4Route)))
add(GW, ['v1', 'v1alpha3', 'v1alpha2'], 'TLSRoute', entry(fixed('tlsroute.json', checkL4Route)))
add(GW, ['v1', 'v1beta1', 'v1alpha2'], 'ReferenceGrant', entry(fixed('referencegrant.json', checkNothing)))
add(GW, ['v1', 'v1alpha3'], 'BackendTLSPolicy', entry(() => btpV1))
add(GW, ['v1alpha2'], 'BackendTLSPolicy', entry((doc) => {
  const spec = asObj(doc.spec)
  return spec !== null && (spec.targetRefs !== undefined || spec.validation !== undefined) ? btpV1 : btpV1alpha2
}))
add(GW, ['v1alpha1'], 'Backend', entry((doc) => {
  const spec = asObj(doc.spec)
  return spec !== null && spec.destination !== undefined
    ? { schema: 'backend.json#/$defs/egress', rules: checkEgressBackend }
    : { schema: 'backend.json#/$defs/gep4488', rules: checkGep4488Backend }
}))
add('gateway.networking.x-k8s.io', ['v1alpha1'], 'XBackend', entry(fixed('xbackend.json', checkGep4488Backend)))
add('gateway.envoyproxy.io', ['v1alpha1'], 'Backend', entry(fixed('backend.json#/$defs/envoyGateway', checkEnvoyBackend)))
add('gateway.envoyproxy.io', ['v1alpha1'], 'BackendTrafficPolicy', entry(fixed('backendtrafficpolicy.json', checkBackendTrafficPolicy)))
add('sallyport.io', ['v1alpha1'], 'EgressExtension', entry(fixed('egressextension.json', checkEgressExtension)))
add('', ['v1'], 'Secret', entry(fixed('secret.json', checkSecret), { redact: ['data', 'stringData'] }))
add('', ['v1'], 'ConfigMap', entry(fixed('configmap.json', checkConfigMap)))
add('', ['v1'], 'Service', entry(fixed('service.json', checkService), { name: 'label' }))
add('', ['v1'], 'Namespace', entry(fixed('namespace.json', checkNothing), { clusterScoped: true, name: 'label' }))
add('', ['v1'], 'Pod', entry(fixed('pod.json', checkPod)))
add('discovery.k8s.io', ['v1'], 'EndpointSlice', entry(fixed('endpointslice.json', checkEndpointSlice)))
add('certificates.k8s.io', ['v1beta1', 'v1alpha1'], 'ClusterTrustBundle', entry(fixed('clustertrustbundle.json', checkNothing), { clusterScoped: true, name: 'path' }))

export function lookupKind(apiVersion: string, kind: string): KindEntry | null {
  return registry.get(`${apiVersion}|${kind}`) ?? null
}

/**
 * Why a document of a group sallyport reads is not read, when that is most
 * likely a mistake (`gateway.envoyproxy.io/v1` Backend, `HTTPRoutee`): the
 * field at fault and a message naming what is read instead. null for kinds it
 * reads, for groups it does not read, and for the core, discovery and
 * certificates groups' other kinds (ServiceAccounts, say).
 */
export function unreadKind(apiVersion: string, kind: string): { field: string; message: string } | null {
  if (lookupKind(apiVersion, kind) !== null) return null
  const slash = apiVersion.lastIndexOf('/')
  const group = slash === -1 ? '' : apiVersion.slice(0, slash)
  if (!kindsOf.has(group)) return null
  const versions = apiVersionsOf.get(kind)
  if (versions !== undefined) {
    return { field: 'apiVersion', message: `${apiVersion} is not an apiVersion sallyport reads ${kind} in (it reads ${versions.join(', ')}): the object is ignored` }
  }
  if (!GATEWAY_GROUPS.has(group)) return null
  return { field: 'kind', message: `${kind} is not a kind sallyport reads in ${group} (it reads ${(kindsOf.get(group) ?? []).join(', ')}): the object is ignored` }
}

/** Every schema reference the registry can choose (for compiling them all in tests). */
export function allSchemaRefs(): string[] {
  return [
    'gatewayclass.json', 'gateway.json', 'httproute.json', 'grpcroute.json', 'tcproute.json', 'tlsroute.json',
    'referencegrant.json', 'backendtlspolicy.json#/$defs/v1', 'backendtlspolicy.json#/$defs/v1alpha2',
    'backend.json#/$defs/gep4488', 'backend.json#/$defs/egress', 'backend.json#/$defs/envoyGateway', 'xbackend.json',
    'backendtrafficpolicy.json', 'egressextension.json', 'secret.json', 'configmap.json', 'service.json',
    'namespace.json', 'pod.json', 'endpointslice.json', 'clustertrustbundle.json',
  ]
}
