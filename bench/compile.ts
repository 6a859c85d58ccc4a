// Compile 10,000 HTTPRoutes over 1,000 hostnames, report compile time and the
// table's retained heap, then lookups/s (findVirtualHost + matchRequest, exact
// and prefix paths) on that table vs a 10-route table over 10 hostnames.
//
// Fairness: both tables are queried with 1,000 request inputs built before
// timing (flat strings, one object shape, no allocation in the loop), half
// Exact paths and half PathPrefix paths with distinct tails, spread over every
// host of the table. Both are warmed up, then measured in alternating runs of
// a fixed count; the median run is reported. A third figure queries the big
// table with 10 distinct inputs (cycled to 1,000) to separate the cost of a
// larger working set (CPU caches) from the cost of the lookup itself.
//
// Bounded: fixed counts, and each run stops after 2 s whatever the count.
// Run: npx node --expose-gc bench/compile.ts
import { compile } from '../lib/compile/compile.ts'
import { findVirtualHost, matchRequest } from '../lib/router/match.ts'
import type { MatchInput } from '../lib/router/match.ts'
import type { HostIndex, RouteTable } from '../lib/compile/table.ts'
import type { HTTPRoute } from '../lib/resources/model.ts'
import * as b from '../test/compile/builders.ts'

const gc = (globalThis as { gc?: () => void }).gc
const INPUTS = 1000
const ROUNDS = 300 // × INPUTS lookups per run
const RUNS = 7

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

/** A flat (sequential) copy: template literals make cons strings, which a real request never has. */
function flat(s: string): string {
  return Buffer.from(s, 'latin1').toString('latin1')
}

function noHeader(): string | undefined { return undefined }

interface Request { readonly host: string; readonly input: MatchInput }

/**
 * `INPUTS` requests over a table of `count` routes on `hosts` hosts; `distinct`
 * limits how many different requests there are (the rest repeat them).
 */
function requests(count: number, hosts: number, distinct = INPUTS): Request[] {
  const made: Request[] = []
  for (let k = 0; k < Math.min(distinct, INPUTS); k++) {
    const i = (k * 7919) % count // spreads over every route, hence every host
    const path = k % 2 === 0 ? `/svc${i}/items` : `/svc${i}/x/${k}`
    made.push({ host: flat(`host${i % hosts}.example.com`), input: { method: 'GET', path: flat(path), query: null, header: noHeader } })
  }
  const out: Request[] = []
  for (let k = 0; k < INPUTS; k++) out.push(made[k % made.length])
  return out
}

function indexOf(table: RouteTable): HostIndex {
  const index = table.ports.get(80)?.http
  if (index == null) throw new Error('no port 80')
  return index
}

/** One timed run: lookups per second. */
function run(index: HostIndex, reqs: readonly Request[]): number {
  let hits = 0
  let n = 0
  const start = performance.now()
  const deadline = start + 2000
  for (let round = 0; round < ROUNDS; round++) {
    for (let k = 0; k < reqs.length; k++) {
      const r = reqs[k]
      const v = findVirtualHost(index, r.host)
      if (v !== null && matchRequest(v, r.input) !== null) hits++
    }
    n += reqs.length
    if ((round & 15) === 15 && performance.now() > deadline) break
  }
  const rate = n / ((performance.now() - start) / 1000)
  if (hits !== n) throw new Error(`expected every lookup to match (${hits}/${n})`)
  return rate
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[s.length >> 1]
}

gc?.()
const before = process.memoryUsage().heapUsed
const t0 = performance.now()
const big = build(10_000, 1_000) // includes generating the snapshot
const compileMs = performance.now() - t0
gc?.()
const retained = process.memoryUsage().heapUsed - before
const small = build(10, 10)

const cases = [
  { name: '10-route table, 1,000 inputs', index: indexOf(small), reqs: requests(10, 10) },
  { name: '10,000-route table, 1,000 inputs', index: indexOf(big), reqs: requests(10_000, 1_000) },
  { name: '10,000-route table, 10 inputs', index: indexOf(big), reqs: requests(10_000, 1_000, 10) },
]
for (const c of cases) { run(c.index, c.reqs); run(c.index, c.reqs) } // warm-up: every case reaches the optimizing tier
const rates = cases.map(() => [] as number[])
for (let r = 0; r < RUNS; r++) {
  for (let i = 0; i < cases.length; i++) rates[i].push(run(cases[i].index, cases[i].reqs))
}
const [smallRate, bigRate, bigHotRate] = rates.map(median)

const mb = (n: number): string => `${(n / 1024 / 1024).toFixed(1)} MiB`
const fmt = (n: number): string => Math.round(n).toLocaleString('en')
console.log('compile bench')
console.log(`  compile 10,000 HTTPRoutes / 1,000 hosts: ${compileMs.toFixed(0)} ms`)
console.log(`  retained heap (table + snapshot held): ${gc === undefined ? 'n/a (run with --expose-gc)' : mb(retained)}`)
console.log(`  lookups/s (median of ${RUNS} alternating runs of ${ROUNDS * INPUTS} lookups):`)
for (let i = 0; i < cases.length; i++) console.log(`    ${cases[i].name.padEnd(34)} ${fmt(median(rates[i]))}`)
console.log(`  ratio big/small: ${(bigRate / smallRate).toFixed(2)} (target >= 0.8)`)
console.log(`  ratio big (10 inputs)/small: ${(bigHotRate / smallRate).toFixed(2)} (same table, small working set)`)
