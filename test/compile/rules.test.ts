// HTTPRoute and GRPCRoute rules through the real pipeline (parseManifests →
// buildSnapshot → compile) and the matcher: what validate lets through must
// compile and serve as the README says.
import t from 'tap'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { compile } from '../../lib/compile/compile.ts'
import type { ObjectStatus } from '../../lib/compile/status.ts'
import type { RouteTable } from '../../lib/compile/table.ts'
import { ensureLookupIndexes } from '../../lib/compile/lookup-index.ts'
import { matchOnPort } from '../../lib/router/match.ts'
import * as b from './builders.ts'

const BASE = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: sallyport}
spec: {controllerName: sallyport.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: sallyport
  listeners: [{name: http, protocol: HTTP, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec: {ports: [{name: http, port: 80}]}
`

function run(yaml: string): { table: RouteTable; status: ReadonlyMap<string, ObjectStatus>; problems: readonly string[] } {
  const parsed = parseManifests('rules.yaml', `${BASE}---\n${yaml}`)
  const snapshot = buildSnapshot(parsed.docs, parsed.problems)
  const { table, status } = compile(snapshot, b.opts)
  ensureLookupIndexes(table)
  return { table, status: status.objects, problems: snapshot.problems.filter(p => p.severity === 'error').map(p => `${p.field}: ${p.message}`) }
}

function hit(table: RouteTable, path: string, headers: Record<string, string> = {}, method = 'GET'): string | null {
  const hosts = table.ports.get(8080)?.http
  if (hosts == null) return null
  const m = matchOnPort(hosts, 'example.org', { method, path, query: null, header: n => headers[n] })
  return m === null ? null : `${m.rule.route.name}/${m.rule.ruleIndex}`
}

function conditions(status: ReadonlyMap<string, ObjectStatus>, key: string): Record<string, string> {
  return Object.fromEntries((status.get(key)?.parents[0]?.conditions ?? []).map(c => [c.type, `${c.status}/${c.reason}`]))
}

t.test('a leading (?i) makes a RegularExpression match case-insensitive (path, header), as validate reads it', async t => {
  const { table, status, problems } = run(`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: RegularExpression, value: "(?i)/v[0-9]+/models"}}]
    backendRefs: [{name: echo, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /h}, headers: [{type: RegularExpression, name: x-model, value: "(?i)gpt-.*"}]}]
    backendRefs: [{name: echo, port: 80}]
`)
  t.same(problems, [], 'validate takes both')
  t.same(conditions(status, 'HTTPRoute/default/r'), { Accepted: 'True/Accepted', ResolvedRefs: 'True/ResolvedRefs' }, 'nothing dropped')
  t.equal(hit(table, '/V1/Models'), 'r/0')
  t.equal(hit(table, '/v2/models'), 'r/0')
  t.equal(hit(table, '/v2/other'), null)
  t.equal(hit(table, '/h', { 'x-model': 'GPT-4o' }), 'r/1')
  t.equal(hit(table, '/h', { 'x-model': 'claude' }), null)
})

t.test('a GRPCRoute RegularExpression service or method with a leading (?i) matches case-insensitively', async t => {
  const { table, status, problems } = run(`apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{method: {type: RegularExpression, service: "(?i)acme\\\\.v1\\\\.Store", method: "(?i)get.*"}}]
    backendRefs: [{name: echo, port: 80}]
`)
  t.same(problems, [])
  t.same(conditions(status, 'GRPCRoute/default/g'), { Accepted: 'True/Accepted', ResolvedRefs: 'True/ResolvedRefs' }, 'nothing dropped')
  t.equal(hit(table, '/ACME.v1.store/GetItem', {}, 'POST'), 'g/0')
  t.equal(hit(table, '/acme.v1.Store/getItem', {}, 'POST'), 'g/0')
  t.equal(hit(table, '/acme.v1.Store/ListItems', {}, 'POST'), null, 'the method pattern still applies')
})

t.test('header modifiers: of set or add entries with an equivalent (case-insensitive) name only the first counts', async t => {
  // Gateway API HTTPHeader.name: "If multiple entries specify equivalent header
  // names, the first entry with an equivalent name MUST be considered";
  // "foo" and "Foo" are equivalent.
  const { table, problems } = run(`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Team, value: first}, {name: x-team, value: second}]
        add: [{name: X-Tag, value: a}, {name: x-TAG, value: b}, {name: X-Other, value: c}]
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{name: Cache-Control, value: no-store}, {name: cache-control, value: max-age=60}]
    backendRefs: [{name: echo, port: 80}]
`)
  t.same(problems, [])
  const hosts = table.ports.get(8080)?.http
  const m = hosts == null ? null : matchOnPort(hosts, 'example.org', { method: 'GET', path: '/', query: null, header: () => undefined })
  t.same(m?.rule.requestHeaders?.set, [['x-team', 'first']])
  t.same(m?.rule.requestHeaders?.add, [['x-tag', 'a'], ['x-other', 'c']])
  t.same(m?.rule.responseHeaders?.set, [['cache-control', 'no-store']])
})
