// Scaling from one worker to two (`serve --workers N`, node:cluster): the same
// closed-loop h1 load against a fresh sallyport per worker count. Neither
// sallyport nor h2load is pinned here (the workers need both cores, and h2load
// and the origin share them), so compare these numbers with each other only.

import path from 'node:path'
import { measure } from './scenarios.ts'
import type { BenchContext } from './scenarios.ts'
import { startGateway } from './gateway.ts'
import { freePort, RssSampler, stopProc } from './procs.ts'
import { compare } from './report.ts'

export interface WorkersRun {
  readonly workers: number
  readonly rps: number
  readonly p99Ms: number
  readonly peakTreeMiB: number
  readonly error: string | null
}

export async function scenarioWorkers(ctx: BenchContext, configDir: string, accessLog: boolean, counts: readonly number[]): Promise<WorkersRun[]> {
  const runs: WorkersRun[] = []
  const unpinned: BenchContext = { ...ctx, loadCores: null }
  for (const workers of counts) {
    let proc = null
    try {
      proc = await startGateway({
        configDir, listenPort: ctx.sallyport.port, adminPort: await freePort(), workers, cores: null, accessLog,
        logPath: path.join(ctx.tmp, `sallyport-workers-${workers}.log`), cpuProfDir: null, memoryCgroup: null,
      })
      const sampler = new RssSampler(proc.child.pid ?? 0)
      const name = `sallyport --workers ${workers}`
      const pid = proc.child.pid ?? null
      const res = await measure(unpinned, 'h1 workers', [{ name, port: ctx.sallyport.port, pid: () => pid }], '/small', {
        h1: true, clients: 32, streams: 1, durationS: ctx.durationS, warmupS: 1, rpsPerClient: null, dataFile: null,
      })
      const rss = sampler.stop()
      const r = res.get(name)
      if (r === undefined) throw new Error('no result')
      ctx.rows.push({ scenario: 'h1 workers', target: name, rps: r.rps, MiBps: NaN, p50Ms: r.p50Ms, p99Ms: r.p99Ms, errors: r.failed + r.non2xx, extra: `unpinned; peak RSS all processes ${rss.peakTreeMiB} MiB${r.cpuUsPerRequest === null ? '' : `; ${Math.round(r.cpuUsPerRequest)} µs CPU/req`}` })
      runs.push({ workers, rps: r.rps, p99Ms: r.p99Ms, peakTreeMiB: rss.peakTreeMiB, error: null })
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err)
      ctx.notes.push({ scenario: 'workers', text: `--workers ${workers} failed: ${msg.slice(0, 600)}` })
      runs.push({ workers, rps: NaN, p99Ms: NaN, peakTreeMiB: NaN, error: msg })
    } finally {
      if (proc !== null) await stopProc(proc, 10_000)
    }
  }
  const base = runs[0]
  for (const r of runs.slice(1)) {
    ctx.comparisons.push(compare('h1 workers', 'scaling', 'rps', `--workers ${r.workers}`, r.rps, `--workers ${base.workers}`, base.rps, null))
  }
  return runs
}
