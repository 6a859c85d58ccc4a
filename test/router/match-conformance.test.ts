// Shared conformance cases (Hono common.case.test style): each case is a set of
// HTTPRoutes and requests with the expected winning rule; every case runs
// through compile + the fast matcher (tree walk and lookup index) AND through
// the slow reference matcher.
// Each precedence case would fail if its tie-break rule were dropped.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import { findVirtualHost, matchOnPort, matchRequest } from '../../lib/router/match.ts'
import type { MatchInput } from '../../lib/router/match.ts'
import type { RouteMatch } from '../../lib/compile/table.ts'
import type { HTTPRoute } from '../../lib/resources/model.ts'
import * as b from '../compile/builders.ts'
import { referenceMatch } from './match-reference.ts'
import { ensureLookupIndexes } from '../../lib/compile/lookup-index.ts'

interface Req { host?: string; method?: string; path: string; query?: Record<string, string>; headers?: Record<string, string>; want: string | null }
interface Case { name: string; routes: HTTPRoute[]; requests: Req[] }

const T1 = { creationTimestamp: '2024-01-01T00:00:00Z' }
const T2 = { creationTimestamp: '2024-02-01T00:00:00Z' }
const r = b.httpRoute, rule = b.rule, m = b.match

const cases: Case[] = [
  { name: 'exact path beats prefix', routes: [r('p', [rule([m('/a/b')])], {}, T1), r('e', [rule([m('/a/b', 'Exact')])], {}, T2)],
    requests: [{ path: '/a/b', want: 'default/e/0' }, { path: '/a/b/c', want: 'default/p/0' }] },
  { name: 'longest prefix (characters) wins', routes: [r('short', [rule([m('/a')])], {}, T1), r('long', [rule([m('/a/bc')])], {}, T2)],
    requests: [{ path: '/a/bc/d', want: 'default/long/0' }, { path: '/a/bcd', want: 'default/short/0' }, { path: '/ab', want: null }] },
  { name: 'trailing slash prefix counts one more character', routes: [r('noslash', [rule([m('/a')])], {}, T1), r('slash', [rule([m('/a/')])], {}, T2)],
    requests: [{ path: '/a/x', want: 'default/slash/0' }, { path: '/a', want: 'default/slash/0' }] },
  { name: 'method match beats no method', routes: [r('any', [rule([m('/')])], {}, T1), r('get', [rule([m('/', 'PathPrefix', { method: 'GET' })])], {}, T2)],
    requests: [{ path: '/x', want: 'default/get/0' }, { path: '/x', method: 'POST', want: 'default/any/0' }] },
  { name: 'more header matches win', routes: [
    r('one', [rule([m('/', 'PathPrefix', { headers: [{ type: 'Exact', name: 'A', value: '1' }] })])], {}, T1),
    r('two', [rule([m('/', 'PathPrefix', { headers: [{ type: 'Exact', name: 'a', value: '1' }, { type: 'RegularExpression', name: 'b', value: '[0-9]+' }] })])], {}, T2)],
  requests: [{ path: '/', headers: { a: '1', b: '22' }, want: 'default/two/0' }, { path: '/', headers: { a: '1', b: 'x' }, want: 'default/one/0' }] },
  { name: 'more query matches win', routes: [
    r('q1', [rule([m('/', 'PathPrefix', { queryParams: [{ type: 'Exact', name: 'a', value: '1' }] })])], {}, T1),
    r('q2', [rule([m('/', 'PathPrefix', { queryParams: [{ type: 'Exact', name: 'a', value: '1' }, { type: 'Exact', name: 'b', value: '2' }] })])], {}, T2)],
  requests: [{ path: '/', query: { a: '1', b: '2' }, want: 'default/q2/0' }, { path: '/', query: { a: '1' }, want: 'default/q1/0' }, { path: '/', want: null }] },
  { name: 'oldest route wins ties', routes: [r('zz-old', [rule([m('/')])], {}, T1), r('aa-new', [rule([m('/')])], {}, T2)],
    requests: [{ path: '/', want: 'default/zz-old/0' }] },
  { name: 'then namespace/name alphabetical', routes: [r('b', [rule([m('/')])], {}, T1), r('a', [rule([m('/')])], {}, { ...T1, namespace: 'default' })],
    requests: [{ path: '/', want: 'default/a/0' }] },
  { name: 'then rule order within the route', routes: [r('x', [rule([m('/')]), rule([m('/')])], {}, T1)],
    requests: [{ path: '/', want: 'default/x/0' }] },
  { name: 'header match beats query match is NOT a rule: headers count first', routes: [
    r('h', [rule([m('/', 'PathPrefix', { headers: [{ type: 'Exact', name: 'a', value: '1' }] })])], {}, T2),
    r('q', [rule([m('/', 'PathPrefix', { queryParams: [{ type: 'Exact', name: 'a', value: '1' }, { type: 'Exact', name: 'b', value: '1' }] })])], {}, T1)],
  requests: [{ path: '/', headers: { a: '1' }, query: { a: '1', b: '1' }, want: 'default/h/0' }] },
  { name: 'exact hostname beats wildcard beats any, regardless of path length', routes: [
    r('any', [rule([m('/a/b/c', 'Exact')])], {}, T1),
    r('wild', [rule([m('/a/b')])], { hostnames: ['*.example.com'] }, T1),
    r('exact', [rule([m('/')])], { hostnames: ['api.example.com'] }, T2)],
  requests: [
    { host: 'api.example.com', path: '/a/b/c', want: 'default/exact/0' },
    { host: 'x.example.com', path: '/a/b/c', want: 'default/wild/0' },
    { host: 'x.example.com', path: '/z', want: null },
    { host: 'other.org', path: '/a/b/c', want: 'default/any/0' }] },
  { name: 'longer wildcard beats shorter wildcard', routes: [
    r('short', [rule([m('/x')])], { hostnames: ['*.com'] }, T1), r('long', [rule([m('/')])], { hostnames: ['*.example.com'] }, T2)],
  requests: [{ host: 'a.example.com', path: '/x', want: 'default/long/0' }, { host: 'a.other.com', path: '/x', want: 'default/short/0' }] },
  { name: 'regex ranks after prefixes; longer pattern first', routes: [
    r('re-short', [rule([m('/v[0-9]/.*', 'RegularExpression')])], {}, T1),
    r('re-long', [rule([m('/v[0-9]/items/.*', 'RegularExpression')])], {}, T2),
    r('pre', [rule([m('/v1/items/special')])], {}, T2)],
  requests: [{ path: '/v1/items/9', want: 'default/re-long/0' }, { path: '/v2/x', want: 'default/re-short/0' }, { path: '/v1/items/special/1', want: 'default/pre/0' }] },
]

function run(routes: HTTPRoute[], req: Req, indexed = false): string | null {
  const snap = b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 80)]), b.service('svc'), ...routes])
  const { table } = compile(snap, b.opts)
  if (indexed) ensureLookupIndexes(table)
  const hosts = table.ports.get(80)?.http
  if (hosts == null) return null
  const query = req.query === undefined ? null : new URLSearchParams(req.query).toString()
  const headers = req.headers ?? {}
  const input: MatchInput = { method: req.method ?? 'GET', path: req.path, query, header: n => headers[n] }
  let hit: RouteMatch | null
  if (indexed) {
    hit = matchOnPort(hosts, req.host ?? 'example.org', input)
  } else {
    const vhost = findVirtualHost(hosts, req.host ?? 'example.org')
    if (vhost === null) return null
    hit = matchRequest(vhost, input)
  }
  return hit === null ? null : `${hit.rule.route.namespace}/${hit.rule.route.name}/${hit.rule.ruleIndex}`
}

for (const c of cases) {
  t.test(c.name, async t => {
    for (const req of c.requests) {
      const label = `${req.method ?? 'GET'} ${req.host ?? 'example.org'}${req.path}`
      t.equal(run(c.routes, req), req.want, `fast: ${label}`)
      t.equal(run(c.routes, req, true), req.want, `indexed: ${label}`)
      t.equal(referenceMatch(c.routes, { host: req.host ?? 'example.org', method: req.method ?? 'GET', path: req.path, query: req.query ?? {}, headers: req.headers ?? {} }), req.want, `reference: ${label}`)
    }
  })
}
