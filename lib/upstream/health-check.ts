// Active health checks (Envoy Gateway BackendTrafficPolicy healthCheck.active):
// one checker per endpoint of a cluster that asks for them, started when a
// table references the cluster and stopped when none does (Resilience.retain).
// Each check opens a fresh connection with the cluster's own TLS: TCP checks
// pass when it connects; HTTP checks send one request (HTTP/1.1, or HTTP/2 for
// HTTP2/H2C clusters) and pass when the status is an expected one.
// unhealthyThreshold failures in a row take the endpoint out of rotation,
// healthyThreshold successes bring it back. Intervals are jittered ±10 % so
// checkers started together drift apart; the first check runs after a
// jittered tenth of the interval, and endpoints count as healthy until checks
// say otherwise.
//
// A hostname endpoint whose addresses the registry balances over (no upstream
// proxy) is checked per address, as Envoy checks every host of a STRICT_DNS
// cluster: each round resolves the name through the destination guard (as
// requests do: a refused address gets no probe), probes every address, and
// gives each address its own verdict. Addresses that left the answer are
// forgotten; at most MAX_ADDRESSES of one answer are probed. The name's own
// verdict — read only before the registry has resolved it — passes while any
// address passes.

import http2 from 'node:http2'
import type { Socket } from 'node:net'
import type { ActiveHealthCheck, Cluster, Endpoint, HealthCheckPayload } from '../compile/table.ts'
import { H1ResponseParser } from './h1-parser.ts'
import { logger } from '../observe/log.ts'
import { Connector, type PendingConnect } from './connect.ts'
import type { EndpointHealth } from './outlier.ts'
import type { Resolver } from './resolve.ts'
import { buildClientTls, endpointServername, type ClientTls } from './tls.ts'

const log = logger('upstream')

const JITTER = 0.1

function jittered(ms: number): number {
  return Math.max(1, Math.round(ms * (1 - JITTER + Math.random() * 2 * JITTER)))
}

/** Addresses of one answer probed in a round; the rest keep their verdict (healthy until checked). */
const MAX_ADDRESSES = 64

/** Where a hostname's per-address verdicts go (Resilience). */
export interface AddressVerdicts {
  /** The health of one resolved address of the name (created when new). */
  healthOf(endpoint: Endpoint): EndpointHealth
  /** The addresses checked changed: those that left may be forgotten. */
  changed(): void
}

interface CheckTarget {
  readonly config: ActiveHealthCheck
  readonly authority: string
  readonly h2: boolean
  /** HTTP: bytes the first BODY_WINDOW bytes of the body must contain (null: the status alone decides). */
  readonly expected: Buffer | null
  /** TCP: written once connected. */
  readonly send: Buffer | null
  /** TCP: looked for in what comes back (null: connecting is enough). */
  readonly receive: Buffer | null
}

/** The body bytes an HTTP check's expectedResponse is looked for in (Envoy's default response buffer). */
const BODY_WINDOW = 1024
/** What a TCP check reads at most while looking for its receive payload. */
const TCP_WINDOW = 64 * 1024

function payloadBytes(p: HealthCheckPayload | null | undefined): Buffer | null {
  if (p === null || p === undefined) return null
  const bytes = p.type === 'Binary' ? Buffer.from(p.binary ?? '', 'base64') : Buffer.from(p.text ?? '', 'utf8')
  return bytes.length === 0 ? null : bytes
}

/** Collects the start of a body and says whether `expected` is in it (bounded to `window` bytes). */
class BodyMatch {
  readonly #expected: Buffer
  readonly #window: number
  #seen: Buffer = Buffer.alloc(0)
  constructor(expected: Buffer, window: number) {
    this.#expected = expected
    this.#window = Math.max(window, expected.length)
  }

  /** True once found; false when not (yet); null when the window is full without it. */
  add(chunk: Buffer): boolean | null {
    const room = this.#window - this.#seen.length
    this.#seen = Buffer.concat([this.#seen, room < chunk.length ? chunk.subarray(0, room) : chunk])
    if (this.#seen.includes(this.#expected)) return true
    return this.#seen.length >= this.#window ? null : false
  }
}

/** One check of one connection target: connect, then (HTTP) one request. */
class Probe {
  readonly endpoint: Endpoint
  readonly #connector: Connector
  #socket: Socket | null = null
  /** The check's connect while in progress. */
  #opening: PendingConnect | null = null
  /** The running check's end; null when none runs. */
  #finish: ((ok: boolean) => void) | null = null

  constructor(endpoint: Endpoint, connector: Connector) {
    this.endpoint = endpoint
    this.#connector = connector
  }

  run(target: CheckTarget, done: (ok: boolean) => void): void {
    const config = target.config
    let over = false
    const finish = (ok: boolean): void => {
      if (over) return
      over = true
      this.#finish = null
      clearTimeout(timer)
      // A check that timed out while connecting stops its connect too.
      this.#opening?.cancel()
      this.#opening = null
      this.#socket?.destroy()
      this.#socket = null
      done(ok)
    }
    this.#finish = finish
    const timer = setTimeout(() => finish(false), config.timeoutMs)
    timer.unref()
    const alpn = config.type === 'HTTP' ? (target.h2 ? ['h2'] : ['http/1.1']) : null
    const opening = this.#connector.connect(alpn, (err, socket) => {
      if (this.#opening === opening) this.#opening = null
      if (err !== null || socket === null) return finish(false)
      if (over) { socket.destroy(); return }
      this.#socket = socket
      if (config.type === 'TCP' || config.http === null) {
        if (target.send === null && target.receive === null) return finish(true)
        return this.#checkTcp(socket, target, finish)
      }
      if (target.h2) this.#checkH2(socket, target, config.http, finish)
      else this.#checkH1(socket, target, config.http, finish)
    })
    this.#opening = opening
  }

  /** Ends a running check at once (its verdict is not wanted any more). */
  stop(): void {
    this.#finish?.(false)
  }

  /** Sends `send`, then passes once `receive` is in what came back (or at once without one). */
  #checkTcp(socket: Socket, target: CheckTarget, finish: (ok: boolean) => void): void {
    const receive = target.receive
    if (receive !== null) {
      const match = new BodyMatch(receive, TCP_WINDOW)
      socket.on('data', (chunk: Buffer) => {
        const found = match.add(chunk)
        if (found !== false) finish(found === true)
      })
    }
    socket.on('error', () => finish(false))
    socket.on('close', () => finish(false))
    if (target.send !== null) socket.write(target.send)
    if (receive === null) finish(true)
  }

  #checkH1(socket: Socket, target: CheckTarget, http: NonNullable<ActiveHealthCheck['http']>, finish: (ok: boolean) => void): void {
    const expected = target.expected
    const match = expected === null ? null : new BodyMatch(expected, BODY_WINDOW)
    const parser = new H1ResponseParser({
      onInterim() {},
      onHead(status) {
        if (!http.expectedStatuses.includes(status)) finish(false)
        else if (match === null) finish(true)
      },
      onBody(chunk) {
        const found = match?.add(chunk) ?? true
        if (found !== false) finish(found === true)
      },
      onEnd() { finish(false) }, // the whole body came without the expected bytes
    })
    parser.expect(http.method)
    socket.on('data', (chunk: Buffer) => {
      if (parser.execute(chunk) !== null) finish(false)
    })
    socket.on('error', () => finish(false))
    socket.on('close', () => finish(false))
    socket.write(`${http.method} ${http.path} HTTP/1.1\r\nhost: ${target.authority}\r\nuser-agent: sallyport-health-check\r\nconnection: close\r\n\r\n`)
  }

  #checkH2(socket: Socket, target: CheckTarget, http: NonNullable<ActiveHealthCheck['http']>, finish: (ok: boolean) => void): void {
    const scheme = this.#connector.secure ? 'https' : 'http'
    const session = http2.connect(`${scheme}://${target.authority}`, { createConnection: () => socket })
    session.on('error', () => finish(false))
    const done = (ok: boolean): void => {
      finish(ok)
      session.destroy()
    }
    const expected = target.expected
    const req = session.request({ ':method': http.method, ':path': http.path, 'user-agent': 'sallyport-health-check' }, { endStream: true })
    req.on('response', (headers) => {
      if (!http.expectedStatuses.includes(Number(headers[':status']))) return done(false)
      if (expected === null) return done(true)
      const match = new BodyMatch(expected, BODY_WINDOW)
      req.on('data', (chunk: Buffer) => {
        const found = match.add(chunk)
        if (found !== false) done(found === true)
      })
      req.on('end', () => done(false))
    })
    req.on('error', () => finish(false))
    req.on('close', () => finish(false))
    req.resume()
  }
}

/** A hostname checked per address: its resolver, and a probe per address of the last answer. */
interface NameTarget {
  readonly endpoint: Endpoint
  readonly resolver: Resolver
  readonly tls: ClientTls | null
  readonly verdicts: AddressVerdicts
  readonly probes: Map<string, Probe>
}

export class HealthChecker {
  readonly #config: ActiveHealthCheck
  /** The configured endpoint's health. */
  readonly #health: EndpointHealth
  readonly #target: CheckTarget
  /** An address, a unix socket, or a name resolved by the connector (through an upstream proxy): one probe. */
  readonly #single: Probe | null
  /** A name checked per resolved address. */
  readonly #name: NameTarget | null
  #timer: NodeJS.Timeout | null = null
  #stopped = false
  /** What of the cluster its probes use (sameAs). */
  readonly #probedAs: string
  /** Checks run so far (tests, dump). */
  runs = 0

  /** `verdicts`: check a hostname endpoint per resolved address (null: one probe for the endpoint). */
  constructor(cluster: Cluster, endpoint: Endpoint, health: EndpointHealth, config: ActiveHealthCheck, resolver: Resolver, verdicts: AddressVerdicts | null = null) {
    this.#config = config
    this.#health = health
    this.#probedAs = probedAs(cluster)
    // A name's probes, each address's too, send and verify that name when the cluster's TLS names none (as its pools).
    const tls = cluster.tls === null || cluster.protocol === 'H2C' ? null : buildClientTls(cluster.tls, endpointServername(cluster.tls, endpoint))
    // The Host a probe asks for: the check's own `http.hostname`, else the Backend's name, else the endpoint.
    const authority = config.http?.hostname ?? cluster.hostname ?? (endpoint.kind === 'unix' ? 'localhost' : endpoint.port === 80 || endpoint.port === 443 ? endpoint.host : `${endpoint.host}:${endpoint.port}`)
    this.#target = {
      config, authority, h2: cluster.protocol === 'HTTP2' || cluster.protocol === 'H2C',
      expected: payloadBytes(config.http?.expectedResponse), send: payloadBytes(config.tcp?.send), receive: payloadBytes(config.tcp?.receive),
    }
    if (verdicts !== null && endpoint.kind === 'hostname') {
      this.#single = null
      this.#name = { endpoint, resolver, tls, verdicts, probes: new Map() }
    } else {
      this.#single = new Probe(endpoint, new Connector({ endpoint, tls, resolver, timeoutMs: config.timeoutMs }))
      this.#name = null
    }
  }

  /**
   * Same check of the same target (a new table with an equal check keeps its
   * checker and counters). The target is the cluster as probes see it: a new
   * table may keep the cluster's id and check but change its Host, TLS,
   * protocol or upstream proxy, which a kept checker would go on probing with.
   */
  sameAs(config: ActiveHealthCheck, cluster: Cluster): boolean {
    return JSON.stringify(config) === JSON.stringify(this.#config) && probedAs(cluster) === this.#probedAs
  }

  /** The resolved addresses checked now (a hostname checked per address; else none). */
  addresses(): Iterable<Endpoint> {
    const name = this.#name
    if (name === null) return []
    return [...name.probes.values()].map((p) => p.endpoint)
  }

  start(): void {
    this.#schedule(jittered(this.#config.intervalMs / 10))
  }

  stop(): void {
    this.#stopped = true
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
    this.#single?.stop()
    if (this.#name !== null) for (const p of this.#name.probes.values()) p.stop()
  }

  #schedule(ms: number): void {
    if (this.#stopped) return
    this.#timer = setTimeout(() => { this.#timer = null; this.#run() }, ms)
    this.#timer.unref()
  }

  #run(): void {
    const single = this.#single
    if (single !== null) {
      single.run(this.#target, (ok) => this.#roundDone(ok))
      return
    }
    const name = this.#name as NameTarget
    name.resolver.resolve(name.endpoint.host).then(
      (addresses) => { if (!this.#stopped) this.#probeAll(name, addresses) },
      // No usable address (NXDOMAIN, resolver down, every address refused): nothing to probe, the name fails.
      () => { if (!this.#stopped) { this.#track(name, []); this.#roundDone(false) } },
    )
  }

  /** Every address of the answer at once; each its own verdict, the name passing while any address passes. */
  #probeAll(name: NameTarget, addresses: readonly string[]): void {
    const probes = this.#track(name, addresses.slice(0, MAX_ADDRESSES))
    if (probes.length === 0) return this.#roundDone(false)
    let left = probes.length
    let any = false
    for (const probe of probes) {
      probe.run(this.#target, (ok) => {
        // Looked up at each verdict: an address forgotten meanwhile gets a fresh state, not a stale one.
        if (!this.#stopped && name.probes.get(probe.endpoint.host) === probe) applyVerdict(name.verdicts.healthOf(probe.endpoint), ok, this.#config)
        if (ok) any = true
        if (--left === 0) this.#roundDone(any)
      })
    }
  }

  /** The probes for `addresses`: new ones made, those of addresses no longer in the answer dropped. */
  #track(name: NameTarget, addresses: readonly string[]): Probe[] {
    const probes = name.probes
    let changed = false
    const wanted = new Set(addresses)
    for (const [address, probe] of probes) {
      if (wanted.has(address)) continue
      probe.stop()
      probes.delete(address)
      changed = true
    }
    const out: Probe[] = []
    for (const address of wanted) {
      let probe = probes.get(address)
      if (probe === undefined) {
        const endpoint: Endpoint = { host: address, port: name.endpoint.port, kind: 'ip', weight: name.endpoint.weight, zone: name.endpoint.zone }
        probe = new Probe(endpoint, new Connector({ endpoint, tls: name.tls, resolver: name.resolver, timeoutMs: this.#config.timeoutMs }))
        probes.set(address, probe)
        changed = true
      }
      out.push(probe)
    }
    if (changed) name.verdicts.changed()
    return out
  }

  #roundDone(ok: boolean): void {
    this.runs++
    if (!this.#stopped) applyVerdict(this.#health, ok, this.#config)
    this.#schedule(jittered(this.#config.intervalMs))
  }
}

/** The cluster's settings a check's probes are made with: protocol, TLS identity, Host, upstream proxy. */
function probedAs(cluster: Cluster): string {
  return `${cluster.protocol}|${cluster.tls?.identityHash ?? 'plain'}|${cluster.hostname ?? ''}|${JSON.stringify(cluster.upstreamProxy ?? null)}`
}

/** One check's outcome for one endpoint: thresholds, then in or out of rotation. */
function applyVerdict(h: EndpointHealth, ok: boolean, config: ActiveHealthCheck): void {
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
