import t from 'tap'
import { readObject } from '../../lib/resources/read.ts'
import { readMeta } from '../../lib/resources/read-meta.ts'

const src = { file: 'inline.yaml', doc: 3 }

t.test('metadata defaults for file sources', async (t) => {
  t.same(readMeta({ metadata: { name: 'x' } }, 'HTTPRoute'), {
    name: 'x', namespace: 'default', uid: '', generation: 1, resourceVersion: '', creationTimestamp: '', firstSeen: 0, labels: {}, annotations: {},
  })
  t.same(readMeta({ metadata: { name: 'x', namespace: 'ns' } }, 'Namespace').namespace, '')
  t.same(readMeta({ metadata: { name: 'x', namespace: 'ns' } }, 'ClusterTrustBundle').namespace, '')
  t.same(readMeta({}, 'Gateway').name, '')
  t.same(readMeta({
    metadata: { name: 'x', namespace: 'ns', uid: 'u-1', generation: 7, resourceVersion: '42', creationTimestamp: '2025-01-01T00:00:00Z', labels: { a: 'b', n: 1 }, annotations: { c: 'd' } },
  }, 'Gateway'), {
    name: 'x', namespace: 'ns', uid: 'u-1', generation: 7, resourceVersion: '42', creationTimestamp: '2025-01-01T00:00:00Z', firstSeen: 0, labels: { a: 'b', n: '1' }, annotations: { c: 'd' },
  })
})

t.test('apiVersion kept as written, source kept, kind is the model kind', async (t) => {
  const o = readObject({ apiVersion: 'gateway.networking.x-k8s.io/v1alpha1', kind: 'XBackend', metadata: { name: 'b' }, spec: { type: 'ExternalHostname', externalHostname: { hostname: 'a.example' }, port: { number: 443 } } }, src)
  t.equal(o!.kind, 'Backend')
  t.equal(o!.apiVersion, 'gateway.networking.x-k8s.io/v1alpha1')
  t.same(o!.source, src)
})

t.test('kinds the model does not use are null', async (t) => {
  const nulls: Array<Record<string, unknown>> = [
    { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'd' } },
    { apiVersion: 'example.com/v1', kind: 'Backend', metadata: { name: 'foreign' } },
    { apiVersion: 'example.com/v1', kind: 'Secret', metadata: { name: 'foreign' } },
    { apiVersion: 'v1', kind: 'EndpointSlice', metadata: { name: 'wrong-group' } },
    { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'UDPRoute', metadata: { name: 'u' } },
    { apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'SecurityPolicy', metadata: { name: 's' } },
    { apiVersion: 'sallyport.io/v1alpha1', kind: 'Other', metadata: { name: 'o' } },
    { apiVersion: 'v1', metadata: { name: 'no-kind' } },
    {},
  ]
  for (const doc of nulls) t.equal(readObject(doc, src), null, JSON.stringify(doc))
})

t.test('every model kind is reachable', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['gateway.networking.k8s.io/v1', 'GatewayClass', 'GatewayClass'],
    ['gateway.networking.k8s.io/v1', 'Gateway', 'Gateway'],
    ['gateway.networking.k8s.io/v1', 'HTTPRoute', 'HTTPRoute'],
    ['gateway.networking.k8s.io/v1', 'GRPCRoute', 'GRPCRoute'],
    ['gateway.networking.k8s.io/v1alpha2', 'TCPRoute', 'TCPRoute'],
    ['gateway.networking.k8s.io/v1alpha2', 'TLSRoute', 'TLSRoute'],
    ['gateway.networking.k8s.io/v1beta1', 'ReferenceGrant', 'ReferenceGrant'],
    ['gateway.networking.k8s.io/v1', 'BackendTLSPolicy', 'BackendTLSPolicy'],
    ['gateway.networking.k8s.io/v1alpha1', 'Backend', 'Backend'],
    ['gateway.networking.x-k8s.io/v1alpha1', 'XBackend', 'Backend'],
    ['gateway.envoyproxy.io/v1alpha1', 'Backend', 'Backend'],
    ['gateway.envoyproxy.io/v1alpha1', 'BackendTrafficPolicy', 'BackendTrafficPolicy'],
    ['sallyport.io/v1alpha1', 'EgressExtension', 'EgressExtension'],
    ['v1', 'Secret', 'Secret'],
    ['v1', 'ConfigMap', 'ConfigMap'],
    ['v1', 'Service', 'Service'],
    ['discovery.k8s.io/v1', 'EndpointSlice', 'EndpointSlice'],
    ['v1', 'Namespace', 'Namespace'],
    ['v1', 'Pod', 'Pod'],
    ['certificates.k8s.io/v1beta1', 'ClusterTrustBundle', 'ClusterTrustBundle'],
  ]
  for (const [apiVersion, kind, model] of cases) {
    // Bare documents (no metadata, no spec) must not throw either.
    const o = readObject({ apiVersion, kind }, src)
    t.equal(o?.kind, model, `${apiVersion} ${kind}`)
  }
})
