// The admin server: health, readiness, Prometheus metrics and the config dump.
// It knows nothing of tables or workers: the runtime hands it callbacks, so the
// same server fronts one process or the primary of a cluster.
//
//   GET /healthz      200 "ok" while the process runs
//   GET /readyz       200 "ready" / 503 "not ready" (load balancers and kubelet)
//   GET /metrics      Prometheus text format
//   GET /config_dump  JSON: table, status, problems, pools — Secret material redacted by the caller

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { logger } from './log.ts'

const log = logger('admin')

export interface AdminOptions {
  readonly host: string
  readonly port: number
  readonly ready: () => boolean
  readonly metrics: () => Promise<{ readonly contentType: string; readonly body: string }>
  readonly configDump: () => Promise<unknown>
}

export interface AdminServer {
  /** Where it listens (the real port when 0 was asked). */
  readonly address: AddressInfo
  close(): Promise<void>
}

/** Parse `--admin ADDR:PORT` (`[::1]:9901`, `:9901` = all interfaces); null for `off`. */
export function parseAdminAddress(value: string): { host: string; port: number } | null {
  if (value === 'off') return null
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(value)
  const port = m === null ? NaN : Number(m[3])
  if (m === null || !(port >= 0 && port <= 65535)) throw new Error(`invalid admin address ${JSON.stringify(value)}: want ADDR:PORT or off`)
  const host = m[1] ?? m[2] ?? ''
  return { host: host === '' ? '0.0.0.0' : host, port }
}

export async function startAdminServer(options: AdminOptions): Promise<AdminServer> {
  const server = http.createServer((req, res) => {
    handle(options, req, res).catch((err: unknown) => {
      log.error({ err, path: req.url }, 'admin request failed')
      if (!res.headersSent) send(res, 500, 'text/plain; charset=utf-8', 'internal error\n')
      else res.destroy()
    })
  })
  server.keepAliveTimeout = 5000
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port, options.host, () => {
      server.off('error', reject)
      resolve()
    })
  })
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

async function handle(options: AdminOptions, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
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
      const dump = await options.configDump()
      return send(res, 200, 'application/json', `${dumpJson(dump)}\n`)
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

function send(res: http.ServerResponse, status: number, contentType: string, body: string): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(body), 'cache-control': 'no-store' })
  res.end(body)
}
