// h2load (nghttp2-client) as the load generator: `--h1` for HTTP/1.1, plain
// h2load against http:// for HTTP/2 over cleartext with prior knowledge.
// Every run is bounded by duration (-D) and by h2load's own timeouts; the
// latency percentiles come from --log-file (one line per request:
// start µs since epoch, status, µs to end of response), not the summary.

import { spawn } from 'node:child_process'
import { readFileSync, rmSync } from 'node:fs'
import path from 'node:path'
import { pinned } from './procs.ts'

export interface LoadSpec {
  readonly url: string
  readonly h1: boolean
  readonly clients: number
  /** Streams per connection (h2) / pipelined requests (h1: keep 1). */
  readonly streams: number
  readonly durationS: number
  readonly warmupS: number
  /** Fixed rate per client (h2load --rps); null = as fast as possible. */
  readonly rpsPerClient: number | null
  /** POST this file as the body of each request; null = GET. */
  readonly dataFile: string | null
  readonly cores: string | null
  /** Where the per-request log goes (deleted after parsing). */
  readonly tmpDir: string
  readonly label: string
}

export interface LoadResult {
  readonly label: string
  readonly rps: number
  readonly requests: number
  readonly succeeded: number
  readonly failed: number
  readonly non2xx: number
  /** Response body+header bytes per second received by h2load, MiB/s. */
  readonly trafficMiBps: number
  readonly p50Ms: number
  readonly p90Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  readonly durationS: number
  readonly raw: string
  /** Connections the origin accepted during the run (filled by the scenario when it can count); null = unknown. */
  readonly originConnections: number | null
  /** CPU time (µs) the proxy process tree spent per request; null = not measured. */
  readonly cpuUsPerRequest: number | null
}

function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return NaN
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
  return sorted[i]
}

function parseSize(text: string): number {
  const m = /^([\d.]+)([KMG]?)B$/.exec(text)
  if (m === null) return NaN
  const mult = m[2] === 'G' ? 1024 ** 3 : m[2] === 'M' ? 1024 ** 2 : m[2] === 'K' ? 1024 : 1
  return Number(m[1]) * mult
}

/** Parses the h2load summary; percentiles from the per-request log lines. */
export function parseH2load(label: string, out: string, logText: string): LoadResult {
  const fin = /finished in ([\d.]+)(ms|s), ([\d.]+) req\/s, ([\d.]+[KMG]?B)\/s/.exec(out)
  const req = /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(out)
  const codes = /status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(out)
  const lat: number[] = []
  for (const line of logText.split('\n')) {
    if (line === '') continue
    const cols = line.split('\t')
    if (cols.length < 3) continue
    const status = Number(cols[1])
    if (status >= 200 && status < 300) lat.push(Number(cols[2]) / 1000)
  }
  const sorted = Float64Array.from(lat).sort()
  const durationS = fin === null ? NaN : Number(fin[1]) / (fin[2] === 'ms' ? 1000 : 1)
  const non2xx = codes === null ? 0 : Number(codes[2]) + Number(codes[3]) + Number(codes[4])
  return {
    label,
    rps: fin === null ? 0 : Number(fin[3]),
    requests: req === null ? 0 : Number(req[1]),
    succeeded: req === null ? 0 : Number(req[4]),
    failed: req === null ? 0 : Number(req[5]) + Number(req[6]) + Number(req[7]),
    non2xx,
    trafficMiBps: fin === null ? 0 : parseSize(fin[4]) / 1024 / 1024,
    p50Ms: percentile(sorted, 0.5),
    p90Ms: percentile(sorted, 0.9),
    p99Ms: percentile(sorted, 0.99),
    maxMs: sorted.length === 0 ? NaN : sorted[sorted.length - 1],
    durationS,
    originConnections: null,
    cpuUsPerRequest: null,
    raw: out.split('\n').filter((l) => /^(finished|requests|status codes|traffic|time for|time to|req\/s)/.test(l)).join('\n'),
  }
}

/** Runs h2load once; rejects only when h2load cannot run at all. */
export async function runH2load(spec: LoadSpec): Promise<LoadResult> {
  const { out, logText } = await spawnH2load(spec, spec.clients, `${process.pid}-${Date.now()}`)
  return parseH2load(spec.label, out, logText)
}

/**
 * Fixed-rate load from independent clients: one h2load process per client
 * (-c 1 --rps R each), the processes started at offsets spread over one
 * request period (timer resolution and process start-up add jitter, so the
 * phases are spread but not exact). A single h2load with -c N --rps R starts all N clients'
 * timers together, so the "fixed rate" arrives as bursts of N requests at the
 * same instant every 1/R s: the p99 then measures how long the proxy takes to
 * work through a burst of N, not its latency at that average load. Here the
 * clients keep their own phases, as N independent workloads would.
 */
export async function runH2loadSpread(spec: LoadSpec): Promise<LoadResult> {
  if (spec.rpsPerClient === null) throw new Error('runH2loadSpread needs rpsPerClient')
  const periodMs = 1000 / spec.rpsPerClient
  const runs: Array<Promise<{ out: string, logText: string }>> = []
  for (let i = 0; i < spec.clients; i++) {
    const startAfterMs = (periodMs * i) / spec.clients
    runs.push(new Promise((resolve) => setTimeout(resolve, startAfterMs)).then(() => spawnH2load(spec, 1, `${process.pid}-${Date.now()}-${i}`)))
  }
  const parts = await Promise.all(runs)
  const results = parts.map((p) => parseH2load(spec.label, p.out, ''))
  const merged = parseH2load(spec.label, '', parts.map((p) => p.logText).join('\n'))
  const sum = (f: (r: LoadResult) => number): number => results.reduce((n, r) => n + f(r), 0)
  return {
    ...merged,
    rps: sum((r) => r.rps),
    requests: sum((r) => r.requests),
    succeeded: sum((r) => r.succeeded),
    failed: sum((r) => r.failed),
    non2xx: sum((r) => r.non2xx),
    trafficMiBps: sum((r) => r.trafficMiBps),
    durationS: Math.max(...results.map((r) => r.durationS)),
    raw: `${spec.clients} h2load processes (-c 1 --rps ${spec.rpsPerClient}), started ${(periodMs / spec.clients).toFixed(2)} ms apart\n${results[0]?.raw ?? ''}`,
  }
}

async function spawnH2load(spec: LoadSpec, clients: number, tag: string): Promise<{ out: string, logText: string }> {
  const logFile = path.join(spec.tmpDir, `h2load-${tag}.log`)
  const args = [
    '-c', String(clients),
    '-m', String(spec.streams),
    '-t', '1',
    '-D', String(spec.durationS),
    '--warm-up-time', String(spec.warmupS),
    '-T', '10', '-N', '10',
    '--log-file', logFile,
  ]
  if (spec.h1) args.push('--h1')
  if (spec.rpsPerClient !== null) args.push('--rps', String(spec.rpsPerClient))
  if (spec.dataFile !== null) args.push('-d', spec.dataFile)
  args.push(spec.url)
  const argv = pinned(spec.cores, ['h2load', ...args])
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] })
    let text = ''
    child.stdout.on('data', (c: Buffer) => { text += c.toString('utf8') })
    child.stderr.on('data', (c: Buffer) => { text += c.toString('utf8') })
    // h2load stops itself after warm-up + duration; this is the backstop.
    const limit = setTimeout(() => child.kill('SIGKILL'), (spec.durationS + spec.warmupS + 30) * 1000)
    child.once('error', (err) => { clearTimeout(limit); reject(err) })
    child.once('close', () => { clearTimeout(limit); resolve(text) })
  })
  let logText = ''
  try { logText = readFileSync(logFile, 'utf8') } catch { logText = '' }
  rmSync(logFile, { force: true })
  return { out, logText }
}
