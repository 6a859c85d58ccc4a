// `npm run bench` — end-to-end data-path benchmarks in one run: the same load
// through sallyport, through nginx as a reverse proxy, and directly to the
// same upstream (nginx), printed as ratios; peak RSS of sallyport; 1 GiB
// transfers; scaling from one worker to two; the compile benchmarks.
//
//   node bench/run.ts [--only h1,h2,bodies,latency,big,workers,compile]
//                     [--duration 4] [--rounds 3] [--warmup 8] [--big-bytes 1g] [--features all|min]
//                     [--access-log on|off] [--memory-limit 512m|off] [--profile] [--no-pin]
//
// Memory: sallyport runs in a memory cgroup limited like deploy/file-mode's
// container (512 MiB; --memory-limit off for none), where this machine lets us
// make one. Node sizes V8's heap from that limit (259 MB in 512 MiB against 4 GB
// on a 24 GiB host without one), and V8 lets a small heap grow less between
// collections, so an unconstrained sallyport shows a peak RSS no pod sees.
//
// Pinning (2+ cores, taskset present): the proxy under test (sallyport, or the
// nginx proxy) runs alone on core 0; h2load, the origin nginx, the Node 1 GiB
// upstream and this process share core 1. Only one proxy is loaded at a time.
// Results: a table and ratio lines on stdout, JSON in bench/results/<timestamp>.json.

import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { spawnSync } from 'node:child_process'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { findNginx, startNginx, writeOriginConfig, writeProxyConfig } from './e2e/nginx.ts'
import { REPO_ROOT, startGateway, writeGatewayConfig } from './e2e/gateway.ts'
import type { FeatureSet } from './e2e/gateway.ts'
import { coreCount, freePort, hasTaskset, memoryCgroup, pinned, RssSampler, startProc, stopProc, waitForHttp, tailOf } from './e2e/procs.ts'
import type { MemoryCgroup, Proc, RssReport } from './e2e/procs.ts'
import { FASTIFY, scenarioBig, scenarioBodies, scenarioH1, scenarioH2, scenarioLatency, warmUp } from './e2e/scenarios.ts'
import type { BenchContext, BigBodyResult } from './e2e/scenarios.ts'
import { scenarioWorkers } from './e2e/workers.ts'
import type { WorkersRun } from './e2e/workers.ts'
import { runCompileBenches } from './e2e/compile-runner.ts'
import type { CompileBenchRun } from './e2e/compile-runner.ts'
import { summarizeProfile, formatProfile } from './e2e/profile.ts'
import type { ProfileSummary } from './e2e/profile.ts'
import { formatComparison, formatTable } from './e2e/report.ts'

const ALL = ['h1', 'h2', 'bodies', 'latency', 'big', 'workers', 'compile'] as const
type ScenarioName = typeof ALL[number]

const { values } = parseArgs({
  options: {
    only: { type: 'string' },
    duration: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '8' },
    'big-bytes': { type: 'string', default: '1g' },
    features: { type: 'string', default: 'all' },
    'access-log': { type: 'string', default: 'on' },
    'memory-limit': { type: 'string', default: '512m' },
    profile: { type: 'boolean', default: false },
    'no-pin': { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
})

if (values.help === true) {
  process.stdout.write(`usage: node bench/run.ts [--only ${ALL.join(',')}] [--duration S] [--rounds N] [--warmup S]
       [--big-bytes 1g|256m|...] [--features all|min] [--access-log on|off] [--memory-limit 512m|off]
       [--profile] [--no-pin]\n`)
  process.exit(0)
}

function parseBytes(text: string): number {
  const m = /^(\d+(?:\.\d+)?)([kmg]?)$/i.exec(text.trim())
  if (m === null) throw new Error(`--big-bytes: cannot read ${text}`)
  const mult = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[m[2].toLowerCase() as '' | 'k' | 'm' | 'g']
  return Math.round(Number(m[1]) * mult)
}

const selected = new Set<ScenarioName>(values.only === undefined ? ALL : values.only.split(',').map((s) => s.trim()).filter((s): s is ScenarioName => (ALL as readonly string[]).includes(s)))
const durationS = Math.max(1, Math.min(30, Number(values.duration)))
const rounds = Math.max(1, Math.min(5, Number(values.rounds)))
const warmupS = Math.max(0, Math.min(60, Number(values.warmup)))
const bigBytes = parseBytes(values['big-bytes'] ?? '1g')
const features: FeatureSet = values.features === 'min' ? 'min' : 'all'
const accessLog = values['access-log'] !== 'off'
const pin = values['no-pin'] !== true && hasTaskset && coreCount() >= 2
const memoryLimit = values['memory-limit'] === 'off' ? null : parseBytes(values['memory-limit'] ?? '512m')
const cgroup: MemoryCgroup | null = memoryLimit === null ? null : memoryCgroup(`sallyport-bench-${process.pid}`, memoryLimit)
const SUT_CORES = pin ? '0' : null
const LOAD_CORES = pin ? '1' : null

const started = new Date()
const procs: Proc[] = []
const log = (line: string): void => { process.stderr.write(`${line}\n`) }

function killAllSync(): void {
  for (const p of procs) if (!p.exited) p.child.kill('SIGKILL')
  cgroup?.remove()
}
process.on('exit', killAllSync)
process.on('SIGINT', () => { killAllSync(); process.exit(130) })
process.on('SIGTERM', () => { killAllSync(); process.exit(143) })

/** Share of all cores busy over `ms` (from /proc/stat), 0..100; NaN when unreadable. */
async function machineBusyPct(ms: number): Promise<number> {
  const read = (): number[] => {
    try {
      const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]
      return line.trim().split(/\s+/).slice(1).map(Number)
    } catch {
      return []
    }
  }
  const a = read()
  await new Promise((r) => setTimeout(r, ms))
  const b = read()
  if (a.length < 5 || b.length < 5) return NaN
  const total = b.reduce((x, y) => x + y, 0) - a.reduce((x, y) => x + y, 0)
  const idle = (b[3] + b[4]) - (a[3] + a[4])
  return total > 0 ? 100 * (1 - idle / total) : NaN
}

async function main(): Promise<number> {
  spawnSync('bash', [path.join(REPO_ROOT, 'scripts', 'system-deps.sh'), '--bench'], { stdio: 'inherit' })
  if (spawnSync('h2load', ['--version']).status !== 0) {
    log('bench: h2load is missing (Debian package nghttp2-client); cannot run the load scenarios')
    return 1
  }
  // This process (the 1 GiB client) belongs with the load generator.
  if (pin) spawnSync('taskset', ['-a', '-p', '-c', LOAD_CORES ?? '1', String(process.pid)], { stdio: 'ignore' })

  const tmp = mkdtempSync(path.join(os.tmpdir(), 'sallyport-bench-'))
  const notes: BenchContext['notes'] = []
  const nginx = findNginx()
  const originPorts = { h1: await freePort(), h2c: await freePort() }
  const proxyPorts = { h1: await freePort(), h2c: await freePort() }
  const bigPort = await freePort()
  const listenPort = await freePort()

  const bigUpstream = startProc('big-upstream', pinned(LOAD_CORES, [process.execPath, path.join(REPO_ROOT, 'bench', 'e2e', 'big-upstream.ts'), String(bigPort)]), path.join(tmp, 'big-upstream.log'))
  procs.push(bigUpstream)
  if (!(await waitForHttp(bigPort, '/small', 10_000, bigUpstream))) throw new Error(`big upstream did not start: ${tailOf(bigUpstream.logPath)}`)

  let originPort = originPorts.h1
  let proxyProc: Proc | null = null
  let gw: Proc | null = null
  const proxyPid = (): number | null => proxyProc?.child.pid ?? null
  const gwPid = (): number | null => (gw === null || gw.exited ? null : gw.child.pid ?? null)
  let haveNginx = false
  if (nginx !== null) {
    procs.push(await startNginx(nginx, 'origin', writeOriginConfig(tmp, originPorts), tmp, originPorts.h1, LOAD_CORES))
    proxyProc = await startNginx(nginx, 'proxy', writeProxyConfig(tmp, proxyPorts, originPorts), tmp, proxyPorts.h1, SUT_CORES)
    procs.push(proxyProc)
    haveNginx = true
  } else {
    // No nginx: the Node upstream doubles as the origin, and there is no nginx-proxy baseline.
    originPort = bigPort
    notes.push({ scenario: 'setup', text: 'nginx not installed: origin is the Node upstream, no nginx-proxy comparison, no direct h2c baseline' })
  }

  // The Node floor: a minimal undici-based proxy on the same core as the other proxies.
  const nodeProxyPort = await freePort()
  const nodeProxy = startProc('node-minimal', pinned(SUT_CORES, [process.execPath, path.join(REPO_ROOT, 'bench', 'e2e', 'node-proxy.ts'), String(nodeProxyPort), String(originPort)]), path.join(tmp, 'node-proxy.log'))
  procs.push(nodeProxy)
  const haveNodeProxy = await waitForHttp(nodeProxyPort, '/small', 10_000, nodeProxy)
  if (!haveNodeProxy) notes.push({ scenario: 'setup', text: `minimal Node proxy did not start: ${tailOf(nodeProxy.logPath)}` })
  // The issue's other reference for the h1 throughput target: fastify with @fastify/reply-from, same core.
  const fastifyPort = await freePort()
  const fastify = startProc(FASTIFY, pinned(SUT_CORES, [process.execPath, path.join(REPO_ROOT, 'bench', 'e2e', 'fastify-proxy.ts'), String(fastifyPort), String(originPort)]), path.join(tmp, 'fastify-proxy.log'))
  procs.push(fastify)
  const haveFastify = await waitForHttp(fastifyPort, '/small', 10_000, fastify)
  if (!haveFastify) notes.push({ scenario: 'setup', text: `fastify with @fastify/reply-from did not start: ${tailOf(fastify.logPath)}` })

  const configDir = path.join(tmp, 'config')
  writeGatewayConfig({ dir: configDir, listenPort, originPort, bigPort, features })
  const ctx: BenchContext = {
    tmp, durationS, rounds, loadCores: LOAD_CORES, bigBytes,
    direct: { name: 'direct', port: originPort },
    directH2c: haveNginx ? { name: 'direct', port: originPorts.h2c } : null,
    nginxProxy: haveNginx ? { name: 'nginx-proxy', port: proxyPorts.h1, pid: proxyPid } : null,
    nginxProxyH2c: haveNginx ? { name: 'nginx-proxy', port: proxyPorts.h2c, pid: proxyPid } : null,
    nodeProxy: haveNodeProxy ? { name: 'node-minimal', port: nodeProxyPort, pid: () => nodeProxy.child.pid ?? null } : null,
    fastifyProxy: haveFastify ? { name: FASTIFY, port: fastifyPort, pid: () => fastify.child.pid ?? null } : null,
    sallyport: { name: 'sallyport', port: listenPort, pid: gwPid },
    bigDirect: { name: 'direct', port: bigPort },
    oneMiBFile: path.join(tmp, 'upload-1m.bin'),
    originStatusPort: haveNginx ? originPorts.h1 : null,
    rows: [], comparisons: [], notes, peakH1Rps: null, peakH1ByTarget: new Map(),
  }
  writeFileSync(ctx.oneMiBFile, Buffer.alloc(1024 * 1024, 0x75))

  const memoryNote = cgroup !== null
    ? `sallyport in a ${Math.round(cgroup.limitBytes / 1048576)} MiB memory cgroup (deploy/file-mode's limit; node sizes its heap from it)`
    : memoryLimit === null ? 'sallyport without a memory limit' : 'sallyport without a memory limit (no memory cgroup could be made here: needs root and a writable memory controller)'
  log(`bench: tmp ${tmp}; ${memoryNote}; pinning ${pin ? 'sallyport/nginx-proxy on core 0, h2load+origin+client on core 1' : 'off'}; features ${features}; access log ${accessLog ? 'on' : 'off'}`)
  // Other work on the machine skews every number: measure it before loading anything.
  const backgroundBusy = await machineBusyPct(2000)
  log(`bench: load average before: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}; machine busy before start: ${backgroundBusy.toFixed(0)}%`)
  if (backgroundBusy > 15) notes.push({ scenario: 'setup', text: `the machine was ${backgroundBusy.toFixed(0)}% busy before the bench started (other processes): absolute numbers and ratios are unreliable; rerun on a quiet machine` })

  const single: ScenarioName[] = ['h1', 'h2', 'bodies', 'latency', 'big']
  let rss: RssReport | null = null
  let idleRss: number | null = null
  let big: BigBodyResult | null = null
  let profile: ProfileSummary | null = null
  const profDir = values.profile === true ? path.join(tmp, 'cpuprof') : null
  if (single.some((s) => selected.has(s))) {
    if (profDir !== null) mkdirSync(profDir, { recursive: true })
    const samplers: RssSampler[] = []
    let restarts = 0
    // A crash is a finding, not the end of the run: note it, start a fresh
    // sallyport (new log file) and go on with the next scenario.
    const launch = async (): Promise<Proc> => {
      const p = await startGateway({
        configDir, listenPort, adminPort: await freePort(), workers: null, cores: SUT_CORES, accessLog,
        logPath: path.join(tmp, restarts === 0 ? 'sallyport.log' : `sallyport-${restarts}.log`), cpuProfDir: profDir, memoryCgroup: cgroup,
      })
      procs.push(p)
      samplers.push(new RssSampler(p.child.pid ?? 0, 200))
      return p
    }
    try {
      gw = await launch()
      idleRss = samplers[0].report().firstMiB
      const steps: Array<[ScenarioName, () => Promise<unknown>]> = [
        ['h1', () => scenarioH1(ctx)],
        ['h2', () => scenarioH2(ctx)],
        ['bodies', () => scenarioBodies(ctx)],
        ['latency', () => scenarioLatency(ctx)],
        ['big', async () => { big = await scenarioBig(ctx, gw?.child.pid ?? 0) }],
      ]
      let warm = false
      for (const [name, run] of steps) {
        if (!selected.has(name)) continue
        if (gw.exited) {
          restarts++
          gw = await launch()
          warm = false
        }
        if (!warm && name !== 'big') {
          log(`bench: warm-up, ${warmupS} s of h1 small load per proxy`)
          await warmUp(ctx, warmupS)
          warm = true
        }
        log(`bench: ${name}`)
        try { await run() } catch (err) { notes.push({ scenario: name, text: `failed: ${err instanceof Error ? err.message : String(err)}` }) }
        if (gw.exited) notes.push({ scenario: name, text: `sallyport exited during ${name}; log tail:\n${tailOf(gw.logPath, 1200)}` })
      }
      const reports = samplers.map((x) => x.stop())
      rss = reports.reduce((a, b) => (b.peakProcessMiB > a.peakProcessMiB ? b : a))
    } catch (err) {
      notes.push({ scenario: 'setup', text: err instanceof Error ? err.message : String(err) })
    } finally {
      for (const x of samplers) x.stop()
      if (gw !== null) await stopProc(gw, 15_000)
    }
    if (profDir !== null) {
      const files = readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile'))
      if (files.length > 0) profile = summarizeProfile(path.join(profDir, files[0]), REPO_ROOT)
      else notes.push({ scenario: 'profile', text: 'no .cpuprofile written (did sallyport exit cleanly on SIGTERM?)' })
    }
  }

  let workers: WorkersRun[] = []
  if (selected.has('workers')) {
    log('bench: workers')
    workers = await scenarioWorkers(ctx, configDir, accessLog, [1, 2])
  }

  for (const p of procs) await stopProc(p)
  cgroup?.remove()

  let compile: CompileBenchRun[] = []
  if (selected.has('compile')) {
    log('bench: compile')
    compile = await runCompileBenches(path.join(REPO_ROOT, 'bench'), 180_000)
    if (compile.length === 0) notes.push({ scenario: 'compile', text: 'no bench/compile*.ts present' })
  }

  // ───────────── report ─────────────
  const out: string[] = []
  out.push(`sallyport end-to-end bench, ${started.toISOString()}, node ${process.version}, ${os.cpus().length} cpus (${os.cpus()[0]?.model ?? '?'})`)
  out.push(`pinning: ${pin ? 'proxy under test on core 0; h2load, origin nginx, Node upstream, bench client on core 1' : 'none'}; features ${features}; access log ${accessLog ? 'on' : 'off'}; ${warmupS} s untimed warm-up per proxy, then ${rounds} round(s) x ${durationS} s, median round kept`)
  out.push(`memory: ${memoryNote}`)
  out.push(`upstream: ${haveNginx ? `nginx ${nginxVersion(nginx)} (1 worker)` : 'Node (nginx missing)'}; load: ${h2loadVersion()}; machine busy before start ${backgroundBusy.toFixed(0)}%; load average after: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`)
  out.push('')
  if (ctx.rows.length > 0) out.push(formatTable(ctx.rows), '')
  for (const c of ctx.comparisons) out.push(formatComparison(c))
  if (rss !== null) {
    const peak = Math.max(rss.peakProcessMiB, rss.rootHwmMiB)
    out.push(`sallyport RSS: ${idleRss ?? '?'} MiB idle after start; peak ${peak} MiB over the run (VmRSS samples and VmHWM) (target < 150 MiB)${peak < 150 ? ' ok' : ' MISSED'}`)
    out.push(`  of which at most ${rss.rootPeakAnonMiB} MiB anonymous (heap, malloc) and ${rss.rootPeakFileMiB} MiB file-backed (the node binary's pages: clean, shared, reclaimable)`)
    const b = rss.atPeak
    if (b !== null) out.push(`  at its peak (${b.totalMiB} MiB): node binary ${b.binaryMiB}, shared libraries ${b.librariesMiB}, malloc arenas ${b.mallocMiB}, V8 heap and other anonymous ${b.otherAnonMiB} MiB`)
  }
  if (big !== null) {
    const b: BigBodyResult = big
    out.push(`sallyport RSS around the ${(bigBytes / 1024 ** 3).toFixed(2)} GiB transfers: before ${b.rssBeforeMiB} MiB, peak ${b.rssPeakMiB} MiB, after ${b.rssAfterMiB} MiB`)
  }
  for (const w of workers) if (w.error === null) out.push(`--workers ${w.workers}: ${Math.round(w.rps)} rps, p99 ${w.p99Ms.toFixed(3)} ms, peak RSS all processes ${w.peakTreeMiB} MiB`)
  for (const c of compile) out.push('', `${c.file} (exit ${c.exitCode}, ${c.seconds.toFixed(1)} s):`, c.output.split('\n').slice(-40).join('\n'))
  if (profile !== null) out.push('', formatProfile(profile))
  if (notes.length > 0) out.push('', 'notes:', ...notes.map((n) => `  [${n.scenario}] ${n.text}`))
  process.stdout.write(`${out.join('\n')}\n`)

  const resultsDir = path.join(REPO_ROOT, 'bench', 'results')
  mkdirSync(resultsDir, { recursive: true })
  const file = path.join(resultsDir, `${started.toISOString().replace(/[:.]/g, '-')}.json`)
  writeFileSync(file, JSON.stringify({
    startedAt: started.toISOString(), node: process.version, cpus: os.cpus().length, pinned: pin, features, accessLog,
    rounds, durationS, memoryLimitBytes: cgroup?.limitBytes ?? null, upstream: haveNginx ? 'nginx' : 'node', rows: ctx.rows, comparisons: ctx.comparisons,
    rss, idleRssMiB: idleRss, big, workers, compile, profile, notes, backgroundBusyPct: backgroundBusy, loadAverageAfter: os.loadavg(),
  }, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), 2))
  process.stdout.write(`results: ${path.relative(REPO_ROOT, file)}\n`)
  if (values.profile !== true && process.env.SALLYPORT_BENCH_KEEP !== '1') rmSync(tmp, { recursive: true, force: true })
  else process.stdout.write(`profiles and logs kept in ${tmp}\n`)
  return 0
}

function nginxVersion(bin: string | null): string {
  if (bin === null) return '?'
  const r = spawnSync(bin, ['-v'], { encoding: 'utf8' })
  return /nginx\/([\d.]+)/.exec(r.stderr)?.[1] ?? '?'
}

function h2loadVersion(): string {
  const r = spawnSync('h2load', ['--version'], { encoding: 'utf8' })
  return r.stdout.trim().replace(/^h2load /, 'h2load ')
}

main().then((code) => { killAllSync(); process.exit(code) }, (err: unknown) => {
  killAllSync()
  process.stderr.write(`bench failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`)
  process.exit(1)
})
