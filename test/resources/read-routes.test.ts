import t from 'tap'
import { readObject } from '../../lib/resources/read.ts'
import type { GRPCRoute, HTTPRoute, ReferenceGrant, TCPRoute, TLSRoute } from '../../lib/resources/model.ts'
import { loadFixture } from './load-fixture.ts'

const src = { file: 'inline.yaml', doc: 0 }
const MATCH_ALL = { path: { type: 'PathPrefix', value: '/' }, headers: [], queryParams: [], method: null }

t.test('HTTPRoute from the Envoy Gateway example (explicit fields kept)', async (t) => {
  const docs = loadFixture('envoy-gateway-btp-example.yaml')
  const r = readObject(docs[2]!, src) as HTTPRoute
  t.equal(r.kind, 'HTTPRoute')
  t.same(r.parentRefs, [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: 'default', name: 'eg', sectionName: null, port: null }])
  t.same(r.hostnames, ['www.foo.example.com'])
  t.same(r.rules, [{
    name: null,
    matches: [MATCH_ALL],
    filters: [],
    backendRefs: [{ group: '', kind: 'Service', namespace: 'default', name: 'ipv4-service', port: 3000, weight: 1, filters: [], priority: 0 }],
    timeouts: null, retry: null, sessionPersistence: null,
  }])
})

t.test('HTTPRoute from GEP-4488: Backend refs, rule without matches, match without path type', async (t) => {
  const docs = loadFixture('gep-4488-examples.yaml')
  const a = readObject(docs[2]!, src) as HTTPRoute
  t.same(a.parentRefs, [])
  t.same(a.rules[0]!.matches, [MATCH_ALL])
  t.same(a.rules[0]!.backendRefs, [{ group: 'gateway.networking.k8s.io', kind: 'Backend', namespace: 'ai-apps', name: 'openai-api', port: 443, weight: 1, filters: [], priority: 0 }])
  const b = readObject(docs[4]!, src) as HTTPRoute
  t.same(b.rules[0]!.matches, [{ path: { type: 'PathPrefix', value: '/api/models' }, headers: [], queryParams: [], method: null }])
  t.same(b.rules[0]!.filters, [{ type: 'ExtensionRef', extensionRef: { group: '', kind: 'RateLimitPolicy', namespace: 'ai-apps', name: 'rate-limiter' } }])
  // No core kind Backend exists: a Backend ref without a group means the Gateway API group.
  t.same(b.rules[0]!.backendRefs[0]!.group, 'gateway.networking.k8s.io')
})

t.test('HTTPRoute defaults and every filter', async (t) => {
  const r = readObject({
    apiVersion: 'gateway.networking.k8s.io/v1beta1',
    kind: 'HTTPRoute',
    metadata: { name: 'r', namespace: 'apps' },
    spec: {
      parentRefs: [{ name: 'egress', namespace: 'gw', sectionName: 'http', port: 80 }],
      hostnames: ['API.Example.com'],
      rules: [{
        name: 'main',
        matches: [{ headers: [{ name: 'x-a', value: '1' }, { type: 'RegularExpression', name: 'x-b', value: 'b.*' }], queryParams: [{ name: 'q', value: 'v' }], method: 'GET' }],
        filters: [
          { type: 'RequestHeaderModifier', requestHeaderModifier: { set: [{ name: 'x-s', value: 's' }], remove: ['x-r'] } },
          { type: 'ResponseHeaderModifier', responseHeaderModifier: { add: [{ name: 'x-a', value: 'a' }] } },
          { type: 'RequestRedirect', requestRedirect: { scheme: 'https', hostname: 'New.Example.com' } },
          { type: 'URLRewrite', urlRewrite: { path: { type: 'ReplacePrefixMatch', replacePrefixMatch: '/v2' } } },
          { type: 'RequestMirror', requestMirror: { backendRef: { name: 'shadow', port: 80 }, fraction: { numerator: 1, denominator: 4 } } },
          { type: 'RequestMirror', requestMirror: { backendRef: { name: 'shadow2' }, percent: 10 } },
          { type: 'RequestMirror', requestMirror: { backendRef: { name: 'shadow3' }, fraction: { numerator: 5 } } },
          { type: 'RequestMirror', requestMirror: { backendRef: { name: 'shadow4' } } },
          { type: 'CORS', cors: { allowOrigins: ['https://a.example'], allowMethods: ['GET'] } },
          { type: 'SomethingNew' },
        ],
        backendRefs: [{ name: 'svc', port: 8080, weight: 3, priority: 1, filters: [{ type: 'RequestHeaderModifier', requestHeaderModifier: { set: [{ name: 'x-b', value: 'b' }] } }] }],
        timeouts: { request: '10s', backendRequest: '500ms' },
        retry: { codes: [503], attempts: 2, backoff: '100ms' },
        sessionPersistence: { sessionName: 's', absoluteTimeout: '1h' },
      }],
    },
  }, src) as HTTPRoute
  t.same(r.parentRefs, [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: 'gw', name: 'egress', sectionName: 'http', port: 80 }])
  t.same(r.hostnames, ['api.example.com'])
  const rule = r.rules[0]!
  t.equal(rule.name, 'main')
  t.same(rule.matches, [{
    path: { type: 'PathPrefix', value: '/' },
    headers: [{ type: 'Exact', name: 'x-a', value: '1' }, { type: 'RegularExpression', name: 'x-b', value: 'b.*' }],
    queryParams: [{ type: 'Exact', name: 'q', value: 'v' }],
    method: 'GET',
  }])
  t.same(rule.filters, [
    { type: 'RequestHeaderModifier', requestHeaderModifier: { set: [{ name: 'x-s', value: 's' }], add: [], remove: ['x-r'] } },
    { type: 'ResponseHeaderModifier', responseHeaderModifier: { set: [], add: [{ name: 'x-a', value: 'a' }], remove: [] } },
    { type: 'RequestRedirect', requestRedirect: { scheme: 'https', hostname: 'new.example.com', path: null, port: null, statusCode: 302 } },
    { type: 'URLRewrite', urlRewrite: { hostname: null, path: { type: 'ReplacePrefixMatch', replaceFullPath: null, replacePrefixMatch: '/v2' } } },
    { type: 'RequestMirror', requestMirror: { backendRef: { group: '', kind: 'Service', namespace: 'apps', name: 'shadow', port: 80, weight: 1, filters: [], priority: 0 }, percent: 25 } },
    { type: 'RequestMirror', requestMirror: { backendRef: { group: '', kind: 'Service', namespace: 'apps', name: 'shadow2', port: null, weight: 1, filters: [], priority: 0 }, percent: 10 } },
    { type: 'RequestMirror', requestMirror: { backendRef: { group: '', kind: 'Service', namespace: 'apps', name: 'shadow3', port: null, weight: 1, filters: [], priority: 0 }, percent: 5 } },
    { type: 'RequestMirror', requestMirror: { backendRef: { group: '', kind: 'Service', namespace: 'apps', name: 'shadow4', port: null, weight: 1, filters: [], priority: 0 }, percent: null } },
    { type: 'CORS', cors: { allowOrigins: ['https://a.example'], allowCredentials: false, allowMethods: ['GET'], allowHeaders: [], exposeHeaders: [], maxAge: 5 } },
  ])
  t.same(rule.backendRefs, [{
    group: '', kind: 'Service', namespace: 'apps', name: 'svc', port: 8080, weight: 3, priority: 1,
    filters: [{ type: 'RequestHeaderModifier', requestHeaderModifier: { set: [{ name: 'x-b', value: 'b' }], add: [], remove: [] } }],
  }])
  t.same(rule.timeouts, { request: 10_000, backendRequest: 500 })
  t.same(rule.retry, { codes: [503], attempts: 2, backoff: 100 })
  t.same(rule.sessionPersistence, { sessionName: 's', type: 'Cookie', absoluteTimeout: 3_600_000, idleTimeout: null })
})

t.test('HTTPRoute without rules gets the CRD default rule', async (t) => {
  const r = readObject({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'r' } }, src) as HTTPRoute
  t.equal(r.meta.namespace, 'default')
  t.same(r.rules, [{ name: null, matches: [MATCH_ALL], filters: [], backendRefs: [], timeouts: null, retry: null, sessionPersistence: null }])
})

t.test('GRPCRoute', async (t) => {
  const r = readObject({
    apiVersion: 'gateway.networking.k8s.io/v1',
    kind: 'GRPCRoute',
    metadata: { name: 'g', namespace: 'rpc' },
    spec: {
      parentRefs: [{ name: 'egress', kind: 'Gateway', group: 'gateway.networking.k8s.io' }],
      hostnames: ['Grpc.Example.com'],
      rules: [
        { matches: [{ method: { service: 'pkg.Svc', method: 'Call' }, headers: [{ name: 'x', value: 'y' }] }, { method: { type: 'RegularExpression', service: 'pkg\\..*' } }], backendRefs: [{ name: 'grpc', port: 50051 }] },
        { backendRefs: [{ name: 'rest' }] },
      ],
    },
  }, src) as GRPCRoute
  t.equal(r.kind, 'GRPCRoute')
  t.same(r.hostnames, ['grpc.example.com'])
  t.same(r.rules[0]!.matches, [
    { method: { type: 'Exact', service: 'pkg.Svc', method: 'Call' }, headers: [{ type: 'Exact', name: 'x', value: 'y' }] },
    { method: { type: 'RegularExpression', service: 'pkg\\..*', method: null }, headers: [] },
  ])
  t.same(r.rules[1]!.matches, [])
  t.same(r.rules[0]!.backendRefs[0], { group: '', kind: 'Service', namespace: 'rpc', name: 'grpc', port: 50051, weight: 1, filters: [], priority: 0 })
})

t.test('TCPRoute, TLSRoute (v1alpha2 and v1alpha3)', async (t) => {
  const tcp = readObject({ apiVersion: 'gateway.networking.k8s.io/v1alpha2', kind: 'TCPRoute', metadata: { name: 't', namespace: 'db' }, spec: { parentRefs: [{ name: 'egress', sectionName: 'pg' }], rules: [{ backendRefs: [{ name: 'pg', port: 5432 }] }] } }, src) as TCPRoute
  t.equal(tcp.kind, 'TCPRoute')
  t.same(tcp.rules, [{ name: null, backendRefs: [{ group: '', kind: 'Service', namespace: 'db', name: 'pg', port: 5432, weight: 1, filters: [], priority: 0 }] }])
  for (const apiVersion of ['gateway.networking.k8s.io/v1alpha2', 'gateway.networking.k8s.io/v1alpha3']) {
    const tls = readObject({ apiVersion, kind: 'TLSRoute', metadata: { name: 's', namespace: 'x' }, spec: { hostnames: ['A.Example'], rules: [{ name: 'r', backendRefs: [{ kind: 'Backend', group: 'gateway.networking.k8s.io', name: 'b', port: 443 }] }] } }, src) as TLSRoute
    t.equal(tls.kind, 'TLSRoute')
    t.same(tls.hostnames, ['a.example'])
    t.same(tls.rules[0]!.backendRefs[0], { group: 'gateway.networking.k8s.io', kind: 'Backend', namespace: 'x', name: 'b', port: 443, weight: 1, filters: [], priority: 0 })
  }
})

t.test('ReferenceGrant', async (t) => {
  const g = readObject({ apiVersion: 'gateway.networking.k8s.io/v1beta1', kind: 'ReferenceGrant', metadata: { name: 'g', namespace: 'pki' }, spec: { from: [{ group: 'gateway.networking.k8s.io', kind: 'BackendTLSPolicy', namespace: 'apps' }], to: [{ group: '', kind: 'ConfigMap' }, { group: '', kind: 'Secret', name: 'ca' }] } }, src) as ReferenceGrant
  t.same(g.from, [{ group: 'gateway.networking.k8s.io', kind: 'BackendTLSPolicy', namespace: 'apps' }])
  t.same(g.to, [{ group: '', kind: 'ConfigMap', name: null }, { group: '', kind: 'Secret', name: 'ca' }])
})
