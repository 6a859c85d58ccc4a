// A Snapshot is the whole valid configuration at one moment: every object that
// passed validation, normalized to the internal model, plus the problems of the
// objects that did not. Sources build it; compile() reads it; nobody mutates it.

import type {
  Backend, BackendTLSPolicy, BackendTrafficPolicy, ClusterTrustBundle, ConfigMap, EgressExtension,
  EndpointSlice, Gateway, GatewayClass, GRPCRoute, HTTPRoute, Namespace, Pod, ReferenceGrant,
  ModelKind, Secret, Service, TCPRoute, TLSRoute,
} from './model.ts'
import type { ConfigProblem } from './problem.ts'

/** Maps keyed by `namespace/name` (or `name` for cluster-scoped kinds). */
export interface Snapshot {
  readonly gatewayClasses: ReadonlyMap<string, GatewayClass>
  readonly gateways: ReadonlyMap<string, Gateway>
  readonly httpRoutes: ReadonlyMap<string, HTTPRoute>
  readonly grpcRoutes: ReadonlyMap<string, GRPCRoute>
  readonly tcpRoutes: ReadonlyMap<string, TCPRoute>
  readonly tlsRoutes: ReadonlyMap<string, TLSRoute>
  readonly referenceGrants: ReadonlyMap<string, ReferenceGrant>
  readonly backends: ReadonlyMap<string, Backend>
  readonly backendTLSPolicies: ReadonlyMap<string, BackendTLSPolicy>
  readonly backendTrafficPolicies: ReadonlyMap<string, BackendTrafficPolicy>
  readonly egressExtensions: ReadonlyMap<string, EgressExtension>
  readonly secrets: ReadonlyMap<string, Secret>
  readonly configMaps: ReadonlyMap<string, ConfigMap>
  readonly services: ReadonlyMap<string, Service>
  /** EndpointSlices keyed by `namespace/name` of the slice. */
  readonly endpointSlices: ReadonlyMap<string, EndpointSlice>
  readonly namespaces: ReadonlyMap<string, Namespace>
  readonly pods: ReadonlyMap<string, Pod>
  readonly clusterTrustBundles: ReadonlyMap<string, ClusterTrustBundle>
  /** Problems of objects that were dropped (errors) or kept with a caveat (warnings). */
  readonly problems: readonly ConfigProblem[]
  /**
   * Kubernetes mode with `--namespace`: the only namespaces namespaced objects
   * are read from, so a reference elsewhere cannot resolve and status says why.
   * Absent or null: every namespace (files, or no --namespace).
   */
  readonly watchedNamespaces?: ReadonlySet<string> | null
  /**
   * Kubernetes mode with `--label-selector`: the API server hands over only the
   * objects it matches, so one that does not is missing, and status and
   * warnings can say why. Absent or null: no selector.
   */
  readonly labelSelector?: string | null
}

/** The names of a Snapshot's object maps. */
export type SnapshotMapName = keyof Omit<Snapshot, 'problems' | 'watchedNamespaces' | 'labelSelector'>

/** Which Snapshot map holds each kind of the model. */
export const MAP_OF_KIND: Readonly<Record<ModelKind, SnapshotMapName>> = {
  GatewayClass: 'gatewayClasses', Gateway: 'gateways', HTTPRoute: 'httpRoutes', GRPCRoute: 'grpcRoutes',
  TCPRoute: 'tcpRoutes', TLSRoute: 'tlsRoutes', ReferenceGrant: 'referenceGrants', Backend: 'backends',
  BackendTLSPolicy: 'backendTLSPolicies', BackendTrafficPolicy: 'backendTrafficPolicies',
  EgressExtension: 'egressExtensions', Secret: 'secrets', ConfigMap: 'configMaps', Service: 'services',
  EndpointSlice: 'endpointSlices', Namespace: 'namespaces', Pod: 'pods', ClusterTrustBundle: 'clusterTrustBundles',
}

export function emptySnapshot(): Snapshot {
  return {
    gatewayClasses: new Map(), gateways: new Map(), httpRoutes: new Map(), grpcRoutes: new Map(),
    tcpRoutes: new Map(), tlsRoutes: new Map(), referenceGrants: new Map(), backends: new Map(),
    backendTLSPolicies: new Map(), backendTrafficPolicies: new Map(), egressExtensions: new Map(),
    secrets: new Map(), configMaps: new Map(), services: new Map(), endpointSlices: new Map(),
    namespaces: new Map(), pods: new Map(), clusterTrustBundles: new Map(), problems: [],
  }
}
