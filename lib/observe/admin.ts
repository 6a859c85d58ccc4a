// The admin server: health, readiness, Prometheus metrics and the config dump.
// It knows nothing of tables or workers: the runtime hands it callbacks, so the
// same server fronts one process or the primary of a cluster.
//
//   GET /healthz      200 "ok" while the process runs
//   GET /readyz       200 "ready" / 503 "not ready" (load balancers and kubelet)
//   GET /metrics      Prometheus text format
//   GET /config_dump  JSON: table, status, problems, pools — Secret material redacted by the caller
//
// It shares the data path's process, event loop and memory, so what it costs
// is bounded: at most 64 connections (16 per client address), idle or stalled ones closed, and one
// config dump built at a time and shared while it is still being sent (the dump
// of a large configuration is tens of MB and takes a few hundred ms to build:
// built per request, twenty clients that never read held 1.2 GiB and stalled
// the data path for seconds). The dump, which names
// every tenant's routes and backends, is served to loopback clients only unless
// `--config-dump on` (Envoy Gateway and Istio keep Envoy's admin on localhost;
// `kubectl port-forward` reaches it from there).

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { logger } from './log.ts'
import { ANY_ADDRESS, bindServer, capConnections } from '../bind.ts'
import { matchCidr, parseCidrList } from '../address-ranges.ts'
import { ErrorCode, SallyportError } from '../errors.ts'

const log = logger('admin')

/** Who may read /config_dump: loopback clients (default), any client, or nobody. */
export type ConfigDumpAccess = 'local' | 'on' | 'off'

export interface AdminOptions {
  readonly host: string
  readonly port: number
  readonly ready: () => boolean
  readonly metrics: () => Promise<{ readonly contentType: string; readonly body: string }>
  /** The dump as JSON text (dumpJson). */
  readonly configDump: () => Promise<string>
  /** `--config-dump` (default local). */
  readonly configDumpAccess?: ConfigDumpAccess
  /** Tests: the bounds below. */
  readonly limits?: Partial<AdminLimits>
}

export interface AdminLimits {
  /** Open connections; past it new ones are closed at accept. */
  readonly maxConnections: number
  /**
   * Open connections from one client address; past it its new ones are closed
   * at accept. Below maxConnections, so that one client (a slowloris, a
   * runaway scraper) cannot take every connection and lock kubelet's probes
   * and Prometheus out.
   */
  readonly maxConnectionsPerClient: number
  /** A connection with nothing read or written for this long is closed (a stalled head, a client that stopped reading). */
  readonly idleMs: number
}

const DEFAULT_LIMITS: AdminLimits = { maxConnections: 64, maxConnectionsPerClient: 16, idleMs: 30_000 }

export interface AdminServer {
  /** Where it listens (the real port when 0 was asked). */
  readonly address: AddressInfo
  close(): Promise<void>
}

/** Parse `--admin ADDR:PORT` (`[::1]:9901`, `:9901` = every address, both families); null for `off`. */
export function parseAdminAddress(value: string): { host: string; port: number } | null {
  if (value === 'off') return null
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(value)
  const port = m === null ? NaN : Number(m[3])
  if (m === null || !(port >= 0 && port <= 65535)) throw new Error(`invalid admin address ${JSON.stringify(value)}: want ADDR:PORT or off`)
  const host = m[1] ?? m[2] ?? ''
  return { host: host === '' ? ANY_ADDRESS : host, port }
}

export async function startAdminServer(options: AdminOptions): Promise<AdminServer> {
  const limits = { ...DEFAULT_LIMITS, ...options.limits }
  const dumps = new SharedDump(options.configDump)
  const server = http.createServer({
    headersTimeout: Math.min(10_000, limits.idleMs),
    requestTimeout: limits.idleMs,
    keepAliveTimeout: 5000,
    connectionsCheckingInterval: Math.min(5000, Math.max(50, limits.idleMs / 4)),
  }, (req, res) => {
    handle(options, dumps, req, res).catch((err: unknown) => {
      log.error({ err, path: req.url }, 'admin request failed')
      if (!res.headersSent) send(res, 500, 'text/plain; charset=utf-8', 'internal error\n')
      else res.destroy()
    })
  })
  capConnections(server, limits.maxConnections, () => {}, () => log.warn({ maxConnections: limits.maxConnections }, 'admin connection limit reached: new connections are closed at accept'))
  capPerClient(server, limits.maxConnectionsPerClient)
  // No byte either way for idleMs: a connection that never sent a head, or stopped reading its answer.
  server.timeout = limits.idleMs
  server.on('timeout', (socket: import('node:net').Socket) => { socket.destroy() })
  try {
    await bindServer(server, options.host, options.port, log)
  } catch (err) {
    // The process cannot start without it (probes, metrics): say which flag names it, not a stack.
    const where = options.host.includes(':') ? `[${options.host}]:${options.port}` : `${options.host}:${options.port}`
    throw new SallyportError(ErrorCode.LISTEN, `cannot listen on the admin address ${where} (--admin): ${err instanceof Error ? err.message : String(err)}`, { cause: err })
  }
  const address = server.address() as AddressInfo
  log.info({ address: address.address, port: address.port }, 'admin server listening')
  return {
    address,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve())
      server.closeAllConnections()
    }),
  }
}

/**
 * At most `max` open connections per client address; past it a new one is
 * closed before the HTTP server reads from it (a warning at most every 10 s).
 */
function capPerClient(server: http.Server, max: number): void {
  const open = new Map<string, number>()
  let warned = -Infinity
  server.prependListener('connection', (socket: import('node:net').Socket) => {
    const client = socket.remoteAddress ?? ''
    const n = open.get(client) ?? 0
    if (n >= max) {
      socket.destroy()
      const now = performance.now()
      if (now - warned >= 10_000) {
        warned = now
        log.warn({ client, maxConnectionsPerClient: max }, 'admin connection limit of one client reached: its new connections are closed at accept')
      }
      return
    }
    open.set(client, n + 1)
    socket.once('close', () => {
      const left = (open.get(client) ?? 1) - 1
      if (left <= 0) open.delete(client)
      else open.set(client, left)
    })
  })
}

async function handle(options: AdminOptions, dumps: SharedDump, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0]
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('allow', 'GET, HEAD')
    return send(res, 405, 'text/plain; charset=utf-8', 'method not allowed\n')
  }
  switch (path) {
    case '/healthz':
      return send(res, 200, 'text/plain; charset=utf-8', 'ok\n')
    case '/readyz': {
      const ready = options.ready()
      return send(res, ready ? 200 : 503, 'text/plain; charset=utf-8', ready ? 'ready\n' : 'not ready\n')
    }
    case '/metrics': {
      const m = await options.metrics()
      return send(res, 200, m.contentType, m.body)
    }
    case '/config_dump': {
      const access = options.configDumpAccess ?? 'local'
      if (access === 'off') return send(res, 404, 'text/plain; charset=utf-8', 'not found (--config-dump off)\n')
      if (access === 'local' && !isLoopback(req.socket.remoteAddress)) {
        return send(res, 403, 'text/plain; charset=utf-8', 'the config dump is served to loopback clients only (kubectl port-forward; --config-dump on serves it to any client)\n')
      }
      const body = await dumps.get()
      dumps.sending(body, res)
      return send(res, 200, 'application/json', body)
    }
    default:
      return send(res, 404, 'text/plain; charset=utf-8', 'not found\n')
  }
}

/** JSON of a config dump: Maps, Sets and RegExps readable; Buffers never print their bytes. */
export function dumpJson(value: unknown): string {
  return JSON.stringify(value, jsonReplacer, 2)
}


function jsonReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Map) return Object.fromEntries(value)
  if (value instanceof Set) return [...value]
  if (value instanceof RegExp) return value.source
  if (typeof value === 'bigint') return value.toString()
  if (value !== null && typeof value === 'object' && (value as { type?: unknown }).type === 'Buffer' && Array.isArray((value as { data?: unknown }).data)) return '[redacted]'
  return value
}

function send(res: http.ServerResponse, status: number, contentType: string, body: string | Buffer): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': typeof body === 'string' ? Buffer.byteLength(body) : body.length, 'cache-control': 'no-store' })
  res.end(body)
}

const LOOPBACK = parseCidrList(['127.0.0.0/8', '::1/128']).cidrs

/** A loopback peer: 127.0.0.0/8, ::1, or an IPv4 loopback address on a dual-stack socket (parseIp maps ::ffff:a.b.c.d). */
export function isLoopback(address: string | undefined): boolean {
  return address !== undefined && matchCidr(LOOPBACK, address) !== null
}

/**
 * One config dump at a time, its bytes shared: by the requests that ask while
 * it is built, and by those that ask while some client is still being sent it.
 * Clients get the same Buffer, so one that stops reading holds a reference to
 * it, not a copy, and cannot make the gateway build (and hold) dump after dump.
 * A request with every earlier answer delivered gets a fresh dump.
 */
class SharedDump {
  readonly #build: () => Promise<string>
  #body: Buffer | null = null
  /** Responses still sending #body. */
  #sending = 0
  #building: Promise<Buffer> | null = null

  constructor(build: () => Promise<string>) {
    this.#build = build
  }

  get(): Promise<Buffer> {
    if (this.#building !== null) return this.#building
    if (this.#body !== null && this.#sending > 0) return Promise.resolve(this.#body)
    this.#body = null
    const building = this.#build().then((json) => Buffer.from(json + '\n'))
    this.#building = building
    building.then((body) => { this.#body = body }, () => {}).finally(() => { this.#building = null })
    return building
  }

  /** `res` is sending `body`: it is shared until every such response has closed. */
  sending(body: Buffer, res: http.ServerResponse): void {
    if (body !== this.#body) return
    this.#sending++
    res.once('close', () => { if (this.#body === body) this.#sending-- })
  }
}
