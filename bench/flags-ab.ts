// `node bench/flags-ab.ts --variant 'name=--flag --flag2' [--variant ...]`
//
// A/B of Node/V8 flags (or environment) for sallyport at one fixed rate: each
// variant is its own sallyport process (same build, same config, same memory
// cgroup limit, pinned to core 0 like bench/run.ts), loaded one at a time in
// interleaved rounds (A B C A B C ...) at half of the first variant's own peak
// by the same independent clients as run.ts's latency scenario. Prints, per
// variant, the p99 of every round and its median minus the direct p99, and the
// CPU per request. Made for questions run.ts is too coarse for ("does this GC
// flag move the p99 tail?"): a single run of run.ts has one sallyport.
//
//   node bench/flags-ab.ts --variant 'base=' --variant 'noscav=--no-parallel-scavenge'
//        [--rounds 5] [--duration 6] [--rate N] [--access-log on|off] [--h2]
//
// `--h2` loads h2c instead (prior knowledge, one stream per client; the peak
// from 8 connections of 16 streams, as run.ts's h2c rounds). There is no direct
// baseline then (the origin nginx answers one-stream h2c connections only after
// its delayed ACKs), so the p99 is printed as measured, not as added.
//
// A variant's text after '=' is Node flags added after the image's own
// (--max-semi-space-size=8); a word 'NAME=VALUE' sets an environment variable
// instead, and 'BIN=path/to/dist/bin/sallyport.js' runs another build (an older
// commit's, say: `git worktree add`, `node scripts/build.ts` there) to A/B code,
// and 'serve:--flag=value' passes a flag to `sallyport serve`
// ('serve:--http1-client=undici'). Every variant's process runs for the whole
// A/B, pinned to core 0 like the others: one that burns CPU while it is not
// the one loaded (a busy-polling experiment, say) skews every other's rounds.

import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { findNginx, startNginx, writeOriginConfig } from './e2e/nginx.ts'
import { startGateway, writeGatewayConfig } from './e2e/gateway.ts'
import { coreCount, cpuMsOf, freePort, hasTaskset, memoryCgroup, stopProc } from './e2e/procs.ts'
import type { MemoryCgroup, Proc } from './e2e/procs.ts'
import { runH2load, runH2loadSpread } from './e2e/h2load.ts'
import type { LoadResult } from './e2e/h2load.ts'
import { median } from './e2e/stream-rates.ts'

const { values } = parseArgs({
  options: {
    variant: { type: 'string', multiple: true, default: [] },
    rounds: { type: 'string', default: '5' },
    duration: { type: 'string', default: '6' },
    rate: { type: 'string' },
    clients: { type: 'string', default: '16' },
    'access-log': { type: 'string', default: 'on' },
    h2: { type: 'boolean', default: false },
  },
})

interface Variant { readonly name: string, readonly flags: string[], readonly serveArgs: string[], readonly env: Record<string, string>, readonly bin: string | undefined }

function parseVariant(text: string): Variant {
  const eq = text.indexOf('=')
  if (eq <= 0) throw new Error(`--variant ${text}: want name=flags`)
  const words = text.slice(eq + 1).split(' ').filter((w) => w !== '')
  const env: Record<string, string> = {}
  const flags: string[] = []
  const serveArgs: string[] = []
  let bin: string | undefined
  for (const w of words) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(w)
    if (w.startsWith('serve:')) serveArgs.push(w.slice('serve:'.length))
    else if (m === null) flags.push(w)
    else if (m[1] === 'BIN') bin = path.resolve(m[2])
    else env[m[1]] = m[2]
  }
  return { name: text.slice(0, eq), flags, serveArgs, env, bin }
}

const variants = (values.variant ?? []).map(parseVariant)
if (variants.length === 0) variants.push({ name: 'base', flags: [], serveArgs: [], env: {}, bin: undefined })
const rounds = Math.max(1, Math.min(20, Number(values.rounds)))
const durationS = Math.max(2, Math.min(60, Number(values.duration)))
const clients = Math.max(1, Math.min(64, Number(values.clients)))
const h1 = values.h2 !== true
const pin = hasTaskset && coreCount() >= 2
const SUT = pin ? '0' : null
const LOAD = pin ? '1' : null

const procs: Proc[] = []
const cgroups: MemoryCgroup[] = []
process.on('exit', () => {
  for (const p of procs) if (!p.exited) p.child.kill('SIGKILL')
  for (const c of cgroups) c.remove()
})

async function main(): Promise<void> {
  const nginx = findNginx()
  if (nginx === null) throw new Error('nginx is not installed (bash scripts/system-deps.sh --bench)')
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'sallyport-flags-ab-'))
  const originPorts = { h1: await freePort(), h2c: await freePort() }
  procs.push(await startNginx(nginx, 'origin', writeOriginConfig(tmp, originPorts), tmp, originPorts.h1, LOAD))
  const gws: Array<{ v: Variant, port: number, proc: Proc }> = []
  for (const [i, v] of variants.entries()) {
    const listenPort = await freePort()
    const dir = path.join(tmp, `config-${i}`)
    writeGatewayConfig({ dir, listenPort, originPort: originPorts.h1, bigPort: originPorts.h1, features: 'all' })
    const cg = memoryCgroup(`sallyport-ab-${process.pid}-${i}`, 512 * 1024 * 1024)
    if (cg !== null) cgroups.push(cg)
    const saved = { ...process.env }
    Object.assign(process.env, v.env)
    const proc = await startGateway({
      configDir: dir, listenPort, adminPort: await freePort(), workers: null, cores: SUT, accessLog: values['access-log'] !== 'off',
      logPath: path.join(tmp, `sallyport-${i}.log`), cpuProfDir: null, memoryCgroup: cg, extraNodeFlags: v.flags, serveArgs: v.serveArgs, bin: v.bin,
    })
    process.env = saved
    procs.push(proc)
    gws.push({ v, port: listenPort, proc })
  }
  const url = (port: number): string => `http://127.0.0.1:${port}/small`
  const closed = (port: number, label: string, s: number): Promise<LoadResult> => runH2load({
    h1, clients: h1 ? 32 : 8, streams: h1 ? 1 : 16, durationS: s, warmupS: 0, rpsPerClient: null, dataFile: null, url: url(port), label, tmpDir: tmp, cores: LOAD,
  })
  for (const g of gws) await closed(g.port, `warm-up ${g.v.name}`, 8)
  let rate = values.rate === undefined ? NaN : Number(values.rate)
  if (!Number.isFinite(rate)) {
    const peaks: number[] = []
    for (let i = 0; i < 3; i++) peaks.push((await closed(gws[0].port, 'peak', 4)).rps)
    const peak = median(peaks)
    rate = peak / 2
    process.stderr.write(`peak of ${gws[0].v.name}: ${Math.round(peak)} req/s; fixed rate ${Math.round(rate)}\n`)
  }
  const perClient = Math.max(1, Math.round(rate / clients))
  const atRate = (port: number, label: string): Promise<LoadResult> => runH2loadSpread({
    h1, clients, streams: 1, durationS, warmupS: 1, rpsPerClient: perClient, dataFile: null, url: url(port), label, tmpDir: tmp, cores: LOAD,
  })
  const p99: Map<string, number[]> = new Map()
  const cpu: Map<string, number[]> = new Map()
  const cpuUser: Map<string, number[]> = new Map()
  const push = (m: Map<string, number[]>, k: string, x: number): void => { m.set(k, [...(m.get(k) ?? []), x]) }
  for (let r = 0; r < rounds; r++) {
    const d = h1 ? await atRate(originPorts.h1, 'direct') : null
    push(p99, 'direct', d?.p99Ms ?? 0)
    for (const g of gws) {
      const pid = g.proc.child.pid ?? 0
      const before = cpuMsOf(pid)
      const res = await atRate(g.port, g.v.name)
      const after = cpuMsOf(pid)
      const per = (ms: number): number => (ms * 1000) / (res.rps * (durationS + 1))
      const [user, sys] = [per(after[0] - before[0]), per(after[1] - before[1])]
      push(p99, g.v.name, res.p99Ms)
      push(cpu, g.v.name, user + sys)
      push(cpuUser, g.v.name, user)
      process.stderr.write(`round ${r + 1} ${g.v.name}: ${Math.round(res.rps)} req/s p99 ${res.p99Ms.toFixed(3)} ms, ${(user + sys).toFixed(0)} µs CPU/req (user ${user.toFixed(0)}) ${d === null ? '' : ` (direct ${d.p99Ms.toFixed(3)})`}\n`)
    }
  }
  const directMed = median(p99.get('direct') ?? [0])
  process.stdout.write(`fixed rate ${perClient * clients} req/s ${h1 ? 'HTTP/1.1' : 'h2c'}, ${clients} independent clients, ${rounds} rounds of ${durationS} s; ${h1 ? `direct p99 median ${directMed.toFixed(3)} ms` : 'no direct baseline: p99 as measured'}\n`)
  for (const g of gws) {
    const xs = p99.get(g.v.name) ?? []
    process.stdout.write(`${g.v.name.padEnd(12)} p99 ${h1 ? 'added ' : ''}(median) ${h1 ? '+' : ''}${(median(xs) - directMed).toFixed(3)} ms; rounds ${xs.map((x) => x.toFixed(2)).join(' ')}; CPU ${median(cpu.get(g.v.name) ?? [0]).toFixed(0)} µs/req (user ${median(cpuUser.get(g.v.name) ?? [0]).toFixed(0)}); flags ${[...Object.entries(g.v.env).map(([k, v]) => `${k}=${v}`), ...g.v.flags, ...g.v.serveArgs].join(' ') || '(image defaults)'}${g.v.bin === undefined ? '' : `; ${g.v.bin}`}\n`)
  }
  for (const p of procs) await stopProc(p)
  if (process.env.SALLYPORT_BENCH_KEEP === '1') process.stderr.write(`kept ${tmp} (sallyport-N.log per variant)\n`)
  else rmSync(tmp, { recursive: true, force: true })
}

main().then(() => process.exit(0), (err: unknown) => {
  process.stderr.write(`flags-ab: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`)
  process.exit(1)
})
