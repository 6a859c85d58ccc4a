// Process plumbing for the end-to-end benchmarks: free ports, spawning pinned
// to cores (taskset), waiting for a port to answer, stopping what we started,
// and sampling the resident set size of a process tree from /proc.

import { spawn, spawnSync } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { openSync, closeSync, readFileSync, existsSync, mkdirSync, rmdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import net from 'node:net'
import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'

export const hasTaskset: boolean = spawnSync('taskset', ['-c', '0', 'true']).status === 0

/** Cores the machine has; the pinning plan needs 2. */
export function coreCount(): number {
  const r = spawnSync('nproc', [], { encoding: 'utf8' })
  const n = Number(r.stdout.trim())
  return Number.isFinite(n) && n > 0 ? n : 1
}

/** A port the kernel just handed out on loopback (closed again before returning). */
export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.once('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address()
      const port = typeof addr === 'object' && addr !== null ? addr.port : 0
      srv.close(() => resolve(port))
    })
  })
}

/** Listens on an ephemeral loopback port; resolves to it. */
export function listen(server: net.Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port)))
}

/** argv prefixed with `taskset -c <cores>` when pinning is possible and asked for. */
export function pinned(cores: string | null, argv: readonly string[]): string[] {
  if (cores === null || !hasTaskset) return [...argv]
  return ['taskset', '-c', cores, ...argv]
}

// ───────────────────────────── memory cgroup ─────────────────────────────

/** A memory cgroup with a limit, as a container runtime makes one for a container. */
export interface MemoryCgroup {
  readonly procsFile: string
  readonly limitBytes: number
  remove(): void
}

/**
 * A memory cgroup limited to limitBytes (cgroup v1's memory controller, or v2 where
 * the memory controller is enabled at the root), or null where this machine does
 * not let us make one (not root, read-only cgroup filesystem).
 */
export function memoryCgroup(name: string, limitBytes: number): MemoryCgroup | null {
  const layouts = [
    { root: '/sys/fs/cgroup/memory', limitFile: 'memory.limit_in_bytes' }, // v1
    { root: '/sys/fs/cgroup', limitFile: 'memory.max' }, // v2
  ]
  for (const { root, limitFile } of layouts) {
    if (!existsSync(path.join(root, 'cgroup.procs'))) continue
    const dir = path.join(root, name)
    try {
      mkdirSync(dir, { recursive: true })
      writeFileSync(path.join(dir, limitFile), String(limitBytes))
      return { procsFile: path.join(dir, 'cgroup.procs'), limitBytes, remove: () => { try { rmdirSync(dir) } catch { /* still in use */ } } }
    } catch {
      try { rmdirSync(dir) } catch { /* never made */ }
    }
  }
  return null
}

/** argv started inside the cgroup: a shell joins it and execs argv, so the pid is argv's own. */
export function inCgroup(cgroup: MemoryCgroup | null, argv: readonly string[]): string[] {
  if (cgroup === null) return [...argv]
  return ['sh', '-c', 'echo $$ > "$0" && exec "$@"', cgroup.procsFile, ...argv]
}

export interface Proc {
  readonly child: ChildProcess
  readonly name: string
  readonly logPath: string
  exited: boolean
}

/** Starts a long-running process with stdout+stderr to a log file (never a pipe: a pipe would cost us CPU). */
export function startProc(name: string, argv: readonly string[], logPath: string, env?: NodeJS.ProcessEnv): Proc {
  const fd = openSync(logPath, 'a')
  const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', fd, fd], env: env ?? process.env })
  closeSync(fd)
  const proc: Proc = { child, name, logPath, exited: false }
  child.once('exit', () => { proc.exited = true })
  child.once('error', () => { proc.exited = true })
  return proc
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
export async function stopProc(proc: Proc, graceMs = 5000): Promise<void> {
  if (proc.exited || proc.child.pid === undefined) return
  const gone = new Promise<void>((resolve) => proc.child.once('exit', () => resolve()))
  proc.child.kill('SIGTERM')
  const timer = setTimeout(() => { if (!proc.exited) proc.child.kill('SIGKILL') }, graceMs)
  await gone
  clearTimeout(timer)
}

export function tailOf(path: string, bytes = 2000): string {
  if (!existsSync(path)) return ''
  const text = readFileSync(path, 'utf8')
  return text.slice(-bytes)
}

/** One GET; resolves to the status code, or 0 on a connection error. */
export async function probe(port: number, path: string, timeoutMs = 2000): Promise<number> {
  return await new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false, timeout: timeoutMs }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
      res.on('error', () => resolve(0))
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(0))
  })
}

/** Polls until GET path answers `want` (or any status when want is 0); false after deadlineMs or if proc exits. */
export async function waitForHttp(port: number, path: string, deadlineMs: number, proc: Proc | null, want = 200): Promise<boolean> {
  const until = Date.now() + deadlineMs
  while (Date.now() < until) {
    if (proc !== null && proc.exited) return false
    const status = await probe(port, path)
    if (status !== 0 && (want === 0 || status === want)) return true
    await sleep(100)
  }
  return false
}

// ───────────────────────────── RSS sampling ─────────────────────────────

function readStatusKb(pid: number, field: string): number {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8')
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)
    return m === null ? 0 : Number(m[1])
  } catch {
    return 0
  }
}

/** Direct children of pid (node:cluster workers are children of the primary). */
function childrenOf(pid: number): number[] {
  try {
    const text = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim()
    return text === '' ? [] : text.split(/\s+/).map(Number)
  } catch {
    return []
  }
}

export interface RssReport {
  /** Highest VmRSS seen of any single process of the tree, MiB. */
  readonly peakProcessMiB: number
  /** Highest sum of VmRSS over the tree at one sample, MiB. */
  readonly peakTreeMiB: number
  /** VmHWM of the root process (kernel's own peak), MiB. */
  readonly rootHwmMiB: number
  /**
   * Highest RssAnon of the root process, MiB: heap, malloc, stacks. The rest of its RSS is
   * RssFile, mostly the node binary's own pages (clean, shared between processes, reclaimable).
   */
  readonly rootPeakAnonMiB: number
  /** Highest RssFile of the root process, MiB. */
  readonly rootPeakFileMiB: number
  /** First and last tree samples (MiB), to see growth. */
  readonly firstMiB: number
  readonly lastMiB: number
  readonly samples: number
  /** Tree RSS over time: [ms since start, MiB]. Thinned to at most 200 points. */
  readonly series: ReadonlyArray<readonly [number, number]>
  /** What the root process's RSS was made of when it peaked (null if /proc/PID/smaps was unreadable). */
  readonly atPeak: RssBreakdown | null
}

/** The root process's resident memory by kind, MiB, from /proc/PID/smaps. */
export interface RssBreakdown {
  readonly totalMiB: number
  /** The node executable's pages (code, V8 snapshot, ICU data): file-backed, clean, shared. */
  readonly binaryMiB: number
  /** Shared libraries (libc, libstdc++...). */
  readonly librariesMiB: number
  /** malloc: the main arena ([heap]) and the per-thread arenas (64 MiB-aligned anonymous mappings). */
  readonly mallocMiB: number
  /** Every other anonymous mapping: V8's heap pages, WebAssembly memory, stacks, large buffers. */
  readonly otherAnonMiB: number
}

const ARENA_ALIGN = 64n << 20n

/** Classifies the mappings of /proc/PID/smaps (see RssBreakdown). */
export function rssBreakdown(pid: number): RssBreakdown | null {
  let text: string
  try {
    text = readFileSync(`/proc/${pid}/smaps`, 'utf8')
  } catch {
    return null
  }
  const kb = { total: 0, binary: 0, libraries: 0, malloc: 0, otherAnon: 0 }
  let kind: 'binary' | 'libraries' | 'malloc' | 'otherAnon' = 'otherAnon'
  for (const line of text.split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line)
    if (head !== null) {
      const name = head[3]
      const start = BigInt(`0x${head[1]}`)
      const end = BigInt(`0x${head[2]}`)
      if (name === '[heap]') kind = 'malloc'
      else if (name === '') kind = start % ARENA_ALIGN === 0n && end - start <= ARENA_ALIGN ? 'malloc' : 'otherAnon'
      else if (name === process.execPath || name.endsWith('/bin/node')) kind = 'binary'
      else if (name.startsWith('/')) kind = 'libraries'
      else kind = 'otherAnon' // [stack], [vvar]...
      continue
    }
    if (line.startsWith('Rss:')) {
      const v = Number(line.split(/\s+/)[1])
      kb[kind] += v
      kb.total += v
    }
  }
  const mib = (v: number): number => Math.round(v / 102.4) / 10
  return { totalMiB: mib(kb.total), binaryMiB: mib(kb.binary), librariesMiB: mib(kb.libraries), mallocMiB: mib(kb.malloc), otherAnonMiB: mib(kb.otherAnon) }
}

/** Samples VmRSS of pid and its children every intervalMs until stop() is called. */
export class RssSampler {
  #pid: number
  #timer: NodeJS.Timeout | null = null
  #start = Date.now()
  #peakProcess = 0
  #peakTree = 0
  #hwm = 0
  #anon = 0
  #file = 0
  #series: Array<[number, number]> = []
  #atPeak: RssBreakdown | null = null
  #atPeakKb = 0

  constructor(pid: number, intervalMs = 100) {
    this.#pid = pid
    this.#sample()
    this.#timer = setInterval(() => this.#sample(), intervalMs)
  }

  #sample(): void {
    const pids = [this.#pid, ...childrenOf(this.#pid)]
    let tree = 0
    for (const p of pids) {
      const kb = readStatusKb(p, 'VmRSS')
      if (kb > this.#peakProcess) this.#peakProcess = kb
      tree += kb
    }
    const rootKb = readStatusKb(this.#pid, 'VmRSS')
    // A breakdown at the root's peak; re-read when the peak has grown by 1 MiB (smaps is not free to read).
    if (rootKb >= this.#atPeakKb + 1024 || (this.#atPeak === null && rootKb > 0)) {
      const b = rssBreakdown(this.#pid)
      if (b !== null) {
        this.#atPeak = b
        this.#atPeakKb = rootKb
      }
    }
    const hwm = readStatusKb(this.#pid, 'VmHWM')
    if (hwm > this.#hwm) this.#hwm = hwm
    const anon = readStatusKb(this.#pid, 'RssAnon')
    if (anon > this.#anon) this.#anon = anon
    const file = readStatusKb(this.#pid, 'RssFile')
    if (file > this.#file) this.#file = file
    if (tree === 0) return
    if (tree > this.#peakTree) this.#peakTree = tree
    this.#series.push([Date.now() - this.#start, tree])
  }

  stop(): RssReport {
    this.#sample()
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#timer = null
    return this.report()
  }

  /** What was seen so far (sampling goes on unless stopped). */
  report(): RssReport {
    if (this.#timer !== null) this.#sample()
    const mib = (kb: number): number => Math.round(kb / 102.4) / 10
    const s = this.#series
    const step = Math.max(1, Math.ceil(s.length / 200))
    const series: Array<readonly [number, number]> = []
    for (let i = 0; i < s.length; i += step) series.push([s[i][0], mib(s[i][1])])
    return {
      peakProcessMiB: mib(this.#peakProcess),
      peakTreeMiB: mib(this.#peakTree),
      rootHwmMiB: mib(this.#hwm),
      rootPeakAnonMiB: mib(this.#anon),
      rootPeakFileMiB: mib(this.#file),
      firstMiB: s.length > 0 ? mib(s[0][1]) : 0,
      lastMiB: s.length > 0 ? mib(s[s.length - 1][1]) : 0,
      samples: s.length,
      series,
      atPeak: this.#atPeak,
    }
  }
}

/** CPU time (ms) used so far by one process, all its threads: [user, system]; [0, 0] once it is gone. */
export function cpuMsOf(pid: number): [number, number] {
  const tick = 1000 / 100 // USER_HZ is 100 on Linux
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return [Number(fields[11]) * tick, Number(fields[12]) * tick]
  } catch {
    return [0, 0]
  }
}

/** CPU time (user+system, ms) used so far by pid and its direct children (nginx workers, cluster workers). */
export function cpuMsOfTree(pid: number): number {
  let ms = 0
  for (const p of [pid, ...childrenOf(pid)]) {
    const [user, system] = cpuMsOf(p)
    ms += user + system
  }
  return ms
}
