// The API resources sallyport watches: every kind the model reads, with the
// versions to try in order (the first one the API server serves wins — a
// cluster with an older Gateway API release serves v1beta1 or v1alpha2 only).
// `modelKind` is the kind the snapshot files it under (XBackend is a Backend).

export interface KubeResource {
  /** '' for the core group. */
  readonly group: string
  readonly versions: readonly string[]
  readonly plural: string
  readonly kind: string
  readonly modelKind: string
  readonly namespaced: boolean
  /** Has a status subresource sallyport writes. */
  readonly status: boolean
  /** Passed as fieldSelector to every list and watch of the kind (null: none). */
  readonly fieldSelector: string | null
  /**
   * Not read (403) before the first sync, the kind holds it (nothing is served,
   * /readyz stays 503) instead of counting as empty: a kind whose objects
   * secure traffic others send, which an empty view would send unsecured.
   */
  readonly failClosed: boolean
}

const GW = 'gateway.networking.k8s.io'
const r = (group: string, versions: string[], plural: string, kind: string, opts: { modelKind?: string; namespaced?: boolean; status?: boolean; fieldSelector?: string; failClosed?: boolean } = {}): KubeResource =>
  ({ group, versions, plural, kind, modelKind: opts.modelKind ?? kind, namespaced: opts.namespaced ?? true, status: opts.status ?? false, fieldSelector: opts.fieldSelector ?? null, failClosed: opts.failClosed ?? false })

export const KUBE_RESOURCES: readonly KubeResource[] = [
  r(GW, ['v1', 'v1beta1'], 'gatewayclasses', 'GatewayClass', { namespaced: false, status: true }),
  r(GW, ['v1', 'v1beta1'], 'gateways', 'Gateway', { status: true }),
  r(GW, ['v1', 'v1beta1'], 'httproutes', 'HTTPRoute', { status: true }),
  r(GW, ['v1', 'v1alpha2'], 'grpcroutes', 'GRPCRoute', { status: true }),
  r(GW, ['v1alpha2'], 'tcproutes', 'TCPRoute', { status: true }),
  r(GW, ['v1', 'v1alpha3', 'v1alpha2'], 'tlsroutes', 'TLSRoute', { status: true }),
  r(GW, ['v1', 'v1beta1'], 'referencegrants', 'ReferenceGrant'),
  // Unseen, its policies' backends would be reached in plaintext (credentials injected for them too).
  r(GW, ['v1', 'v1alpha3'], 'backendtlspolicies', 'BackendTLSPolicy', { status: true, failClosed: true }),
  r(GW, ['v1alpha1'], 'backends', 'Backend', { status: true }),
  r('gateway.networking.x-k8s.io', ['v1alpha1'], 'xbackends', 'XBackend', { modelKind: 'Backend', status: true }),
  r('gateway.envoyproxy.io', ['v1alpha1'], 'backends', 'Backend', { status: true }),
  r('gateway.envoyproxy.io', ['v1alpha1'], 'backendtrafficpolicies', 'BackendTrafficPolicy', { status: true }),
  r('sallyport.io', ['v1alpha1'], 'egressextensions', 'EgressExtension', { status: true }),
  // Helm keeps every release revision in a Secret (the whole rendered chart,
  // often hundreds of KiB each); nothing sallyport reads is one.
  r('', ['v1'], 'secrets', 'Secret', { fieldSelector: 'type!=helm.sh/release.v1' }),
  r('', ['v1'], 'configmaps', 'ConfigMap'),
  r('', ['v1'], 'services', 'Service'),
  r('', ['v1'], 'namespaces', 'Namespace', { namespaced: false }),
  r('', ['v1'], 'pods', 'Pod'),
  r('discovery.k8s.io', ['v1'], 'endpointslices', 'EndpointSlice'),
  r('certificates.k8s.io', ['v1beta1', 'v1alpha1'], 'clustertrustbundles', 'ClusterTrustBundle', { namespaced: false }),
]

export function apiVersion(group: string, version: string): string {
  return group === '' ? version : `${group}/${version}`
}

/** `/api/v1` or `/apis/GROUP/VERSION`, then `/namespaces/NS` when namespaced and given, then the plural. */
export function resourcePath(res: Pick<KubeResource, 'group' | 'plural'>, version: string, namespace: string | null): string {
  const base = res.group === '' ? `/api/${version}` : `/apis/${res.group}/${version}`
  return namespace === null || namespace === '' ? `${base}/${res.plural}` : `${base}/namespaces/${encodeURIComponent(namespace)}/${res.plural}`
}

export function objectPath(res: Pick<KubeResource, 'group' | 'plural' | 'namespaced'>, version: string, namespace: string, name: string): string {
  return `${resourcePath(res, version, res.namespaced ? namespace : null)}/${encodeURIComponent(name)}`
}
