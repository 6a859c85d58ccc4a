// The end-to-end scenarios. Each runs the same load against the targets of one
// run — the origin directly, nginx as reverse proxy, sallyport — in
// interleaved rounds (A B C A B C ...) so a noisy neighbour hits all of them
// alike, keeps the median round per target, and records comparison lines.

import { runH2load, runH2loadSpread } from './h2load.ts'
import { acceptedConnections } from './nginx.ts'
import type { LoadResult, LoadSpec } from './h2load.ts'
import { compare, delta } from './report.ts'
import type { Comparison, Note, Row } from './report.ts'
import { download, upload } from './big-body.ts'
import type { TransferResult } from './big-body.ts'
import { cpuMsOfTree, RssSampler } from './procs.ts'

export interface Target {
  readonly name: string
  readonly port: number
  /** The process (tree) serving it, for CPU time per request; null = not measured. */
  readonly pid?: () => number | null
}

export interface BenchContext {
  readonly tmp: string
  readonly durationS: number
  readonly rounds: number
  /** Cores for h2load (null = unpinned). */
  readonly loadCores: string | null
  readonly direct: Target
  /** Origin's h2c port; null when the origin cannot speak h2c (Node fallback). */
  readonly directH2c: Target | null
  readonly nginxProxy: Target | null
  readonly nginxProxyH2c: Target | null
  /** Minimal Node + undici proxy (HTTP/1.1 only): the floor for a Node data path; null = not run. */
  readonly nodeProxy: Target | null
  /** fastify + @fastify/reply-from (issue 3's other named reference), h1 small throughput only; null = not run. */
  readonly fastifyProxy: Target | null
  readonly sallyport: Target
  readonly bigDirect: Target
  readonly oneMiBFile: string
  readonly bigBytes: number
  readonly rows: Row[]
  readonly comparisons: Comparison[]
  readonly notes: Note[]
  /** The origin nginx port whose stub_status counts accepted connections; null = no counting. */
  readonly originStatusPort: number | null
  /** Filled by the h1 scenario; the latency scenario runs at half of it. */
  peakH1Rps: number | null
  /** Each proxy's own h1 small peak (req/s), filled by the h1 scenario: the latency scenario also runs each at half of its own. */
  readonly peakH1ByTarget: Map<string, number>
}

type Shape = Omit<LoadSpec, 'url' | 'label' | 'tmpDir' | 'cores'> & {
  /** Fixed rate from independent clients (one h2load process each, own phase): h2load.ts runH2loadSpread. */
  readonly spread?: boolean
}

function medianBy(results: readonly LoadResult[], key: (r: LoadResult) => number): LoadResult {
  const sorted = [...results].sort((a, b) => key(a) - key(b))
  return sorted[Math.floor((sorted.length - 1) / 2)]
}

/** Runs `shape` against each target in `rounds` interleaved rounds; keeps each target's median round (by req/s, or by p99 for fixed-rate runs). */
export async function measure(ctx: BenchContext, scenario: string, targets: readonly Target[], path: string, shape: Shape, rounds = ctx.rounds): Promise<Map<string, LoadResult>> {
  const load = shape.spread === true ? runH2loadSpread : runH2load
  const all = new Map<string, LoadResult[]>()
  for (let r = 0; r < rounds; r++) {
    for (const t of targets) {
      const before = ctx.originStatusPort === null ? null : await acceptedConnections(ctx.originStatusPort)
      const pid = t.pid === undefined ? null : t.pid()
      const cpuBefore = pid === null ? 0 : cpuMsOfTree(pid)
      const run = await load({ ...shape, url: `http://127.0.0.1:${t.port}${path}`, label: `${scenario} ${t.name}`, tmpDir: ctx.tmp, cores: ctx.loadCores })
      const cpuMs = pid === null ? 0 : cpuMsOfTree(pid) - cpuBefore
      const after = ctx.originStatusPort === null ? null : await acceptedConnections(ctx.originStatusPort)
      // CPU over warm-up + measured phase, divided by the requests of both (h2load's rate times the whole time).
      const served = run.rps * (shape.durationS + shape.warmupS)
      const res: LoadResult = {
        ...run,
        originConnections: before === null || after === null ? null : after - before - 1, // minus the stub_status request itself
        cpuUsPerRequest: pid === null || served <= 0 ? null : (cpuMs * 1000) / served,
      }
      const list = all.get(t.name) ?? []
      list.push(res)
      all.set(t.name, list)
      process.stderr.write(`  ${scenario} ${t.name} round ${r + 1}: ${Math.round(res.rps)} req/s p99 ${res.p99Ms.toFixed(3)} ms${res.failed + res.non2xx > 0 ? ` errors ${res.failed + res.non2xx}` : ''}\n`)
    }
  }
  const out = new Map<string, LoadResult>()
  for (const [name, list] of all) out.set(name, shape.rpsPerClient === null ? medianBy(list, (r) => r.rps) : medianBy(list, (r) => r.p99Ms))
  return out
}

function addRows(ctx: BenchContext, scenario: string, results: Map<string, LoadResult>, bytesPerResponse: number, extra = ''): void {
  for (const [name, r] of results) {
    ctx.rows.push({
      scenario, target: name, rps: r.rps, MiBps: bytesPerResponse > 0 ? r.rps * bytesPerResponse / 1024 / 1024 : r.trafficMiBps,
      p50Ms: r.p50Ms, p99Ms: r.p99Ms, errors: r.failed + r.non2xx,
      extra: [extra, r.originConnections === null ? '' : `${r.originConnections} conns opened to origin`, r.cpuUsPerRequest === null ? '' : `${Math.round(r.cpuUsPerRequest)} µs CPU/req`].filter((x) => x !== '').join('; '),
    })
  }
}

function throughputTargets(ctx: BenchContext, h2: boolean): Target[] {
  const t: Target[] = []
  const direct = h2 ? ctx.directH2c : ctx.direct
  const proxy = h2 ? ctx.nginxProxyH2c : ctx.nginxProxy
  if (direct !== null) t.push(direct)
  if (proxy !== null) t.push(proxy)
  if (!h2 && ctx.nodeProxy !== null) t.push(ctx.nodeProxy)
  t.push(ctx.sallyport)
  return t
}

function compareAll(ctx: BenchContext, scenario: string, metric: string, unit: string, results: Map<string, LoadResult>, pick: (r: LoadResult) => number, targetVsProxy: { min: number } | null): void {
  const s = results.get('sallyport')
  if (s === undefined) return
  const proxy = results.get('nginx-proxy')
  if (proxy !== undefined) ctx.comparisons.push(compare(scenario, metric, unit, 'sallyport', pick(s), 'nginx-proxy', pick(proxy), targetVsProxy))
  const direct = results.get('direct')
  if (direct !== undefined) ctx.comparisons.push(compare(scenario, metric, unit, 'sallyport', pick(s), 'direct', pick(direct), null))
  // Noise-robust view: CPU time per request of each proxy, as requests per CPU-second
  // (what one dedicated core would sustain); other load on the machine barely moves it.
  if (proxy !== undefined && s.cpuUsPerRequest !== null && proxy.cpuUsPerRequest !== null && unit === 'rps') {
    ctx.comparisons.push(compare(scenario, 'per CPU-second', 'rps', 'sallyport', 1e6 / s.cpuUsPerRequest, 'nginx-proxy', 1e6 / proxy.cpuUsPerRequest, targetVsProxy))
  }
  const floor = results.get('node-minimal')
  if (floor !== undefined && s.cpuUsPerRequest !== null && floor.cpuUsPerRequest !== null && unit === 'rps') {
    ctx.comparisons.push(compare(scenario, 'per CPU-second', 'rps', 'sallyport', 1e6 / s.cpuUsPerRequest, 'node-minimal', 1e6 / floor.cpuUsPerRequest, null))
  }
  const fastify = results.get(FASTIFY)
  if (fastify !== undefined) {
    ctx.comparisons.push(compare(scenario, metric, unit, 'sallyport', pick(s), FASTIFY, pick(fastify), null))
    if (s.cpuUsPerRequest !== null && fastify.cpuUsPerRequest !== null && unit === 'rps') {
      ctx.comparisons.push(compare(scenario, 'per CPU-second', 'rps', 'sallyport', 1e6 / s.cpuUsPerRequest, FASTIFY, 1e6 / fastify.cpuUsPerRequest, null))
    }
  }
}

/** The fastify + @fastify/reply-from target's name. */
export const FASTIFY = 'fastify-reply-from'

/** How busy the proxy's core was, in percent: req/s x CPU per request; null when its CPU was not measured. */
function busyPct(r: LoadResult): number | null {
  return r.cpuUsPerRequest === null ? null : Math.round((r.rps * r.cpuUsPerRequest) / 1e4)
}

function compareLatency(ctx: BenchContext, scenario: string, results: Map<string, LoadResult>, maxAddedMs: number | null): void {
  const s = results.get('sallyport')
  const direct = results.get('direct')
  if (s === undefined || direct === undefined) return
  ctx.comparisons.push(delta(scenario, 'p50 added', 'ms', 'sallyport', s.p50Ms, 'direct', direct.p50Ms, null))
  ctx.comparisons.push(delta(scenario, 'p99 added', 'ms', 'sallyport', s.p99Ms, 'direct', direct.p99Ms, maxAddedMs))
  const proxy = results.get('nginx-proxy')
  if (proxy !== undefined) ctx.comparisons.push(delta(scenario, 'p99 added', 'ms', 'nginx-proxy', proxy.p99Ms, 'direct', direct.p99Ms, null))
  const floor = results.get('node-minimal')
  if (floor !== undefined) ctx.comparisons.push(delta(scenario, 'p99 added', 'ms', 'node-minimal', floor.p99Ms, 'direct', direct.p99Ms, null))
  noteCoreBusy(ctx, scenario, results)
}

/**
 * A fixed rate's p99 is mostly queueing, which grows steeply with how busy the
 * proxy's one core is at that rate: say how busy each target was (those whose
 * CPU was measured: the proxies, not the direct baseline).
 */
function noteCoreBusy(ctx: BenchContext, scenario: string, results: Map<string, LoadResult>): void {
  const busy = [...results].flatMap(([name, r]) => {
    const pct = busyPct(r)
    return pct === null ? [] : [`${name} ${pct} %`]
  })
  if (busy.length > 0) ctx.notes.push({ scenario, text: `core busy at this rate (req/s x CPU per request): ${busy.join(', ')}` })
}

/**
 * Untimed warm-up: the h1 small load on every target for `seconds`, nothing
 * recorded. A JIT-compiled proxy (sallyport, the minimal Node proxy) reaches
 * its steady state only after some seconds of load (V8 tiers functions up
 * as they get hot); nginx does not care. Without it the first of three rounds
 * measures the compiler, not the proxy a gateway that has been serving is.
 */
export async function warmUp(ctx: BenchContext, seconds: number): Promise<void> {
  if (seconds <= 0) return
  for (const t of h1SmallTargets(ctx)) {
    if (t.name === 'direct') continue
    await runH2load({
      h1: true, clients: 32, streams: 1, durationS: seconds, warmupS: 0, rpsPerClient: null, dataFile: null,
      url: `http://127.0.0.1:${t.port}/small`, label: `warm-up ${t.name}`, tmpDir: ctx.tmp, cores: ctx.loadCores,
    })
  }
}

/**
 * The h1 small throughput scenario's targets: fastify with reply-from besides
 * the others. Only there: it is a throughput reference, and at sallyport's
 * fixed rates it would be measured past its own saturation.
 */
function h1SmallTargets(ctx: BenchContext): Target[] {
  const t = throughputTargets(ctx, false)
  if (ctx.fastifyProxy !== null) t.splice(t.length - 1, 0, ctx.fastifyProxy)
  return t
}

/** Small HTTP/1.1 keep-alive responses, closed loop (as fast as each connection goes). */
export async function scenarioH1(ctx: BenchContext): Promise<void> {
  const results = await measure(ctx, 'h1 small', h1SmallTargets(ctx), '/small', {
    h1: true, clients: 32, streams: 1, durationS: ctx.durationS, warmupS: 1, rpsPerClient: null, dataFile: null,
  })
  addRows(ctx, 'h1 small', results, 0, 'c=32 keep-alive')
  compareAll(ctx, 'h1 small', 'throughput', 'rps', results, (r) => r.rps, { min: 0.25 })
  for (const [name, r] of results) ctx.peakH1ByTarget.set(name, r.rps)
  const s = results.get('sallyport')
  if (s !== undefined) ctx.peakH1Rps = s.rps
}

/** Small responses over HTTP/2 cleartext (prior knowledge) downstream; HTTP/1.1 upstream for both proxies. */
export async function scenarioH2(ctx: BenchContext): Promise<void> {
  const results = await measure(ctx, 'h2 small', throughputTargets(ctx, true), '/small', {
    h1: false, clients: 8, streams: 16, durationS: ctx.durationS, warmupS: 1, rpsPerClient: null, dataFile: null,
  })
  addRows(ctx, 'h2 small', results, 0, 'h2c c=8 m=16')
  compareAll(ctx, 'h2 small', 'throughput', 'rps', results, (r) => r.rps, null)
  const peak = results.get('sallyport')?.rps
  if (peak !== undefined && peak >= 20) await h2AtHalfPeak(ctx, peak)
}

/**
 * HTTP/2 (h2c) at half of sallyport's own h2 peak, from independent clients
 * with one stream each (h2load.ts runH2loadSpread), sallyport and nginx-proxy
 * at the same rate. h2load's own `--rps` with `-m 16` sends its requests in
 * bursts (a few dozen in the same millisecond), so its p99 would measure how
 * long a proxy takes to clear a burst. No direct baseline: the origin nginx
 * answers one-stream h2c connections only after its delayed ACKs (~44 ms).
 */
async function h2AtHalfPeak(ctx: BenchContext, peak: number): Promise<void> {
  const targets = [ctx.nginxProxyH2c, ctx.sallyport].filter((t): t is Target => t !== null)
  const perClient = Math.max(1, Math.round(peak / 2 / LATENCY_CLIENTS))
  const rate = perClient * LATENCY_CLIENTS
  const results = await measure(ctx, 'h2 fixed-rate', targets, '/small', {
    h1: false, clients: LATENCY_CLIENTS, streams: 1, durationS: ctx.durationS * 2, warmupS: 1, rpsPerClient: perClient, dataFile: null, spread: true,
  })
  addRows(ctx, 'h2 fixed-rate', results, 0, `${rate} req/s offered (half of sallyport's h2 peak) by ${LATENCY_CLIENTS} independent h2c clients, one stream each`)
  const s = results.get('sallyport')
  const n = results.get('nginx-proxy')
  if (s !== undefined && n !== undefined) ctx.comparisons.push(delta(`h2 @${rate} rps`, 'p99', 'ms', 'sallyport', s.p99Ms, 'nginx-proxy', n.p99Ms, null))
  noteCoreBusy(ctx, `h2 @${rate} rps`, results)
}

/** 1 MiB response bodies (download) and 1 MiB request bodies (upload), HTTP/1.1. */
export async function scenarioBodies(ctx: BenchContext): Promise<void> {
  const MiB = 1024 * 1024
  const shape: Shape = { h1: true, clients: 4, streams: 1, durationS: ctx.durationS, warmupS: 1, rpsPerClient: null, dataFile: null }
  const down = await measure(ctx, '1MiB download', throughputTargets(ctx, false), '/1m', shape)
  addRows(ctx, '1MiB download', down, MiB, 'c=4')
  compareAll(ctx, '1MiB download', 'throughput', 'MiB/s', down, (r) => r.rps, null)
  const up = await measure(ctx, '1MiB upload', throughputTargets(ctx, false), '/upload', { ...shape, dataFile: ctx.oneMiBFile })
  addRows(ctx, '1MiB upload', up, MiB, 'c=4 POST')
  compareAll(ctx, '1MiB upload', 'throughput', 'MiB/s', up, (r) => r.rps, null)
}

/**
 * Fixed-rate load at half of sallyport's peak (h1 small): p99 latency added
 * over going direct. All targets get the same rate, so the difference is the
 * proxy's cost at a load it can sustain, not queueing at saturation. The
 * clients are independent (h2load.ts runH2loadSpread): one h2load with
 * `-c 16 --rps R` would send 16 requests at the same instant every 1/R s, and
 * its p99 would be the time to clear a burst of 16. Rounds as for the
 * throughput scenarios; the median round by p99 is kept.
 */
export async function scenarioLatency(ctx: BenchContext): Promise<void> {
  if (ctx.peakH1Rps === null) {
    const probe = await measure(ctx, 'h1 peak probe', throughputTargets(ctx, false).filter((t) => t !== ctx.direct), '/small', {
      h1: true, clients: 32, streams: 1, durationS: Math.max(2, ctx.durationS - 1), warmupS: 1, rpsPerClient: null, dataFile: null,
    }, 1)
    for (const [name, r] of probe) ctx.peakH1ByTarget.set(name, r.rps)
    ctx.peakH1Rps = probe.get('sallyport')?.rps ?? null
  }
  if (ctx.peakH1Rps === null || ctx.peakH1Rps < 20) {
    ctx.notes.push({ scenario: 'latency', text: 'skipped: no usable sallyport peak rate' })
    return
  }
  const { rate, results } = await atRate(ctx, 'h1 fixed-rate', throughputTargets(ctx, false), ctx.peakH1Rps / 2, ctx.durationS * 2)
  addRows(ctx, 'h1 fixed-rate', results, 0, `${rate} req/s offered (half of sallyport peak) by ${LATENCY_CLIENTS} independent clients`)
  compareLatency(ctx, `h1 @${rate} rps`, results, 1)
  await latencyCurve(ctx, ctx.peakH1Rps)
  await ownHalfPeak(ctx)
}

const LATENCY_CLIENTS = 16

/** One fixed rate (independent clients, see scenarioLatency) against `targets`; the rate actually offered and the results. */
async function atRate(ctx: BenchContext, scenario: string, targets: readonly Target[], rps: number, durationS: number): Promise<{ rate: number, results: Map<string, LoadResult> }> {
  const perClient = Math.max(1, Math.round(rps / LATENCY_CLIENTS))
  const results = await measure(ctx, scenario, targets, '/small', {
    h1: true, clients: LATENCY_CLIENTS, streams: 1, durationS, warmupS: 1, rpsPerClient: perClient, dataFile: null, spread: true,
  })
  return { rate: perClient * LATENCY_CLIENTS, results }
}

/**
 * sallyport's p99 added at lower fixed rates (1/8, 1/4, 3/8 of its peak):
 * the load up to which it stays under 1 ms, which is what an operator sizing
 * replicas needs, and how much of the miss at half of peak is queueing.
 */
async function latencyCurve(ctx: BenchContext, peak: number): Promise<void> {
  const added: string[] = []
  let under: number | null = null
  for (const fraction of [0.125, 0.25, 0.375]) {
    const { rate, results } = await atRate(ctx, `h1 @${fraction} peak`, [ctx.direct, ctx.sallyport], peak * fraction, ctx.durationS)
    const s = results.get('sallyport')
    const d = results.get('direct')
    if (s === undefined || d === undefined) continue
    const extra = s.p99Ms - d.p99Ms
    ctx.comparisons.push(delta(`h1 @${rate} rps (${fraction * 100}% of peak)`, 'p99 added', 'ms', 'sallyport', s.p99Ms, 'direct', d.p99Ms, null))
    added.push(`${rate} req/s +${extra.toFixed(2)} ms (core ${busyPct(s) ?? '?'} % busy)`)
    if (extra < 1) under = rate
  }
  if (added.length > 0) {
    ctx.notes.push({ scenario: 'latency curve', text: `sallyport p99 added by fixed rate: ${added.join('; ')}; under 1 ms up to ${under === null ? 'none of these rates' : `${under} req/s`}` })
  }
}

/**
 * nginx-proxy and the minimal Node proxy at half of their own peak (not
 * sallyport's): the issue's latency target applied to the references, so the
 * report says whether "p99 added < 1 ms at half of peak" is reachable on this
 * machine at all by a proxy that holds its core to the same share.
 */
async function ownHalfPeak(ctx: BenchContext): Promise<void> {
  for (const proxy of [ctx.nginxProxy, ctx.nodeProxy]) {
    if (proxy === null) continue
    const peak = ctx.peakH1ByTarget.get(proxy.name)
    if (peak === undefined || peak < 20) continue
    const { rate, results } = await atRate(ctx, `h1 ${proxy.name} half own peak`, [ctx.direct, proxy], peak / 2, ctx.durationS * 2)
    const p = results.get(proxy.name)
    const d = results.get('direct')
    if (p === undefined || d === undefined) continue
    ctx.comparisons.push(delta(`h1 @${rate} rps (half of ${proxy.name}'s own peak)`, 'p99 added', 'ms', proxy.name, p.p99Ms, 'direct', d.p99Ms, null))
    const pct = busyPct(p)
    if (pct !== null) ctx.notes.push({ scenario: `${proxy.name} @ half own peak`, text: `core busy at ${rate} req/s: ${pct} %` })
  }
}

export interface BigBodyResult {
  readonly sallyport: readonly TransferResult[]
  readonly direct: readonly TransferResult[]
  readonly rssBeforeMiB: number
  readonly rssPeakMiB: number
  readonly rssAfterMiB: number
}

/**
 * 1 GiB download and upload through sallyport (and direct to the same Node
 * upstream for the baseline), sampling sallyport's RSS all along: a streaming
 * data path keeps it flat, a buffering one grows by the body size.
 */
export async function scenarioBig(ctx: BenchContext, sallyportPid: number): Promise<BigBodyResult> {
  const deadline = 180_000
  const bytes = ctx.bigBytes
  const sampler = new RssSampler(sallyportPid, 50)
  const before = sampler.report()
  const direct = [await download(ctx.bigDirect.port, bytes, deadline), await upload(ctx.bigDirect.port, bytes, deadline)]
  const through = [await download(ctx.sallyport.port, bytes, deadline), await upload(ctx.sallyport.port, bytes, deadline)]
  const during = sampler.stop()
  const label = `${(bytes / 1024 / 1024 / 1024).toFixed(bytes >= 1024 ** 3 ? 0 : 2)} GiB`
  for (const [i, dir] of (['download', 'upload'] as const).entries()) {
    const s = through[i]
    const d = direct[i]
    ctx.rows.push({ scenario: `${label} ${dir}`, target: 'direct', rps: NaN, MiBps: d.MiBps, p50Ms: NaN, p99Ms: NaN, errors: d.ok ? 0 : 1, extra: d.error ?? '' })
    ctx.rows.push({ scenario: `${label} ${dir}`, target: 'sallyport', rps: NaN, MiBps: s.MiBps, p50Ms: NaN, p99Ms: NaN, errors: s.ok ? 0 : 1, extra: s.ok ? '' : `status ${s.status} bytes ${s.bytes} ${s.error ?? ''}` })
    ctx.comparisons.push(compare(`${label} ${dir}`, 'throughput', 'MiB/s', 'sallyport', s.ok ? s.MiBps : NaN, 'direct', d.MiBps, null))
  }
  ctx.comparisons.push(delta(`${label} transfers`, 'RSS growth', 'MiB', 'sallyport peak', during.peakTreeMiB, 'before', before.firstMiB, 64))
  return { sallyport: through, direct, rssBeforeMiB: before.firstMiB, rssPeakMiB: during.peakTreeMiB, rssAfterMiB: during.lastMiB }
}
