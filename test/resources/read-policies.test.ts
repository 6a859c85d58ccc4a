import t from 'tap'
import { readObject } from '../../lib/resources/read.ts'
import type { BackendTLSPolicy, EgressExtension, UpstreamTLS } from '../../lib/resources/model.ts'
import { loadFixture } from './load-fixture.ts'

const src = { file: 'inline.yaml', doc: 0 }

function tls(over: Partial<UpstreamTLS>): UpstreamTLS {
  return {
    mode: 'ServerOnly', sni: null, hostname: null, caCertificateRefs: [], wellKnownCACertificates: null, subjectAltNames: [],
    clientCertificateRef: null, insecureSkipVerify: false, spkiPins: [], crlRefs: [], minVersion: 'TLSv1.2', alpn: [], ...over,
  }
}

t.test('BackendTLSPolicy v1 (and v1alpha3): targetRefs + validation', async (t) => {
  for (const apiVersion of ['gateway.networking.k8s.io/v1', 'gateway.networking.k8s.io/v1alpha3']) {
    const p = readObject({
      apiVersion,
      kind: 'BackendTLSPolicy',
      metadata: { name: 'tls-upstream-auth', namespace: 'apps', annotations: { 'sallyport.io/spki-pins': 'cGluMQ==,cGluMg==', 'sallyport.io/crl-refs': 'ConfigMap/my-crl' } },
      spec: {
        targetRefs: [{ group: '', kind: 'Service', name: 'auth', sectionName: 'https' }, { group: '', kind: 'Service', name: 'auth2' }],
        validation: {
          caCertificateRefs: [{ group: '', kind: 'ConfigMap', name: 'auth-cert' }],
          hostname: 'Auth.Example.com',
          subjectAltNames: [{ type: 'Hostname', hostname: 'auth.example.com' }, { type: 'URI', uri: 'spiffe://example/auth' }],
        },
        options: { 'example.com/x': 'y' },
      },
    }, src) as BackendTLSPolicy
    t.equal(p.kind, 'BackendTLSPolicy')
    t.equal(p.apiVersion, apiVersion)
    t.same(p.targetRefs, [{ group: '', kind: 'Service', name: 'auth', sectionName: 'https' }, { group: '', kind: 'Service', name: 'auth2', sectionName: null }])
    t.same(p.tls, tls({
      sni: 'auth.example.com',
      hostname: 'auth.example.com',
      caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'apps', name: 'auth-cert', key: null }],
      subjectAltNames: [{ type: 'Hostname', value: 'auth.example.com' }, { type: 'URI', value: 'spiffe://example/auth' }],
      spkiPins: ['cGluMQ==', 'cGluMg=='],
      crlRefs: [{ group: '', kind: 'ConfigMap', namespace: 'apps', name: 'my-crl', key: null }],
    }), apiVersion)
  }
  const system = readObject({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'BackendTLSPolicy', metadata: { name: 's' }, spec: { targetRefs: [{ group: '', kind: 'Service', name: 'x' }], validation: { wellKnownCACertificates: 'System', hostname: 'x.example' } } }, src) as BackendTLSPolicy
  t.same(system.tls, tls({ sni: 'x.example', hostname: 'x.example', wellKnownCACertificates: 'System' }))
})

t.test('BackendTLSPolicy v1alpha2 (GEP-1897 and Gateway API v1.0 spellings)', async (t) => {
  const [gep, released] = loadFixture('gep-1897-backendtlspolicy.yaml')
  const p = readObject(gep!, src) as BackendTLSPolicy
  t.same(p.targetRefs, [{ group: '', kind: 'Service', name: 'dev-service', sectionName: 'btls' }])
  t.same(p.tls, tls({ sni: 'dev.example.com', hostname: 'dev.example.com', caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'dev', name: 'auth-cert', key: null }] }))
  const q = readObject(released!, src) as BackendTLSPolicy
  t.same(q.targetRefs, [{ group: '', kind: 'Service', name: 'auth', sectionName: null }])
  t.same(q.tls, tls({ sni: 'auth.example.com', hostname: 'auth.example.com', wellKnownCACertificates: 'System' }))
  const caCertRefs = readObject({ apiVersion: 'gateway.networking.k8s.io/v1alpha2', kind: 'BackendTLSPolicy', metadata: { name: 'c', namespace: 'n' }, spec: { targetRef: { kind: 'Service', name: 's' }, tls: { caCertRefs: [{ name: 'ca' }], hostname: 'h.example' } } }, src) as BackendTLSPolicy
  t.same(caCertRefs.tls.caCertificateRefs, [{ group: '', kind: 'ConfigMap', namespace: 'n', name: 'ca', key: null }])
})

t.test('BackendTLSPolicy without validation does not throw', async (t) => {
  const p = readObject({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'BackendTLSPolicy', metadata: { name: 'e' } }, src) as BackendTLSPolicy
  t.same(p.targetRefs, [])
  t.same(p.tls, tls({}))
})

t.test('EgressExtension', async (t) => {
  const e = readObject({
    apiVersion: 'sallyport.io/v1alpha1',
    kind: 'EgressExtension',
    metadata: { name: 'redact', namespace: 'ai' },
    spec: {
      targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'egress' }],
      extensions: [{ name: 'pii', type: 'sallyport.io/Redact:v1', phase: 'request-body', priority: 5, failOpen: true, config: { fields: ['email'] } }, { name: 'log', type: 'sallyport.io/Log:v1' }],
    },
  }, src) as EgressExtension
  t.equal(e.kind, 'EgressExtension')
  t.same(e.targetRefs, [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'egress', sectionName: null }])
  t.same(e.extensions, [
    { name: 'pii', type: 'sallyport.io/Redact:v1', phase: 'request-body', priority: 5, failOpen: true, config: { fields: ['email'] } },
    { name: 'log', type: 'sallyport.io/Log:v1', phase: null, priority: 0, failOpen: false, config: {} },
  ])
})
