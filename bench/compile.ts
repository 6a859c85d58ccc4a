// Compile 10,000 HTTPRoutes over 1,000 hostnames, report compile time and the
// table's retained heap, then lookups/s (findVirtualHost + matchRequest, exact
// and prefix paths) on that table vs a 10-route table. Bounded: fixed counts
// and a 5 s cap per lookup run. Run: npx node --expose-gc bench/compile.ts
import { compile } from '../lib/compile/compile.ts'
import { findVirtualHost, matchRequest } from '../lib/router/match.ts'
import type { MatchInput } from '../lib/router/match.ts'
import type { RouteTable } from '../lib/compile/table.ts'
import type { HTTPRoute } from '../lib/resources/model.ts'
import * as b from '../test/compile/builders.ts'

const gc = (globalThis as { gc?: () => void }).gc

function routes(count: number, hosts: number): HTTPRoute[] {
  const out: HTTPRoute[] = []
  for (let i = 0; i < count; i++) {
    const h = i % hosts
    out.push(b.httpRoute(`r${i}`, [
      b.rule([b.match(`/svc${i}/items`, 'Exact'), b.match(`/svc${i}/`, 'PathPrefix')]),
      b.rule([b.match(`/api${i}`, 'PathPrefix', { method: 'POST', headers: [{ type: 'Exact', name: 'x-tenant', value: `t${i}` }] })]),
    ], { hostnames: [`host${h}.example.com`] }, { creationTimestamp: `2024-01-01T00:00:${String(i % 60).padStart(2, '0')}Z` }))
  }
  return out
}

function build(count: number, hosts: number): RouteTable {
  const snap = b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 80, 'HTTP', { allowedRoutes: { namespacesFrom: 'All', namespaceSelector: null, kinds: [] } })]), b.service('svc'), ...routes(count, hosts)])
  return compile(snap, b.opts).table
}

function inputs(count: number, hosts: number, distinct = 1000): Array<{ host: string; input: MatchInput }> {
  const out: Array<{ host: string; input: MatchInput }> = []
  const header = (): string | undefined => undefined
  for (let k = 0; k < 1000; k++) {
    const i = ((k % distinct) * 7919) % count
    const path = k % 2 === 0 ? `/svc${i}/items` : `/svc${i}/x/y`
    out.push({ host: `host${i % hosts}.example.com`, input: { method: 'GET', path, query: null, header } })
  }
  return out
}

function lookups(table: RouteTable, reqs: Array<{ host: string; input: MatchInput }>): number {
  const index = table.ports.get(80)?.http
  if (index == null) throw new Error('no port 80')
  let hits = 0
  const deadline = performance.now() + 3000
  const start = performance.now()
  let n = 0
  for (let round = 0; round < 2000 && performance.now() < deadline; round++) {
    for (let k = 0; k < reqs.length; k++) {
      const v = findVirtualHost(index, reqs[k].host)
      if (v !== null && matchRequest(v, reqs[k].input) !== null) hits++
    }
    n += reqs.length
  }
  if (hits !== n) throw new Error(`expected every lookup to match (${hits}/${n})`)
  return n / ((performance.now() - start) / 1000)
}

gc?.()
const before = process.memoryUsage().heapUsed
const t0 = performance.now()
const big = build(10_000, 1_000) // includes generating the snapshot
const compileMs = performance.now() - t0
gc?.()
const retained = process.memoryUsage().heapUsed - before
const small = build(10, 10)

lookups(small, inputs(10, 10)) // warm-up both
lookups(big, inputs(10_000, 1_000))
const smallRate = lookups(small, inputs(10, 10))
const bigRate = lookups(big, inputs(10_000, 1_000))
const bigHotRate = lookups(big, inputs(10_000, 1_000, 10))

const mb = (n: number): string => `${(n / 1024 / 1024).toFixed(1)} MiB`
console.log('compile bench')
console.log(`  compile 10,000 HTTPRoutes / 1,000 hosts: ${compileMs.toFixed(0)} ms`)
console.log(`  retained heap (table + snapshot held): ${gc === undefined ? 'n/a (run with --expose-gc)' : mb(retained)}`)
console.log(`  lookups/s, 10-route table:     ${Math.round(smallRate).toLocaleString('en')}`)
console.log(`  lookups/s, 10,000-route table: ${Math.round(bigRate).toLocaleString('en')}`)
console.log(`  lookups/s, 10,000-route table, 10 distinct requests: ${Math.round(bigHotRate).toLocaleString('en')} (ratio ${(bigHotRate / smallRate).toFixed(2)})`)
console.log(`  ratio big/small: ${(bigRate / smallRate).toFixed(2)} (target >= 0.8)`)
void big
