// The internal model: one TypeScript shape per resource kind, whatever apiVersion
// or published variant the manifest was written in. Readers in this folder turn a
// validated manifest into these shapes, applying the API's defaults, so compile/
// never looks at raw YAML. Optional fields are `null` when absent (never
// undefined), lists are empty when absent.

import type { LabelSelector, ObjectBase } from './meta.ts'

// ───────────────────────────── references ─────────────────────────────

/** A reference to another object; `namespace` is already defaulted to the referrer's namespace. */
export interface ObjectRef {
  readonly group: string // '' for core
  readonly kind: string
  readonly namespace: string
  readonly name: string
}

/** A reference to a key-holding object used for CA bundles / CRLs (ConfigMap, Secret or ClusterTrustBundle). */
export interface DataRef extends ObjectRef {
  /** Key inside the object's data; null means the kind's default (`ca.crt` for CA bundles). */
  readonly key: string | null
}

/** Gateway API ParentReference, defaulted (group gateway.networking.k8s.io, kind Gateway, namespace of the route). */
export interface ParentRef {
  readonly group: string
  readonly kind: string
  readonly namespace: string
  readonly name: string
  readonly sectionName: string | null
  readonly port: number | null
}

/** Gateway API BackendRef / BackendObjectReference, defaulted (group '', kind Service, namespace of the route). */
export interface BackendRef {
  readonly group: string
  readonly kind: string
  readonly namespace: string
  readonly name: string
  readonly port: number | null
  /** Default 1. */
  readonly weight: number
  /** Per-backendRef filters (HTTPRoute/GRPCRoute). */
  readonly filters: readonly HTTPRouteFilter[]
  /** sallyport.io/priority annotation-equivalent on the ref (failover level, 0 = primary). Issue 6. */
  readonly priority: number
}

/** Gateway API PolicyTargetReference(WithSectionName). */
export interface PolicyTargetRef {
  readonly group: string
  readonly kind: string
  readonly name: string
  readonly sectionName: string | null
}

// ───────────────────────────── GatewayClass / Gateway ─────────────────────────────

export interface GatewayClass extends ObjectBase<'GatewayClass'> {
  readonly controllerName: string
  readonly parametersRef: ObjectRef | null
  readonly description: string | null
}

export type ListenerProtocol = 'HTTP' | 'HTTPS' | 'TCP' | 'TLS' | 'UDP'

export interface RouteGroupKind { readonly group: string; readonly kind: string }

export interface AllowedRoutes {
  /** Default Same. */
  readonly namespacesFrom: 'All' | 'Same' | 'Selector' | 'None'
  readonly namespaceSelector: LabelSelector | null
  /** Empty: the listener protocol's default kinds. */
  readonly kinds: readonly RouteGroupKind[]
}

export interface ListenerTLS {
  /** Default Terminate. */
  readonly mode: 'Terminate' | 'Passthrough'
  /** Secrets (kind Secret, group ''), namespace defaulted to the Gateway's. */
  readonly certificateRefs: readonly ObjectRef[]
  readonly options: Readonly<Record<string, string>>
}

export interface Listener {
  readonly name: string
  readonly hostname: string | null
  readonly port: number
  readonly protocol: ListenerProtocol | string
  readonly tls: ListenerTLS | null
  readonly allowedRoutes: AllowedRoutes
}

/** Gateway.spec.tls.frontend: client certificate validation on HTTPS listeners. */
export interface FrontendTLSValidation {
  readonly caCertificateRefs: readonly DataRef[]
  /** Default AllowValidOnly. */
  readonly mode: 'AllowValidOnly' | 'AllowInsecureFallback'
  /** Per-port overrides. */
  readonly perPort: ReadonlyArray<{ readonly port: number; readonly caCertificateRefs: readonly DataRef[]; readonly mode: 'AllowValidOnly' | 'AllowInsecureFallback' }>
}

/** GEP-3792 Gateway.spec.mesh. The trust bundle may be written as one reference or a list; normalized to a list. */
export interface GatewayMesh {
  readonly trustBundles: readonly DataRef[]
  /** Routes (or their Namespaces) matching this selector are meshed; an absent selector (empty) selects every route (GEP-3792). */
  readonly selector: LabelSelector | null
}

export interface Gateway extends ObjectBase<'Gateway'> {
  readonly gatewayClassName: string
  readonly listeners: readonly Listener[]
  readonly addresses: ReadonlyArray<{ readonly type: string; readonly value: string }>
  readonly frontendValidation: FrontendTLSValidation | null
  readonly mesh: GatewayMesh | null
  readonly infrastructure: { readonly labels: Readonly<Record<string, string>>; readonly annotations: Readonly<Record<string, string>>; readonly parametersRef: ObjectRef | null } | null
}

// ───────────────────────────── HTTPRoute / GRPCRoute ─────────────────────────────

export interface HTTPPathMatch {
  /** Default PathPrefix with value '/'. */
  readonly type: 'Exact' | 'PathPrefix' | 'RegularExpression'
  readonly value: string
}

export interface HTTPHeaderMatch {
  /** Default Exact. */
  readonly type: 'Exact' | 'RegularExpression'
  readonly name: string
  readonly value: string
}

export interface HTTPRouteMatch {
  readonly path: HTTPPathMatch
  readonly headers: readonly HTTPHeaderMatch[]
  readonly queryParams: readonly HTTPHeaderMatch[]
  readonly method: string | null
}

export interface HTTPHeader { readonly name: string; readonly value: string }

export interface HeaderModifier {
  readonly set: readonly HTTPHeader[]
  readonly add: readonly HTTPHeader[]
  readonly remove: readonly string[]
}

export interface HTTPPathModifier {
  readonly type: 'ReplaceFullPath' | 'ReplacePrefixMatch'
  readonly replaceFullPath: string | null
  readonly replacePrefixMatch: string | null
}

export interface RequestRedirect {
  readonly scheme: 'http' | 'https' | null
  readonly hostname: string | null
  readonly path: HTTPPathModifier | null
  readonly port: number | null
  /** Default 302. */
  readonly statusCode: number
}

export interface URLRewrite {
  readonly hostname: string | null
  readonly path: HTTPPathModifier | null
}

export interface RequestMirror {
  readonly backendRef: BackendRef
  /** Percent 0..100, or null for all requests (fraction normalized to percent). */
  readonly percent: number | null
}

export interface CORSFilter {
  readonly allowOrigins: readonly string[]
  readonly allowCredentials: boolean
  readonly allowMethods: readonly string[]
  readonly allowHeaders: readonly string[]
  readonly exposeHeaders: readonly string[]
  readonly maxAge: number
}

export type HTTPRouteFilter =
  | { readonly type: 'RequestHeaderModifier'; readonly requestHeaderModifier: HeaderModifier }
  | { readonly type: 'ResponseHeaderModifier'; readonly responseHeaderModifier: HeaderModifier }
  | { readonly type: 'RequestRedirect'; readonly requestRedirect: RequestRedirect }
  | { readonly type: 'URLRewrite'; readonly urlRewrite: URLRewrite }
  | { readonly type: 'RequestMirror'; readonly requestMirror: RequestMirror }
  | { readonly type: 'CORS'; readonly cors: CORSFilter }
  | { readonly type: 'ExtensionRef'; readonly extensionRef: ObjectRef }

export interface HTTPRouteTimeouts {
  /** Milliseconds; null = no timeout set. Gateway API durations ("10s", "500ms", "1h2m") are parsed by readers. */
  readonly request: number | null
  readonly backendRequest: number | null
}

export interface HTTPRouteRetry {
  readonly codes: readonly number[]
  readonly attempts: number | null
  /** Milliseconds. */
  readonly backoff: number | null
}

export interface SessionPersistence {
  readonly sessionName: string | null
  readonly type: 'Cookie' | 'Header'
  readonly absoluteTimeout: number | null
  readonly idleTimeout: number | null
}

export interface HTTPRouteRule {
  readonly name: string | null
  /** Empty in the manifest means one match of PathPrefix '/'. Readers add it. */
  readonly matches: readonly HTTPRouteMatch[]
  readonly filters: readonly HTTPRouteFilter[]
  readonly backendRefs: readonly BackendRef[]
  readonly timeouts: HTTPRouteTimeouts | null
  readonly retry: HTTPRouteRetry | null
  readonly sessionPersistence: SessionPersistence | null
}

/**
 * A rule validation found invalid while the rest of its route is valid
 * (Gateway API RouteConditionPartiallyInvalid): it stays in `rules`, so every
 * other rule keeps its index, and compile serves the route without it.
 */
export interface DroppedRule {
  /** Index in spec.rules. */
  readonly index: number
  readonly name: string | null
  /** `FIELD: MESSAGE` for each problem found in it. */
  readonly reasons: readonly string[]
}

export interface HTTPRoute extends ObjectBase<'HTTPRoute'> {
  readonly parentRefs: readonly ParentRef[]
  readonly hostnames: readonly string[]
  readonly rules: readonly HTTPRouteRule[]
  /** Rules not served (in index order); empty for most routes. */
  readonly droppedRules: readonly DroppedRule[]
}

export interface GRPCMethodMatch {
  /** Default Exact. */
  readonly type: 'Exact' | 'RegularExpression'
  readonly service: string | null
  readonly method: string | null
}

export interface GRPCRouteMatch {
  readonly method: GRPCMethodMatch | null
  readonly headers: readonly HTTPHeaderMatch[]
}

export interface GRPCRouteRule {
  readonly name: string | null
  readonly matches: readonly GRPCRouteMatch[]
  readonly filters: readonly HTTPRouteFilter[]
  readonly backendRefs: readonly BackendRef[]
  readonly sessionPersistence: SessionPersistence | null
}

export interface GRPCRoute extends ObjectBase<'GRPCRoute'> {
  readonly parentRefs: readonly ParentRef[]
  readonly hostnames: readonly string[]
  readonly rules: readonly GRPCRouteRule[]
  /** Rules not served (in index order); empty for most routes. */
  readonly droppedRules: readonly DroppedRule[]
}

// ───────────────────────────── TCPRoute / TLSRoute ─────────────────────────────

export interface L4RouteRule {
  readonly name: string | null
  readonly backendRefs: readonly BackendRef[]
}

export interface TCPRoute extends ObjectBase<'TCPRoute'> {
  readonly parentRefs: readonly ParentRef[]
  readonly rules: readonly L4RouteRule[]
}

export interface TLSRoute extends ObjectBase<'TLSRoute'> {
  readonly parentRefs: readonly ParentRef[]
  readonly hostnames: readonly string[]
  readonly rules: readonly L4RouteRule[]
}

export type Route = HTTPRoute | GRPCRoute | TCPRoute | TLSRoute

// ───────────────────────────── ReferenceGrant ─────────────────────────────

export interface ReferenceGrant extends ObjectBase<'ReferenceGrant'> {
  readonly from: ReadonlyArray<{ readonly group: string; readonly kind: string; readonly namespace: string }>
  readonly to: ReadonlyArray<{ readonly group: string; readonly kind: string; readonly name: string | null }>
}

// ───────────────────────────── TLS (shared by Backend and BackendTLSPolicy) ─────────────────────────────

export type SubjectAltName =
  | { readonly type: 'Hostname'; readonly value: string }
  | { readonly type: 'URI'; readonly value: string }

/**
 * How a client connection to one backend must do TLS. Every Backend flavour and
 * both BackendTLSPolicy shapes normalize to this.
 */
export interface UpstreamTLS {
  /** ServerOnly = Simple; ClientAndServer = Mutual. (None is represented by `tls: null`.) */
  readonly mode: 'ServerOnly' | 'ClientAndServer'
  /** SNI to send; null: derived (validation hostname, then the Backend hostname). */
  readonly sni: string | null
  /** Name to verify the certificate against when no subjectAltNames are given (validation.hostname). */
  readonly hostname: string | null
  /** Referenced CA bundles. Non-empty: they replace system trust (CA pinning). */
  readonly caCertificateRefs: readonly DataRef[]
  /** 'System': the platform's CAs. null with empty caCertificateRefs also means system trust for Backends. */
  readonly wellKnownCACertificates: 'System' | null
  readonly subjectAltNames: readonly SubjectAltName[]
  readonly clientCertificateRef: ObjectRef | null
  readonly insecureSkipVerify: boolean
  /** Base64 SHA-256 SPKI pins (annotation sallyport.io/spki-pins, comma separated). */
  readonly spkiPins: readonly string[]
  /** CRL bundles (annotation sallyport.io/crl-refs or field crlRefs). */
  readonly crlRefs: readonly DataRef[]
  /** sallyport extension: minimum TLS version ('TLSv1.2' default). */
  readonly minVersion: 'TLSv1.2' | 'TLSv1.3'
  /** ALPN protocols to offer; empty: derived from the backend protocol. */
  readonly alpn: readonly string[]
}

// ───────────────────────────── Backend (all flavours) ─────────────────────────────

/** Which published document the manifest followed; kept for status messages and golden tests. */
export type BackendFlavor = 'XBackend' | 'GEP4488' | 'EgressProposal' | 'EnvoyGateway'

export type BackendProtocol = 'TCP' | 'HTTP' | 'HTTP2' | 'HTTP11' | 'H2C' | 'MCP' | 'TLS'

export interface MCPOptions {
  readonly version: string | null
  /** Default /mcp. */
  readonly path: string
}

export interface BackendPortSpec {
  /** Port name ('' when unnamed). */
  readonly name: string
  readonly port: number
  readonly protocol: BackendProtocol
  /** Per-port TLS (egress proposal), else the Backend's. null = plaintext. */
  readonly tls: UpstreamTLS | null
  readonly mcp: MCPOptions | null
}

/** Where a Backend's endpoints come from. */
export type BackendDestination =
  | { readonly type: 'ExternalHostname'; readonly hostname: string }
  | { readonly type: 'EndpointSelector'; readonly selectorRef: ObjectRef | null; readonly selector: LabelSelector | null }
  | { readonly type: 'Ip'; readonly addresses: readonly string[] }
  | { readonly type: 'Service'; readonly service: ObjectRef }
  /** Envoy Gateway: a list of fqdn / ip / unix endpoints, each with its own port. */
  | { readonly type: 'Endpoints'; readonly endpoints: readonly BackendStaticEndpoint[] }

export type BackendStaticEndpoint =
  | { readonly kind: 'fqdn'; readonly hostname: string; readonly port: number }
  | { readonly kind: 'ip'; readonly address: string; readonly port: number }
  | { readonly kind: 'unix'; readonly path: string }

/** Egress proposal Backend extension; also used at Route and Gateway scope. */
export interface ExtensionSpec {
  readonly name: string
  readonly type: string
  /** request-headers | request-body | response-headers | response-body; null = the type's default. */
  readonly phase: string | null
  /** Higher runs first; default 0. */
  readonly priority: number
  /** Default false: a failing extension fails the request. */
  readonly failOpen: boolean
  /** Free-form configuration (config or rawConfig). */
  readonly config: Readonly<Record<string, unknown>>
}

export interface Backend extends ObjectBase<'Backend'> {
  readonly flavor: BackendFlavor
  readonly destination: BackendDestination
  /** At least one. XBackend / GEP-4488 / Envoy Gateway have one; the egress proposal may list several. */
  readonly ports: readonly BackendPortSpec[]
  readonly extensions: readonly ExtensionSpec[]
  /** Envoy Gateway `fallback`: this Backend is used only when the others of the rule are unhealthy. */
  readonly fallback: boolean
  /** Region label sallyport.io/region (issue 5); null when unlabelled. */
  readonly region: string | null
}

// ───────────────────────────── BackendTLSPolicy ─────────────────────────────

export interface BackendTLSPolicy extends ObjectBase<'BackendTLSPolicy'> {
  readonly targetRefs: readonly PolicyTargetRef[]
  /** Normalized from v1 validation.* or v1alpha2 tls.*; mode is ServerOnly unless a client cert is given. */
  readonly tls: UpstreamTLS
  /**
   * status.ancestors as read from the API server (empty for a file document):
   * who holds each entry. PolicyStatus takes 16 entries; compile leaves the
   * policy to as many Gateways as the other controllers' entries leave room for.
   */
  readonly statusAncestors: readonly StatusAncestor[]
}

/** One status.ancestors entry of a policy: its controllerName and the Gateway it names (namespace defaulted to the policy's); other ancestor kinds are not kept. */
export interface StatusAncestor {
  readonly controllerName: string
  readonly namespace: string
  readonly name: string
}

// ───────────────────────────── BackendTrafficPolicy (Envoy Gateway) ─────────────────────────────

export interface RetryPolicy {
  readonly numRetries: number
  /** Milliseconds. */
  readonly perTryTimeout: number | null
  readonly backoffBase: number | null
  readonly backoffMax: number | null
  /** connect-failure, reset, refused-stream, 5xx, gateway-error, retriable-status-codes… */
  readonly triggers: readonly string[]
  readonly httpStatusCodes: readonly number[]
}

export interface CircuitBreakerPolicy {
  readonly maxConnections: number | null
  readonly maxPendingRequests: number | null
  readonly maxParallelRequests: number | null
  readonly maxParallelRetries: number | null
  readonly maxRequestsPerConnection: number | null
}

export interface ActiveHealthCheck {
  readonly type: 'HTTP' | 'TCP'
  readonly intervalMs: number
  readonly timeoutMs: number
  readonly unhealthyThreshold: number
  readonly healthyThreshold: number
  readonly http: {
    readonly path: string
    readonly method: string
    readonly expectedStatuses: readonly number[]
    readonly hostname: string | null
    /** Bytes the first 1 KiB of the response body must contain (Envoy Gateway's expectedResponse). */
    readonly expectedResponse: HealthCheckPayload | null
  } | null
  /** A TCP check's payloads: `send` written once connected, `receive` looked for in what comes back. */
  readonly tcp: { readonly send: HealthCheckPayload | null; readonly receive: HealthCheckPayload | null } | null
}

/** Envoy Gateway's ActiveHealthCheckPayload: `text` as is (Text) or base64 `binary` (Binary). */
export interface HealthCheckPayload {
  readonly type: 'Text' | 'Binary'
  readonly text: string | null
  readonly binary: string | null
}

export interface PassiveHealthCheck {
  readonly consecutive5xxErrors: number | null
  readonly consecutiveGatewayErrors: number | null
  readonly consecutiveLocalOriginFailures: number | null
  readonly splitExternalLocalOriginErrors: boolean
  readonly intervalMs: number
  readonly baseEjectionTimeMs: number
  readonly maxEjectionPercent: number
}

export interface LoadBalancerPolicy {
  readonly type: 'RoundRobin' | 'LeastRequest' | 'Random' | 'ConsistentHash'
  readonly consistentHash: { readonly type: 'SourceIP' | 'Header' | 'Cookie'; readonly header: string | null; readonly cookie: string | null } | null
  readonly slowStartWindowMs: number | null
}

export interface RateLimitRule {
  readonly clientSelectors: ReadonlyArray<Readonly<Record<string, unknown>>>
  readonly requests: number
  readonly unit: 'Second' | 'Minute' | 'Hour' | 'Day'
  /** `shared: true`: one bucket for every route the policy covers; else one per route. */
  readonly shared: boolean
  /** Tokens a request takes: `cost.request.number` when `from: Number`, else 1; 0 only checks the bucket. */
  readonly cost: number
}

export interface BackendTrafficPolicy extends ObjectBase<'BackendTrafficPolicy'> {
  readonly targetRefs: readonly PolicyTargetRef[]
  readonly enableIPv6: boolean | null
  readonly retry: RetryPolicy | null
  readonly timeout: { readonly connectMs: number | null; readonly requestMs: number | null; readonly idleMs: number | null } | null
  readonly circuitBreaker: CircuitBreakerPolicy | null
  readonly healthCheck: { readonly active: ActiveHealthCheck | null; readonly passive: PassiveHealthCheck | null } | null
  readonly loadBalancer: LoadBalancerPolicy | null
  readonly rateLimit: { readonly type: 'Local' | 'Global'; readonly rules: readonly RateLimitRule[] } | null
}

// ───────────────────────────── sallyport EgressExtension ─────────────────────────────

/** sallyport.io/v1alpha1 EgressExtension: an extension at Route (ExtensionRef filter) or Gateway scope. */
export interface EgressExtension extends ObjectBase<'EgressExtension'> {
  readonly targetRefs: readonly PolicyTargetRef[]
  readonly extensions: readonly ExtensionSpec[]
}

// ───────────────────────────── core / discovery kinds ─────────────────────────────

export interface Secret extends ObjectBase<'Secret'> {
  readonly type: string
  /** Decoded values (data is base64-decoded; stringData merged over it). Never logged. */
  readonly data: Readonly<Record<string, Buffer>>
}

export interface ConfigMap extends ObjectBase<'ConfigMap'> {
  readonly data: Readonly<Record<string, string>>
}

export interface ServicePort {
  readonly name: string
  readonly port: number
  readonly targetPort: number | string | null
  readonly protocol: string
  readonly appProtocol: string | null
}

export interface Service extends ObjectBase<'Service'> {
  readonly type: string
  readonly clusterIP: string | null
  /** spec.clusterIPs (dual-stack: the primary family first), or spec.clusterIP when the list is absent; empty for a headless Service ("None"). */
  readonly clusterIPs: readonly string[]
  /** status.loadBalancer.ingress[] of a LoadBalancer Service, as the load balancer controller wrote it. */
  readonly loadBalancerIngress: ReadonlyArray<{ readonly ip: string | null; readonly hostname: string | null }>
  /** spec.externalIPs: addresses outside the cluster that the nodes route to the Service. */
  readonly externalIPs: readonly string[]
  readonly externalName: string | null
  readonly ports: readonly ServicePort[]
  readonly selector: Readonly<Record<string, string>>
}

export interface EndpointSlice extends ObjectBase<'EndpointSlice'> {
  /** Label kubernetes.io/service-name, or null. */
  readonly serviceName: string | null
  readonly addressType: 'IPv4' | 'IPv6' | 'FQDN'
  readonly endpoints: ReadonlyArray<{ readonly addresses: readonly string[]; readonly ready: boolean; readonly serving: boolean; readonly terminating: boolean; readonly zone: string | null }>
  readonly ports: ReadonlyArray<{ readonly name: string; readonly port: number | null; readonly protocol: string; readonly appProtocol: string | null }>
}

export interface Namespace extends ObjectBase<'Namespace'> {}

export interface Pod extends ObjectBase<'Pod'> {
  /** Empty once the Pod has Succeeded or Failed (its IP is released). */
  readonly podIPs: readonly string[]
  /** spec.hostNetwork: the Pod's IP is its node's, shared by every such Pod there. */
  readonly hostNetwork: boolean
  /** Serving as a Service counts it: Ready condition True (or none at all), not being deleted. */
  readonly ready: boolean
  readonly serviceAccountName: string
  readonly nodeName: string | null
}

export interface ClusterTrustBundle extends ObjectBase<'ClusterTrustBundle'> {
  readonly signerName: string | null
  readonly trustBundle: string
}

export type ModelObject =
  | GatewayClass | Gateway | HTTPRoute | GRPCRoute | TCPRoute | TLSRoute | ReferenceGrant
  | Backend | BackendTLSPolicy | BackendTrafficPolicy | EgressExtension
  | Secret | ConfigMap | Service | EndpointSlice | Namespace | Pod | ClusterTrustBundle

export type ModelKind = ModelObject['kind']

/** Kinds without a namespace. */
export const CLUSTER_SCOPED: ReadonlySet<string> = new Set(['GatewayClass', 'Namespace', 'ClusterTrustBundle'])

/**
 * Three CRDs publish a Backend: gateway.envoyproxy.io `Backend`,
 * gateway.networking.x-k8s.io `XBackend` and gateway.networking.k8s.io
 * `Backend`. They are different objects even with one namespace and name, so a
 * Backend is known by group, kind, namespace and name. The key (also the
 * cluster id, the `backend` label of the metrics and the access line's
 * `backend`) keeps the short `Backend/namespace/name` it always had for Envoy
 * Gateway's, the one most configurations use; the others say which they are:
 * `XBackend/namespace/name`, `Backend.gateway.networking.k8s.io/namespace/name`.
 * A backendRef or targetRef to `gateway.networking.x-k8s.io` kind `Backend`
 * means the XBackend (the experimental channel's kind before its rename).
 */
export function backendKey(group: string, kind: string, namespace: string, name: string): string {
  if (group === 'gateway.networking.x-k8s.io') return `XBackend/${namespace}/${name}`
  if (group === 'gateway.envoyproxy.io' && kind === 'Backend') return `Backend/${namespace}/${name}`
  return `${kind}.${group}/${namespace}/${name}`
}

/** A Backend object's API group (of its apiVersion) and the kind it was written as. */
export function groupKindOf(b: Backend): { readonly group: string; readonly kind: 'Backend' | 'XBackend' } {
  const slash = b.apiVersion.indexOf('/')
  return { group: slash === -1 ? '' : b.apiVersion.slice(0, slash), kind: b.flavor === 'XBackend' ? 'XBackend' : 'Backend' }
}

/** The key of a Backend object (backendKey). */
export function keyOfBackend(b: Backend): string {
  const { group, kind } = groupKindOf(b)
  return backendKey(group, kind, b.meta.namespace, b.meta.name)
}

/** Where a Snapshot map keeps an object: `namespace/name`, `name` when cluster-scoped, keyOfBackend for Backends. */
export function snapshotKeyOf(o: ModelObject): string {
  if (o.kind === 'Backend') return keyOfBackend(o)
  return CLUSTER_SCOPED.has(o.kind) ? o.meta.name : `${o.meta.namespace}/${o.meta.name}`
}
