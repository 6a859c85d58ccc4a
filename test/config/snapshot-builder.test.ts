import t from 'tap'
import { DocumentCache, buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { parseManifests } from '../../lib/config/parse.ts'
import { formatProblem } from '../../lib/resources/problem.ts'

const cm = (name: string, ns?: string): string => `apiVersion: v1
kind: ConfigMap
metadata:
  name: ${name}
${ns === undefined ? '' : `  namespace: ${ns}\n`}data:
  k: v
`

const route = (name: string, pathType: string): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: apps
spec:
  parentRefs:
    - name: egress
  rules:
    - matches:
        - path:
            type: ${pathType}
            value: /x
`

t.test('an invalid object is dropped with a problem naming it; the rest is kept', async (t) => {
  const { docs } = parseManifests('all.yaml', [route('good', 'PathPrefix'), route('bad', 'Bogus'), cm('settings', 'apps')].join('---\n'))
  const snapshot = buildSnapshot(docs)
  t.same([...snapshot.httpRoutes.keys()], ['apps/good'])
  t.same([...snapshot.configMaps.keys()], ['apps/settings'])
  const errors = snapshot.problems.filter((p) => p.severity === 'error')
  t.ok(errors.length >= 1)
  for (const p of errors) {
    t.equal(p.source.file, 'all.yaml')
    t.equal(p.source.doc, 1)
    t.equal(p.kind, 'HTTPRoute')
    t.equal(p.name, 'bad')
  }
  t.match(errors.map(formatProblem).join('\n'), /^all\.yaml:1: HTTPRoute apps\/bad: spec\.rules\[0\]\.matches\[0\]\.path\.type/m)
})

t.test('unknown kinds are skipped silently; non-objects are problems', async (t) => {
  const docs = [
    { source: { file: 'a.yaml', doc: 0 }, doc: { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'x' } } },
    { source: { file: 'a.yaml', doc: 1 }, doc: 'just a string' },
    { source: { file: 'a.yaml', doc: 2 }, doc: { metadata: { name: 'no-kind' } } },
  ]
  const snapshot = buildSnapshot(docs)
  t.same(snapshot.problems.map((p) => p.source.doc), [1, 2])
  t.ok(snapshot.problems.every((p) => p.severity === 'error'))
})

t.test('a document without its header says what it is, or which field is missing, and names what it can', async (t) => {
  const lines = (doc: unknown): string[] => buildSnapshot([{ source: { file: 'a.yaml', doc: 0 }, doc }]).problems.map(formatProblem)
  t.same(lines('just a string'), ['a.yaml:0: document is a string, not an object with apiVersion and kind'])
  t.same(lines([{ kind: 'A' }]), ['a.yaml:0: document is a list, not an object with apiVersion and kind'])
  t.same(lines({ kind: 'HTTPRoute', metadata: { name: 'r', namespace: 'apps' } }), ['a.yaml:0: HTTPRoute apps/r: apiVersion: required'])
  t.same(lines({ apiVersion: 'gateway.networking.k8s.io/v1', kind: ['Gateway'], metadata: { name: 'g' } }), ['a.yaml:0: <no kind> g: kind: must be a string, not a list'])
})

t.test('a typo in the apiVersion or kind of a group sallyport reads is a warning; the object is skipped', async (t) => {
  const { docs } = parseManifests('typo.yaml', [
    'apiVersion: gateway.envoyproxy.io/v1\nkind: Backend\nmetadata: {name: up, namespace: apps}\n',
    'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoutee\nmetadata: {name: r, namespace: apps}\n',
    cm('fine', 'apps'),
  ].join('---\n'))
  const snapshot = buildSnapshot(docs)
  t.equal(snapshot.backends.size, 0)
  t.same([...snapshot.configMaps.keys()], ['apps/fine'])
  t.same(snapshot.problems.map(formatProblem), [
    'typo.yaml:0: Backend apps/up: apiVersion: gateway.envoyproxy.io/v1 is not an apiVersion sallyport reads Backend in (it reads gateway.networking.k8s.io/v1alpha1, gateway.envoyproxy.io/v1alpha1): the object is ignored',
    'typo.yaml:1: HTTPRoutee apps/r: kind: HTTPRoutee is not a kind sallyport reads in gateway.networking.k8s.io (it reads GatewayClass, Gateway, HTTPRoute, GRPCRoute, TCPRoute, TLSRoute, ReferenceGrant, BackendTLSPolicy, Backend): the object is ignored',
  ])
  t.ok(snapshot.problems.every((p) => p.severity === 'warning'))
})

t.test('namespaced objects without a namespace land in default', async (t) => {
  const snapshot = buildSnapshot(parseManifests('cm.yaml', cm('plain')).docs)
  t.same([...snapshot.configMaps.keys()], ['default/plain'])
})

t.test('a duplicate keeps the first and names both places', async (t) => {
  const first = parseManifests('one.yaml', cm('dup', 'ns1')).docs
  const second = parseManifests('two.yaml', `${cm('other', 'ns1')}---\n${cm('dup', 'ns1')}`).docs
  const snapshot = buildSnapshot([...first, ...second])
  t.equal(snapshot.configMaps.get('ns1/dup')?.source.file, 'one.yaml')
  t.ok(snapshot.configMaps.has('ns1/other'))
  t.equal(snapshot.problems.length, 1)
  const p = snapshot.problems[0]
  t.equal(p?.source.file, 'two.yaml')
  t.equal(p?.source.doc, 1)
  t.match(p?.message, /one\.yaml:0/)
  // Same name, different namespace or kind: no conflict.
  const other = buildSnapshot([...parseManifests('x.yaml', `${cm('dup', 'ns1')}---\n${cm('dup', 'ns2')}`).docs])
  t.equal(other.problems.length, 0)
  t.equal(other.configMaps.size, 2)
})

t.test('extra problems (unreadable files) come first in snapshot.problems', async (t) => {
  const extra = parseManifests('broken.yaml', 'a: [\n').problems
  const snapshot = buildSnapshot(parseManifests('cm.yaml', cm('x')).docs, extra)
  t.equal(snapshot.problems[0]?.source.file, 'broken.yaml')
  t.equal(snapshot.configMaps.size, 1)
})

t.test('with a DocumentCache an unchanged document keeps its object; a changed or moved one is read again', async (t) => {
  const cache = new DocumentCache()
  const first = parseManifests('all.yaml', [route('a', 'PathPrefix'), route('b', 'Exact'), route('bad', 'Bogus')].join('---\n'))
  const s1 = buildSnapshot(first.docs, first.problems, cache)
  const again = parseManifests('all.yaml', [route('a', 'PathPrefix'), route('b', 'PathPrefix'), route('bad', 'Bogus')].join('---\n'))
  const s2 = buildSnapshot(again.docs, again.problems, cache)
  t.equal(s2.httpRoutes.get('apps/a'), s1.httpRoutes.get('apps/a'), 'unchanged: the same instance')
  t.not(s2.httpRoutes.get('apps/b'), s1.httpRoutes.get('apps/b'), 'changed: read again')
  t.equal(s2.httpRoutes.get('apps/b')?.rules[0]?.matches[0]?.path.type, 'PathPrefix')
  t.same(s2.problems.map(formatProblem), s1.problems.map(formatProblem), 'an invalid document keeps reporting its problems')
  t.ok(s2.problems.length > 0)
  const moved = parseManifests('all.yaml', [route('b', 'PathPrefix'), route('a', 'PathPrefix')].join('---\n'))
  const s3 = buildSnapshot(moved.docs, moved.problems, cache)
  t.not(s3.httpRoutes.get('apps/a'), s2.httpRoutes.get('apps/a'), 'moved: its source changed, so it is read again')
  t.equal(s3.httpRoutes.get('apps/a')?.source.doc, 1)
  t.equal(s3.httpRoutes.get('apps/b')?.source.doc, 0)
  t.equal(s3.problems.length, 0, 'the dropped document is gone from the cache and from the problems')
})

t.test('Backends of different groups or kinds with one namespace/name are different objects, all kept', async (t) => {
  const yaml = `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: api, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: 41001 } }]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: { name: api, namespace: default }
spec:
  type: ExternalHostname
  externalHostname: { hostname: partner.example.com }
  port: { port: 443 }
---
apiVersion: gateway.networking.k8s.io/v1alpha1
kind: Backend
metadata: { name: api, namespace: default }
spec:
  type: ExternalHostname
  externalHostname: { hostname: gep.example.com }
  port: { port: 443 }
`
  const snapshot = buildSnapshot(parseManifests('backends.yaml', yaml).docs)
  t.same(snapshot.problems, [], 'no duplicate: the group and kind are part of the identity')
  t.equal(snapshot.backends.size, 3)
  t.same([...snapshot.backends.values()].map((b) => b.apiVersion).sort(),
    ['gateway.envoyproxy.io/v1alpha1', 'gateway.networking.k8s.io/v1alpha1', 'gateway.networking.x-k8s.io/v1alpha1'])
})

const twoRules = (name: string, first: string, second: string): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: apps
spec:
  parentRefs:
    - name: egress
  rules:
    - name: first
      matches:
        - path: { type: RegularExpression, value: '${first}' }
    - matches:
        - path: { type: RegularExpression, value: '${second}' }
`

t.test('a rule whose regular expression does not compile is dropped; the route and its other rules are kept (Gateway API PartiallyInvalid)', async (t) => {
  const { docs } = parseManifests('r.yaml', twoRules('partial', '/(?P<x>y)', '/ok/.*'))
  const snapshot = buildSnapshot(docs)
  const route = snapshot.httpRoutes.get('apps/partial')
  t.ok(route, 'the route is kept')
  t.equal(route?.rules.length, 2, 'rule indexes are kept')
  t.same(route?.droppedRules.map((d) => [d.index, d.name]), [[0, 'first']])
  t.match(route?.droppedRules[0]?.reasons, [/^spec\.rules\[0\]\.matches\[0\]\.path\.value: regular expression "\/\(\?P<x>y\)" does not compile/])
  const errors = snapshot.problems.filter((p) => p.severity === 'error')
  t.equal(errors.length, 1, 'still an error (the rule does not serve)')
  t.equal(errors[0]?.rule, 0)
  t.match(formatProblem(errors[0]!), /^r\.yaml:0: HTTPRoute apps\/partial: spec\.rules\[0\]\.matches\[0\]\.path\.value: regular expression .* does not compile: .*; rule 0 is dropped, the route's other rules are served$/)
})

t.test('a route whose every rule is invalid is dropped, as before', async (t) => {
  const { docs } = parseManifests('r.yaml', twoRules('bad', '/(?P<x>y)', '/(z'))
  const snapshot = buildSnapshot(docs)
  t.notOk(snapshot.httpRoutes.has('apps/bad'))
  const errors = snapshot.problems.filter((p) => p.severity === 'error')
  t.equal(errors.length, 2)
  t.ok(errors.every((p) => p.rule === undefined), 'errors of the object, not of one rule')
  t.ok(errors.every((p) => !p.message.includes('dropped')))
})

t.test('an error the CRD itself refuses (an Exact path without "/") still drops the whole route', async (t) => {
  const doc = twoRules('crd', '/ok', '/ok').replace("{ type: RegularExpression, value: '/ok' }", '{ type: Exact, value: nope }')
  const snapshot = buildSnapshot(parseManifests('r.yaml', doc).docs)
  t.notOk(snapshot.httpRoutes.has('apps/crd'))
})

const filtered = (name: string, filters: string, matches = ''): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: apps
spec:
  parentRefs:
    - name: egress
  rules:
    - matches:
        - path: { type: PathPrefix, value: /bad }
${matches}      backendRefs: [{ name: svc, port: 80 }]
      filters:
${filters}
    - matches:
        - path: { type: PathPrefix, value: /good }
      backendRefs: [{ name: svc, port: 80 }]
`

t.test('what only sallyport refuses in a filter (a CR/LF header value, a redirect path with a space) drops that rule alone: the Gateway API CRD admits it', async (t) => {
  const cases: Array<[string, string, RegExp]> = [
    ['hdr', `        - type: RequestHeaderModifier
          requestHeaderModifier: { set: [{ name: x-a, value: "a\\r\\nX-Injected: 1" }] }`, /^spec\.rules\[0\]\.filters\[0\]\.requestHeaderModifier\.set\[0\]\.value: "a\\r\\nX-Injected: 1" is not a valid header value/],
    ['resp', `        - type: ResponseHeaderModifier
          responseHeaderModifier: { add: [{ name: x-c, value: "c\\nd" }] }`, /^spec\.rules\[0\]\.filters\[0\]\.responseHeaderModifier\.add\[0\]\.value: .* is not a valid header value/],
    ['rewrite', `        - type: URLRewrite
          urlRewrite: { path: { type: ReplaceFullPath, replaceFullPath: "/a b" } }`, /^spec\.rules\[0\]\.filters\[0\]\.urlRewrite\.path\.replaceFullPath: "\/a b" is not a valid path/],
    ['noslash', `        - type: URLRewrite
          urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: "v2" } }`, /^spec\.rules\[0\]\.filters\[0\]\.urlRewrite\.path\.replacePrefixMatch: "v2" is not a valid path/],
  ]
  for (const [name, filters, reason] of cases) {
    const snapshot = buildSnapshot(parseManifests('r.yaml', filtered(name, filters)).docs)
    const route = snapshot.httpRoutes.get(`apps/${name}`)
    t.ok(route, `${name}: the route is kept`)
    t.same(route?.droppedRules.map((d) => d.index), [0], `${name}: rule 0 is dropped`)
    t.match(route?.droppedRules[0]?.reasons, [reason], name)
    const errors = snapshot.problems.filter((p) => p.severity === 'error')
    t.same(errors.map((p) => p.rule), [0], `${name}: one error, of rule 0`)
  }
  // On a backendRef's filter too: the backendRef belongs to the rule.
  const onRef = filtered('ref', '        - type: RequestHeaderModifier\n          requestHeaderModifier: { set: [{ name: x-a, value: ok }] }')
    .replace('backendRefs: [{ name: svc, port: 80 }]\n      filters:', 'backendRefs: [{ name: svc, port: 80, filters: [{ type: RequestHeaderModifier, requestHeaderModifier: { add: [{ name: x-d, value: " padded" }] } }] }]\n      filters:')
  const s2 = buildSnapshot(parseManifests('r.yaml', onRef).docs)
  t.same(s2.httpRoutes.get('apps/ref')?.droppedRules.map((d) => d.index), [0])
})

t.test('what the CRD refuses in a filter (a header name that is no token, a value past 4096 characters) still drops the whole route', async (t) => {
  const badName = filtered('name', '        - type: RequestHeaderModifier\n          requestHeaderModifier: { set: [{ name: "x a", value: ok }] }')
  t.notOk(buildSnapshot(parseManifests('r.yaml', badName).docs).httpRoutes.has('apps/name'))
  const long = filtered('long', `        - type: RequestHeaderModifier\n          requestHeaderModifier: { set: [{ name: x-a, value: "${'v'.repeat(4097)}" }] }`)
  t.notOk(buildSnapshot(parseManifests('r.yaml', long).docs).httpRoutes.has('apps/long'))
})

t.test('header names of one match that differ only in case: the first is used, the later one is a warning naming it (Gateway API HTTPHeaderMatch)', async (t) => {
  const matches = '          headers: [{ name: X-Tenant, value: a }, { name: x-tenant, value: b }]\n'
  const doc = filtered('case', '        - type: RequestHeaderModifier\n          requestHeaderModifier: { set: [{ name: x-a, value: ok }] }', matches)
  const snapshot = buildSnapshot(parseManifests('r.yaml', doc).docs)
  const route = snapshot.httpRoutes.get('apps/case')
  t.ok(route, 'the route is kept')
  t.same(route?.droppedRules, [], 'no rule is dropped')
  t.same(snapshot.problems.filter((p) => p.severity === 'error'), [])
  const warnings = snapshot.problems.filter((p) => p.severity === 'warning')
  t.equal(warnings.length, 1)
  t.equal(warnings[0]?.field, 'spec.rules[0].matches[0].headers[1].name')
  t.match(warnings[0]?.message, /"x-tenant" repeats "X-Tenant".*this entry is ignored/)
  // The same name twice is what the CRD's list map refuses: the whole route.
  const same = filtered('same', '        - type: RequestHeaderModifier\n          requestHeaderModifier: { set: [{ name: x-a, value: ok }] }', '          headers: [{ name: x-tenant, value: a }, { name: x-tenant, value: b }]\n')
  t.notOk(buildSnapshot(parseManifests('r.yaml', same).docs).httpRoutes.has('apps/same'))
})
