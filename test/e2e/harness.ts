// Helpers for the end-to-end tests: the real CLI as a child process, loopback
// sockets only, every wait bounded in time.

import { execFile, spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'
import { unusedPort } from '../helpers/ports.ts'
import { FLUSH_MS } from '../../lib/observe/log.ts'

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
export const BIN = path.join(ROOT, 'bin', 'sallyport.ts')

/** A loopback port that was free a moment ago, below the ephemeral range (helpers/ports.ts unusedPort). */
export async function freePort(): Promise<number> {
  return unusedPort()
}

export function tempDir(t: Test): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-e2e-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

export interface Cli {
  readonly child: ChildProcess
  /** Everything printed so far. */
  stdout(): string
  stderr(): string
  /** Wait until stdout+stderr match `re` (bounded). */
  waitFor(re: RegExp, timeoutMs?: number): Promise<string>
  /** Resolves with the exit code (or signal name). */
  readonly exited: Promise<number | string>
}

export function startCli(t: Test, args: readonly string[], options: { env?: Record<string, string>; bin?: string } = {}): Cli {
  const child = spawn(process.execPath, [options.bin ?? BIN, ...args], {
    cwd: ROOT, env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  let err = ''
  const waiters = new Set<() => void>()
  const notify = (): void => { for (const w of waiters) w() }
  child.stdout?.setEncoding('utf8').on('data', (s: string) => { out += s; notify() })
  child.stderr?.setEncoding('utf8').on('data', (s: string) => { err += s; notify() })
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => { resolve(code ?? signal ?? -1); notify() })
  })
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await exited
    }
  })
  const cli: Cli = {
    child,
    exited,
    stdout: () => out,
    stderr: () => err,
    waitFor: (re, timeoutMs = 15000) => new Promise<string>((resolve, reject) => {
      const check = (): void => {
        const m = re.exec(out + err)
        if (m !== null) { done(); resolve(m[0]) }
        else if (child.exitCode !== null || child.signalCode !== null) { done(); reject(new Error(`process exited before ${re}:\n${out}\n${err}`)) }
      }
      const timer = setTimeout(() => { done(); reject(new Error(`timed out waiting for ${re}:\n${out.slice(-4000)}\n${err.slice(-4000)}`)) }, timeoutMs)
      const done = (): void => { clearTimeout(timer); waiters.delete(check) }
      waiters.add(check)
      check()
    }),
  }
  return cli
}

/**
 * Waits until log lines written so far have left the child (it batches its
 * stdout for up to FLUSH_MS, lib/observe/log.ts): for checks that something was
 * never logged.
 */
export function settleLogs(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, FLUSH_MS * 3))
}

/** Run the CLI to completion (bounded). */
export async function runCli(t: Test, args: readonly string[], timeoutMs = 30000): Promise<{ code: number | string; stdout: string; stderr: string }> {
  const cli = startCli(t, args)
  const timer = setTimeout(() => cli.child.kill('SIGKILL'), timeoutMs)
  const code = await cli.exited
  clearTimeout(timer)
  return { code, stdout: cli.stdout(), stderr: cli.stderr() }
}

export interface Reply {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
}

/** Sum of a metric's samples in a Prometheus text exposition, over the series carrying every given label. */
export function metricSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0
  for (const line of text.split('\n')) {
    if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue
    sum += Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return sum
}

/** One HTTP/1.1 request on a fresh connection (no agent), bounded in time. */
export function request(url: string, options: { host?: string; method?: string; timeoutMs?: number } = {}): Promise<Reply> {
  return new Promise<Reply>((resolve, reject) => {
    const headers: Record<string, string> = {}
    if (options.host !== undefined) headers.host = options.host
    const req = http.request(url, { method: options.method ?? 'GET', headers, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (s: string) => { body += s })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }))
      res.on('error', reject)
    })
    req.setTimeout(options.timeoutMs ?? 10000, () => req.destroy(new Error(`request to ${url} timed out`)))
    req.on('error', reject)
    req.end()
  })
}

/** Retry `fn` until it returns a value without throwing and `ok` accepts it (bounded). */
export async function eventually<T>(fn: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 15000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown = null
  for (let i = 0; i < 1000; i++) {
    try {
      const v = await fn()
      if (ok(v)) return v
      last = v
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) break
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`${what} not reached in ${timeoutMs} ms; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`)
}

/** The test upstreams are on loopback, which the destination guard refuses unless allowed. */
export const LOOPBACK_ALLOWED: Readonly<Record<string, string>> = { 'sallyport.io/allow-destination-cidrs': '127.0.0.0/8' }

/** Manifests: a GatewayClass, a Gateway with an HTTP listener, and Backends pointing at local upstreams. */
export function gatewayYaml(port: number, extraListeners = '', annotations: Readonly<Record<string, string>> = LOOPBACK_ALLOWED): string {
  const notes = Object.entries(annotations).map(([k, v]) => `\n    ${k}: ${v}`).join('')
  return `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: sallyport
spec:
  controllerName: sallyport.io/gateway-controller
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: egress
  namespace: default
  annotations:${notes}
spec:
  gatewayClassName: sallyport
  listeners:
    - name: http
      protocol: HTTP
      port: ${port}
${extraListeners}`
}

export function backendYaml(name: string, port: number, host = '127.0.0.1'): string {
  // An address is an `ip` endpoint; a name is an `fqdn` one, which sallyport resolves through DNS.
  const endpoint = net.isIP(host) === 0 ? `fqdn:\n        hostname: ${host}` : `ip:\n        address: ${host}`
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
spec:
  endpoints:
    - ${endpoint}
        port: ${port}
`
}

/**
 * An HTTPRoute on Gateway egress for `hostname` to `backends` in failover order
 * (`sallyport.io/backend-priority`: the first is priority 0, the next 1...).
 */
export function failoverRouteYaml(name: string, hostname: string, backends: ReadonlyArray<{ readonly name: string; readonly port: number }>): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
  annotations:
    sallyport.io/backend-priority: "${backends.map((b, i) => `${b.name}=${i}`).join(',')}"
spec:
  parentRefs:
    - name: egress
  hostnames: [${hostname}]
  rules:
    - backendRefs:
${backends.map((b) => `        - { group: gateway.envoyproxy.io, kind: Backend, name: ${b.name}, port: ${b.port} }`).join('\n')}
`
}

/**
 * An HTTPRoute on Gateway egress for `hostname` to a Backend; `filters`: YAML list items (indented 8)
 * for the rule; `timeouts`: the rule's timeouts fields (e.g. `backendRequest: 300ms`).
 */
export function routeYaml(name: string, hostname: string, backend: string, port: number, filters = '', timeouts = ''): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs:
    - name: egress
  hostnames:
    - ${hostname}
  rules:
    - ${filters === '' ? '' : `filters:\n${filters}\n      `}${timeouts === '' ? '' : `timeouts:\n        ${timeouts}\n      `}backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: ${backend}
          port: ${port}
`
}

/** curl (bounded: 10 s per transfer), never throwing: exit code, stdout, stderr. `env` adds to a PATH-only environment (HTTPS_PROXY...). */
export function curl(args: readonly string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile('curl', ['-sS', '--max-time', '10', ...args], { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 15000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stdout, stderr })
    })
    // telnet:// sends stdin through the tunnel: end it, so curl leaves when the far end closes.
    child.stdin?.end()
  })
}

/**
 * Writes `text` on a fresh TCP connection (from the loopback address `from`, when
 * given: client attribution by Pod IP) and collects what comes back, as latin1,
 * until `until` matches or the server closes; bounded by `timeoutMs` (5 s).
 */
export function rawExchange(port: number, text: string, options: { until?: RegExp; from?: string; timeoutMs?: number } = {}): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(options.from === undefined ? { port, host: '127.0.0.1' } : { port, host: '127.0.0.1', localAddress: options.from })
    let data = ''
    const finish = (): void => { clearTimeout(timer); socket.destroy(); resolve(data) }
    const timer = setTimeout(finish, options.timeoutMs ?? 5000)
    socket.setEncoding('latin1')
    socket.on('data', (c: string) => { data += c; if (options.until?.test(data) === true) finish() })
    socket.on('error', () => {})
    socket.on('close', finish)
    socket.write(text, 'latin1')
  })
}

/** Whole HTTP/1.1 responses in `text`, each body read by its head's Content-Length (as a client reads them). */
export function splitResponses(text: string): Array<{ head: string; body: string }> {
  const out: Array<{ head: string; body: string }> = []
  let rest = text
  while (rest.startsWith('HTTP/1.1 ')) {
    const end = rest.indexOf('\r\n\r\n')
    if (end === -1) break
    const head = rest.slice(0, end)
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0)
    out.push({ head, body: rest.slice(end + 4, end + 4 + length) })
    rest = rest.slice(end + 4 + length)
  }
  return out
}

const indentPem = (pem: string): string => pem.trim().split(/\r?\n/).map((l) => `    ${l}`).join('\n')

/** A kubernetes.io/tls Secret (namespace default) holding `certPem` and `keyPem`. */
export function tlsSecretYaml(name: string, certPem: string, keyPem: string): string {
  return `apiVersion: v1
kind: Secret
metadata: { name: ${name}, namespace: default }
type: kubernetes.io/tls
stringData:
  tls.crt: |
${indentPem(certPem)}
  tls.key: |
${indentPem(keyPem)}
`
}

/** A ConfigMap (namespace default) with the CA bundle `pem` under ca.crt. */
export function caConfigMapYaml(name: string, pem: string): string {
  return `apiVersion: v1
kind: ConfigMap
metadata: { name: ${name}, namespace: default }
data:
  ca.crt: |
${indentPem(pem)}
`
}
