// Forward-proxy mode (issue 9): one HTTP CONNECT, from verdict to close.
// HTTP/1.1 (the http.Server 'connect' event: the raw socket after the request
// head) and HTTP/2 (a CONNECT stream without :protocol, RFC 9113 §8.5) end up
// here as a ClientSide; the tunnel is the same.
//
// 1. routeConnect (router/forward-proxy.ts) decides from the routes and the
//    Gateway's destination policy; a refusal is answered (403 with the reason
//    as body, 400 for an unreadable target), counted
//    (sallyport_forward_proxy_refusals_total{reason}), logged and an Event.
// 1b. The backend's extension chain runs its request hooks on the CONNECT
//    (lib/extensions/flow.ts with a tunnel for host): an Authorization or a
//    RateLimit decides the tunnel as it would a request; what hooks would
//    change in a request goes nowhere (the bytes are the client's own).
// 2. The backend is dialled like a TCPRoute's (upstreams.dialL4: endpoint
//    failover, DNS, the confused-deputy guard on resolved addresses, the
//    upstream proxy if the Backend has one) — before answering, so an
//    unreachable or refused destination still gets its status (403 / 502).
// 3. 200, then (sallyport.io/connect-verify-sni) the client's ClientHello is
//    read and its SNI must name the requested host; then bytes are relayed
//    both ways with backpressure (pipe), half-close and the idle timeout.
// 4. Accounted once however it ends: the L4 connection metrics (bytes,
//    duration, how it ended) and one access-log line with protocol 'connect',
//    the destination and the client's identity.

import http2 from 'node:http2'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import type { RouteRule, RouteTable } from '../compile/table.ts'
import { ErrorCode, type SallyportError } from '../errors.ts'
import type { Logger } from '../observe/log.ts'
import { logger } from '../observe/log.ts'
import { l4ActiveConnections, recordL4Connection, type L4Code } from '../observe/l4-metrics.ts'
import { tracer } from '../observe/tracing.ts'
import { forwardProxyRefusals } from '../observe/forward-proxy-metrics.ts'
import type { ConnectionSni } from '../router/misdirected.ts'
import { connectDestination, routeConnect, type ConnectAllowed, type ConnectRefusal } from '../router/forward-proxy.ts'
import type { UpstreamRequest, Upstreams } from '../upstream/types.ts'
import { relay } from '../upstream/relay.ts'
import type { EventSink } from '../extensions/events.ts'
import { MAX_CLIENT_HELLO_BYTES, parseClientHello } from './sni-client-hello.ts'
import { STATUS_CODES } from 'node:http'
import { defaultExtensionRuntime, type ExtensionRuntime } from '../extensions/chain.ts'
import { clientInfo, identify } from '../extensions/client.ts'
import { Flow, type FlowHost, type FlowInfo } from '../extensions/flow.ts'
import type { ClientInfo } from '../extensions/plugin-api.ts'
import { gatewayOf, servingListener } from '../observe/serving-listener.ts'
import { hostOf } from '../router/headers.ts'
import { Cancel } from '../upstream/cancel.ts'
import { endAndDiscard } from './linger.ts'
import { markTunnel, resetStream } from './tunnel-ends.ts'
import { resetSocket } from '../upstream/reset-socket.ts'
import { wasCut } from '../router/exchange.ts'

const log = logger('forward-proxy')

/** How long a client may take to send its ClientHello when the SNI is checked. */
const HELLO_TIMEOUT_MS = 10_000
/** Tunnel idle timeout when the route sets none. */
const DEFAULT_IDLE_MS = 300_000

/** The downstream side of one CONNECT: how to answer and where the tunnel bytes are. */
export interface ClientSide {
  readonly protocol: 'h1' | 'h2'
  readonly address: string
  /** Answers with a status and a short text body, then closes. */
  refuse(status: number, body: string): void
  /** Answers 200 and returns the tunnel's byte stream. */
  accept(): Duplex
  /** Calls `fn` when the client goes away; returns what stops watching. */
  whenGone(fn: () => void): () => void
  /** Calls `fn` when the client resets the tunnel without an 'error' (HTTP/2: its RST_STREAM). */
  onReset(fn: () => void): void
  /** The destination reset the tunnel: so does the client's side (a TCP RST; HTTP/2: RST_STREAM CONNECT_ERROR). */
  reset(): void
  /** The gateway closed the client's connection itself (its listener's grace period ran out). */
  cut(): boolean
}

export interface TunnelEnv {
  readonly upstreams: Upstreams
  /** `access` logger, or null when the access log is off. */
  readonly accessLog: Logger | null
  /** Where refusal Events go (the extension runtime's aggregating sink); null: log only. */
  readonly events: EventSink | null
  /** Runs the backends' extension chains (null: the process-wide default). */
  readonly extensions: ExtensionRuntime | null
}

const REASON_TEXT: Record<ConnectRefusal, string> = {
  bad_authority: 'CONNECT target must be host:port',
  no_route: 'no route for this destination',
  misdirected: 'this connection serves another listener: connect again with this destination as TLS server name',
  connect_not_allowed: 'CONNECT not allowed by the route for this destination',
  port_not_allowed: 'CONNECT to this port not allowed by the route',
  no_backend: 'no backend for this destination',
  destination_denied: 'destination not allowed by gateway policy',
  destination_refused: 'destination refused: its addresses are not allowed',
  sni_mismatch: 'TLS server name does not match the CONNECT destination',
  connect_failed: 'destination unreachable',
  extension_denied: 'denied by an extension',
  extension_failed: 'extension failed',
}

/** HTTP/1.1 CONNECT: `req.url` is the authority; `head` are bytes the client sent after the request head. */
export function h1Client(socket: Socket, address: string): ClientSide {
  return {
    protocol: 'h1',
    address,
    refuse(status: number, body: string): void {
      const text = body + '\n'
      endAndDiscard(socket, `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Unknown'}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`)
    },
    accept(): Duplex {
      socket.allowHalfOpen = true
      markTunnel(socket) // cut by the gateway: reset, never a FIN (tunnel-ends.ts cutConnection)
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n')
      return socket
    },
    whenGone(fn: () => void): () => void {
      socket.once('close', fn)
      return () => { socket.removeListener('close', fn) }
    },
    // A reset reaches the tunnel as the socket's 'error' (ECONNRESET).
    onReset: noop,
    reset(): void { resetSocket(socket) },
    cut: () => wasCut(socket),
  }
}

/** HTTP/2 CONNECT stream (RFC 9113 §8.5): the stream itself is the tunnel. */
export function h2Client(stream: http2.ServerHttp2Stream, address: string): ClientSide {
  // Its session's end (a protocol error later in the read that opened it) is emitted on the
  // stream: a refused one, or one still dialling, had nobody listening and took the process down.
  stream.on('error', noop)
  return {
    protocol: 'h2',
    address,
    refuse(status: number, body: string): void {
      if (stream.destroyed) return
      stream.respond({ ':status': status, 'content-type': 'text/plain; charset=utf-8' })
      stream.end(body + '\n')
    },
    accept(): Duplex {
      stream.respond({ ':status': 200 })
      return stream
    },
    whenGone(fn: () => void): () => void {
      stream.once('close', fn)
      return () => { stream.removeListener('close', fn) }
    },
    // A stream reset while we may still send ('aborted', before node's 'end' and 'close'
    // for it): node emits no 'error' for CANCEL or NO_ERROR, and an 'end' that reads as
    // the client's END_STREAM.
    onReset(fn: () => void): void { stream.once('aborted', fn) },
    // RFC 9113 §8.5: a TCP reset from the destination is a stream error CONNECT_ERROR
    // (without the END_STREAM node's close() would send first: tunnel-ends.ts).
    reset(): void { resetStream(stream, http2.constants.NGHTTP2_CONNECT_ERROR) },
    cut: () => wasCut(stream.session),
  }
}

/** Runs one CONNECT to `authority` arriving on `port`, on the table it arrived with. */
export function openTunnel(client: ClientSide, authority: string, head: Buffer | null, table: RouteTable, port: number, env: TunnelEnv, sni: ConnectionSni | null): void {
  const startedAt = performance.now()
  const decision = routeConnect(table, port, authority, sni)
  if (!decision.ok) {
    refuse(client, decision.status, decision.reason, decision.destination, decision.rule, table, port, env)
    return
  }
  if (decision.chain === null) { dial(client, decision, head, table, port, env, startedAt); return }
  // The backend's chain decides first: its request hooks, on a view of the CONNECT.
  const runtime = env.extensions ?? defaultExtensionRuntime()
  const host = new ConnectFlowHost(client, decision, head, table, port, env, startedAt)
  const { rule, cluster } = decision
  const req: UpstreamRequest = {
    cluster, method: 'CONNECT', path: '', authority: connectDestination(decision.host, decision.port), headers: {}, body: null,
    timeouts: { connectMs: rule.timeouts.connectMs, headersMs: null, idleMs: rule.timeouts.idleMs }, signal: new Cancel(), upgrade: null, clientAddress: client.address,
  }
  const info: FlowInfo = {
    route: `${rule.route.namespace}/${rule.route.name}`, rule: rule.id, backend: cluster.id,
    gateway: labelsOf(table, port, decision.host).gateway, scheme: 'http',
  }
  new Flow(host, runtime.runnable(decision.chain), req, info).start()
}

/** The end of a CONNECT's extension run: dial, or refuse as the chain said. */
class ConnectFlowHost implements FlowHost {
  readonly #client: ClientSide
  readonly #decision: ConnectAllowed
  readonly #head: Buffer | null
  readonly #table: RouteTable
  readonly #port: number
  readonly #env: TunnelEnv
  readonly #startedAt: number
  readonly #stopWatching: () => void
  #done = false
  #gone = false
  constructor(client: ClientSide, decision: ConnectAllowed, head: Buffer | null, table: RouteTable, port: number, env: TunnelEnv, startedAt: number) {
    this.#client = client
    this.#decision = decision
    this.#head = head
    this.#table = table
    this.#port = port
    this.#env = env
    this.#startedAt = startedAt
    this.#stopWatching = client.whenGone(() => { this.#gone = true })
  }
  isDone(): boolean { return this.#done || this.#gone }
  send(): void {
    if (this.isDone()) return
    this.#done = true
    this.#stopWatching()
    dial(this.#client, this.#decision, this.#head, this.#table, this.#port, this.#env, this.#startedAt)
  }
  relay(): void { /* a CONNECT has no upstream response for hooks to see */ }
  deny(status: number, _code: ErrorCode, reason: string): void {
    this.#refuse(status, 'extension_denied', reason)
  }
  fail(_code: ErrorCode, detail?: string | null): void {
    this.#refuse(500, 'extension_failed', detail ?? 'extension failed')
  }
  clientInfo(): ClientInfo {
    const address = this.#client.address
    return clientInfo(address, identify(this.#table, address, null), null)
  }
  #refuse(status: number, reason: ConnectRefusal, text: string): void {
    if (this.isDone()) return
    this.#done = true
    this.#stopWatching()
    const d = this.#decision
    refuse(this.#client, status, reason, connectDestination(d.host, d.port), d.rule, this.#table, this.#port, this.#env, text, text)
  }
}

/** Dials the decided backend, then opens the tunnel (or refuses: unreachable, refused addresses). */
function dial(client: ClientSide, decision: ConnectAllowed, head: Buffer | null, table: RouteTable, port: number, env: TunnelEnv, startedAt: number): void {
  const { rule, cluster } = decision
  // The client leaving while the destination is dialled stops the dial.
  let stopWatching = noop
  const dialing = env.upstreams.dialL4({ cluster, originateTls: false, connectMs: rule.timeouts.connectMs }, (err, conn) => {
    stopWatching()
    if (err !== null && err.code === ErrorCode.CLIENT_ABORTED) {
      // The client left while the destination was dialled: nobody to answer; recorded as a reset by the client.
      recordTunnel(client, decision, table, port, env, startedAt, labelsOf(table, port, decision.host), '', 'client_reset', 0, 0)
      return
    }
    if (err !== null || conn === null) {
      const reason: ConnectRefusal = isPolicyError(err) ? 'destination_refused' : 'connect_failed'
      refuse(client, reason === 'connect_failed' ? 502 : 403, reason, connectDestination(decision.host, decision.port), rule, table, port, env, err?.message)
      return
    }
    new Tunnel(client, decision, conn.socket, conn.endpoint, head, table, port, env, startedAt)
  })
  stopWatching = client.whenGone(() => { dialing.cancel() })
}

function isPolicyError(err: SallyportError | null): boolean {
  return err !== null && (err.code === ErrorCode.DESTINATION_REFUSED || err.code === ErrorCode.FORBIDDEN)
}

/** The Gateway and listener a CONNECT to `host` came through (a route may be attached to several): its labels. */
function labelsOf(table: RouteTable, port: number, host: string): { gateway: string; listener: string } {
  const entry = table.ports.get(port) ?? null
  const listener = servingListener(entry, host)
  return { gateway: gatewayOf(entry, listener), listener: listener === null ? '' : listener.name }
}

function identityOf(table: RouteTable, address: string): string | null {
  const id = table.clients.get(address)
  return id === undefined ? null : `${id.namespace}/${id.serviceAccount}`
}

function refuse(
  client: ClientSide, status: number, reason: ConnectRefusal, destination: string, rule: RouteRule | null,
  table: RouteTable, port: number, env: TunnelEnv, detail?: string, body?: string,
): void {
  client.refuse(status, body ?? REASON_TEXT[reason])
  forwardProxyRefusals.inc({ reason })
  const { gateway, listener } = labelsOf(table, port, hostOf(destination))
  const route = rule === null ? '' : `${rule.route.namespace}/${rule.route.name}`
  const fields = { gateway, listener, client: client.address, identity: identityOf(table, client.address), destination, route, reason, status }
  log.info(detail === undefined ? fields : { ...fields, detail }, 'CONNECT refused')
  if (env.accessLog !== null) env.accessLog.info({ protocol: 'connect', ...fields }, 'connection')
  if (env.events !== null && reason !== 'connect_failed') {
    const [namespace = '', name = ''] = gateway.split('/')
    env.events.emit({ type: 'Warning', reason: 'ConnectRefused', object: { kind: 'Gateway', namespace, name }, message: `CONNECT to ${destination} refused: ${reason}`, count: 1 })
  }
}

class Tunnel {
  readonly #client: ClientSide
  readonly #decision: ConnectAllowed
  readonly #upstream: Socket
  readonly #endpoint: string
  readonly #table: RouteTable
  readonly #port: number
  readonly #env: TunnelEnv
  readonly #startedAt: number
  readonly #labels: { gateway: string; listener: string }
  #stream: Duplex | null = null
  #end: L4Code | null = null
  #open = 2
  #finished = false

  constructor(client: ClientSide, decision: ConnectAllowed, upstream: Socket, endpoint: string, head: Buffer | null, table: RouteTable, port: number, env: TunnelEnv, startedAt: number) {
    this.#client = client
    this.#decision = decision
    this.#upstream = upstream
    this.#endpoint = endpoint
    this.#table = table
    this.#port = port
    this.#env = env
    this.#startedAt = startedAt
    this.#labels = labelsOf(table, port, decision.host)
    l4ActiveConnections.inc(this.#labels)
    const stream = client.accept()
    this.#stream = stream
    upstream.on('error', this.#onUpstreamError)
    stream.on('error', this.#onClientError)
    // RFC 9113 §8.5: a reset stream makes the proxy reset its TCP connection; a
    // FIN would tell the destination the upload was complete.
    client.onReset(this.#onClientReset)
    stream.once('close', () => {
      // The gateway's own cut (a grace period ran out) resets the destination: a FIN would say the upload was whole.
      if (this.#client.cut()) { this.#end ??= 'shutdown'; resetSocket(upstream) } else upstream.destroy()
      this.#onClose()
    })
    upstream.once('close', this.#onClose)
    if (stream.destroyed) { this.#onClientError(); this.#onClose(); return } // the client left while we dialled
    const first = head !== null && head.length > 0 ? head : null
    // connect-verify-sni: bytes the client sent with the CONNECT head are the
    // start of its ClientHello, checked like the rest; nothing reaches the
    // destination before the check passes.
    if (decision.verifySni) { this.#checkHello(stream, upstream, first); return }
    if (first !== null) upstream.write(first)
    this.#splice(stream, upstream)
  }

  /** connect-verify-sni: the first bytes (`first`, then what the client sends) must be a ClientHello naming the requested host. */
  #checkHello(stream: Duplex, upstream: Socket, first: Buffer | null): void {
    let buffered: Buffer = Buffer.alloc(0)
    const timer = setTimeout(() => this.#deny('client_hello_timeout'), HELLO_TIMEOUT_MS)
    const onData = (chunk: Buffer): void => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk])
      const r = parseClientHello(buffered)
      if (r.kind === 'more' && buffered.length <= MAX_CLIENT_HELLO_BYTES) return
      clearTimeout(timer)
      stream.removeListener('data', onData)
      stream.pause()
      if (r.kind !== 'hello' || r.sni === null || r.sni.toLowerCase() !== this.#decision.host) {
        forwardProxyRefusals.inc({ reason: 'sni_mismatch' })
        log.info({ ...this.#labels, client: this.#client.address, destination: connectDestination(this.#decision.host, this.#decision.port), sni: r.kind === 'hello' ? r.sni : null }, 'CONNECT tunnel closed: SNI does not match')
        this.#deny('forbidden')
        return
      }
      upstream.write(buffered)
      this.#splice(stream, upstream)
    }
    stream.on('data', onData)
    if (first !== null) onData(first)
  }

  #deny(code: L4Code): void {
    this.#end ??= code
    this.#stream?.destroy()
    this.#upstream.destroy()
  }

  #splice(stream: Duplex, upstream: Socket): void {
    const idleMs = this.#decision.rule.timeouts.idleMs ?? DEFAULT_IDLE_MS
    // Every byte either way passes through the upstream socket: one timer watches both.
    if (idleMs > 0) upstream.setTimeout(idleMs, () => this.#deny('idle_timeout'))
    upstream.allowHalfOpen = true
    relay(stream, upstream)
    relay(upstream, stream)
  }

  /** The client reset (or broke) its side: the destination's connection is reset, not ended, so a cut upload never looks whole. */
  #onClientError = (): void => {
    this.#onClientReset()
    this.#stream?.destroy()
  }

  #onClientReset = (): void => {
    this.#end ??= 'client_reset'
    resetSocket(this.#upstream)
  }

  /** The destination reset (or broke) its side: so is the client's, so a cut download never looks whole. */
  #onUpstreamError = (): void => {
    this.#end ??= 'upstream_reset'
    this.#client.reset()
    this.#upstream.destroy()
  }

  #onClose = (): void => {
    if (--this.#open > 0 || this.#finished) return
    this.#finished = true
    l4ActiveConnections.dec(this.#labels)
    // Wire bytes of the tunnel: what went to the upstream came from the client, and back.
    recordTunnel(this.#client, this.#decision, this.#table, this.#port, this.#env, this.#startedAt, this.#labels, this.#endpoint,
      this.#end ?? 'ok', this.#upstream.bytesWritten, this.#upstream.bytesRead)
  }
}

/** A CONNECT that was answered 200 (or abandoned while dialled): its metrics, span and access line. */
function recordTunnel(
  client: ClientSide, d: ConnectAllowed, table: RouteTable, port: number, env: TunnelEnv, startedAt: number,
  labels: { gateway: string; listener: string }, endpoint: string, code: L4Code, bytesIn: number, bytesOut: number,
): void {
  const seconds = (performance.now() - startedAt) / 1000
  const route = `${d.rule.route.namespace}/${d.rule.route.name}`
  recordL4Connection({ ...labels, route, backend: d.cluster.id, code, bytesIn, bytesOut, seconds })
  // Issue 10: one span per tunnel, like TCP/TLS listener connections (the requested host as tls.server.name).
  if (tracer !== null) {
    tracer.recordConnection({
      startedAt, protocol: 'connect', gateway: labels.gateway, listener: labels.listener, port,
      client: client.address, sni: d.host, route, backend: d.cluster.id, endpoint, bytesIn, bytesOut, code,
    })
  }
  const access = env.accessLog
  if (access !== null) {
    access.info({
      protocol: 'connect', via: client.protocol, gateway: labels.gateway, listener: labels.listener,
      client: client.address, identity: identityOf(table, client.address), port,
      destination: connectDestination(d.host, d.port), route, backend: d.cluster.id, upstream: endpoint,
      bytesIn, bytesOut, durationMs: Math.round(seconds * 1000), reason: code,
    }, 'connection')
  }
}

function noop(): void {}
