// Active health checks (Envoy Gateway BackendTrafficPolicy healthCheck.active):
// one checker per endpoint of a cluster that asks for them, started when a
// table references the cluster and stopped when none does (Resilience.retain).
// Each check opens a fresh connection with the cluster's own connector (same
// DNS, guard and TLS as traffic): TCP checks pass when it connects; HTTP
// checks send one request (HTTP/1.1, or HTTP/2 for HTTP2/H2C clusters) and
// pass when the status is an expected one. unhealthyThreshold failures in a
// row take the endpoint out of rotation, healthyThreshold successes bring it
// back. Intervals are jittered ±10 % so checkers started together drift
// apart; the first check runs after a jittered tenth of the interval, and
// endpoints count as healthy until checks say otherwise.

import http2 from 'node:http2'
import type { Socket } from 'node:net'
import type { ActiveHealthCheck, Cluster, Endpoint } from '../compile/table.ts'
import { logger } from '../observe/log.ts'
import { Connector, type PendingConnect } from './connect.ts'
import type { EndpointHealth } from './outlier.ts'
import type { Resolver } from './resolve.ts'
import { buildClientTls } from './tls.ts'

const log = logger('upstream')

const JITTER = 0.1

function jittered(ms: number): number {
  return Math.max(1, Math.round(ms * (1 - JITTER + Math.random() * 2 * JITTER)))
}

export class HealthChecker {
  readonly #config: ActiveHealthCheck
  readonly #health: EndpointHealth
  readonly #connector: Connector
  readonly #authority: string
  readonly #h2: boolean
  #timer: NodeJS.Timeout | null = null
  #socket: Socket | null = null
  #stopped = false
  /** The check's connect while in progress. */
  #opening: PendingConnect | null = null
  /** Checks run so far (tests, dump). */
  runs = 0

  constructor(cluster: Cluster, endpoint: Endpoint, health: EndpointHealth, config: ActiveHealthCheck, resolver: Resolver) {
    this.#config = config
    this.#health = health
    const tls = cluster.tls === null || cluster.protocol === 'H2C' ? null : buildClientTls(cluster.tls)
    this.#connector = new Connector({ endpoint, tls, resolver, timeoutMs: config.timeoutMs })
    this.#authority = cluster.hostname ?? (endpoint.kind === 'unix' ? 'localhost' : endpoint.port === 80 || endpoint.port === 443 ? endpoint.host : `${endpoint.host}:${endpoint.port}`)
    this.#h2 = cluster.protocol === 'HTTP2' || cluster.protocol === 'H2C'
  }

  /** Same configuration (a new table with an equal check keeps its checker and counters). */
  sameAs(config: ActiveHealthCheck): boolean {
    return JSON.stringify(config) === JSON.stringify(this.#config)
  }

  start(): void {
    this.#schedule(jittered(this.#config.intervalMs / 10))
  }

  stop(): void {
    this.#stopped = true
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
    this.#opening?.cancel()
    this.#opening = null
    this.#socket?.destroy()
    this.#socket = null
  }

  #schedule(ms: number): void {
    if (this.#stopped) return
    this.#timer = setTimeout(() => { this.#timer = null; this.#run() }, ms)
    this.#timer.unref()
  }

  #run(): void {
    const config = this.#config
    let done = false
    const finish = (ok: boolean): void => {
      if (done) return
      done = true
      clearTimeout(timer)
      // A check that timed out while connecting stops its connect too.
      this.#opening?.cancel()
      this.#opening = null
      this.#socket?.destroy()
      this.#socket = null
      this.runs++
      if (!this.#stopped) this.#verdict(ok)
      this.#schedule(jittered(config.intervalMs))
    }
    const timer = setTimeout(() => finish(false), config.timeoutMs)
    timer.unref()
    const alpn = config.type === 'HTTP' ? (this.#h2 ? ['h2'] : ['http/1.1']) : null
    const opening = this.#connector.connect(alpn, (err, socket) => {
      if (this.#opening === opening) this.#opening = null
      if (err !== null || socket === null) return finish(false)
      if (done || this.#stopped) { socket.destroy(); return }
      this.#socket = socket
      if (config.type === 'TCP' || config.http === null) return finish(true)
      if (this.#h2) this.#checkH2(socket, config.http, finish)
      else this.#checkH1(socket, config.http, finish)
    })
    this.#opening = opening
  }

  #checkH1(socket: Socket, http: NonNullable<ActiveHealthCheck['http']>, finish: (ok: boolean) => void): void {
    let head = ''
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => {
      head += chunk
      const eol = head.indexOf('\r\n')
      if (eol === -1) { if (head.length > 8192) finish(false); return }
      // Status line: HTTP/1.1 200 OK
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(head.slice(0, eol))
      finish(m !== null && http.expectedStatuses.includes(Number(m[1])))
    })
    socket.on('error', () => finish(false))
    socket.on('close', () => finish(false))
    socket.write(`${http.method} ${http.path} HTTP/1.1\r\nhost: ${this.#authority}\r\nuser-agent: sallyport-health-check\r\nconnection: close\r\n\r\n`)
  }

  #checkH2(socket: Socket, http: NonNullable<ActiveHealthCheck['http']>, finish: (ok: boolean) => void): void {
    const scheme = this.#connector.secure ? 'https' : 'http'
    const session = http2.connect(`${scheme}://${this.#authority}`, { createConnection: () => socket })
    session.on('error', () => finish(false))
    const req = session.request({ ':method': http.method, ':path': http.path, 'user-agent': 'sallyport-health-check' }, { endStream: true })
    req.on('response', (headers) => {
      finish(http.expectedStatuses.includes(Number(headers[':status'])))
      session.destroy()
    })
    req.on('error', () => finish(false))
    req.resume()
  }

  #verdict(ok: boolean): void {
    const h = this.#health
    const config = this.#config
    if (ok) {
      h.checkFailures = 0
      h.checkSuccesses++
      if (!h.activeHealthy && h.checkSuccesses >= config.healthyThreshold) {
        h.activeHealthy = true
        h.since = performance.now()
        log.info({ backend: h.backend, endpoint: h.label }, 'upstream endpoint healthy (active check)')
      }
    } else {
      h.checkSuccesses = 0
      h.checkFailures++
      if (h.activeHealthy && h.checkFailures >= config.unhealthyThreshold) {
        h.activeHealthy = false
        log.warn({ backend: h.backend, endpoint: h.label }, 'upstream endpoint unhealthy (active check)')
      }
    }
  }
}
