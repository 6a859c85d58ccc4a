// Unit tests of the per-request helpers: path rewrites, redirect Locations,
// weighted picks, header edits, hop-by-hop removal, loop marks, host parsing.
import t from 'tap'
import type { PathMatcher, Redirect, RouteRule, WeightedCluster } from '../../lib/compile/table.ts'
import { pickBackend, redirectLocation, rewritePath } from '../../lib/router/filters.ts'
import { addForwarded, applyHeaderEdits, forwardableHeaders, hostOf, markHop, stripResponseHopByHop } from '../../lib/router/headers.ts'

const prefix = (value: string): PathMatcher => ({ type: 'PathPrefix', value, regex: null })

t.test('ReplacePrefixMatch is element-wise and slash-safe', async (t) => {
  const cases: Array<[string, string, string, string]> = [
    // [match prefix, replacement, request path, expected]
    ['/foo', '/xyz', '/foo/bar', '/xyz/bar'],
    ['/foo', '/xyz', '/foo', '/xyz'],
    ['/foo/', '/xyz', '/foo/bar', '/xyz/bar'],
    ['/foo', '/xyz/', '/foo/bar', '/xyz/bar'],
    ['/foo', '/', '/foo/bar', '/bar'],
    ['/foo', '/', '/foo', '/'],
    ['/foo/', '/', '/foo/', '/'],
    ['/', '/api', '/x/y', '/api/x/y'],
    ['/', '/api', '/', '/api/'], // like '/foo/' on '/foo' → '/xyz/' in the spec's table
    ['/foo', '/xyz', '/foo/', '/xyz/'],
    ['/foo', '', '/foo/bar', '/bar'],
    ['/foo', '', '/foo', '/'],
    ['/foo', 'xyz', '/foo/bar', '/xyz/bar'],
  ]
  for (const [p, value, path, want] of cases) {
    t.equal(rewritePath(path, { type: 'ReplacePrefixMatch', value }, prefix(p)), want, `${p} → ${value} on ${path}`)
  }
  t.equal(rewritePath('/a/b', { type: 'ReplaceFullPath', value: '/z' }, prefix('/a')), '/z')
})

t.test('redirect Location per Gateway API port rules', async (t) => {
  const r = (over: Partial<Redirect>): Redirect => ({ scheme: null, hostname: null, port: null, path: null, statusCode: 302, ...over })
  t.equal(redirectLocation(r({}), 'http', 'a.com', 8080, '/p', null, prefix('/')), 'http://a.com:8080/p')
  t.equal(redirectLocation(r({}), 'http', 'a.com', 80, '/p', 'q=1', prefix('/')), 'http://a.com/p?q=1')
  t.equal(redirectLocation(r({ scheme: 'https' }), 'http', 'a.com', 8080, '/p', null, prefix('/')), 'https://a.com/p')
  t.equal(redirectLocation(r({ scheme: 'https', port: 443 }), 'http', 'a.com', 80, '/p', null, prefix('/')), 'https://a.com/p')
  t.equal(redirectLocation(r({ port: 9000 }), 'https', 'a.com', 443, '/p', null, prefix('/')), 'https://a.com:9000/p')
  t.equal(redirectLocation(r({ hostname: 'b.org' }), 'https', 'a.com', 443, '/', null, prefix('/')), 'https://b.org/')
  t.equal(redirectLocation(r({ hostname: '::1' }), 'http', 'a.com', 80, '/', null, prefix('/')), 'http://[::1]/')
})

t.test('pickBackend: weights, zero weights, priorities, none left', async (t) => {
  const wc = (cluster: string, weight: number, priority = 0): WeightedCluster => ({ cluster, weight, priority, requestHeaders: null, responseHeaders: null })
  const rule = (backends: WeightedCluster[] | null): RouteRule => ({ backends, totalWeight: backends === null ? 0 : backends.reduce((s, b) => s + b.weight, 0) }) as unknown as RouteRule
  const r = rule([wc('a', 1), wc('z', 0), wc('b', 3), wc('p', 5, 1)])
  t.equal(pickBackend(r, 0)?.cluster, 'a')
  t.equal(pickBackend(r, 0.24)?.cluster, 'a')
  t.equal(pickBackend(r, 0.26)?.cluster, 'b')
  t.equal(pickBackend(r, 0.9999999)?.cluster, 'b')
  t.equal(pickBackend(rule([wc('a', 0)]), 0.5), null)
  t.equal(pickBackend(rule(null), 0.5), null)
  t.equal(pickBackend(rule([wc('only', 2)]), 0.7)?.cluster, 'only')
})

t.test('header edits: set, add (comma join; set-cookie stays a list), remove', async (t) => {
  const h: Record<string, string | string[]> = { a: '1', b: '2', 'set-cookie': 'x=1' }
  applyHeaderEdits(h, { set: [['a', 'one'], ['new', 'n']], add: [['b', '3'], ['c', '4'], ['set-cookie', 'y=2']], remove: ['gone', 'new'] })
  t.same(h, { a: 'one', b: '2,3', c: '4', 'set-cookie': ['x=1', 'y=2'] })
})

t.test('hop-by-hop both ways; te: trailers; tunnels keep upgrade; Connection-named headers', async (t) => {
  const out = forwardableHeaders({
    host: 'h', ':path': '/', connection: 'keep-alive, X-Secret', 'x-secret': 's', 'keep-alive': '1', te: 'trailers', upgrade: 'websocket',
    'transfer-encoding': 'chunked', 'proxy-connection': 'x', trailer: 'x', 'x-keep': 'k',
  }, false)
  t.same(out, { te: 'trailers', 'x-keep': 'k' })
  t.same(forwardableHeaders({ upgrade: 'websocket', connection: 'Upgrade', te: 'gzip' }, true), { upgrade: 'websocket' })
  const res: Record<string, string | string[]> = { connection: 'close, x-a', 'x-a': '1', 'keep-alive': 't', 'transfer-encoding': 'chunked', 'x-b': '2' }
  stripResponseHopByHop(res)
  t.same(res, { 'x-b': '2' })
})

t.test('X-Forwarded-For appends; loop marks; host parsing', async (t) => {
  const h: Record<string, string | string[]> = { 'x-forwarded-for': '1.1.1.1' }
  addForwarded(h, '10.0.0.1', 'https')
  t.same(h, { 'x-forwarded-for': '1.1.1.1, 10.0.0.1', 'x-forwarded-proto': 'https' })
  const hops: Record<string, string | string[]> = {}
  t.equal(markHop(hops, 'g1'), false)
  t.equal(markHop(hops, 'g2'), false)
  t.equal(hops['x-sallyport-hops'], 'g1, g2')
  t.equal(markHop(hops, 'g1'), true)
  t.equal(markHop({ 'x-sallyport-hops': 'g10' }, 'g1'), false, 'ids compare whole, not by substring')
  t.equal(hostOf('Example.COM:8080'), 'example.com')
  t.equal(hostOf('[::1]:443'), '::1')
  t.equal(hostOf('[FE80::1]'), 'fe80::1')
  t.equal(hostOf('host'), 'host')
  t.equal(hostOf(''), '')
})
