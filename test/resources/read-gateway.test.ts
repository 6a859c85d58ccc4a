import t from 'tap'
import { readObject } from '../../lib/resources/read.ts'
import type { ClusterTrustBundle, Gateway, GatewayClass } from '../../lib/resources/model.ts'
import { loadFixture } from './load-fixture.ts'

const src = { file: 'inline.yaml', doc: 0 }

t.test('GatewayClass is cluster-scoped', async (t) => {
  const [doc] = loadFixture('envoy-gateway-btp-example.yaml')
  const gc = readObject(doc!, src) as GatewayClass
  t.equal(gc.kind, 'GatewayClass')
  t.equal(gc.meta.namespace, '')
  t.equal(gc.controllerName, 'gateway.envoyproxy.io/gatewayclass-controller')
  t.equal(gc.parametersRef, null)
  t.equal(gc.description, null)
  const withParams = readObject({ apiVersion: 'gateway.networking.k8s.io/v1beta1', kind: 'GatewayClass', metadata: { name: 'x', namespace: 'ignored' }, spec: { controllerName: 'sallyport.io/gateway', description: 'd', parametersRef: { group: 'sallyport.io', kind: 'Config', name: 'c', namespace: 'sys' } } }, src) as GatewayClass
  t.equal(withParams.meta.namespace, '')
  t.same(withParams.parametersRef, { group: 'sallyport.io', kind: 'Config', namespace: 'sys', name: 'c' })
  t.equal(withParams.description, 'd')
})

t.test('Gateway listeners with API defaults', async (t) => {
  for (const apiVersion of ['gateway.networking.k8s.io/v1', 'gateway.networking.k8s.io/v1beta1', 'gateway.networking.k8s.io/v1alpha2']) {
    const gw = readObject({
      apiVersion,
      kind: 'Gateway',
      metadata: { name: 'egress', namespace: 'gw' },
      spec: {
        gatewayClassName: 'sallyport',
        addresses: [{ value: '127.0.0.1' }],
        listeners: [
          { name: 'http', port: 80, protocol: 'HTTP' },
          { name: 'https', port: 443, protocol: 'HTTPS', hostname: '*.Example.com', tls: { certificateRefs: [{ name: 'cert' }, { name: 'other', namespace: 'certs', kind: 'Secret', group: '' }], options: { 'sallyport.io/x': 'y' } }, allowedRoutes: { namespaces: { from: 'Selector', selector: { matchLabels: { egress: 'yes' } } }, kinds: [{ kind: 'HTTPRoute' }] } },
          { name: 'tls', port: 8443, protocol: 'TLS', tls: { mode: 'Passthrough' }, allowedRoutes: { namespaces: { from: 'All' } } },
        ],
      },
    }, src) as Gateway
    t.equal(gw.apiVersion, apiVersion)
    t.equal(gw.gatewayClassName, 'sallyport')
    t.same(gw.addresses, [{ type: 'IPAddress', value: '127.0.0.1' }])
    t.same(gw.listeners[0], { name: 'http', hostname: null, port: 80, protocol: 'HTTP', tls: null, allowedRoutes: { namespacesFrom: 'Same', namespaceSelector: null, kinds: [] } })
    t.same(gw.listeners[1], {
      name: 'https', hostname: '*.example.com', port: 443, protocol: 'HTTPS',
      tls: { mode: 'Terminate', certificateRefs: [{ group: '', kind: 'Secret', namespace: 'gw', name: 'cert' }, { group: '', kind: 'Secret', namespace: 'certs', name: 'other' }], options: { 'sallyport.io/x': 'y' } },
      allowedRoutes: { namespacesFrom: 'Selector', namespaceSelector: { matchLabels: { egress: 'yes' }, matchExpressions: [] }, kinds: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute' }] },
    })
    t.same(gw.listeners[2]!.tls, { mode: 'Passthrough', certificateRefs: [], options: {} })
    t.equal(gw.listeners[2]!.allowedRoutes.namespacesFrom, 'All')
    t.equal(gw.frontendValidation, null)
    t.equal(gw.mesh, null)
    t.equal(gw.infrastructure, null)
  }
})

t.test('frontend TLS validation: current and older shapes', async (t) => {
  const current = readObject({
    apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: 'g', namespace: 'gw' },
    spec: {
      gatewayClassName: 'c',
      listeners: [{ name: 'https', port: 443, protocol: 'HTTPS' }],
      tls: { frontend: {
        default: { validation: { caCertificateRefs: [{ kind: 'ConfigMap', group: '', name: 'client-ca' }] } },
        perPort: [{ port: 8443, tls: { validation: { caCertificateRefs: [{ kind: 'Secret', group: '', name: 'other-ca', namespace: 'pki' }], mode: 'AllowInsecureFallback' } } }],
      } },
    },
  }, src) as Gateway
  t.same(current.frontendValidation, {
    caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'gw', name: 'client-ca', key: null }],
    mode: 'AllowValidOnly',
    perPort: [{ port: 8443, caCertificateRefs: [{ group: '', kind: 'Secret', namespace: 'pki', name: 'other-ca', key: null }], mode: 'AllowInsecureFallback' }],
  })
  const flat = readObject({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: 'g' }, spec: { tls: { frontend: { default: { caCertificateRefs: [{ name: 'ca' }], mode: 'AllowInsecureFallback' } } } } }, src) as Gateway
  t.same(flat.frontendValidation, { caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'default', name: 'ca', key: null }], mode: 'AllowInsecureFallback', perPort: [] })
  const perListener = readObject({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: 'g' }, spec: { listeners: [{ name: 'https', port: 443, protocol: 'HTTPS', tls: { certificateRefs: [{ name: 'c' }], frontendValidation: { caCertificateRefs: [{ kind: 'ConfigMap', group: '', name: 'ca' }] } } }] } }, src) as Gateway
  t.same(perListener.frontendValidation, { caCertificateRefs: [], mode: 'AllowValidOnly', perPort: [{ port: 443, caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'default', name: 'ca', key: null }], mode: 'AllowValidOnly' }] })
})

t.test('GEP-3792 mesh: trustBundle as one reference or a list (spec examples)', async (t) => {
  const docs = loadFixture('gep-3792-examples.yaml')
  const everything = { matchLabels: {}, matchExpressions: [] }
  const one = readObject(docs[0]!, src) as Gateway
  t.same(one.mesh, { trustBundles: [{ group: '', kind: 'Secret', namespace: 'mesh-system', name: 'mesh-ca-secret', key: null }], selector: everything })
  const ctb = readObject(docs[1]!, src) as Gateway
  t.same(ctb.mesh, { trustBundles: [{ group: 'certificates.k8s.io', kind: 'ClusterTrustBundle', namespace: '', name: 'mesh-identity-bundle', key: null }], selector: everything })
  const list = readObject(docs[2]!, src) as Gateway
  t.same(list.mesh, { trustBundles: [{ group: '', kind: 'Secret', namespace: 'ocg-mesh-namespace', name: 'ocg-mesh-root-ca', key: null }], selector: { matchLabels: { 'linkerd.io/inject': 'true' }, matchExpressions: [] } })
  const bundle = readObject(docs[3]!, src) as ClusterTrustBundle
  t.equal(bundle.kind, 'ClusterTrustBundle')
  t.equal(bundle.meta.namespace, '')
  t.equal(bundle.signerName, 'my-mesh.io/identity')
  t.match(bundle.trustBundle, /BEGIN CERTIFICATE/)
  const configMapBundle = readObject({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: 'g', namespace: 'gw' }, spec: { mesh: { trustBundle: [{ kind: 'ConfigMap', name: 'roots', key: 'roots.pem' }] } } }, src) as Gateway
  t.same(configMapBundle.mesh!.trustBundles, [{ group: '', kind: 'ConfigMap', namespace: 'gw', name: 'roots', key: 'roots.pem' }])
})

t.test('infrastructure', async (t) => {
  const gw = readObject({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: 'g', namespace: 'gw' }, spec: { infrastructure: { labels: { a: 'b' }, parametersRef: { group: 'sallyport.io', kind: 'Params', name: 'p' } } } }, src) as Gateway
  t.same(gw.infrastructure, { labels: { a: 'b' }, annotations: {}, parametersRef: { group: 'sallyport.io', kind: 'Params', namespace: 'gw', name: 'p' } })
})
