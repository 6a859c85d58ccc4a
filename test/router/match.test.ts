// Unit tests for the fast matcher on hand-built VirtualHosts (the shared
// conformance cases in match-conformance.test.ts go through compile too).
import t from 'tap'
import { findVirtualHost, matchRequest, parseQuery } from '../../lib/router/match.ts'
import type { MatchInput } from '../../lib/router/match.ts'
import type { HostIndex, PathMatcher, PrefixNode, RouteMatch, RouteRule, VirtualHost } from '../../lib/compile/table.ts'

function rule (id: string): RouteRule {
  return {
    id, route: { kind: 'HTTPRoute', namespace: 'ns', name: id }, ruleIndex: 0, ruleName: null, gateway: 'ns/gw',
    requestHeaders: null, responseHeaders: null, redirect: null, rewriteHost: null, rewritePath: null, mirrors: null,
    direct: null, backends: [], totalWeight: 0,
    timeouts: { requestMs: null, backendRequestMs: null, connectMs: null, idleMs: null },
    retry: null, extensions: null, meshed: false, grpc: false,
  }
}

let nextRank = 0
function m (id: string, path: PathMatcher, extra: Partial<Pick<RouteMatch, 'method' | 'headers' | 'query'>> = {}): RouteMatch {
  return { path, method: extra.method ?? null, headers: extra.headers ?? null, query: extra.query ?? null, rule: rule(id), rank: nextRank++ }
}
const exact = (value: string): PathMatcher => ({ type: 'Exact', value, regex: null })
const prefix = (value: string): PathMatcher => ({ type: 'PathPrefix', value, regex: null })
const regex = (value: string): PathMatcher => ({ type: 'RegularExpression', value, regex: new RegExp(`^(?:${value})$`) })

function node (matches: RouteMatch[], children: Record<string, PrefixNode> = {}): PrefixNode {
  return { matches, children: new Map(Object.entries(children)) }
}

function req (path: string, opts: { method?: string, query?: string, headers?: Record<string, string> } = {}): MatchInput {
  const headers = opts.headers ?? {}
  return { method: opts.method ?? 'GET', path, query: opts.query ?? null, header: (n: string) => headers[n] }
}

t.test('findVirtualHost: exact, longest wildcard, fallback', async t => {
  const v = (hostname: string): VirtualHost => ({ hostname, exactPaths: new Map(), prefixes: node([]), regexes: [], needsQuery: false })
  const index: HostIndex = {
    exact: new Map([['a.example.com', v('a.example.com')]]),
    wildcards: [{ suffix: '.b.example.com', value: v('*.b.example.com') }, { suffix: '.example.com', value: v('*.example.com') }],
    fallback: v('*'),
  }
  t.equal(findVirtualHost(index, 'a.example.com')?.hostname, 'a.example.com')
  t.equal(findVirtualHost(index, 'x.b.example.com')?.hostname, '*.b.example.com')
  t.equal(findVirtualHost(index, 'x.y.example.com')?.hostname, '*.example.com')
  t.equal(findVirtualHost(index, 'example.com')?.hostname, '*', 'wildcard needs at least one label')
  t.equal(findVirtualHost(index, 'b.example.com')?.hostname, '*.example.com')
  t.equal(findVirtualHost({ ...index, fallback: null }, 'other.org'), null)
})

t.test('matchRequest: exact > deepest prefix > shallower prefix > regex; element-wise prefixes', async t => {
  nextRank = 0
  const ex = m('exact', exact('/foo/bar'))
  const deep = m('deep', prefix('/foo/bar'))
  const mid = m('mid', prefix('/foo/'))
  const root = m('root', prefix('/'))
  const re = m('re', regex('/x[0-9]+'))
  const vhost: VirtualHost = {
    hostname: 'h', exactPaths: new Map([['/foo/bar', [ex]]]),
    prefixes: node([root], { foo: node([mid], { bar: node([deep]) }) }), regexes: [re], needsQuery: false,
  }
  const id = (p: string) => matchRequest(vhost, req(p))?.rule.id
  t.equal(id('/foo/bar'), 'exact')
  t.equal(id('/foo/bar/'), 'deep')
  t.equal(id('/foo/bar/baz'), 'deep')
  t.equal(id('/foo/barbaz'), 'mid')
  t.equal(id('/foo'), 'mid', 'trailing slash of the prefix is ignored')
  t.equal(id('/foo/'), 'mid')
  t.equal(id('/foobar'), 'root', 'not a segment prefix')
  t.equal(id('/x12'), 'root', 'prefix / ranks before the regex')
  const noRoot: VirtualHost = { ...vhost, prefixes: node([], { foo: node([mid]) }) }
  t.equal(matchRequest(noRoot, req('/x12'))?.rule.id, 're')
  t.equal(matchRequest(noRoot, req('/x12a')), null)
})

t.test('matchRequest: method, headers, query must all match; lowest rank wins across lists', async t => {
  nextRank = 0
  const get = m('get', prefix('/api'), { method: 'GET', headers: [{ name: 'x-env', exact: 'prod', regex: null }] })
  const q = m('q', prefix('/api'), { query: [{ name: 'v', exact: 'a b', regex: null }] })
  const re = m('re', prefix('/api'), { headers: [{ name: 'x-env', exact: null, regex: /^st.*$/ }] })
  // A merged wildcard-tier match that lives deeper in the tree but ranks after the vhost's own.
  const wild = m('wild', prefix('/api/v1'))
  const vhost: VirtualHost = {
    hostname: 'h', exactPaths: new Map(), regexes: [], needsQuery: true,
    prefixes: node([], { api: node([get, q, re], { v1: node([wild]) }) }),
  }
  t.equal(matchRequest(vhost, req('/api', { headers: { 'x-env': 'prod' } }))?.rule.id, 'get')
  t.equal(matchRequest(vhost, req('/api', { method: 'POST', headers: { 'x-env': 'prod' } })), null)
  t.equal(matchRequest(vhost, req('/api', { query: 'v=a%20b' }))?.rule.id, 'q')
  t.equal(matchRequest(vhost, req('/api', { query: 'v=a+b&v=c' }))?.rule.id, 'q')
  t.equal(matchRequest(vhost, req('/api', { query: 'v=c&v=a+b' })), null, 'first value of a repeated param')
  t.equal(matchRequest(vhost, req('/api', { headers: { 'x-env': 'staging' } }))?.rule.id, 're')
  t.equal(matchRequest(vhost, req('/api/v1', { headers: { 'x-env': 'prod' } }))?.rule.id, 'get', 'own host tier beats a deeper merged match')
  t.equal(matchRequest(vhost, req('/api/v1'))?.rule.id, 'wild')
})

t.test('parseQuery', async t => {
  t.same([...parseQuery('a=1&b&&c=%zz&a=2&d=x%3Dy')], [['a', '1'], ['b', ''], ['c', '%zz'], ['d', 'x=y']])
  t.same([...parseQuery('')], [])
  t.same([...parseQuery(null)], [])
})
