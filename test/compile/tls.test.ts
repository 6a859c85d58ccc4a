// Upstream TLS in compile (lib/compile/tls.ts, the TLS parts of backends.ts):
// SNI source order, trust bundles (ConfigMap / Secret / ClusterTrustBundle)
// replacing system trust and parsed, ReferenceGrant for cross-namespace
// material, revocation/OCSP/version annotations, identityHash rotation,
// GEP-1897's "How a client behaves" table, Backends wrapping Services,
// GEP-4488's "a Backend is not a BackendTLSPolicy target", insecureSkipVerify
// in status, and GEP-3792 mesh mTLS clusters.

import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import { buildClusterTls, readTlsExtras } from '../../lib/compile/tls.ts'
import type { Cluster, ClusterTls, RouteTable } from '../../lib/compile/table.ts'
import type { ObjectStatus } from '../../lib/compile/status.ts'
import type { Backend, ClusterTrustBundle, ConfigMap, GRPCRoute, Secret, UpstreamTLS } from '../../lib/resources/model.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import * as b from './builders.ts'
import { clientCert, createCa, makeCrl } from '../helpers/pki.ts'

type Obj = Parameters<typeof b.snapshotOf>[0][number]
const source = { file: 'test.yaml', doc: 0 }
const ca = createCa('compile test CA')
const ca2 = createCa('compile rotated CA')
const client = clientCert(ca, 'gateway')

function configMap(name: string, data: Record<string, string>, ns = 'default'): ConfigMap {
  return { kind: 'ConfigMap', apiVersion: 'v1', meta: b.meta(name, ns), source, data }
}
function secret(name: string, data: Record<string, string>, type = 'Opaque', ns = 'default'): Secret {
  return { kind: 'Secret', apiVersion: 'v1', meta: b.meta(name, ns), source, type, data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v)])) }
}
function trustBundle(name: string, pem: string): ClusterTrustBundle {
  return { kind: 'ClusterTrustBundle', apiVersion: 'certificates.k8s.io/v1beta1', meta: b.meta(name, ''), source, signerName: null, trustBundle: pem }
}
const ref = (kind: string, name: string, ns = 'default', key: string | null = null) => ({ group: '', kind, namespace: kind === 'ClusterTrustBundle' ? '' : ns, name, key })
const from = { group: 'gateway.networking.k8s.io', kind: 'Backend', namespace: 'default' }

function tlsOf(objects: Obj[], tls: Partial<UpstreamTLS>, hostname: string | null = 'api.example.com', annotations: Record<string, string> = {}): ClusterTls | string {
  const r = buildClusterTls(b.snapshotOf(objects), from, b.upstreamTls(tls), hostname, 'HTTP', annotations)
  return r.ok ? r.value : `${r.reason}: ${r.message}`
}

/** How resolveBundle normalizes one PEM (trailing whitespace trimmed, one newline). */
function pem(text: string): string {
  return text.trimEnd() + '\n'
}

function asTls(v: ClusterTls | string): ClusterTls {
  if (typeof v === 'string') throw new Error(v)
  return v
}

t.test('SNI: tls.sni, then validation.hostname, then the Backend hostname; never an IP literal', async t => {
  t.equal(asTls(tlsOf([], { sni: 'sni.example.com', hostname: 'v.example.com' })).servername, 'sni.example.com')
  t.equal(asTls(tlsOf([], { hostname: 'v.example.com' })).servername, 'v.example.com')
  t.equal(asTls(tlsOf([], {})).servername, 'api.example.com')
  t.equal(asTls(tlsOf([], {}, '203.0.113.7')).servername, null, 'IPv4 literal: no SNI')
  t.equal(asTls(tlsOf([], { sni: '2001:db8::1' })).servername, null, 'IPv6 literal: no SNI')
  const v = asTls(tlsOf([], { hostname: 'v.example.com', sni: 'sni.example.com' }))
  t.equal(v.verifyHostname, 'v.example.com', 'the validation hostname is what is verified')
})

t.test('trust: system CAs by default; referenced bundles replace them, from each kind', async t => {
  t.equal(asTls(tlsOf([], {})).caPem, null, 'no refs: system trust')
  const objs = [configMap('cm', { 'ca.crt': ca.certPem }), secret('sec', { 'ca.crt': ca2.certPem }), trustBundle('ctb', ca.certPem)]
  t.equal(asTls(tlsOf(objs, { caCertificateRefs: [ref('ConfigMap', 'cm')] })).caPem, pem(ca.certPem))
  t.equal(asTls(tlsOf(objs, { caCertificateRefs: [ref('Secret', 'sec')] })).caPem, pem(ca2.certPem))
  t.equal(asTls(tlsOf(objs, { caCertificateRefs: [ref('ClusterTrustBundle', 'ctb')] })).caPem, pem(ca.certPem))
  const both = asTls(tlsOf(objs, { caCertificateRefs: [ref('ConfigMap', 'cm'), ref('Secret', 'sec')] })).caPem ?? ''
  t.ok(both.includes(ca.certPem.trim()) && both.includes(ca2.certPem.trim()), 'several refs: one bundle')
  t.match(tlsOf([configMap('bad', { 'ca.crt': '-----BEGIN CERTIFICATE-----\ncGxhY2Vob2xkZXI=\n-----END CERTIFICATE-----\n' })], { caCertificateRefs: [ref('ConfigMap', 'bad')] }), /^InvalidCACertificateRef: CA bundle: a certificate cannot be parsed/)
  t.match(tlsOf([], { caCertificateRefs: [ref('ConfigMap', 'missing')] }), /^InvalidCACertificateRef: ConfigMap default\/missing not found/, 'a missing bundle never falls back to system trust')
  t.match(tlsOf([configMap('cm', { 'ca.crt': ca.certPem }, 'other')], { caCertificateRefs: [ref('ConfigMap', 'cm', 'other')] }), /^RefNotPermitted/, 'cross-namespace without a ReferenceGrant')
})

t.test('mTLS: the client certificate comes from a kubernetes.io/tls Secret; cross-namespace only with a ReferenceGrant', async t => {
  const tlsSecret = secret('client', { 'tls.crt': client.certPem, 'tls.key': client.keyPem }, 'kubernetes.io/tls', 'certs')
  const want = { mode: 'ClientAndServer' as const, clientCertificateRef: { group: '', kind: 'Secret', namespace: 'certs', name: 'client' } }
  t.match(tlsOf([tlsSecret], want), /^RefNotPermitted/)
  const grant = b.referenceGrant('g', 'certs', { kind: 'Backend', namespace: 'default' }, { group: '', kind: 'Secret' })
  const ok = asTls(tlsOf([tlsSecret, grant], want))
  t.equal(ok.certPem, client.certPem)
  t.equal(ok.keyPem, client.keyPem)
  t.match(tlsOf([secret('opaque', { 'tls.crt': client.certPem, 'tls.key': client.keyPem }, 'Opaque')], { ...want, clientCertificateRef: { group: '', kind: 'Secret', namespace: 'default', name: 'opaque' } }), /InvalidClientCertificateRef.*not kubernetes.io\/tls/)
  t.match(tlsOf([], { mode: 'ClientAndServer' }), /^InvalidClientCertificateRef: mode ClientAndServer needs a clientCertificateRef/)
})

t.test('annotations: CRL staleness and fetching, OCSP, minimum version; bad values keep the safe defaults', async t => {
  t.same(readTlsExtras({}), { crlStale: 'fail', crlFetch: false, ocsp: 'must-staple', minVersion: null })
  t.same(readTlsExtras({ 'sallyport.io/crl-stale': 'allow', 'sallyport.io/crl-fetch': 'true', 'sallyport.io/ocsp': 'require', 'sallyport.io/tls-min-version': '1.3' }),
    { crlStale: 'allow', crlFetch: true, ocsp: 'require', minVersion: 'TLSv1.3' })
  t.same(readTlsExtras({ 'sallyport.io/crl-stale': 'maybe', 'sallyport.io/ocsp': 'sometimes', 'sallyport.io/tls-min-version': '1.0' }), { crlStale: 'fail', crlFetch: false, ocsp: 'must-staple', minVersion: null })
  const c = asTls(tlsOf([], {}, 'api.example.com', { 'sallyport.io/tls-min-version': 'TLSv1.3', 'sallyport.io/ocsp': 'off' }))
  t.equal(c.minVersion, 'TLSv1.3')
  t.equal(c.ocsp, 'off')
})

t.test('CRLs: resolved from ConfigMap / Secret key ca.crl, shape-checked', async t => {
  const crl = makeCrl(ca)
  const c = asTls(tlsOf([configMap('crl', { 'ca.crl': crl })], { crlRefs: [ref('ConfigMap', 'crl')] }))
  t.equal(c.crlPem, pem(crl))
  t.match(tlsOf([configMap('crl', { 'ca.crl': '-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n' })], { crlRefs: [ref('ConfigMap', 'crl')] }), /^InvalidCRLRef/)
})

t.test('rotation: new Secret/ConfigMap/ClusterTrustBundle content, new identityHash (new pools)', async t => {
  const at = (pem: string, kind: string): string => {
    const objs = kind === 'ClusterTrustBundle' ? [trustBundle('x', pem)] : kind === 'Secret' ? [secret('x', { 'ca.crt': pem })] : [configMap('x', { 'ca.crt': pem })]
    return asTls(tlsOf(objs, { caCertificateRefs: [ref(kind, 'x')] })).identityHash
  }
  for (const kind of ['ConfigMap', 'Secret', 'ClusterTrustBundle']) {
    t.equal(at(ca.certPem, kind), at(ca.certPem, kind), `${kind}: same content, same identity`)
    t.not(at(ca.certPem, kind), at(ca2.certPem, kind), `${kind}: rotated content, new identity`)
  }
  const a = asTls(tlsOf([], {}, 'api.example.com', {})).identityHash
  t.not(a, asTls(tlsOf([], {}, 'api.example.com', { 'sallyport.io/ocsp': 'off' })).identityHash, 'settings are part of the identity too')
})

// ── through compile() ──

const GW = b.gateway('gw', [
  b.listener('http', 8080, 'HTTP', { allowedRoutes: { namespacesFrom: 'All', namespaceSelector: null, kinds: [] } }),
  b.listener('tls', 8443, 'TLS', { tls: { mode: 'Passthrough', certificateRefs: [], options: {} }, allowedRoutes: { namespacesFrom: 'All', namespaceSelector: null, kinds: [] } }),
])

function run(objects: Obj[], gw = GW): { table: RouteTable; status: ReadonlyMap<string, ObjectStatus> } {
  const r = compile(b.snapshotOf([b.gatewayClass(), gw, ...objects]), b.opts)
  return { table: r.table, status: r.status.objects }
}

function clusterOf(table: RouteTable, prefix: string): Cluster | undefined {
  return [...table.clusters.values()].find(c => c.id.startsWith(prefix))
}

const svc = b.service('api', [{ name: 'https', port: 443 }])
const eps = b.slice('api-1', 'api', [{ name: 'https', port: 8443 }], [{ ip: '10.1.0.5' }])
const cm = configMap('api-ca', { 'ca.crt': ca.certPem })
const policy = b.tlsPolicy('api-tls', 'Service', 'api', null, b.upstreamTls({ hostname: 'api.internal', caCertificateRefs: [ref('ConfigMap', 'api-ca')], wellKnownCACertificates: null }))

// TCPRoute / TLSRoute rows of the table are the L4 owner's (issue 8): passthrough
// never originates TLS, decided in the data plane (lib/upstream/l4-dial.ts).
t.test('GEP-1897 "How a client behaves": HTTPRoute and GRPCRoute to a targeted Service use TLS', async t => {
  const http = b.httpRoute('web', [b.rule([b.match('/')], [b.backendRef('api', 443)])])
  const grpc: GRPCRoute = { kind: 'GRPCRoute', apiVersion: `${b.G}/v1`, meta: b.meta('rpc'), source, parentRefs: http.parentRefs, hostnames: ['rpc.test'], rules: [{ name: null, matches: [], filters: [], backendRefs: [b.backendRef('api', 443)], timeouts: null, retry: null, sessionPersistence: null }], droppedRules: [] } as unknown as GRPCRoute

  const h = run([svc, eps, cm, policy, http]).table
  const c = h.clusters.get('Service/default/api:443')
  t.equal(c?.tls?.servername, 'api.internal', 'HTTPRoute: TLS with the policy hostname as SNI')
  t.equal(c?.tls?.caPem, pem(ca.certPem))

  const g = run([svc, eps, cm, policy, grpc]).table.clusters.get('Service/default/api:443')
  t.equal(g?.protocol, 'HTTP2', 'GRPCRoute: HTTP/2 over TLS (our choice for "implementation-dependent")')
  t.ok(g?.tls !== null)

})

t.test('a Backend is not a BackendTLSPolicy target (GEP-4488): status says it is not applied', async t => {
  const backend = b.externalBackend('ext', 'api.example.com', 443, null)
  const pol = b.tlsPolicy('on-backend', 'Backend', 'ext', null, b.upstreamTls())
  const { table, status } = run([backend, pol, b.httpRoute('web', [b.rule([b.match('/')], [b.backendRef('ext', 443, { group: 'gateway.networking.x-k8s.io', kind: 'Backend' })])])])
  t.equal(table.clusters.get('XBackend/default/ext:443')?.tls, null, 'the Backend stays plaintext (its own tls is None)')
  const c = status.get('BackendTLSPolicy/default/on-backend')?.conditions[0]
  t.equal(c?.status, 'False')
  t.match(c?.message, /not applied.*not valid BackendTLSPolicy targets \(GEP-4488\)/)
})

t.test('a BackendTLSPolicy that is not applied still names, as its ancestors, the Gateways whose routes reach its target', async t => {
  // Gateway API conformance (BackendTLSPolicyInvalidCACertificateRef,
  // BackendTLSPolicyConflictResolution) reads the policy's conditions from
  // its status.ancestors entry for the Gateway: with no ancestor, the status
  // writer has nowhere to put Accepted=False and writes nothing at all.
  const gw = (name: string): string => `default/${name}`
  const ancestorsOf = (status: ReadonlyMap<string, ObjectStatus>, policy: string): string[] =>
    (status.get(`BackendTLSPolicy/default/${policy}`)?.parents ?? []).map(p => `${p.parentRef.namespace}/${p.parentRef.name}:${p.conditions.map(c => `${c.type}=${c.status}/${c.reason}`).join(',')}`)
  const route = b.httpRoute('web', [b.rule([b.match('/')], [b.backendRef('api', 443)])])

  const badCa = b.tlsPolicy('bad-ca', 'Service', 'api', null, b.upstreamTls({ hostname: 'api.internal', caCertificateRefs: [ref('ConfigMap', 'missing')], wellKnownCACertificates: null }))
  t.same(ancestorsOf(run([svc, eps, badCa, route]).status, 'bad-ca'), [`${gw('gw')}:Accepted=False/NoValidCACertificate,ResolvedRefs=False/InvalidCACertificateRef`], 'an unresolvable CA ref')

  const older = b.tlsPolicy('first', 'Service', 'api', null, b.upstreamTls({ hostname: 'api.internal' }))
  const younger = b.tlsPolicy('second', 'Service', 'api', null, b.upstreamTls({ hostname: 'api.internal' }), { creationTimestamp: '2024-02-01T00:00:00Z' })
  const both = run([svc, eps, older, younger, route]).status
  t.same(ancestorsOf(both, 'first'), [`${gw('gw')}:Accepted=True/Accepted,ResolvedRefs=True/ResolvedRefs`])
  t.same(ancestorsOf(both, 'second'), [`${gw('gw')}:Accepted=False/Conflicted`], 'the younger of two on one Service')

  const backend = b.externalBackend('ext', 'api.example.com', 443, null)
  const onBackend = b.tlsPolicy('on-backend', 'Backend', 'ext', null, b.upstreamTls())
  const viaBackend = b.httpRoute('web', [b.rule([b.match('/')], [b.backendRef('ext', 443, { group: 'gateway.networking.x-k8s.io', kind: 'Backend' })])])
  t.same(ancestorsOf(run([backend, onBackend, viaBackend]).status, 'on-backend'), [`${gw('gw')}:Accepted=False/Invalid`], 'a Backend target (GEP-4488)')

  t.same(ancestorsOf(run([svc, eps, badCa]).status, 'bad-ca'), [], 'no route reaches the Service: no ancestor')
})

t.test('a Backend wrapping a Service (EndpointSelector selectorRef) picks up the Service\'s BackendTLSPolicy', async t => {
  const wrapper: Backend = {
    kind: 'Backend', apiVersion: `${b.G}/v1alpha1`, meta: b.meta('wrapped'), source, flavor: 'GEP4488',
    destination: { type: 'EndpointSelector', selector: null, selectorRef: { group: '', kind: 'Service', namespace: 'default', name: 'api' } },
    ports: [{ name: '', port: 443, protocol: 'HTTP', tls: null, mcp: null }], extensions: [], fallback: false, region: null,
  }
  const route = b.httpRoute('web', [b.rule([b.match('/')], [b.backendRef('wrapped', 443, { group: b.G, kind: 'Backend' })])])
  const c = run([svc, eps, cm, policy, wrapper, route]).table.clusters.get('Backend.gateway.networking.k8s.io/default/wrapped:443')
  t.same(c?.endpoints.map(e => `${e.host}:${e.port}`), ['10.1.0.5:8443'], 'the Service endpoints')
  t.equal(c?.tls?.servername, 'api.internal', 'the Service policy applies')
  const inline: Backend = { ...wrapper, ports: [{ name: '', port: 443, protocol: 'HTTP', tls: b.upstreamTls({ sni: 'own.example' }), mcp: null }] }
  t.equal(run([svc, eps, cm, policy, inline, route]).table.clusters.get('Backend.gateway.networking.k8s.io/default/wrapped:443')?.tls?.servername, 'own.example', 'inline TLS wins')
})

t.test('insecureSkipVerify shows as a status condition on the Backend and the BackendTLSPolicy', async t => {
  const backend = b.externalBackend('loose', 'api.example.com', 443, b.upstreamTls({ insecureSkipVerify: true }))
  const pol = b.tlsPolicy('loose-policy', 'Service', 'api', null, b.upstreamTls({ insecureSkipVerify: true }))
  const { status } = run([backend, pol, svc, eps, b.httpRoute('web', [b.rule([b.match('/')], [b.backendRef('loose', 443, { group: 'gateway.networking.x-k8s.io', kind: 'Backend' }), b.backendRef('api', 443)])])])
  for (const key of ['XBackend/default/loose', 'BackendTLSPolicy/default/loose-policy']) {
    const c = status.get(key)?.conditions.find(x => x.type === 'sallyport.io/InsecureSkipVerify')
    t.equal(c?.status, 'True', key)
    t.match(c?.message, /NOT verified/)
  }
})

t.test('mesh (GEP-3792): meshed routes reach in-cluster workloads with the gateway identity and the mesh trust bundle', async t => {
  const plainSvc = b.service('web', [{ name: 'http', port: 80 }])
  const webEps = b.slice('web-1', 'web', [{ name: 'http', port: 8080 }], [{ ip: '10.1.0.9' }])
  const identity = secret('gateway-identity', { 'tls.crt': client.certPem, 'tls.key': client.keyPem }, 'kubernetes.io/tls', 'sallyport-system')
  const meshCa = secret('mesh-ca', { 'ca.crt': ca.certPem })
  const gw = { ...GW, mesh: { trustBundles: [ref('Secret', 'mesh-ca')], selector: { matchLabels: { mesh: 'on' }, matchExpressions: [] } } }
  const cls = { ...b.gatewayClass(), parametersRef: { group: '', kind: 'Secret', namespace: 'sallyport-system', name: 'gateway-identity' } }
  const meshed = b.httpRoute('meshed', [b.rule([b.match('/')], [b.backendRef('web', 80)])], { hostnames: ['meshed.test'] }, { labels: { mesh: 'on' } })
  const plain = b.httpRoute('plain', [b.rule([b.match('/')], [b.backendRef('web', 80)])], { hostnames: ['plain.test'] })
  const run2 = (objs: Obj[]): ReturnType<typeof run> => {
    const r = compile(b.snapshotOf([cls, gw, ...objs] as Obj[]), b.opts)
    return { table: r.table, status: r.status.objects }
  }
  const { table } = run2([plainSvc, webEps, identity, meshCa, meshed, plain])
  t.equal(table.clusters.get('Service/default/web:80')?.tls, null, 'the unmeshed route stays plaintext')
  const m = clusterOf(table, 'Service/default/web:80#mesh:')
  t.ok(m !== undefined, 'a mesh variant of the cluster')
  t.equal(m?.tls?.certPem, client.certPem, 'the gateway identity')
  t.equal(m?.tls?.caPem, pem(ca.certPem), 'the mesh trust bundle')
  t.equal(m?.tls?.verifyName, false, 'chain only: workload identities are SPIFFE IDs')
  t.equal(m?.tls?.servername, null)
  t.same(m?.tls?.alpn, ['http/1.1'], 'the protocol\'s own ALPN, nothing mesh-specific')

  const broken = run2([plainSvc, webEps, meshCa, meshed])
  const rule = broken.table.ports.get(8080)?.http?.exact.get('meshed.test')?.prefixes.matches[0]?.rule
  t.equal(rule?.direct?.status, 500, 'no identity: the meshed route answers 500, never plaintext')
  const rr = broken.status.get('HTTPRoute/default/meshed')?.parents[0]?.conditions.find(c => c.type === 'ResolvedRefs')
  t.equal(rr?.reason, 'InvalidMeshIdentity')
})

t.test('the snapshot type is what builders produce', async t => {
  const s: Snapshot = b.snapshotOf([])
  t.ok(s.secrets instanceof Map)
})
