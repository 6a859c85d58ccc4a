// matchOnPort (the compact lookup index) against the tree walk
// (findVirtualHost + matchRequest) and the spec reference matcher, on random
// tables and requests built from a small vocabulary so that hosts, prefixes
// and precedence tiers collide often. Plus the cases a hash table can get
// wrong: a full 32-bit hash collision, probe chains, keys that only differ
// past a boundary.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import { ensureLookupIndexes } from '../../lib/compile/lookup-index.ts'
import { findVirtualHost, matchOnPort, matchRequest } from '../../lib/router/match.ts'
import type { MatchInput } from '../../lib/router/match.ts'
import type { HostIndex, RouteMatch } from '../../lib/compile/table.ts'
import type { HTTPRoute, HTTPRouteMatch } from '../../lib/resources/model.ts'
import { hostHash, pathHash, slotHash, KIND_PREFIX } from '../../lib/lookup-hash.ts'
import * as b from '../compile/builders.ts'
import { referenceMatch } from './match-reference.ts'
import { prng } from '../helpers/prng.ts'

const ROUTE_HOSTS = ['a.example.com', 'b.example.com', '*.example.com', '*.b.example.com', '*.com', 'x.b.example.com']
const REQUEST_HOSTS = ['a.example.com', 'b.example.com', 'x.b.example.com', 'y.b.example.com', 'z.example.com', 'x.com', 'example.com', 'other.org', '.example.com', 'a.b.c.example.com']
const SEGMENTS = ['a', 'b', 'ab', '', 'c']

function pickOf<T>(rand: () => number, xs: readonly T[]): T { return xs[Math.floor(rand() * xs.length)] }

function randomPath(rand: () => number, maxSegments: number): string {
  const n = Math.floor(rand() * (maxSegments + 1))
  let p = ''
  for (let i = 0; i < n; i++) p += `/${pickOf(rand, SEGMENTS)}`
  return p === '' ? '/' : (rand() < 0.2 ? `${p}/` : p)
}

function randomMatch(rand: () => number): HTTPRouteMatch {
  const r = rand()
  const type = r < 0.35 ? 'Exact' : r < 0.9 ? 'PathPrefix' : 'RegularExpression'
  const value = type === 'RegularExpression' ? pickOf(rand, ['/a/.*', '/(a|b)+', '/.*c']) : randomPath(rand, 3)
  return b.match(value, type, {
    method: rand() < 0.2 ? pickOf(rand, ['GET', 'POST']) : null,
    headers: rand() < 0.2 ? [{ type: 'Exact', name: 'x-h', value: pickOf(rand, ['1', '2']) }] : [],
    queryParams: rand() < 0.1 ? [{ type: 'Exact', name: 'q', value: '1' }] : [],
  })
}

function randomRoutes(rand: () => number, count: number): HTTPRoute[] {
  const out: HTTPRoute[] = []
  for (let i = 0; i < count; i++) {
    const hostnames = rand() < 0.25 ? [] : [pickOf(rand, ROUTE_HOSTS), ...(rand() < 0.2 ? [pickOf(rand, ROUTE_HOSTS)] : [])]
    const rules = Array.from({ length: 1 + Math.floor(rand() * 2) }, () => b.rule(Array.from({ length: 1 + Math.floor(rand() * 2) }, () => randomMatch(rand))))
    out.push(b.httpRoute(`r${i}`, rules, { hostnames: [...new Set(hostnames)] }, { creationTimestamp: `2024-01-01T00:00:${String(Math.floor(rand() * 5)).padStart(2, '0')}Z` }))
  }
  return out
}

function hostsOf(routes: HTTPRoute[], listenerHost: string | null = null): HostIndex {
  const snap = b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 80, 'HTTP', { hostname: listenerHost })]), b.service('svc'), ...routes])
  const table = compile(snap, b.opts).table
  ensureLookupIndexes(table)
  const hosts = table.ports.get(80)?.http
  if (hosts == null) throw new Error('no port 80')
  return hosts
}

interface Req { host: string; method: string; path: string; query: Record<string, string>; headers: Record<string, string> }

function inputOf(r: Req): MatchInput {
  const q = new URLSearchParams(r.query).toString()
  return { method: r.method, path: r.path, query: q === '' ? null : q, header: n => r.headers[n] }
}

function walk(hosts: HostIndex, host: string, input: MatchInput): RouteMatch | null {
  const v = findVirtualHost(hosts, host)
  return v === null ? null : matchRequest(v, input)
}

const idOf = (m: RouteMatch | null): string | null => m === null ? null : `${m.rule.route.namespace}/${m.rule.route.name}/${m.rule.ruleIndex}`

t.test('random tables: index = tree walk = reference', async t => {
  let compared = 0
  let hits = 0
  for (let seed = 1; seed <= 40; seed++) {
    const rand = prng(seed)
    const routes = randomRoutes(rand, 5 + Math.floor(rand() * 30))
    const hosts = hostsOf(routes)
    if (hosts.lookup?.index === undefined) t.fail('ensureLookupIndexes builds the index')
    for (let k = 0; k < 150; k++) {
      const path = rand() < 0.03 ? '*' : randomPath(rand, 4)
      const r: Req = {
        host: pickOf(rand, REQUEST_HOSTS), method: rand() < 0.7 ? 'GET' : 'POST', path,
        query: rand() < 0.2 ? { q: '1' } : {}, headers: rand() < 0.3 ? { 'x-h': pickOf(rand, ['1', '2']) } : {},
      }
      const input = inputOf(r)
      const fast = matchOnPort(hosts, r.host, input)
      const tree = walk(hosts, r.host, input)
      if (fast !== tree) t.fail(`seed ${seed}: ${r.method} ${r.host}${r.path} index ${idOf(fast)} walk ${idOf(tree)}`)
      const ref = referenceMatch(routes, r)
      if (idOf(fast) !== ref) t.fail(`seed ${seed}: ${r.method} ${r.host}${r.path} index ${idOf(fast)} reference ${ref}`)
      compared++
      if (fast !== null) hits++
    }
  }
  t.ok(hits > compared / 4, `enough requests match (${hits}/${compared})`)
})

t.test('a listener hostname narrows what the index answers', async t => {
  const hosts = hostsOf([b.httpRoute('r', [b.rule([b.match('/')])])], '*.example.com')
  t.equal(idOf(matchOnPort(hosts, 'q.example.com', inputOf({ host: '', method: 'GET', path: '/x', query: {}, headers: {} }))), 'default/r/0')
  t.equal(matchOnPort(hosts, 'example.com', inputOf({ host: '', method: 'GET', path: '/x', query: {}, headers: {} })), null)
})

t.test('a full 32-bit hash collision is confirmed on the key', async t => {
  // Two prefix keys with the same FNV-1a hash, hence the same slot hash for the
  // same vhost: found by search (the birthday bound makes one near certain).
  const seen = new Map<number, string>()
  let pair: [string, string] | null = null
  const rand = prng(7)
  for (let i = 0; i < 400_000 && pair === null; i++) {
    let key = '/'
    for (let k = 0; k < 8; k++) key += String.fromCharCode(97 + Math.floor(rand() * 26))
    const h = pathHash(key)
    const other = seen.get(h)
    if (other !== undefined) pair = [other, key]
    else seen.set(h, key)
  }
  if (pair === null) return t.fail('no collision found')
  const [a, c] = pair
  const owner = hostHash('*')
  t.equal(slotHash(owner, pathHash(a), KIND_PREFIX), slotHash(owner, pathHash(c), KIND_PREFIX))
  const hosts = hostsOf([b.httpRoute('r', [b.rule([b.match(a)])])])
  const req = (path: string): MatchInput => inputOf({ host: '', method: 'GET', path, query: {}, headers: {} })
  t.equal(idOf(matchOnPort(hosts, 'h.example', req(`${a}/x`))), 'default/r/0')
  t.equal(matchOnPort(hosts, 'h.example', req(`${c}/x`)), null, `${c} has the hash of ${a} but is another key`)
  t.equal(matchOnPort(hosts, 'h.example', req(c)), null)
})

t.test('many keys: probe chains, prefixes that differ past a boundary', async t => {
  const routes: HTTPRoute[] = []
  for (let i = 0; i < 2000; i++) {
    routes.push(b.httpRoute(`r${i}`, [b.rule([b.match(`/p${i}/x`, 'Exact'), b.match(`/p${i}`), b.match(`/p${i}/deep/er/`)])], { hostnames: [`h${i % 50}.example.com`] }))
  }
  const hosts = hostsOf(routes)
  const req = (path: string): MatchInput => inputOf({ host: '', method: 'GET', path, query: {}, headers: {} })
  let bad = 0
  for (let i = 0; i < 2000; i++) {
    const host = `h${i % 50}.example.com`
    for (const path of [`/p${i}/x`, `/p${i}`, `/p${i}/`, `/p${i}/deep/er/y`, `/p${i}0`, `/p${i}/deep/err`, `/p${i + 50}`]) {
      if (matchOnPort(hosts, host, req(path)) !== walk(hosts, host, req(path))) bad++
    }
  }
  t.equal(bad, 0, 'index and walk agree on 14,000 lookups')
  t.equal(idOf(matchOnPort(hosts, 'h3.example.com', req('/p3/deep/er/y'))), 'default/r3/0')
  t.equal(matchOnPort(hosts, 'h3.example.com', req('/p4')), null, 'another host\'s key')
  t.equal(matchOnPort(hosts, 'h3.example.com', req('/p30')), null, 'not a segment prefix')
})

t.test('hand-built tables without an index are walked', async t => {
  const hosts = hostsOf([b.httpRoute('r', [b.rule([b.match('/a')])])])
  const plain: HostIndex = { exact: hosts.exact, wildcards: hosts.wildcards, fallback: hosts.fallback }
  t.equal(plain.lookup, undefined)
  t.equal(idOf(matchOnPort(plain, 'any', inputOf({ host: '', method: 'GET', path: '/a/b', query: {}, headers: {} }))), 'default/r/0')
})
