// Route attachment (lib/compile/attach.ts) through compile(): parentRef
// sectionName and port, listener allowedRoutes (namespaces, kinds), and the
// listener/route hostname intersection. Each case checks both the table (what
// serves) and the route's parent status.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import type { ObjectStatus } from '../../lib/compile/status.ts'
import type { RouteTable } from '../../lib/compile/table.ts'
import type { GRPCRoute, HTTPRoute, Listener, ParentRef } from '../../lib/resources/model.ts'
import { findVirtualHost } from '../../lib/router/match.ts'
import * as b from './builders.ts'

type Obj = Parameters<typeof b.snapshotOf>[0][number]

function run(objects: Obj[]): { table: RouteTable; status: ReadonlyMap<string, ObjectStatus> } {
  const r = compile(b.snapshotOf([b.gatewayClass(), b.service('svc'), ...objects]), b.opts)
  return { table: r.table, status: r.status.objects }
}

function parent(sectionName: string | null = null, port: number | null = null): ParentRef {
  return { group: b.G, kind: 'Gateway', namespace: 'default', name: 'gw', sectionName, port }
}

function route(name: string, extra: Partial<HTTPRoute> = {}, namespace = 'default'): HTTPRoute {
  return b.httpRoute(name, [b.rule([b.match('/')], [b.backendRef('svc', 80, { namespace: 'default' })])], extra, { namespace })
}

function accepted(status: ReadonlyMap<string, ObjectStatus>, key: string, i = 0): string {
  const c = status.get(key)?.parents[i]?.conditions.find(c => c.type === 'Accepted')
  return c === undefined ? 'none' : `${c.status}/${c.reason}`
}

function listenerStatus(status: ReadonlyMap<string, ObjectStatus>, name: string): { attached: number; conditions: Record<string, string> } {
  const l = status.get('Gateway/default/gw')?.listeners.find(l => l.name === name)
  return { attached: l?.attachedRoutes ?? -1, conditions: Object.fromEntries((l?.conditions ?? []).map(c => [c.type, `${c.status}/${c.reason}`])) }
}

function servedHosts(table: RouteTable, port: number): string[] {
  const http = table.ports.get(port)?.http
  if (http == null) return []
  const withMatches = (v: { exactPaths: ReadonlyMap<string, unknown>, prefixes: { children: ReadonlyMap<string, unknown>, matches: readonly unknown[] }, regexes: readonly unknown[] }): boolean =>
    v.exactPaths.size > 0 || v.prefixes.matches.length > 0 || v.prefixes.children.size > 0 || v.regexes.length > 0
  return [
    ...[...http.exact.values()].filter(withMatches).map(v => v.hostname),
    ...http.wildcards.filter(w => withMatches(w.value)).map(w => `*${w.suffix}`),
    ...(http.fallback !== null && withMatches(http.fallback) ? ['*'] : []),
  ]
}

const all = { namespacesFrom: 'All' as const, namespaceSelector: null, kinds: [] }

t.test('parentRef sectionName and port pick listeners; a missing one is NoMatchingParent', async t => {
  const gw = b.gateway('gw', [b.listener('a', 8081), b.listener('b', 8082)])
  const { table, status } = run([gw,
    route('by-section', { parentRefs: [parent('b')], hostnames: ['s.example'] }),
    route('by-port', { parentRefs: [parent(null, 8081)], hostnames: ['p.example'] }),
    route('both', { parentRefs: [parent('a', 8082)], hostnames: ['x.example'] }),
    route('no-section', { parentRefs: [parent('zzz')], hostnames: ['z.example'] }),
  ])
  t.same(servedHosts(table, 8081), ['p.example'])
  t.same(servedHosts(table, 8082), ['s.example'])
  t.equal(accepted(status, 'HTTPRoute/default/by-section'), 'True/Accepted')
  t.equal(accepted(status, 'HTTPRoute/default/both'), 'False/NoMatchingParent', 'sectionName and port must both match')
  t.equal(accepted(status, 'HTTPRoute/default/no-section'), 'False/NoMatchingParent')
  t.equal(listenerStatus(status, 'a').attached, 1)
  t.equal(listenerStatus(status, 'b').attached, 1)
})

t.test('parentRefs to Gateways of other classes or controllers are left alone', async t => {
  const gw = b.gateway('gw', [b.listener('a', 8081)])
  const foreign = b.gateway('other', [b.listener('a', 9000)], { gatewayClassName: 'someone-else' })
  const { table, status } = run([gw, foreign,
    route('r', { parentRefs: [{ ...parent(), name: 'other' }] })])
  t.equal(table.ports.has(9000), false)
  t.equal(status.has('HTTPRoute/default/r'), false, 'no status written for parents we do not serve')
})

t.test('allowedRoutes namespaces: Same, All, Selector (with kubernetes.io/metadata.name)', async t => {
  const gw = b.gateway('gw', [
    b.listener('same', 8081),
    b.listener('all', 8082, 'HTTP', { allowedRoutes: all }),
    b.listener('sel', 8083, 'HTTP', { allowedRoutes: { namespacesFrom: 'Selector', namespaceSelector: { matchLabels: { team: 'pay' }, matchExpressions: [] }, kinds: [] } }),
    b.listener('byname', 8084, 'HTTP', { allowedRoutes: { namespacesFrom: 'Selector', namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'dev' }, matchExpressions: [] }, kinds: [] } }),
  ])
  const { table, status } = run([gw, b.namespace('pay', { team: 'pay' }), b.namespace('other'),
    route('home', { hostnames: ['home.example'] }),
    route('pay', { hostnames: ['pay.example'] }, 'pay'),
    route('other', { hostnames: ['other.example'] }, 'other'),
    route('dev', { hostnames: ['dev.example'] }, 'dev'), // no Namespace object: the name label is implied
  ])
  t.same(servedHosts(table, 8081), ['home.example'], 'Same: only the Gateway namespace')
  t.same(servedHosts(table, 8082).sort(), ['dev.example', 'home.example', 'other.example', 'pay.example'], 'All')
  t.same(servedHosts(table, 8083), ['pay.example'], 'Selector on labels')
  t.same(servedHosts(table, 8084), ['dev.example'], 'Selector on kubernetes.io/metadata.name')
  t.equal(accepted(status, 'HTTPRoute/other/other'), 'True/Accepted', 'accepted through the All listener')
  const only = run([gw, route('x', { parentRefs: [parent('same')] }, 'other')])
  t.equal(accepted(only.status, 'HTTPRoute/other/x'), 'False/NotAllowedByListeners')
})

t.test('allowedRoutes kinds: a listener for GRPCRoute only refuses HTTPRoutes; an unknown kind is InvalidRouteKinds', async t => {
  const gw = b.gateway('gw', [
    b.listener('grpc', 8081, 'HTTP', { allowedRoutes: { namespacesFrom: 'Same', namespaceSelector: null, kinds: [{ group: b.G, kind: 'GRPCRoute' }] } }),
    b.listener('odd', 8082, 'HTTP', { allowedRoutes: { namespacesFrom: 'Same', namespaceSelector: null, kinds: [{ group: b.G, kind: 'HTTPRoute' }, { group: b.G, kind: 'TCPRoute' }] } }),
  ])
  const { table, status } = run([gw, route('r', { parentRefs: [parent('grpc')] }), route('s', { parentRefs: [parent('odd')] })])
  t.same(servedHosts(table, 8081), [])
  t.equal(accepted(status, 'HTTPRoute/default/r'), 'False/NotAllowedByListeners')
  t.equal(listenerStatus(status, 'odd').conditions.ResolvedRefs, 'False/InvalidRouteKinds', 'TCPRoute is not a kind an HTTP listener can carry')
  t.same(status.get('Gateway/default/gw')?.listeners.find(l => l.name === 'odd')?.supportedKinds, [{ group: b.G, kind: 'HTTPRoute' }])
  t.same(servedHosts(table, 8082), ['*'], 'the supported kind still attaches')
})

t.test('hostname intersection: exact, wildcard listener, wildcard route, none', async t => {
  const gw = b.gateway('gw', [
    b.listener('wild', 8081, 'HTTP', { hostname: '*.example.com' }),
    b.listener('exact', 8082, 'HTTP', { hostname: 'api.example.com' }),
  ])
  const { table, status } = run([gw,
    route('a', { parentRefs: [parent('wild')], hostnames: ['a.example.com', 'b.other.org'] }),
    route('deep', { parentRefs: [parent('wild')], hostnames: ['x.y.example.com'] }),
    route('apex', { parentRefs: [parent('wild')], hostnames: ['example.com'] }),
    route('wide', { parentRefs: [parent('exact')], hostnames: ['*.example.com'] }),
    route('none', { parentRefs: [parent('exact')], hostnames: ['other.example.com'] }),
    route('any', { parentRefs: [parent('wild')] }),
  ])
  t.same(servedHosts(table, 8081).sort(), ['*.example.com', 'a.example.com', 'x.y.example.com'], 'non-intersecting b.other.org is dropped, the rest kept')
  t.same(servedHosts(table, 8082), ['api.example.com'], 'a wildcard route narrows to the exact listener hostname')
  t.equal(accepted(status, 'HTTPRoute/default/apex'), 'False/NoMatchingListenerHostname', '*.example.com does not cover example.com')
  t.equal(accepted(status, 'HTTPRoute/default/none'), 'False/NoMatchingListenerHostname')
  t.equal(accepted(status, 'HTTPRoute/default/wide'), 'True/Accepted')
  const http = table.ports.get(8081)?.http
  t.ok(http != null)
  if (http == null) return
  t.equal(findVirtualHost(http, 'q.example.com')?.hostname, '*.example.com', 'the route without hostnames serves the listener hostname')
  t.equal(findVirtualHost(http, 'example.com'), null, 'nothing answers outside the listener hostname')
})

t.test('attachedRoutes counts routes on listeners that are not programmed (Gateway API ListenerStatus.attachedRoutes)', async t => {
  // "Successful attachment ... is based solely on the combination of the
  // AllowedRoutes field on the corresponding Listener and the Route's
  // ParentRefs field ... the AttachedRoutes field count MUST be set for
  // Listeners with condition Accepted: false".
  const listeners: Listener[] = [
    b.listener('ok', 8080),
    b.listener('badcert', 8443, 'HTTPS', { tls: { mode: 'Terminate', certificateRefs: [{ group: '', kind: 'Secret', namespace: 'default', name: 'missing' }], options: {} } }),
  ]
  const { table, status } = run([b.gateway('gw', listeners), route('r')])
  t.equal(listenerStatus(status, 'badcert').conditions.Programmed, 'False/Invalid')
  t.equal(listenerStatus(status, 'badcert').attached, 1, 'counted although the listener is not programmed')
  t.equal(listenerStatus(status, 'ok').attached, 1)
  t.equal(table.ports.has(8443), false, 'an unprogrammed listener serves nothing')
  t.equal(accepted(status, 'HTTPRoute/default/r'), 'True/Accepted')
})

t.test('attachedRoutes counts a route once per listener, however many of its parentRefs reach that listener', async t => {
  // Gateway API ListenerStatus.attachedRoutes is "the total number of Routes
  // that have been successfully attached to this Listener": a count of routes,
  // not of parentRefs. The CRD's CEL lets a route name one Gateway twice when
  // only one ref spells out the namespace, and the files are not held to it.
  const gw = b.gateway('gw', [b.listener('a', 8081), b.listener('b', 8082)])
  const { status } = run([gw,
    route('twice', { parentRefs: [parent(), parent('a')] }),
    route('spelled', { parentRefs: [{ ...parent(), namespace: 'default' }, parent(null, 8082)] }),
    route('once', { parentRefs: [parent('b')] }),
  ])
  t.equal(listenerStatus(status, 'a').attached, 2, 'twice and spelled, each once')
  t.equal(listenerStatus(status, 'b').attached, 3, 'twice, spelled and once, each once')
  t.equal(status.get('HTTPRoute/default/twice')?.parents.length, 2, 'each parentRef still has its own RouteParentStatus')
})

t.test('an HTTPRoute and a GRPCRoute sharing a listener hostname: the older is accepted, the other is turned away there', async t => {
  // GRPCRouteSpec.hostnames: with intersecting hostnames on one listener the
  // implementation "MUST accept exactly one of these two routes" (oldest, then
  // namespace/name); "Merging MUST not be done between GRPCRoutes and HTTPRoutes."
  const grpc = (name: string, hostnames: string[], m: Partial<import('../../lib/resources/meta.ts').ObjectMeta>, parentRefs = [parent('a')]): GRPCRoute => ({
    kind: 'GRPCRoute', apiVersion: `${b.G}/v1`, meta: b.meta(name, 'default', m), source: { file: 'test.yaml', doc: 0 }, parentRefs, hostnames,
    rules: [{ name: null, matches: [], filters: [], backendRefs: [b.backendRef('svc', 80, { namespace: 'default' })], sessionPersistence: null }], droppedRules: [],
  }) as unknown as GRPCRoute
  const T1 = { creationTimestamp: '2024-01-01T00:00:00Z' }
  const T2 = { creationTimestamp: '2024-02-01T00:00:00Z' }
  const T3 = { creationTimestamp: '2024-03-01T00:00:00Z' }
  const gw = b.gateway('gw', [b.listener('a', 8081), b.listener('b', 8082)])
  const { table, status } = run([gw,
    b.httpRoute('web', [b.rule([b.match('/')], [b.backendRef('svc', 80, { namespace: 'default' })])], { parentRefs: [parent('a')], hostnames: ['api.example.com'] }, T1),
    // Younger, its *.example.com covers api.example.com: turned away on listener a only.
    grpc('rpc', ['*.example.com'], T2, [parent('a'), parent('b')]),
    // Younger than rpc, which is still attached to b: turned away there; rpc was turned away on a, so it takes nothing from it.
    b.httpRoute('late', [b.rule([b.match('/')], [b.backendRef('svc', 80, { namespace: 'default' })])], { parentRefs: [parent('a'), parent('b')], hostnames: ['x.example.com'] }, T3),
    // No overlap with anything on a: both kinds coexist.
    grpc('other', ['rpc.other.org'], T3),
  ])
  t.equal(accepted(status, 'HTTPRoute/default/web'), 'True/Accepted')
  t.equal(accepted(status, 'GRPCRoute/default/rpc', 0), 'False/HostnameConflict', 'turned away on listener a')
  t.match(status.get('GRPCRoute/default/rpc')?.parents[0]?.conditions.find(c => c.type === 'Accepted')?.message, /HTTPRoute default\/web \(older\) serves hostname api\.example\.com on listener default\/gw\/a/)
  t.equal(accepted(status, 'GRPCRoute/default/rpc', 1), 'True/Accepted', 'nothing of the other kind on listener b')
  t.equal(accepted(status, 'HTTPRoute/default/late', 0), 'True/Accepted', 'rpc was turned away on a, so late is not')
  t.equal(accepted(status, 'HTTPRoute/default/late', 1), 'False/HostnameConflict', 'rpc serves *.example.com on b')
  t.equal(accepted(status, 'GRPCRoute/default/other'), 'True/Accepted')
  t.same(servedHosts(table, 8081).sort(), ['api.example.com', 'rpc.other.org', 'x.example.com'], 'no *.example.com from the GRPCRoute on a')
  t.same(servedHosts(table, 8082), ['*.example.com'], 'only the GRPCRoute on b')
  t.equal(listenerStatus(status, 'a').attached, 4, 'attachedRoutes still counts the turned-away routes (allowedRoutes and parentRefs alone)')
})
