// Byte-stream throughput pieces shared by bench/tcp.ts and bench/connect.ts:
// an upstream that sinks uploads (answering the byte count on the client's FIN)
// and sources downloads ("down <bytes>\n"), the two rate measurements over
// any way of opening a socket (direct, through a TCP listener, through a
// CONNECT tunnel), each bounded by a byte count and a time limit, and the
// whole run (runThroughputBench): sallyport started on the bench's manifests,
// alternating direct and proxied runs, medians, ratios and CPU per GiB.

import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { cpuMsOfTree, freePort, listen, startProc, stopProc, waitForHttp } from './procs.ts'
import { sallyportCommand } from './gateway.ts'

export const CHUNK = Buffer.alloc(256 * 1024, 0x5a)

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)] as number
}

/** Upload sink: counts, answers the byte count on FIN. Download source: on "down <bytes>\n", sends that many, then ends. */
export function upstream(): net.Server {
  return net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {})
    let mode: 'unknown' | 'up' | 'down' = 'unknown'
    let count = 0
    s.on('data', (c: Buffer) => {
      if (mode === 'unknown') {
        const text = c.subarray(0, 32).toString('latin1')
        if (text.startsWith('down ')) {
          mode = 'down'
          void send(s, Number(text.slice(5, text.indexOf('\n'))))
          return
        }
        mode = 'up'
      }
      count += c.length
    })
    s.on('end', () => { if (mode !== 'down') s.end(String(count)) })
  })
}

async function send(s: net.Socket, bytes: number): Promise<void> {
  let left = bytes
  while (left > 0 && !s.destroyed) {
    const n = Math.min(left, CHUNK.length)
    left -= n
    if (!s.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) await new Promise((r) => s.once('drain', r))
  }
  s.end()
}

/** MiB/s of one upload of `sizeMiB` (bytes confirmed by the upstream), cut off after `limitMs`. */
export async function uploadRate(open: () => Promise<net.Socket>, sizeMiB: number, limitMs: number): Promise<number> {
  const s = await open()
  const total = sizeMiB * 1024 * 1024
  const start = performance.now()
  let answer = ''
  const done = new Promise<void>((resolve) => {
    s.on('data', (c: Buffer) => { answer += c.toString() })
    s.on('end', () => resolve())
    s.on('close', () => resolve())
  })
  let sent = 0
  const deadline = start + limitMs
  while (sent < total && performance.now() < deadline) {
    sent += CHUNK.length
    if (!s.write(CHUNK)) await new Promise((r) => s.once('drain', r))
  }
  s.end()
  await done
  s.destroy()
  const confirmed = Number(answer)
  if (!(confirmed > 0)) throw new Error(`upload: upstream confirmed ${answer}`)
  return confirmed / 1024 / 1024 / ((performance.now() - start) / 1000)
}

/** MiB/s of one download of `sizeMiB`, cut off after `limitMs` (the rate then counts what arrived). */
export async function downloadRate(open: () => Promise<net.Socket>, sizeMiB: number, limitMs: number): Promise<number> {
  const s = await open()
  const total = sizeMiB * 1024 * 1024
  const start = performance.now()
  let got = 0
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => { s.destroy(); resolve() }, limitMs)
    s.on('data', (c: Buffer) => { got += c.length })
    s.on('end', () => { clearTimeout(timer); resolve() })
    s.on('close', () => { clearTimeout(timer); resolve() })
    s.write(`down ${total}\n`)
  })
  s.destroy()
  if (got === 0) throw new Error('download: nothing received')
  return got / 1024 / 1024 / ((performance.now() - start) / 1000)
}

/** A plain TCP connection to 127.0.0.1:port (half-open allowed). */
export function connectPlain(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, allowHalfOpen: true }, () => resolve(s))
    s.once('error', reject)
  })
}

export interface ThroughputBench {
  /** First words of the report ("TCP throughput"). */
  readonly title: string
  /** Temporary directory prefix. */
  readonly name: string
  /** The configuration: sallyport listens on gatewayPort and reaches the upstream on upstreamPort. */
  readonly manifests: (gatewayPort: number, upstreamPort: number) => string
  /** A socket to the upstream through sallyport on gatewayPort. */
  readonly openProxied: (gatewayPort: number) => Promise<net.Socket>
  readonly sizeMiB: number
}

const RUNS = 3
const LIMIT_MS = 15_000

/**
 * Starts the real CLI on `bench.manifests`, then for upload and download:
 * RUNS alternating runs (direct, proxied, ...) of sizeMiB, each cut off after
 * LIMIT_MS; prints each run, the medians, the ratio (target >= 0.7) and CPU
 * per GiB of sallyport's process and of this one (both ends of the copy).
 */
export async function runThroughputBench(bench: ThroughputBench): Promise<void> {
  const server = upstream()
  const upstreamPort = await listen(server)
  const [gw, admin] = [await freePort(), await freePort()]
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `sallyport-bench-${bench.name}-`))
  fs.writeFileSync(path.join(dir, 'all.yaml'), bench.manifests(gw, upstreamPort))
  const proc = startProc('sallyport', [...sallyportCommand(), 'serve', '--config', dir, '--bind', '127.0.0.1',
    '--admin', `127.0.0.1:${admin}`, '--access-log', 'off', '--log-level', 'warn', '--allow-destination-cidr', '127.0.0.0/8'], path.join(dir, 'sallyport.log'))
  const direct = (): Promise<net.Socket> => connectPlain(upstreamPort)
  const proxied = (): Promise<net.Socket> => bench.openProxied(gw)
  try {
    if (!await waitForHttp(admin, '/readyz', 20_000, proc)) throw new Error(`sallyport did not become ready: ${fs.readFileSync(path.join(dir, 'sallyport.log'), 'utf8').slice(-2000)}`)
    await uploadRate(proxied, bench.sizeMiB, LIMIT_MS) // warm-up (JIT, first connection)
    console.log(`${bench.title}, ${bench.sizeMiB} MiB per run, median of ${RUNS} alternating runs (cut off at ${LIMIT_MS / 1000} s)`)
    const ratios: string[] = []
    for (const [name, rate] of [['upload', uploadRate], ['download', downloadRate]] as const) {
      const directRates: number[] = []
      const proxiedRates: number[] = []
      let gatewayCpuMs = 0
      let endsCpuMs = 0
      let proxiedMiB = 0
      for (let run = 0; run < RUNS; run++) {
        directRates.push(await rate(direct, bench.sizeMiB, LIMIT_MS))
        const gw0 = cpuMsOfTree(proc.child.pid as number)
        const me0 = process.cpuUsage()
        const t0 = performance.now()
        proxiedRates.push(await rate(proxied, bench.sizeMiB, LIMIT_MS))
        proxiedMiB += proxiedRates[run] * (performance.now() - t0) / 1000
        gatewayCpuMs += cpuMsOfTree(proc.child.pid as number) - gw0
        const me = process.cpuUsage(me0)
        endsCpuMs += (me.user + me.system) / 1000
        console.log(`  ${name} run ${run + 1}: direct ${directRates[run].toFixed(0)} MiB/s, sallyport ${proxiedRates[run].toFixed(0)} MiB/s`)
      }
      const ratio = median(proxiedRates) / median(directRates)
      ratios.push(`${name} ${ratio.toFixed(2)}`)
      console.log(`${name.padEnd(8)} direct ${median(directRates).toFixed(0)} MiB/s  sallyport ${median(proxiedRates).toFixed(0)} MiB/s  ratio ${ratio.toFixed(2)} (target >= 0.7)`)
      const perGiB = (ms: number): string => (ms / (proxiedMiB / 1024)).toFixed(0)
      console.log(`${''.padEnd(8)} CPU per GiB: sallyport ${perGiB(gatewayCpuMs)} ms, client+upstream ${perGiB(endsCpuMs)} ms`)
    }
    console.log(`ratio sallyport/direct: ${ratios.join(', ')}`)
  } finally {
    await stopProc(proc)
    server.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}
