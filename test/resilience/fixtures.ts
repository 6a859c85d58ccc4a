// Shared pieces of the resilience tests: real node:http upstreams on
// 127.0.0.1 that count what they receive, the real data plane and registry in
// front of a hand-built table, a client with headers / body / source address,
// and metric reads from the process registry. Every wait is bounded.
import type { Test } from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Cluster, Endpoint, PassiveHealthCheck, RouteTable } from '../../lib/compile/table.ts'
import { createDataPlane } from '../../lib/listeners/data-plane.ts'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import type { Upstreams } from '../../lib/upstream/types.ts'
import type { DnsSettings } from '../../lib/upstream/resolve.ts'
import type { GuardOptions } from '../../lib/upstream/destination-guard.ts'

export interface Upstream {
  readonly name: string
  port: number
  hits: number
  /** Request bodies received, in order. */
  readonly bodies: string[]
  handler: (req: http.IncomingMessage, res: http.ServerResponse, body: string) => void
  readonly server: http.Server
}

/** An upstream that reads the whole body, then calls `handler`. */
export async function upstream(t: Test, name: string, handler: Upstream['handler'] = (_q, res) => { res.end(name) }): Promise<Upstream> {
  const server = http.createServer()
  const u: Upstream = { name, port: 0, hits: 0, bodies: [], handler, server }
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    u.hits++
    let body = ''
    req.setEncoding('latin1')
    req.on('data', (s: string) => { body += s })
    req.on('end', () => { u.bodies.push(body); u.handler(req, res, body) })
    req.on('error', () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  u.port = (server.address() as AddressInfo).port
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return u
}

export function ep(port: number, weight = 1): Endpoint {
  return { host: '127.0.0.1', port, kind: 'ip', weight, zone: null }
}

export const PASSIVE: PassiveHealthCheck = {
  consecutive5xxErrors: 2, consecutiveGatewayErrors: 0, consecutiveLocalOriginFailures: 5, splitExternalLocalOriginErrors: false,
  intervalMs: 1000, baseEjectionTimeMs: 60_000, maxEjectionPercent: 50,
}

export const NO_LIMITS = { maxConnections: null, maxPendingRequests: null, maxParallelRequests: null, maxParallelRetries: null, maxRequestsPerConnection: null }

export interface Gateway {
  readonly port: number
  readonly upstreams: Upstreams
}

/** The real data plane + registry serving `table` (its first port). */
export async function gateway(t: Test, table: RouteTable, options: { connectTimeoutMs?: number; connectionsPerPool?: number; dns?: DnsSettings; guard?: GuardOptions } = {}): Promise<Gateway> {
  const upstreams = createUpstreams({ connectTimeoutMs: options.connectTimeoutMs ?? 1000, connectionsPerPool: options.connectionsPerPool, dns: options.dns, guard: options.guard })
  upstreams.retain(table)
  const p = createDataPlane({ bind: '127.0.0.1', upstreams, accessLog: false, gatewayId: 'gw-test' })
  await p.apply(table)
  t.teardown(async () => { await p.drain(100); await upstreams.close() })
  return { port: table.ports.keys().next().value as number, upstreams }
}

export interface Reply { status: number; body: string; headers: http.IncomingHttpHeaders }

export interface Ask {
  path?: string
  method?: string
  headers?: Record<string, string>
  body?: string | Buffer
  localAddress?: string
  timeoutMs?: number
}

/** One request on a fresh connection. */
export function ask(port: number, o: Ask = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1', port, path: o.path ?? '/', method: o.method ?? (o.body === undefined ? 'GET' : 'POST'), agent: false,
      localAddress: o.localAddress, headers: { host: 'x', ...o.headers },
    }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (s: string) => { body += s }).on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }))
    })
    req.setTimeout(o.timeoutMs ?? 10_000, () => req.destroy(new Error('client timeout')))
    req.on('error', reject)
    req.end(o.body)
  })
}

/** `n` sequential requests; the answer bodies in order. */
export async function bodies(port: number, n: number, o: Ask = {}): Promise<string[]> {
  const out: string[] = []
  for (let i = 0; i < n; i++) out.push((await ask(port, o)).body)
  return out
}

export function countOf(list: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const s of list) out[s] = (out[s] ?? 0) + 1
  return out
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

/** Poll `ok` every 20 ms up to `ms`; returns whether it became true. */
export async function until(ok: () => boolean, ms = 5000): Promise<boolean> {
  for (let waited = 0; waited < ms; waited += 20) {
    if (ok()) return true
    await sleep(20)
  }
  return ok()
}

/** Sum of a metric's samples whose labels include `labels`. */
export { metricValue as metric } from '../helpers/metrics.ts'

export { closedPort, listenOnReleased } from '../helpers/ports.ts'

export type { Cluster }
