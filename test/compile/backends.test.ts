// backendRef resolution (lib/compile/backends.ts, refs.ts) and the weights of
// rules (rules.ts): Service ports to EndpointSlice ports by name, ready
// endpoints only, ReferenceGrant for cross-namespace refs, invalid refs as a
// 500 share, zero total weight as a 500 rule.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import type { RouteRule, RouteTable } from '../../lib/compile/table.ts'
import type { ObjectStatus } from '../../lib/compile/status.ts'
import * as b from './builders.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { parseManifests } from '../../lib/config/parse.ts'

type Obj = Parameters<typeof b.snapshotOf>[0][number]

function run(objects: Obj[]): { table: RouteTable; status: ReadonlyMap<string, ObjectStatus> } {
  const gw = b.gateway('gw', [b.listener('http', 8080, 'HTTP', { allowedRoutes: { namespacesFrom: 'All', namespaceSelector: null, kinds: [] } })])
  const r = compile(b.snapshotOf([b.gatewayClass(), gw, ...objects]), b.opts)
  return { table: r.table, status: r.status.objects }
}

/** The rule serving '/' on the catch-all vhost of port 8080. */
function rootRule(table: RouteTable): RouteRule | undefined {
  return table.ports.get(8080)?.http?.fallback?.prefixes.matches[0]?.rule
}

function resolvedRefs(status: ReadonlyMap<string, ObjectStatus>, key: string): string {
  const c = status.get(key)?.parents[0]?.conditions.find(c => c.type === 'ResolvedRefs')
  return c === undefined ? 'none' : `${c.status}/${c.reason}: ${c.message}`
}

t.test('a Service port finds its EndpointSlice port by NAME, not by number or position', async t => {
  const svc = b.service('api', [{ name: 'metrics', port: 9090 }, { name: 'http', port: 80 }])
  const slice = b.slice('api-1', 'api', [{ name: 'metrics', port: 9091 }, { name: 'http', port: 8080 }], [{ ip: '10.0.0.5' }])
  const other = b.slice('api-2', 'api', [{ name: 'grpc', port: 80 }], [{ ip: '10.0.0.9' }]) // port number 80, wrong name
  const { table } = run([svc, slice, other, b.httpRoute('r', [b.rule([b.match('/')], [b.backendRef('api', 80)])])])
  t.same(table.clusters.get('Service/default/api:80')?.endpoints.map(e => `${e.host}:${e.port}`), ['10.0.0.5:8080'])
})

t.test('only ready endpoints are used', async t => {
  const svc = b.service('api')
  const slice = b.slice('api-1', 'api', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.5' }, { ip: '10.0.0.6', ready: false }, { ip: '10.0.0.7' }])
  const { table } = run([svc, slice, b.httpRoute('r', [b.rule([b.match('/')], [b.backendRef('api', 80)])])])
  t.same(table.clusters.get('Service/default/api:80')?.endpoints.map(e => e.host), ['10.0.0.5', '10.0.0.7'])
})

t.test('slices of another Service or namespace are not used', async t => {
  const svc = b.service('api')
  const mine = b.slice('api-1', 'api', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.5' }])
  const theirs = b.slice('web-1', 'web', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.8' }])
  const elsewhere = { ...b.slice('api-x', 'api', [{ name: 'http', port: 8080 }], [{ ip: '10.0.0.9' }]), meta: b.meta('api-x', 'other') }
  const { table } = run([svc, mine, theirs, elsewhere, b.httpRoute('r', [b.rule([b.match('/')], [b.backendRef('api', 80)])])])
  t.same(table.clusters.get('Service/default/api:80')?.endpoints.map(e => e.host), ['10.0.0.5'])
})

t.test('a backendRef to a port the Service does not have is BackendNotFound and the rule answers 500', async t => {
  const { table, status } = run([b.service('api'), b.httpRoute('r', [b.rule([b.match('/')], [b.backendRef('api', 81)])])])
  t.equal(rootRule(table)?.direct?.status, 500)
  t.match(resolvedRefs(status, 'HTTPRoute/default/r'), /^False\/BackendNotFound: .*no port 81/)
})

t.test('cross-namespace backendRef: RefNotPermitted without a ReferenceGrant, resolved with one', async t => {
  const svc = { ...b.service('billing'), meta: b.meta('billing', 'shared') }
  const ref = b.backendRef('billing', 80, { namespace: 'shared' })
  const route = b.httpRoute('r', [b.rule([b.match('/')], [ref])], {}, { namespace: 'apps' })

  const without = run([svc, route])
  t.equal(rootRule(without.table)?.direct?.status, 500)
  t.match(resolvedRefs(without.status, 'HTTPRoute/apps/r'), /^False\/RefNotPermitted/)
  t.equal(without.table.clusters.size, 0, 'no cluster is built for a refused reference')

  const grantInWrongNs = b.referenceGrant('g', 'apps', { kind: 'HTTPRoute', namespace: 'apps' }, { group: '', kind: 'Service' })
  t.match(resolvedRefs(run([svc, route, grantInWrongNs]).status, 'HTTPRoute/apps/r'), /^False\/RefNotPermitted/, 'the grant must live in the target namespace')
  const grantForOtherKind = b.referenceGrant('g', 'shared', { kind: 'GRPCRoute', namespace: 'apps' }, { group: '', kind: 'Service' })
  t.match(resolvedRefs(run([svc, route, grantForOtherKind]).status, 'HTTPRoute/apps/r'), /^False\/RefNotPermitted/, 'the grant must name the referring kind')

  const grant = b.referenceGrant('g', 'shared', { kind: 'HTTPRoute', namespace: 'apps' }, { group: '', kind: 'Service' })
  const granted = run([svc, route, grant])
  t.equal(resolvedRefs(granted.status, 'HTTPRoute/apps/r'), 'True/ResolvedRefs: ')
  t.same(rootRule(granted.table)?.backends?.map(w => w.cluster), ['Service/shared/billing:80'])

  const named = { ...grant, to: [{ group: '', kind: 'Service', name: 'someone-else' }] }
  t.match(resolvedRefs(run([svc, route, named]).status, 'HTTPRoute/apps/r'), /^False\/RefNotPermitted/, 'a grant naming another object does not apply')
})

t.test('weights: one invalid ref of two keeps its share with cluster null; the other serves', async t => {
  const { table, status } = run([b.service('good'), b.httpRoute('r', [b.rule([b.match('/')], [
    b.backendRef('missing', 80, { weight: 3 }), b.backendRef('good', 80, { weight: 1 }),
  ])])])
  const rule = rootRule(table)
  t.equal(rule?.direct, null, 'the rule still routes')
  t.same(rule?.backends?.map(w => [w.cluster, w.weight]), [[null, 3], ['Service/default/good:80', 1]])
  t.equal(rule?.totalWeight, 4, 'the invalid share stays in the total: 3 of 4 requests get 500')
  t.match(resolvedRefs(status, 'HTTPRoute/default/r'), /^False\/BackendNotFound/)
})

t.test('weights: a total of 0 answers 500; a zero-weight ref beside a weighted one is never picked', async t => {
  const zero = run([b.service('good'), b.httpRoute('r', [b.rule([b.match('/')], [b.backendRef('good', 80, { weight: 0 })])])])
  t.same(rootRule(zero.table)?.direct, { status: 500, code: 'SP_ERR_BACKEND_INVALID', body: 'no backend with weight' })
  t.equal(resolvedRefs(zero.status, 'HTTPRoute/default/r'), 'True/ResolvedRefs: ', 'a zero weight is not an unresolved reference')
  const mixed = run([b.service('a'), b.service('b'), b.httpRoute('r', [b.rule([b.match('/')], [b.backendRef('a', 80, { weight: 0 }), b.backendRef('b', 80, { weight: 2 })])])])
  t.equal(rootRule(mixed.table)?.direct, null)
  t.equal(rootRule(mixed.table)?.totalWeight, 2)
})

t.test('a rule without backendRefs answers 500 (nothing to forward to)', async t => {
  const { table } = run([b.httpRoute('r', [b.rule([b.match('/')], [])])])
  t.equal(rootRule(table)?.direct?.status, 500)
})

t.test('ResolvedRefs names each unresolvable reference once', async t => {
  const { status } = run([b.httpRoute('r', [
    b.rule([b.match('/a')], [b.backendRef('gone', 80)]),
    b.rule([b.match('/b')], [b.backendRef('gone', 80)]),
  ])])
  t.equal(resolvedRefs(status, 'HTTPRoute/default/r'), 'False/BackendNotFound: Service default/gone not found')
})

t.test('Backend kinds resolve to one cluster per object and port, shared by rules', async t => {
  const backend = b.externalBackend('openai', 'API.OpenAI.com')
  const { table } = run([backend, b.httpRoute('r', [
    b.rule([b.match('/a')], [b.backendRef('openai', 443, { group: 'gateway.networking.x-k8s.io', kind: 'Backend' })]),
    b.rule([b.match('/b')], [b.backendRef('openai', null, { group: 'gateway.networking.x-k8s.io', kind: 'Backend' })]),
  ])])
  t.same([...table.clusters.keys()], ['XBackend/default/openai:443'])
  const c = table.clusters.get('XBackend/default/openai:443')
  t.equal(c?.hostname, 'api.openai.com', 'hostnames are lowercased')
  t.equal(c?.tls?.servername, 'api.openai.com', 'SNI defaults to the external hostname')
})

t.test('a backendRef resolves by group and kind: an XBackend and an Envoy Backend named alike stay apart', async t => {
  const yaml = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: default }
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: 8080 }]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: api, namespace: default }
spec:
  endpoints: [{ ip: { address: 192.0.2.10, port: 8443 } }]
  extensions:
    - name: inject
      type: CredentialInjector
      config: { secretRef: { name: team1-key } }
---
apiVersion: v1
kind: Secret
metadata: { name: team1-key, namespace: default }
stringData: { token: TEAM1-SECRET }
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: { name: api, namespace: default }
spec:
  type: ExternalHostname
  externalHostname: { hostname: partner.example.com }
  port: { port: 8443 }
  protocol: HTTP
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: partner, namespace: default }
spec:
  parentRefs: [{ name: gw }]
  hostnames: [x.test]
  rules:
    - backendRefs: [{ group: gateway.networking.x-k8s.io, kind: XBackend, name: api, port: 8443 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: team1, namespace: default }
spec:
  parentRefs: [{ name: gw }]
  hostnames: [e.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: 8443 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: missing, namespace: default }
spec:
  parentRefs: [{ name: gw }]
  hostnames: [missing.test]
  rules:
    - backendRefs: [{ group: gateway.networking.k8s.io, kind: Backend, name: api, port: 8443 }]
`
  const snapshot = buildSnapshot(parseManifests('set.yaml', yaml).docs)
  t.same(snapshot.problems, [])
  const { table, status } = compile(snapshot, b.opts)
  const ruleFor = (host: string) => table.ports.get(8080)?.http?.exact.get(host)?.prefixes.matches[0]?.rule
  const xb = table.clusters.get(ruleFor('x.test')?.backends?.[0]?.cluster ?? '')
  t.same(xb?.endpoints.map(e => e.host), ['partner.example.com'], 'the XBackend ref reaches the XBackend')
  t.equal(ruleFor('x.test')?.backends?.[0]?.extensions ?? null, null, 'and never the Envoy Backend\'s credential')
  const eb = table.clusters.get(ruleFor('e.test')?.backends?.[0]?.cluster ?? '')
  t.same(eb?.endpoints.map(e => e.host), ['192.0.2.10'], 'the Envoy Backend ref reaches the Envoy Backend')
  t.not(ruleFor('e.test')?.backends?.[0]?.extensions ?? null, null, 'with its credential injector')
  // No gateway.networking.k8s.io Backend named api exists: unresolved, not another kind's object.
  t.match(resolvedRefs(status.objects, 'HTTPRoute/default/missing'), /^False\/BackendNotFound: /)
  t.equal(ruleFor('missing.test')?.direct?.status, 500)
})
