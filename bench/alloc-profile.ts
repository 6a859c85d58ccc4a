// `node bench/alloc-profile.ts [--seconds 5] [--clients 16] [--h2] [--rate N] [--callers FUNCTION] [--survivors] [--access-log on|off]`
// — where sallyport's garbage comes from, per request.
//
// Starts the nginx origin (core 1) and sallyport (core 0, the bench's config
// with every feature on, in the bench's memory cgroup where the machine allows
// one) with the inspector on a loopback port, warms it up, then samples
// allocations with V8's sampling heap profiler, objects already collected
// included (what a minor GC sweeps is what this measures), while h2load keeps
// it busy. Prints bytes allocated per request and the top allocation sites by
// function and by file. Fewer bytes per request means fewer minor GCs: less
// CPU and fewer requests caught behind a GC pause (bench/RESULTS.md).
//
// --rate N samples at a fixed rate instead of saturation: N req/s from
// --clients independent clients with one stream each (as bench/flags-ab.ts and
// run.ts's fixed-rate scenarios offer it), where what outlives a minor GC
// differs (a queued stream lives long under saturation, not at a fixed rate).
//
// --survivors samples only what outlives the minor GCs (objects a minor GC
// freed are left out): what gets promoted to the old generation, whose growth
// sets how often a full (mark-compact) GC runs, the longest pauses there are.

import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { findNginx, startNginx, writeOriginConfig } from './e2e/nginx.ts'
import { REPO_ROOT, startGateway, writeGatewayConfig } from './e2e/gateway.ts'
import { freePort, memoryCgroup, stopProc } from './e2e/procs.ts'
import type { Proc } from './e2e/procs.ts'
import { runH2load, runH2loadSpread } from './e2e/h2load.ts'
import { shortUrl } from './e2e/profile.ts'

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    clients: { type: 'string', default: '16' },
    h2: { type: 'boolean', default: false },
    callers: { type: 'string' },
    survivors: { type: 'boolean', default: false },
    'access-log': { type: 'string', default: 'on' },
    rate: { type: 'string' },
  },
})
const seconds = Number(values.seconds)
const clients = Number(values.clients)
const rate = values.rate === undefined ? null : Number(values.rate)
if (!(seconds > 0 && seconds <= 60) || !(clients > 0 && clients <= 256) || (rate !== null && !(rate >= clients && rate <= 1e6))) {
  process.stderr.write('usage: node bench/alloc-profile.ts [--seconds 1..60] [--clients 1..256] [--h2] [--rate N (>= clients)] [--callers FUNCTION] [--survivors] [--access-log on|off]\n')
  process.exit(2)
}

interface CallFrame { readonly functionName: string, readonly url: string, readonly lineNumber: number }
interface SamplingNode { readonly callFrame: CallFrame, readonly selfSize: number, readonly children: readonly SamplingNode[] }

/** A minimal Chrome DevTools Protocol client over the inspector's WebSocket. */
class Inspector {
  readonly #ws: WebSocket
  readonly #pending = new Map<number, (result: unknown) => void>()
  #id = 0

  private constructor(ws: WebSocket) {
    this.#ws = ws
    ws.addEventListener('message', (e) => {
      const m = JSON.parse(String(e.data)) as { id?: number, result?: unknown }
      if (m.id !== undefined) this.#pending.get(m.id)?.(m.result)
    })
  }

  static async connect(port: number): Promise<Inspector> {
    const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json() as Array<{ webSocketDebuggerUrl: string }>
    const ws = new WebSocket(targets[0].webSocketDebuggerUrl)
    await new Promise((resolve, reject) => {
      ws.addEventListener('open', resolve, { once: true })
      ws.addEventListener('error', reject, { once: true })
    })
    return new Inspector(ws)
  }

  call(method: string, params: object = {}): Promise<unknown> {
    const id = ++this.#id
    return new Promise((resolve) => {
      this.#pending.set(id, resolve)
      this.#ws.send(JSON.stringify({ id, method, params }))
    })
  }

  close(): void {
    this.#ws.close()
  }
}

async function main(): Promise<number> {
  const nginx = findNginx()
  if (nginx === null) {
    process.stderr.write('alloc-profile: nginx is missing (scripts/system-deps.sh --bench installs it)\n')
    return 1
  }
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'sallyport-alloc-'))
  const procs: Proc[] = []
  const cgroup = memoryCgroup('sallyport-alloc', 512 * 1024 * 1024)
  try {
    const originPorts = { h1: await freePort(), h2c: await freePort() }
    procs.push(await startNginx(nginx, 'origin', writeOriginConfig(tmp, originPorts), tmp, originPorts.h1, '1'))
    const listenPort = await freePort()
    const inspectPort = await freePort()
    const configDir = path.join(tmp, 'config')
    writeGatewayConfig({ dir: configDir, listenPort, originPort: originPorts.h1, bigPort: originPorts.h1, features: 'all' })
    procs.push(await startGateway({
      configDir, listenPort, adminPort: await freePort(), workers: null, cores: '0', accessLog: values['access-log'] !== 'off',
      logPath: path.join(tmp, 'sallyport.log'), cpuProfDir: null, memoryCgroup: cgroup, extraNodeFlags: [`--inspect=127.0.0.1:${inspectPort}`, ...(values.survivors ? ['--expose-gc'] : [])],
    }))

    const load = (durationS: number): ReturnType<typeof runH2load> => runH2load({
      url: `http://127.0.0.1:${listenPort}/small`, h1: values.h2 !== true, clients: values.h2 === true ? 8 : clients,
      streams: values.h2 === true ? 16 : 1, durationS, warmupS: 0, rpsPerClient: null, dataFile: null, cores: '1', tmpDir: tmp, label: 'alloc',
    })
    const atRate = (durationS: number, perSecond: number): ReturnType<typeof runH2load> => runH2loadSpread({
      url: `http://127.0.0.1:${listenPort}/small`, h1: values.h2 !== true, clients, streams: 1, durationS, warmupS: 0,
      rpsPerClient: Math.max(1, Math.round(perSecond / clients)), dataFile: null, cores: '1', tmpDir: tmp, label: 'alloc',
    })
    await load(6) // warm-up: the JIT's steady state, a grown young generation

    const inspector = await Inspector.connect(inspectPort)
    await inspector.call('HeapProfiler.enable')
    await inspector.call('HeapProfiler.startSampling', { samplingInterval: 512, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: !values.survivors })
    const result = rate === null ? await load(seconds) : await atRate(seconds, rate)
    if (values.survivors) {
      // What the young generation still holds when the load stops is mostly
      // garbage no minor GC has visited yet: two of them (the second promotes
      // what the first kept) leave only what outlives minor GCs.
      for (let i = 0; i < 2; i++) await inspector.call('Runtime.evaluate', { expression: "gc({ type: 'minor' })" })
    }
    const { profile } = await inspector.call('HeapProfiler.stopSampling') as { profile: { head: SamplingNode } }
    inspector.close()

    const byFunction = new Map<string, number>()
    const byFile = new Map<string, number>()
    let total = 0
    // --callers NAME: whose calls the allocations of functions named NAME serve (two frames up).
    const byCaller = new Map<string, number>()
    const walk = (n: SamplingNode, stack: readonly string[]): void => {
      const f = n.callFrame
      const file = shortUrl(f.url, REPO_ROOT)
      const name = `${f.functionName === '' ? '(anonymous)' : f.functionName} ${file}${f.url === '' ? '' : `:${f.lineNumber + 1}`}`
      total += n.selfSize
      byFunction.set(name, (byFunction.get(name) ?? 0) + n.selfSize)
      byFile.set(file, (byFile.get(file) ?? 0) + n.selfSize)
      if (values.callers !== undefined && f.functionName === values.callers && n.selfSize > 0) {
        const key = stack.slice(-2).reverse().join(' <- ')
        byCaller.set(key, (byCaller.get(key) ?? 0) + n.selfSize)
      }
      const next = [...stack, name]
      for (const c of n.children) walk(c, next)
    }
    walk(profile.head, [])
    const out: string[] = []
    out.push(`sallyport ${values.survivors ? 'allocations that outlived minor GCs' : 'allocations'} under ${rate !== null ? `${values.h2 === true ? 'h2c' : 'HTTP/1.1'} at ${rate} req/s (${clients} independent clients, one stream each)` : values.h2 === true ? 'h2c (8 connections x 16 streams)' : `HTTP/1.1 (${clients} keep-alive clients)`}, ${seconds} s sampled`)
    out.push(`${result.requests} requests at ${Math.round(result.rps)} req/s; ${(total / 1048576).toFixed(1)} MiB allocated (sampled estimate): ${(total / Math.max(1, result.requests) / 1024).toFixed(1)} KiB per request`)
    const top = (m: Map<string, number>, n: number): void => {
      for (const [k, v] of [...m].sort((a, b) => b[1] - a[1]).slice(0, n)) out.push(`  ${(100 * v / total).toFixed(1).padStart(5)} %  ${k}`)
    }
    out.push('by function (self):')
    top(byFunction, 25)
    out.push('by file:')
    top(byFile, 12)
    if (values.callers !== undefined) {
      out.push(`callers of ${values.callers} (caller <- its caller):`)
      top(byCaller, 15)
    }
    process.stdout.write(out.join('\n') + '\n')
    return 0
  } finally {
    for (const p of procs.reverse()) await stopProc(p)
    cgroup?.remove()
    rmSync(tmp, { recursive: true, force: true })
  }
}

process.exitCode = await main()
