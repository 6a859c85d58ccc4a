// Step 3: backendRef resolution. A Service or Backend reference becomes a
// Cluster (endpoints, protocol, TLS) shared by every rule that names the same
// object and port; a reference that cannot be resolved becomes a reason for
// ResolvedRefs=False and a null cluster (requests picked for it get 500).

import type { Backend, BackendRef, BackendTLSPolicy, EndpointSlice, Service, ServicePort } from '../resources/model.ts'
import { backendKey, keyOfBackend } from '../resources/model.ts'
import { matchesSelector } from '../resources/meta.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import type { Cluster, ClusterTls, Endpoint, UpstreamProtocol } from './table.ts'
import { UpstreamProxies, type ProxyChoice } from './upstream-proxy.ts'
import { ANNOTATIONS } from '../validate/annotations.ts'
import { isIpLiteral } from './hostnames.ts'
import type { From, Resolved } from './refs.ts'
import { fail, isReferenceAllowed, refNotPermitted } from './refs.ts'
import type { TlsPolicyPlan } from './tls.ts'
import { DestinationPolicies, type Denial } from './destination-policy.ts'
import { buildClusterTls, buildMeshTls, tlsPolicyContenders, tlsPolicyFor } from './tls.ts'
import { ANCESTORS_FULL, MAX_POLICY_ANCESTORS, NO_LIMITS, type TlsAncestorLimits } from './ancestor-limit.ts'

export type RouteKind = 'HTTPRoute' | 'GRPCRoute' | 'TCPRoute' | 'TLSRoute'

/** Who uses a cluster: policy merge looks at these. */
export interface ClusterUser { readonly routeKind: RouteKind; readonly routeKey: string; readonly gatewayKey: string }

// The group/kind pairs a Backend object can be written as (resources/model.ts
// backendKey); x-k8s.io `Backend` is the XBackend's earlier name.
const BACKEND_KINDS = new Set([
  'gateway.networking.k8s.io/Backend', 'gateway.networking.x-k8s.io/Backend', 'gateway.networking.x-k8s.io/XBackend',
  'gateway.envoyproxy.io/Backend',
])

const BACKEND_KIND_NAMES = new Set(['Backend', 'XBackend'])

export function isBackendKind(group: string, kind: string): boolean {
  // Asked for every backendRef of every rule (issue 11): rule out Services and other kinds before building a key.
  return BACKEND_KIND_NAMES.has(kind) && BACKEND_KINDS.has(`${group}/${kind}`)
}

/**
 * A resolve() or denial() call as a compiled route made it (issue 11): both
 * record what uses a cluster (users, TLS policy and Backend ancestors, denials
 * for status), so a route reused from the previous compile repeats its calls.
 */
export type ResolverCall =
  | { readonly op: 'resolve'; readonly ref: BackendRef; readonly from: From & { readonly name: string }; readonly routeKind: RouteKind; readonly gatewayKey: string; readonly meshed: boolean }
  | { readonly op: 'denial'; readonly id: string; readonly gatewayKey: string }

/** Resolves and caches clusters for one compile. Not shared across compiles. */
export class BackendResolver {
  readonly #snapshot: Snapshot
  readonly tlsPlan: TlsPolicyPlan
  readonly #clusters = new Map<string, Resolved<Cluster>>()
  /** Cluster id → users, for policy merge. */
  readonly users = new Map<string, ClusterUser[]>()
  /** BackendTLSPolicy key → Gateways whose routes use it (its ancestors), and its resolution error. */
  readonly tlsPolicyUse = new Map<string, Set<string>>()
  /**
   * BackendTLSPolicy key → Gateways whose routes reached a backend it applies
   * to but may not use it: its status.ancestors is full (ancestor-limit.ts).
   * Those references fail (500), never plaintext.
   */
  readonly tlsPolicyRefused = new Map<string, Set<string>>()
  /** BackendTLSPolicy key → the Gateways this compile leaves it out of (decided from a first pass's use). */
  readonly #tlsLimits: TlsAncestorLimits
  /** Cluster id → the BackendTLSPolicy its TLS comes from (a Service port, or a Backend wrapping one). */
  readonly #clusterPolicy = new Map<string, string>()
  readonly tlsPolicyErrors = new Map<string, { reason: string; message: string }>()
  /**
   * BackendTLSPolicy key → Gateways whose routes reach a Service port it
   * targets, whether it applies there or not (conflicted, its CA refs broken):
   * the ancestors its status is written under when it is not applied.
   */
  readonly tlsPolicyReach = new Map<string, Set<string>>()
  /** Cluster id → the BackendTLSPolicies contending for its Service port (tlsPolicyContenders), set as the cluster is built, even when that fails. */
  readonly #clusterContenders = new Map<string, readonly string[]>()
  /** Backend key → Gateways whose routes use it. */
  readonly backendUse = new Map<string, Set<string>>()

  /** Gateway destination policies (issue 5): region locks, allow/deny lists, the guard on static addresses. */
  readonly destinations: DestinationPolicies
  /** Upstream CONNECT proxies of Backends and Gateways (issue 9). */
  readonly proxies: UpstreamProxies

  constructor(snapshot: Snapshot, tlsPlan: TlsPolicyPlan, destinations: DestinationPolicies = new DestinationPolicies(snapshot, undefined), tlsLimits: TlsAncestorLimits = NO_LIMITS) {
    this.#snapshot = snapshot
    this.tlsPlan = tlsPlan
    this.#tlsLimits = tlsLimits
    this.destinations = destinations
    this.proxies = new UpstreamProxies(snapshot)
  }

  /**
   * Issue 9: whether a Gateway's upstream proxy applies to cluster `id`: an
   * external destination (not in-cluster endpoints, no unix socket) whose
   * Backend chose nothing itself.
   */
  takesGatewayProxy(id: string, c: Cluster): boolean {
    if (this.#inCluster.has(id) || c.upstreamProxy != null || c.endpoints.some(e => e.kind === 'unix')) return false
    return c.kind !== 'Backend' || c.backendKey == null || this.proxies.forBackend(c.backendKey) === null
  }

  /** While set, resolve() and denial() calls are appended here (compile-cache.ts). */
  journal: ResolverCall[] | null = null

  /** Repeats recorded calls for their side effects (a reused route's users, ancestors and denials). */
  replay(calls: readonly ResolverCall[]): void {
    for (const c of calls) {
      if (c.op === 'resolve') this.resolve(c.ref, c.from, c.routeKind, c.gatewayKey, c.meshed)
      else this.denial(c.id, c.gatewayKey)
    }
  }

  /** Whether routes of `gatewayKey` may send to the resolved cluster `id`; null: allowed. */
  denial(id: string, gatewayKey: string): Denial | null {
    if (this.journal !== null) this.journal.push({ op: 'denial', id, gatewayKey })
    const r = this.#clusters.get(id)
    if (r === undefined || !r.ok) return null
    // Issue 9: through an upstream proxy the proxy resolves the name; its addresses are never seen here.
    const proxied = r.value.upstreamProxy != null || (this.takesGatewayProxy(id, r.value) && this.proxies.forGateway(gatewayKey) !== null)
    return this.destinations.check(r.value, gatewayKey, proxied)
  }

  /** One resolved cluster by id, or null (issue 7: its Backend-scope extensions). */
  cluster(id: string): Cluster | null {
    const r = this.#clusters.get(id)
    return r !== undefined && r.ok ? r.value : null
  }

  clusters(): Map<string, Cluster> {
    const out = new Map<string, Cluster>()
    for (const [id, r] of [...this.#clusters].sort((a, b) => a[0] < b[0] ? -1 : 1)) if (r.ok) out.set(id, r.value)
    return out
  }

  /** `meshed` (GEP-3792): in-cluster plaintext backends get a mesh-mTLS variant of the cluster. */
  resolve(ref: BackendRef, from: From & { readonly name: string }, routeKind: RouteKind, gatewayKey: string, meshed = false): Resolved<string> {
    if (this.journal !== null) this.journal.push({ op: 'resolve', ref, from, routeKind, gatewayKey, meshed })
    const target = { group: ref.group, kind: ref.kind, namespace: ref.namespace, name: ref.name }
    const isService = ref.group === '' && ref.kind === 'Service'
    if (!isService && !isBackendKind(ref.group, ref.kind)) return fail('InvalidKind', `backendRef kind ${ref.group === '' ? '' : ref.group + '/'}${ref.kind} is not supported`)
    if (!isReferenceAllowed(this.#snapshot, from, target)) {
      return fail('RefNotPermitted', refNotPermitted(this.#snapshot, `${ref.kind} ${ref.namespace}/${ref.name}`, ref.namespace))
    }
    let r = isService ? this.#service(ref, routeKind, gatewayKey) : this.#backend(ref, routeKind, gatewayKey)
    if (!r.ok) return r
    const policy = this.#clusterPolicy.get(r.value)
    if (policy !== undefined) {
      // Gateway API PolicyStatus.ancestors: once the list is full the policy is
      // unimplementable for further ancestors. Its backend is then unusable
      // through them (500, ResolvedRefs=False) — sent without TLS it would
      // go out in plaintext.
      const limited = this.#tlsLimits.get(policy)
      const refused = limited !== undefined && limited.refused.has(gatewayKey)
      noteGateway(refused ? this.tlsPolicyRefused : this.tlsPolicyUse, policy, gatewayKey)
      if (refused) {
        return fail(ANCESTORS_FULL, `BackendTLSPolicy ${policy} cannot be used through Gateway ${gatewayKey}: its status.ancestors is full (${limited.budget} of ${MAX_POLICY_ANCESTORS} entries left to sallyport, taken by Gateways that sort first); requests to ${ref.kind} ${ref.namespace}/${ref.name} answer 500 rather than go without TLS`)
      }
    }
    if (meshed) {
      r = this.#meshed(r.value, gatewayKey)
      if (!r.ok) return r
    }
    const users = this.users.get(r.value) ?? []
    users.push({ routeKind, routeKey: `${from.namespace}/${from.name}`, gatewayKey })
    this.users.set(r.value, users)
    return r
  }

  #cache(id: string, build: () => Resolved<Cluster>): Resolved<string> {
    let r = this.#clusters.get(id)
    if (r === undefined) { r = build(); this.#clusters.set(id, r) }
    return r.ok ? { ok: true, value: id } : r
  }

  /** Cluster ids whose endpoints are in-cluster workloads (Service endpoints, selected Pods): mesh candidates. */
  readonly #inCluster = new Set<string>()

  /**
   * GEP-3792: a meshed route reaches in-cluster workloads with bare mTLS (the
   * gateway identity, the mesh trust bundle). A backend that already has its
   * own TLS (BackendTLSPolicy, Backend tls) keeps it: that is application TLS.
   * A broken mesh configuration fails the reference — never plaintext instead.
   */
  #meshed(id: string, gatewayKey: string): Resolved<string> {
    const base = this.#clusters.get(id)
    if (base === undefined || !base.ok || base.value.tls !== null || !this.#inCluster.has(id)) return { ok: true, value: id }
    const c = base.value
    if (c.protocol === 'TCP' || c.protocol === 'TLS') return { ok: true, value: id }
    return this.#cache(`${id}#mesh:${gatewayKey}`, () => {
      const gateway = this.#snapshot.gateways.get(gatewayKey)
      if (gateway === undefined) return fail('InvalidMeshConfig', `Gateway ${gatewayKey} not found`)
      const protocol = c.protocol === 'H2C' ? 'HTTP2' : c.protocol
      const tls = buildMeshTls(this.#snapshot, gateway, protocol)
      if (!tls.ok) return fail(tls.reason, `meshed route to ${c.id}: ${tls.message}`)
      return { ok: true, value: { ...c, id: `${id}#mesh:${gatewayKey}`, protocol, tls: tls.value } }
    })
  }

  #service(ref: BackendRef, routeKind: RouteKind, gatewayKey: string): Resolved<string> {
    const svc = this.#snapshot.services.get(`${ref.namespace}/${ref.name}`)
    if (svc === undefined) return fail('BackendNotFound', `Service ${ref.namespace}/${ref.name} not found`)
    if (ref.port === null) return fail('BackendNotFound', `backendRef to Service ${ref.namespace}/${ref.name} needs a port`)
    const port = svc.ports.find(p => p.port === ref.port)
    if (port === undefined) return fail('BackendNotFound', `Service ${ref.namespace}/${ref.name} has no port ${ref.port}`)
    const id = `Service/${ref.namespace}/${ref.name}:${port.port}${l4Suffix(routeKind)}`
    if (svc.type !== 'ExternalName') this.#inCluster.add(id)
    const r = this.#cache(id, () => this.#serviceCluster(svc, port, routeKind, id))
    this.#noteReach(id, gatewayKey)
    return r
  }

  /** The BackendTLSPolicies contending for cluster `id`'s Service port have `gatewayKey` among their ancestors. */
  #noteReach(id: string, gatewayKey: string): void {
    const keys = this.#clusterContenders.get(id)
    if (keys !== undefined) for (const key of keys) noteGateway(this.tlsPolicyReach, key, gatewayKey)
  }

  /** TLS of a BackendTLSPolicy for a Service port; a failure is recorded for the policy's status and fails the ref. */
  #policyTls(policy: BackendTLSPolicy, protocol: UpstreamProtocol): Resolved<ClusterTls> {
    const from = { group: 'gateway.networking.k8s.io', kind: 'BackendTLSPolicy', namespace: policy.meta.namespace }
    const r = buildClusterTls(this.#snapshot, from, policy.tls, null, protocol, policy.meta.annotations)
    if (r.ok) return r
    this.tlsPolicyErrors.set(`${policy.meta.namespace}/${policy.meta.name}`, { reason: r.reason, message: r.message })
    return fail('InvalidBackendTLS', `BackendTLSPolicy ${policy.meta.namespace}/${policy.meta.name}: ${r.message}`)
  }

  #serviceCluster(svc: Service, port: ServicePort, routeKind: RouteKind, id: string): Resolved<Cluster> {
    const ns = svc.meta.namespace
    // GEP-1897 "How a client behaves": HTTPRoute (and, our choice, GRPCRoute) to a
    // targeted Service connects with TLS. Our choice for the implementation-dependent
    // L4 rows (issue 8, README): TCPRoute and TLSRoute on a Terminate listener
    // originate TLS too; TLSRoute passthrough never does — the data plane dials
    // without the cluster's TLS there (lib/upstream/l4-dial.ts).
    const policy = tlsPolicyFor(this.tlsPlan, ns, svc.meta.name, port.name)
    if (policy !== null) this.#clusterContenders.set(id, tlsPolicyContenders(this.tlsPlan, ns, svc.meta.name, port.name))
    let protocol = serviceProtocol(port.appProtocol, routeKind, policy !== null)
    let tls: ClusterTls | null = null
    if (policy !== null) {
      const r = this.#policyTls(policy, protocol)
      if (!r.ok) return r
      tls = r.value
      this.#clusterPolicy.set(id, `${policy.meta.namespace}/${policy.meta.name}`)
      if (protocol === 'H2C') protocol = 'HTTP2'
    }
    const endpoints = svc.type === 'ExternalName' && svc.externalName !== null
      ? [externalNameEndpoint(svc.externalName, port.port)]
      : serviceEndpoints(this.#snapshot, ns, svc.meta.name, port)
    return { ok: true, value: cluster('Service', ns, svc.meta.name, port.port, protocol, null, endpoints, tls, null) }
  }

  #backend(ref: BackendRef, routeKind: RouteKind, gatewayKey: string): Resolved<string> {
    // By group and kind too: an XBackend and an Envoy Gateway Backend with one name
    // are different objects, and a ref to one never reaches the other (its
    // endpoints, its credentials).
    const key = backendKey(ref.group, ref.kind, ref.namespace, ref.name)
    const backend = this.#snapshot.backends.get(key)
    const what = `${ref.kind} ${ref.namespace}/${ref.name} (${ref.group})`
    if (backend === undefined) return fail('BackendNotFound', `${what} not found`)
    const port = ref.port === null ? backend.ports[0] : backend.ports.find(p => p.port === ref.port)
    if (port === undefined) return fail('BackendNotFound', `${what} has no port ${ref.port}`)
    noteGateway(this.backendUse, key, gatewayKey)
    const id = `${key}:${port.port}${l4Suffix(routeKind)}`
    const d = backend.destination
    if (d.type === 'EndpointSelector' || (d.type === 'Service' && this.#snapshot.services.get(`${d.service.namespace}/${d.service.name}`)?.type !== 'ExternalName')) this.#inCluster.add(id)
    const r = this.#cache(id, () => this.#backendCluster(backend, port, routeKind, id))
    this.#noteReach(id, gatewayKey)
    return r
  }

  #backendCluster(backend: Backend, port: Backend['ports'][number], routeKind: RouteKind, id: string): Resolved<Cluster> {
    const ns = backend.meta.namespace
    const d = backend.destination
    // The egress proposal's example writes `protocol: TLS` on the port of an HTTP API: for HTTP
    // routes that is HTTP over TLS (ALPN decides h2 or http/1.1); for TCP/TLS routes, raw TLS.
    let protocol: UpstreamProtocol = isL4(routeKind) ? (port.protocol === 'TLS' ? 'TLS' : 'TCP') : port.protocol === 'TLS' ? 'HTTP' : port.protocol
    let hostname: string | null = null
    let wrapped: { svc: Service; port: ServicePort } | null = null
    let endpoints: Endpoint[]
    switch (d.type) {
      case 'ExternalHostname':
        hostname = d.hostname.toLowerCase()
        endpoints = [hostEndpoint(hostname, port.port)]
        break
      case 'Ip':
        endpoints = d.addresses.map(a => ({ host: a, port: port.port, kind: 'ip' as const, weight: 1, zone: null }))
        break
      case 'EndpointSelector': {
        const selector = d.selector
        endpoints = []
        const ref = d.selectorRef
        if (selector === null && ref !== null && ref.group === '' && ref.kind === 'Service') {
          // GEP-4488 selectorRef: the Service's endpoints (and its BackendTLSPolicy, below).
          const svc = this.#snapshot.services.get(`${ref.namespace}/${ref.name}`)
          if (svc === undefined) return fail('BackendNotFound', `Backend ${ns}/${backend.meta.name}: Service ${ref.namespace}/${ref.name} not found`)
          const sp = svc.ports.find(p => p.port === port.port) ?? svc.ports[0]
          if (sp === undefined) return fail('BackendNotFound', `Backend ${ns}/${backend.meta.name}: Service ${svc.meta.name} has no ports`)
          endpoints = serviceEndpoints(this.#snapshot, svc.meta.namespace, svc.meta.name, sp)
          wrapped = { svc, port: sp }
        } else if (selector !== null) {
          for (const pod of [...this.#snapshot.pods.values()].sort((a, b) => a.meta.name < b.meta.name ? -1 : 1)) {
            // As a Service's endpoints: only Pods that are ready and not being deleted.
            if (pod.meta.namespace !== ns || !pod.ready || !matchesSelector(selector, pod.meta.labels)) continue
            for (const ip of pod.podIPs) endpoints.push({ host: ip, port: port.port, kind: 'ip', weight: 1, zone: null })
          }
        }
        break
      }
      case 'Service': {
        const svc = this.#snapshot.services.get(`${d.service.namespace}/${d.service.name}`)
        if (svc === undefined) return fail('BackendNotFound', `Backend ${ns}/${backend.meta.name}: Service ${d.service.namespace}/${d.service.name} not found`)
        const sp = svc.ports.find(p => p.port === port.port) ?? svc.ports[0]
        if (sp === undefined) return fail('BackendNotFound', `Backend ${ns}/${backend.meta.name}: Service ${svc.meta.name} has no ports`)
        endpoints = svc.type === 'ExternalName' && svc.externalName !== null
          ? [externalNameEndpoint(svc.externalName, sp.port)]
          : serviceEndpoints(this.#snapshot, svc.meta.namespace, svc.meta.name, sp)
        wrapped = { svc, port: sp }
        break
      }
      case 'Endpoints':
        endpoints = d.endpoints.map(e => e.kind === 'unix'
          ? { host: e.path, port: 0, kind: 'unix' as const, weight: 1, zone: null }
          : e.kind === 'ip'
            ? { host: e.address, port: e.port, kind: 'ip' as const, weight: 1, zone: null }
            : hostEndpoint(e.hostname, e.port))
        // One name across every endpoint (a:443 and a:8443) is the Backend's: its Host and TLS name.
        if (endpoints.length > 0 && endpoints.every(e => e.kind === 'hostname' && e.host === endpoints[0].host)) hostname = endpoints[0].host
        break
    }
    let tls: ClusterTls | null = null
    if (port.tls !== null) {
      const from = { group: 'gateway.networking.k8s.io', kind: 'Backend', namespace: ns }
      const r = buildClusterTls(this.#snapshot, from, port.tls, hostname, protocol, backend.meta.annotations)
      if (!r.ok) return fail('InvalidBackendTLS', `Backend ${ns}/${backend.meta.name}: ${r.message}`)
      tls = r.value
    } else if (wrapped !== null) {
      // A Backend wrapping a Service (GEP-4488 EndpointSelector with a selectorRef, or a
      // Service destination) without TLS of its own: a BackendTLSPolicy on that Service
      // port applies as it would to the Service (GEP-1897 table, HTTP-like routes only).
      // The Backend itself is never a BackendTLSPolicy target (planTlsPolicies).
      const policy = tlsPolicyFor(this.tlsPlan, wrapped.svc.meta.namespace, wrapped.svc.meta.name, wrapped.port.name)
      if (policy !== null) {
        this.#clusterContenders.set(id, tlsPolicyContenders(this.tlsPlan, wrapped.svc.meta.namespace, wrapped.svc.meta.name, wrapped.port.name))
        const r = this.#policyTls(policy, protocol)
        if (!r.ok) return r
        tls = r.value
        this.#clusterPolicy.set(id, `${policy.meta.namespace}/${policy.meta.name}`)
        if (protocol === 'H2C') protocol = 'HTTP2'
      }
    }
    const c = cluster('Backend', ns, backend.meta.name, port.port, protocol, hostname, endpoints, tls, port.protocol === 'MCP' ? (port.mcp?.path ?? '/mcp') : null)
    const key = keyOfBackend(backend)
    return {
      ok: true,
      value: {
        ...c, id: `${key}:${port.port}`, backendKey: key, extensions: backend.extensions.length > 0 ? backend.extensions : null, fallback: backend.fallback, region: backend.region,
        // Issue 6, parent mode: the Backend is another egress gateway; only connections to it are retried.
        parentGateway: backend.meta.annotations[ANNOTATIONS.PARENT_GATEWAY] === 'true',
        // Issue 9: the Backend's own proxy; `none` keeps it direct whatever its Gateways say (compile.ts).
        ...ownProxy(this.proxies.forBackend(key)),
      },
    }
  }
}

/** Records that Gateway `gatewayKey` uses what `key` names (a BackendTLSPolicy, a Backend). */
function noteGateway(map: Map<string, Set<string>>, key: string, gatewayKey: string): void {
  const set = map.get(key)
  if (set === undefined) map.set(key, new Set([gatewayKey]))
  else set.add(gatewayKey)
}

/** The cluster field for a Backend's own proxy choice (absent unless it names one). */
function ownProxy(choice: ProxyChoice): Pick<Cluster, 'upstreamProxy'> {
  return choice === null || choice === 'none' ? {} : { upstreamProxy: choice }
}

function cluster(
  kind: 'Backend' | 'Service', namespace: string, name: string, port: number, protocol: UpstreamProtocol,
  hostname: string | null, endpoints: Endpoint[], tls: ClusterTls | null, mcpPath: string | null,
): Cluster {
  return {
    id: `${kind}/${namespace}/${name}:${port}`, kind, namespace, name, port, protocol, hostname, endpoints, tls, mcpPath,
    extensions: null, lb: null, circuitBreaker: null, healthCheck: null, fallback: false, region: null, enableIPv6: false, destination: null,
  }
}

/**
 * An ExternalName Service's endpoint is always a name to resolve, even when it
 * is an address (`externalName: 169.254.169.254` is a valid DNS-1123
 * subdomain): whoever may create a Service chose it, so the destination guard
 * judges it when it is dialled (upstream/resolve.ts takes an address in a
 * name's place without DNS).
 */
function externalNameEndpoint(host: string, port: number): Endpoint {
  return { host, port, kind: 'hostname', weight: 1, zone: null }
}

function hostEndpoint(host: string, port: number): Endpoint {
  return { host, port, kind: isIpLiteral(host) ? 'ip' : 'hostname', weight: 1, zone: null }
}

/**
 * Kubernetes appProtocol (KEP-3726 standard values and IANA names) decides how
 * we speak to a Service; GRPCRoute defaults to HTTP/2 (h2c in the clear).
 */
function isL4(routeKind: RouteKind): boolean {
  return routeKind === 'TCPRoute' || routeKind === 'TLSRoute'
}

/**
 * A backend used by both HTTP and L4 routes gets two clusters: the protocol on the wire
 * differs (HTTP pools vs a raw byte splice), so they must not share one whose protocol
 * depended on which route compiled first.
 */
function l4Suffix(routeKind: RouteKind): string {
  return isL4(routeKind) ? '#l4' : ''
}

export function serviceProtocol(appProtocol: string | null, routeKind: RouteKind, tls: boolean): UpstreamProtocol {
  if (routeKind === 'TCPRoute' || routeKind === 'TLSRoute') return 'TCP'
  switch (appProtocol?.toLowerCase()) {
    case 'kubernetes.io/h2c': case 'h2c': return tls ? 'HTTP2' : 'H2C'
    case 'http2': case 'grpc': case 'kubernetes.io/http2': return tls ? 'HTTP2' : 'H2C'
    case 'kubernetes.io/ws': case 'http': case 'http/1.1': return 'HTTP11'
    case 'https': case 'kubernetes.io/wss': return 'HTTP'
  }
  if (routeKind === 'GRPCRoute') return tls ? 'HTTP2' : 'H2C'
  return tls ? 'HTTP' : 'HTTP11'
}

/** Ready endpoints of the slices labelled kubernetes.io/service-name, the slice port matched by the Service port's name. */
/** A snapshot's EndpointSlices by `namespace/service`, each list sorted by name; built once per snapshot. */
const slicesIndex = new WeakMap<ReadonlyMap<string, EndpointSlice>, ReadonlyMap<string, readonly EndpointSlice[]>>()

function slicesOf(snapshot: Snapshot, namespace: string, service: string): readonly EndpointSlice[] {
  let index = slicesIndex.get(snapshot.endpointSlices)
  if (index === undefined) {
    // A cluster has thousands of slices; scanning them all for each Service a
    // route uses made the compile quadratic (1,000 Services over 10,000 slices:
    // two thirds of a 200 ms compile).
    const byService = new Map<string, EndpointSlice[]>()
    for (const s of snapshot.endpointSlices.values()) {
      if (s.serviceName === null) continue
      const key = `${s.meta.namespace}/${s.serviceName}`
      const list = byService.get(key)
      if (list === undefined) byService.set(key, [s])
      else list.push(s)
    }
    for (const list of byService.values()) list.sort((a, b) => a.meta.name < b.meta.name ? -1 : 1)
    slicesIndex.set(snapshot.endpointSlices, index = byService)
  }
  return index.get(`${namespace}/${service}`) ?? []
}

function serviceEndpoints(snapshot: Snapshot, namespace: string, service: string, port: ServicePort): Endpoint[] {
  const out: Endpoint[] = []
  for (const slice of slicesOf(snapshot, namespace, service)) {
    const sp = slice.ports.find(p => p.name === port.name)
    if (sp === undefined || sp.port === null) continue
    for (const ep of slice.endpoints) {
      if (!ep.ready) continue
      for (const address of ep.addresses) {
        out.push({ host: address, port: sp.port, kind: slice.addressType === 'FQDN' ? 'hostname' : 'ip', weight: 1, zone: ep.zone })
      }
    }
  }
  return out
}
