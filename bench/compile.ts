// Compile 10,000 HTTPRoutes over 1,000 hostnames, report compile time and the
// table's retained heap, then lookups/s (exact and prefix paths) on that table
// vs a 10-route table over 10 hostnames, for the tree walk (findVirtualHost +
// matchRequest, before) and the compact lookup index (matchOnPort, after).
//
// Fairness: both tables are queried with 1,000 request inputs built before
// timing (flat strings, one object shape, no allocation in the loop), half
// Exact paths and half PathPrefix paths with distinct tails, spread over every
// host of the table; numbers in names are zero-padded to one width, so both
// tables' requests have as many chars to hash. Both are warmed up, then
// measured in rounds: each round runs every case once, back to back, for a
// fixed count. Rates are the median over rounds; a ratio is the median over
// rounds of the two cases' ratio in the same round, so the machine's load,
// which drifts over seconds, divides out. The big table is also queried with
// requests confined to 300, 100, 30 and 10 of its hosts (still 1,000 distinct
// inputs), to separate the cost of a working set larger than the CPU caches
// from the cost of the lookup itself.
//
// Rates are lookups per CPU-second of this process (process.cpuUsage), not per
// wall-clock second: on a shared, loaded machine the time spent descheduled
// would otherwise swamp the difference being measured. What other processes
// do to the caches between our time slices still shows (it is part of the
// cost of a large working set), so ratios from one run are the figures to
// compare, not absolute rates across runs.
//
// Bounded: fixed counts, and each run stops after 2 s whatever the count.
// Run: npx node --expose-gc bench/compile.ts
import { compile } from '../lib/compile/compile.ts'
import { ensureLookupIndexes } from '../lib/compile/lookup-index.ts'
import { findVirtualHost, matchOnPort, matchRequest } from '../lib/router/match.ts'
import type { MatchInput } from '../lib/router/match.ts'
import type { HostIndex, RouteTable } from '../lib/compile/table.ts'
import type { HTTPRoute } from '../lib/resources/model.ts'
import * as b from '../test/compile/builders.ts'

const gc = (globalThis as { gc?: () => void }).gc
const INPUTS = 1000
const ROUNDS = 100 // × INPUTS lookups per run
const RUNS = 15

/**
 * Route and host numbers in names, zero-padded to one width in every table:
 * a lookup hashes every char of the host and path, so names that grow with
 * the count ('/svc9999' against '/svc9') would make the big table's lookups
 * slower for a reason that is not the table's size.
 */
function id(n: number): string {
  return String(n).padStart(5, '0')
}

function routes(count: number, hosts: number): HTTPRoute[] {
  const out: HTTPRoute[] = []
  for (let i = 0; i < count; i++) {
    const h = i % hosts
    out.push(b.httpRoute(`r${i}`, [
      b.rule([b.match(`/svc${id(i)}/items`, 'Exact'), b.match(`/svc${id(i)}/`, 'PathPrefix')]),
      b.rule([b.match(`/api${id(i)}`, 'PathPrefix', { method: 'POST', headers: [{ type: 'Exact', name: 'x-tenant', value: `t${i}` }] })]),
    ], { hostnames: [`host${id(h)}.example.com`] }, { creationTimestamp: `2024-01-01T00:00:${String(i % 60).padStart(2, '0')}Z` }))
  }
  return out
}

function build(count: number, hosts: number): RouteTable {
  const snap = b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 80, 'HTTP', { allowedRoutes: { namespacesFrom: 'All', namespaceSelector: null, kinds: [] } })]), b.service('svc'), ...routes(count, hosts)])
  const table = compile(snap, b.opts).table
  ensureLookupIndexes(table) // what the runtime does right after the swap
  return table
}

/** A flat (sequential) copy: template literals make cons strings, which a real request never has. */
function flat(s: string): string {
  return Buffer.from(s, 'latin1').toString('latin1')
}

function noHeader(): string | undefined { return undefined }

interface Request { readonly host: string; readonly input: MatchInput }

/**
 * `INPUTS` requests to a table whose route i serves host `i % hosts` (so a
 * host has `count / hosts` routes). The requests visit the first `span` hosts
 * and every route of each; exact paths repeat, prefix paths have distinct tails.
 */
function requests(count: number, hosts: number, span = hosts): Request[] {
  const perHost = count / hosts
  const out: Request[] = []
  for (let k = 0; k < INPUTS; k++) {
    const h = k % span
    const i = h + hosts * ((Math.floor(k / span) + k) % perHost)
    const path = k % 2 === 0 ? `/svc${id(i)}/items` : `/svc${id(i)}/x/${k}`
    out.push({ host: flat(`host${id(h)}.example.com`), input: { method: 'GET', path: flat(path), query: null, header: noHeader } })
  }
  return out
}

function indexOf(table: RouteTable): HostIndex {
  const index = table.ports.get(80)?.http
  if (index == null) throw new Error('no port 80')
  return index
}

/** One timed run of the tree walk (findVirtualHost + matchRequest, the matcher before the index): lookups per second. */
function runWalk(index: HostIndex, reqs: readonly Request[]): number {
  let hits = 0
  let n = 0
  const cpu = process.cpuUsage()
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
  const used = process.cpuUsage(cpu)
  const rate = n / ((used.user + used.system) / 1e6)
  if (hits !== n) throw new Error(`expected every lookup to match (${hits}/${n})`)
  return rate
}

/** The same through the lookup index (matchOnPort, what lib/router/forward.ts calls). Its own loop keeps each call site monomorphic. */
function runIndex(index: HostIndex, reqs: readonly Request[]): number {
  let hits = 0
  let n = 0
  const cpu = process.cpuUsage()
  const start = performance.now()
  const deadline = start + 2000
  for (let round = 0; round < ROUNDS; round++) {
    for (let k = 0; k < reqs.length; k++) {
      const r = reqs[k]
      if (matchOnPort(index, r.host, r.input) !== null) hits++
    }
    n += reqs.length
    if ((round & 15) === 15 && performance.now() > deadline) break
  }
  const used = process.cpuUsage(cpu)
  const rate = n / ((used.user + used.system) / 1e6)
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
const oneHost = build(10, 1) // ten routes on one host: a vhost shaped like the big table's

const shapes = [
  { name: '10-route table, 10 hosts', index: indexOf(small), reqs: requests(10, 10) },
  { name: '10-route table, 1 host', index: indexOf(oneHost), reqs: requests(10, 1) },
  { name: '10,000-route table, 1,000 hosts', index: indexOf(big), reqs: requests(10_000, 1_000) },
  // Same big table, requests confined to fewer hosts: separates the cost of a
  // working set larger than the CPU caches from the cost of the lookup itself.
  { name: '10,000-route table, 300 hosts hit', index: indexOf(big), reqs: requests(10_000, 1_000, 300) },
  { name: '10,000-route table, 100 hosts hit', index: indexOf(big), reqs: requests(10_000, 1_000, 100) },
  { name: '10,000-route table, 30 hosts hit', index: indexOf(big), reqs: requests(10_000, 1_000, 30) },
  { name: '10,000-route table, 10 hosts hit', index: indexOf(big), reqs: requests(10_000, 1_000, 10) },
]
const matchers = [{ name: 'walk', run: runWalk }, { name: 'index', run: runIndex }]
for (const m of matchers) for (const c of shapes) { m.run(c.index, c.reqs); m.run(c.index, c.reqs) } // warm-up: every case reaches the optimizing tier
const rates = matchers.map(() => shapes.map(() => [] as number[]))
for (let r = 0; r < RUNS; r++) {
  for (let j = 0; j < matchers.length; j++) {
    for (let i = 0; i < shapes.length; i++) rates[j][i].push(matchers[j].run(shapes[i].index, shapes[i].reqs))
  }
}
const medians = rates.map(rs => rs.map(median))
/** Median over runs of shape a's rate / shape b's, both from the same run (measured back to back). */
const pairRatio = (j: number, a: number, b: number): number => median(rates[j][a].map((x, r) => x / rates[j][b][r]))
const mb = (n: number): string => `${(n / 1024 / 1024).toFixed(1)} MiB`
const fmt = (n: number): string => Math.round(n).toLocaleString('en').padStart(11)
console.log('compile bench')
console.log(`  compile 10,000 HTTPRoutes / 1,000 hosts: ${compileMs.toFixed(0)} ms`)
console.log(`  retained heap (table + snapshot held): ${gc === undefined ? 'n/a (run with --expose-gc)' : mb(retained)}`)
console.log(`  lookups per CPU-second (median of ${RUNS} rounds, ${ROUNDS * INPUTS} lookups a case each):`)
console.log(`    ${''.padEnd(34)} ${'walk (before)'.padStart(13)} ${'index (after)'.padStart(13)}`)
for (let i = 0; i < shapes.length; i++) console.log(`    ${shapes[i].name.padEnd(34)} ${fmt(medians[0][i])}   ${fmt(medians[1][i])}`)
for (let j = 0; j < matchers.length; j++) {
  console.log(`  ${matchers[j].name}: ratio big/small ${pairRatio(j, 2, 0).toFixed(2)} (target >= 0.8); big/small 1 host (same vhost shape) ${pairRatio(j, 2, 1).toFixed(2)}; big 10 hosts hit/small 1 host ${pairRatio(j, 6, 1).toFixed(2)}`)
}
