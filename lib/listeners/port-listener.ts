// One listening port of protocol HTTP or HTTPS. Both speak HTTP/1.1 and HTTP/2
// through one (unlistened) http.Server and one http2 server per port, fed by
// `emit('connection')`:
// - HTTP: a net.Server peeks the first bytes; the HTTP/2 connection preface
//   means prior-knowledge h2c, anything else HTTP/1.1 (which may still ask for
//   `Upgrade: h2c`). Peeked bytes are unshifted, so nothing is copied twice.
// - HTTPS: a tls.Server picks certificates by SNI and offers ALPN h2 and
//   http/1.1; the negotiated protocol picks the server.
// HTTP/1.1 connections start on h1-fast.ts (plain requests parsed and answered
// without node:http) and move to the http.Server at the first request it does
// not take. The port number is fixed per listener, so requests find their
// PortEntry in whatever table they arrive with.

import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import http2, { type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2'
import net, { type Socket } from 'node:net'
import tls, { type TLSSocket } from 'node:tls'
import type { Duplex } from 'node:stream'
import type { PortEntry, RouteTable, ServerTls } from '../compile/table.ts'
import { handleExchange, recordRefusal, type RouterEnv } from '../router/forward.ts'
import { markCut, type Exchange } from '../router/exchange.ts'
import { hostOf, namesH2c } from '../router/headers.ts'
import { downstreamActiveConnections, downstreamConnectionsClosed } from '../observe/http-metrics.ts'
import { bindServer } from '../bind.ts'
import { logger } from '../observe/log.ts'
import { H1Exchange, H2C_TUNNEL, HOST_DIFFERS, UpgradeExchange, clientIp, closingResponse, connectionSni, inFlightExchange, refusedHead, setConnectionSni, type Refusal } from './exchange-h1.ts'
import { ErrorCode } from '../errors.ts'
import { FastH1Connection, type FastH1Host } from './h1-fast.ts'
import { H2Exchange, type H2Connection } from './exchange-h2.ts'
import { ConnectionSni } from '../router/misdirected.ts'
import { canUpgradeH2c, upgradeH2c } from './h2c-upgrade.ts'
import { h1Client, h2Client, openTunnel, type TunnelEnv } from './connect-tunnel.ts'
import { endAndDiscard } from './linger.ts'
import { cutConnection } from './tunnel-ends.ts'
import type { Logger } from '../observe/log.ts'
import { LISTENER_CIPHERS, LISTENER_SECURE_OPTIONS, SecureContexts, defaultContextKey, hasTls13Floor, noCertificate, refusedBelowFloor, selectCert, serverNameOf, setDefaultContext } from './tls-contexts.ts'
import { handshakeFailed } from './tls-handshake-errors.ts'
import { DEFAULT_MAX_CONNECTIONS, limitConnections } from './connection-limit.ts'
import { peerSpiffeId } from '../extensions/client.ts'

const log = logger('listener')

export interface HttpLimits {
  /** Bytes of request headers (HTTP/1.1 maxHeaderSize; HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE). */
  readonly maxHeaderSize: number
  readonly maxHeaders: number
  /** Whole request received (HTTP/1.1); 0 = none. */
  readonly requestTimeoutMs: number
  readonly headersTimeoutMs: number
  /** Idle keep-alive connection / HTTP/2 session without streams. */
  readonly keepAliveTimeoutMs: number
  readonly maxConcurrentStreams: number
  /** Open client connections on the port (--max-connections); past it new ones are closed at accept. */
  readonly maxConnections: number
}

export const DEFAULT_LIMITS: HttpLimits = {
  maxHeaderSize: 16 * 1024,
  maxHeaders: 100,
  requestTimeoutMs: 0,
  headersTimeoutMs: 30_000,
  keepAliveTimeoutMs: 60_000,
  maxConcurrentStreams: 250,
  maxConnections: DEFAULT_MAX_CONNECTIONS,
}

/** What a listener needs from its data plane. */
export interface PlaneContext {
  readonly env: RouterEnv
  readonly limits: HttpLimits
  readonly contexts: SecureContexts
  /** The table in force; read once per request. */
  current(): RouteTable | null
  /** Issue 9: the `access` logger for CONNECT tunnels (absent or null: off). */
  readonly accessLog?: Logger | null
}

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1')

/**
 * CVE-2023-44487 (HTTP/2 rapid reset): a connection that has opened at least
 * this many streams, more than half of them reset before an answer began and
 * within PREMATURE_RESET_LIFETIME_MS of opening, is closed with GOAWAY
 * ENHANCE_YOUR_CALM (Envoy's premature-reset check, with its count and lifetime). Each such stream is a request routed and an upstream request begun
 * and cancelled; nghttp2's own reset rate limit lets a paced client go on for
 * ever. Twice the streams a client may have open at once: a client cancelling
 * everything it has in flight cannot trip it alone.
 */
export const PREMATURE_RESET_MIN_STREAMS = 500

/**
 * A reset counts as premature within this long of its stream's opening: a
 * client whose own timeout (longer) gives up on a slow upstream is not an attack.
 */
const PREMATURE_RESET_LIFETIME_MS = 1000

interface SessionInfo extends H2Connection {
  streams: number
  /** Streams the session has opened, and those reset before the answer's head went out. */
  opened: number
  resets: number
  /** Being closed for its resets (PREMATURE_RESET_MIN_STREAMS). */
  abusive: boolean
  /** Runs out keepAliveTimeout after the last stream closed (restarted then); cleared when the session closes. */
  idle: NodeJS.Timeout | null
}

export class PortListener {
  readonly port: number
  readonly protocol: 'HTTP' | 'HTTPS'
  readonly #plane: PlaneContext
  readonly #scheme: 'http' | 'https'
  readonly #server: net.Server
  /** defaultContextKey of the TLS server's current server-wide context; null: none set yet. */
  #defaultContext: string | null = null
  readonly #h1: http.Server
  readonly #h2: http2.Http2Server
  readonly #sockets = new Set<Socket>()
  /** HTTPS: the TLS sockets over those, which the exchanges hold: a cut is marked on them too. */
  readonly #secure = new Set<TLSSocket>()
  /** HTTP/1.1 connections served without node:http (h1-fast.ts) until they are handed over. */
  readonly #fast = new Set<FastH1Connection>()
  readonly #fastHost: FastH1Host
  readonly #sessions = new Map<ServerHttp2Session, SessionInfo>()
  readonly #connections: ReturnType<typeof downstreamActiveConnections.labels>
  /** The connection being handed to the HTTP/2 server, as its session will know it (its socket may be a wrapper). */
  #handing: SessionInfo | null = null
  #closing = false

  constructor(port: number, protocol: 'HTTP' | 'HTTPS', plane: PlaneContext) {
    this.port = port
    this.protocol = protocol
    this.#plane = plane
    this.#scheme = protocol === 'HTTPS' ? 'https' : 'http'
    this.#connections = downstreamActiveConnections.labels(String(port))
    const limits = plane.limits

    this.#h1 = http.createServer({
      maxHeaderSize: limits.maxHeaderSize,
      requestTimeout: limits.requestTimeoutMs,
      headersTimeout: limits.headersTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      // How often heads (and whole requests) are checked against those bounds.
      connectionsCheckingInterval: Math.max(50, Math.min(5000, Math.floor(limits.headersTimeoutMs / 4))),
      noDelay: true,
      // refusedHead answers a request without Host itself (a reason, an access line).
      requireHostHeader: false,
      shouldUpgradeCallback: this.#shouldUpgrade,
    }, this.#onRequest)
    // node checks headersTimeout/requestTimeout from a timer its server starts on
    // 'listening'; this one never listens (connections are handed to it), so it is
    // told. Without it a head that stalled once begun (a byte, half a head) was
    // never timed out. close() stops the timer.
    this.#h1.emit('listening')
    this.#h1.maxHeadersCount = limits.maxHeaders
    this.#h1.on('upgrade', this.#onUpgrade)
    this.#h1.on('connect', this.#onConnect)
    this.#h1.on('clientError', this.#onClientError)

    this.#h2 = http2.createServer({
      // Both limits are enforced in #onStream, where the answer is ours (431, a reset
      // counted in the field limit's terms); node's and nghttp2's sit above them, for
      // what must not reach JavaScript at all. nghttp2 enforces the
      // SETTINGS_MAX_HEADER_LIST_SIZE we announce once the client has acknowledged it,
      // with a bare RST_STREAM: announced at the limit, only a connection's first
      // requests got the 431.
      maxHeaderListPairs: limits.maxHeaders * 2,
      settings: {
        maxConcurrentStreams: limits.maxConcurrentStreams,
        maxHeaderListSize: limits.maxHeaderSize * 4,
        enableConnectProtocol: true, // RFC 8441 extended CONNECT (WebSocket over HTTP/2)
      },
    })
    // Streams are taken from each session ('stream' there, see #onSession), not from the server.
    this.#h2.on('session', this.#onSession)

    if (protocol === 'HTTPS') {
      const server = tls.createServer({
        ALPNProtocols: ['h2', 'http/1.1'],
        SNICallback: this.#sni,
        minVersion: 'TLSv1.2',
        ciphers: LISTENER_CIPHERS,
        secureOptions: LISTENER_SECURE_OPTIONS,
        handshakeTimeout: limits.headersTimeoutMs,
      })
      server.on('secureConnection', this.#onSecure)
      server.on('tlsClientError', (err: Error, socket: TLSSocket) => onTlsError(this.port, err, socket))
      this.#server = server
    } else {
      this.#server = net.createServer({ noDelay: true }, this.#onPlain)
    }
    this.#server.on('connection', this.#track)
    limitConnections(this.#server, port, limits.maxConnections)

    this.#fastHost = {
      port,
      scheme: this.#scheme,
      maxHeaderSize: limits.maxHeaderSize,
      maxHeaders: limits.maxHeaders,
      keepAliveTimeoutMs: limits.keepAliveTimeoutMs,
      closing: () => this.#closing,
      handle: this.#serve,
      fallback: (socket, rest) => {
        socket.pause()
        if (rest !== null) socket.unshift(rest)
        this.#h1.emit('connection', socket)
        socket.resume()
      },
      release: (conn) => { this.#fast.delete(conn) },
    }
  }

  /** HTTP/1.1 on `socket`: served by h1-fast.ts while its requests are the plain kind, then by node's server. */
  #toH1(socket: Socket, first: Buffer | null): void {
    const conn = new FastH1Connection(socket, this.#fastHost)
    this.#fast.add(conn) // before its first read, which may release it to node's server at once
    conn.start(first)
  }

  /** Binds `bind:port`; rejects with the listen error. */
  listen(bind: string, entry: PortEntry): Promise<void> {
    this.update(entry)
    return bindServer(this.#server, bind, this.port, log)
  }

  /** A new table for this port: TLS options that live on the server rather than the SecureContext. */
  update(entry: PortEntry): void {
    if (!(this.#server instanceof tls.Server)) return
    const tlsConf = entry.serverTls
    const server = this.#server as tls.Server & { requestCert: boolean; rejectUnauthorized: boolean }
    server.requestCert = tlsConf !== null && tlsConf.clientValidation !== null
    server.rejectUnauthorized = tlsConf !== null && tlsConf.clientValidation !== null && tlsConf.clientValidation.required
    if (tlsConf === null) return
    // The same certificates and validation: the context stays, and the TLS sessions it issued resume.
    const key = defaultContextKey(tlsConf)
    if (key === this.#defaultContext) return
    this.#defaultContext = key
    setDefaultContext(server, tlsConf, this.port)
  }

  /**
   * Stops accepting; in-flight exchanges finish (HTTP/1.1 idle connections are
   * closed, HTTP/2 sessions get GOAWAY); after `graceMs` the rest is destroyed.
   */
  close(graceMs: number): Promise<void> {
    this.#closing = true
    this.#server.close()
    this.#h1.close() // its idle connections, and its head-timeout timer
    this.#h1.closeIdleConnections()
    for (const conn of this.#fast) conn.closeIfIdle()
    for (const session of this.#sessions.keys()) if (!session.closed) session.close()
    if (this.#sockets.size === 0) return Promise.resolve()
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        // What is still open is cut by us, not by its client (logged so).
        for (const session of this.#sessions.keys()) markCut(session)
        for (const s of this.#secure) markCut(s)
        for (const s of this.#sockets) { markCut(s); cutConnection(s) }
        // Their 'close' comes a turn later: what ends with them (access lines, a tunnel's
        // other side) must run before the process may exit. The check below resolves then.
        setTimeout(() => { clearInterval(check); resolve() }, CUT_SETTLE_MS)
      }, graceMs)
      const check = setInterval(() => {
        this.#h1.closeIdleConnections()
        for (const conn of this.#fast) conn.closeIfIdle()
        if (this.#sockets.size === 0) {
          clearInterval(check)
          clearTimeout(timer)
          resolve()
        }
      }, 25)
    })
  }

  // ── connections ──

  #track = (socket: Socket): void => {
    this.#sockets.add(socket)
    this.#connections.inc()
    socket.once('close', () => {
      this.#sockets.delete(socket)
      this.#connections.dec()
    })
  }

  /** Plain port: the HTTP/2 preface means prior-knowledge h2c; anything else is HTTP/1.1. */
  #onPlain = (socket: Socket): void => {
    socket.on('error', noop)
    this.#sniff(socket, (first) => { this.#toH1(socket, first) }, () => { this.#toH2(socket, clientIp(socket.remoteAddress)) })
  }

  /**
   * Reads the connection's first bytes: the HTTP/2 preface (prior knowledge)
   * goes to `h2` with the bytes put back, anything else to `h1` with them.
   */
  #sniff(socket: Socket, h1: (first: Buffer) => void, h2: () => void): void {
    let buffered: Buffer | null = null
    const silent = (): void => { socket.destroy() }
    socket.setTimeout(this.#plane.limits.headersTimeoutMs, silent)
    const onData = (chunk: Buffer): void => {
      const buf = buffered === null ? chunk : Buffer.concat([buffered, chunk])
      const n = Math.min(buf.length, PREFACE.length)
      const isPreface = buf.compare(PREFACE, 0, n, 0, n) === 0
      if (isPreface && n < PREFACE.length) { buffered = buf; return }
      socket.removeListener('data', onData)
      // Off, and its listener gone: whoever serves the connection arms its own timeouts.
      socket.setTimeout(0, silent)
      if (!isPreface) { h1(buf); return }
      socket.pause()
      socket.unshift(buf)
      h2()
    }
    socket.on('data', onData)
  }

  #onSecure = (socket: TLSSocket): void => {
    socket.on('error', noop)
    this.#secure.add(socket)
    socket.once('close', () => { this.#secure.delete(socket) })
    // A listener whose min-version is above the port's: a connection its SNI selected it
    // for that settled below it is closed before anything is read (tls-contexts.ts).
    if (refusedBelowFloor(this.#plane.current()?.ports.get(this.port)?.serverTls ?? null, socket, this.port, serverNameOf(socket.servername))) { socket.destroy(); return }
    // Issue 7: a verified client certificate's SPIFFE ID, read while the connection has it
    // (cached per socket for HTTP/1.1): requests are recorded after they end, and a closed
    // socket's certificate, or a closed stream's session, is gone by then.
    const spiffeId = peerSpiffeId(socket)
    // GEP-3567: the server name the connection was made for, which selects its listener (router/misdirected.ts).
    const servername = serverNameOf(socket.servername)
    const sni = servername.length > 0 ? new ConnectionSni(servername) : withoutNameBelowFloor(this.#plane.current()?.ports.get(this.port)?.serverTls ?? null, socket)
    if (socket.alpnProtocol === 'h2') { this.#toH2(socket, clientIp(socket.remoteAddress), spiffeId, sni); return }
    const h1 = (first: Buffer | null): void => {
      if (sni !== null) setConnectionSni(socket, sni)
      socket.setNoDelay(true) // node's server did this for its connections; this one may never reach it
      this.#toH1(socket, first)
    }
    if (socket.alpnProtocol === 'http/1.1') { h1(null); return }
    // No ALPN at all: a client may speak HTTP/2 with prior knowledge (RFC 9113 §3.3), as
    // on the plain port; Envoy's codec detection serves it too. Its preface tells.
    this.#sniff(socket, h1, () => {
      // node's HTTP/2 server answers a TLS socket without ALPN h2 "403 Missing ALPN Protocol";
      // the preface settled what this connection speaks.
      socket.alpnProtocol = 'h2'
      this.#toH2(socket, clientIp(socket.remoteAddress), spiffeId, sni)
    })
  }

  #toH2(socket: Duplex, address: string, spiffeId: string | null = null, sni: ConnectionSni | null = null): void {
    this.#handing = { address, spiffeId, sni, streams: 0, opened: 0, resets: 0, abusive: false, idle: null }
    this.#h2.emit('connection', socket)
    this.#handing = null
  }

  #sni = (servername: string, cb: (err: Error | null, ctx?: tls.SecureContext) => void): void => {
    const name = serverNameOf(servername)
    if (name === '') { cb(null); return } // an address: the server-wide context, as for no SNI
    const table = this.#plane.current()
    const entry = table === null ? undefined : table.ports.get(this.port)
    const conf = entry === undefined ? null : entry.serverTls
    const cert = conf === null ? null : selectCert(conf, name)
    if (conf === null || cert === null) { cb(noCertificate()); return }
    try {
      cb(null, this.#plane.contexts.get(cert, conf, this.port))
    } catch (err) {
      cb(err as Error)
    }
  }

  // ── refusals before routing: an access line and metrics all the same ──

  #refused(protocol: 'h1' | 'h2', client: string, method: string, authority: string, target: string, status: number, code: ErrorCode, reason: string): void {
    log.debug({ status, reason }, 'request refused')
    recordRefusal(this.#plane.env, this.#plane.current(), { method, authority, target, status, code, reason, protocol, client, port: this.port })
  }

  #refusedHead(req: IncomingMessage, refused: Refusal): void {
    this.#refused('h1', clientIp(req.socket.remoteAddress), req.method ?? '', req.headers.host ?? '', req.url ?? '', refused.status,
      refused.status === 501 ? ErrorCode.NOT_IMPLEMENTED : ErrorCode.BAD_REQUEST, refused.body.slice(0, -1))
  }

  #onClientError = (err: NodeJS.ErrnoException, socket: Duplex): void => {
    // node's defaults would answer 400/431/408 only without a listener; keep them, and log them.
    if (!socket.writable) { socket.destroy(); return }
    // The request was refused already (refuseResponse) and its answer says the
    // connection closes: node's parser failing on the body it then read on (a
    // transfer coding other than chunked last: it cannot tell where that body
    // ends) is no second request, to be answered and logged a second time.
    if (refusedSockets.has(socket)) { socket.end(); return }
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400
    const refusal = closingResponse(status, '')
    const eof = err.code === 'HPE_INVALID_EOF_STATE'
    const code = status === 431 ? ErrorCode.HEADERS_TOO_LARGE : status === 408 ? ErrorCode.CLIENT_TIMEOUT : ErrorCode.BAD_REQUEST
    // A request in flight: its answer is never corrupted or replaced by the refusal (and its own line tells).
    if (inFlightExchange(socket)?.clientError(refusal, code === ErrorCode.CLIENT_TIMEOUT ? ErrorCode.BAD_REQUEST : code, eof) === true) return
    socket.end(refusal)
    // A connection closed before its head was whole is no request.
    if (eof) return
    const reason = status === 431 ? 'request head over the size or field limit'
      : status === 408 ? 'the request head did not arrive in time'
        : `malformed request head (${err.code ?? 'unparsable'})`
    this.#refused('h1', clientIp((socket as Socket).remoteAddress), '', '', '', status, code, reason)
  }

  // ── HTTP/1.1 ──

  // hot path
  #onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const socket = req.socket as PipelinedSocket
    // RFC 9112 §9.6: once an answer that closes the connection is on its way, the
    // requests pipelined behind it are not processed. node's parser reads them on
    // and hands them over all the same (it knows a close only from the client's
    // own Connection: close), so the request behind a refusal, or behind an
    // answer an HTTP/1.0 client can only get close-delimited, went upstream and
    // its answer was then dropped with the connection.
    if (refusedSockets.has(socket)) return
    const before = socket[kAnswering]
    socket[kAnswering] = res
    res.once('close', () => { if (socket[kAnswering] === res) socket[kAnswering] = undefined })
    const refused = refusedHead(req)
    if (refused !== null) { this.#refusedHead(req, refused); refuseResponse(res, refused); return }
    // Behind an answer still going out: served once it is whole, if the connection stays open.
    if (before !== undefined) { before.once('close', () => { if (socket.writable) this.#answer(req, res) }); return }
    this.#answer(req, res)
  }

  #answer(req: IncomingMessage, res: ServerResponse): void {
    if (this.#closing) res.shouldKeepAlive = false
    this.#serve(new H1Exchange(req, res, this.port, this.#scheme))
  }

  /** An HTTP/1.1 request, from either parser, on the table current when it arrived. */
  // hot path
  #serve = (ex: Exchange): void => {
    const table = this.#plane.current() // the one read of the table for this request
    if (table === null) { ex.respond(503, { 'content-type': 'text/plain' }, 'no configuration\n'); return }
    handleExchange(ex, table, this.#plane.env)
  }

  #shouldUpgrade = (req: IncomingMessage): boolean => {
    const upgrade = req.headers.upgrade
    if (upgrade === undefined) return false
    const token = upgrade.toLowerCase()
    if (token === 'h2c') return this.protocol === 'HTTP' && canUpgradeH2c(req)
    // An h2c upgrade the gateway does not take itself (a TLS listener, a body, h2c in a list)
    // is served as a plain request, its Upgrade dropped: never a tunnel (h2c smuggling).
    if (namesH2c(token)) return false
    return token.length > 0
  }

  #onUpgrade = (req: IncomingMessage, socket: Socket, head: Buffer): void => {
    const refused = refusedHead(req)
    if (refused !== null) { this.#refusedHead(req, refused); refuse(socket, refused); return }
    const token = (req.headers.upgrade ?? '').toLowerCase()
    if (token === 'h2c') {
      this.#toH2(upgradeH2c(req, socket, head), clientIp(socket.remoteAddress))
      return
    }
    // A tunnel (RFC 9113 §8.5, RFC 8441): a client's FIN is a half-close, even
    // one read while the upstream is asked. Set before the socket's 'end' can be
    // emitted, as for CONNECT (#onConnect); not on h2c, which node's HTTP/2
    // server takes.
    socket.allowHalfOpen = true
    const table = this.#plane.current()
    if (table === null) { socket.destroy(); return }
    handleExchange(new UpgradeExchange(req, socket, head, this.port, this.#scheme), table, this.#plane.env)
  }

  // ── forward-proxy mode (issue 9): HTTP CONNECT ──

  #tunnelEnv(): TunnelEnv {
    const env = this.#plane.env
    return { upstreams: env.upstreams, accessLog: this.#plane.accessLog ?? null, events: env.extensions?.events ?? null, extensions: env.extensions ?? null }
  }

  #onConnect = (req: IncomingMessage, socket: Socket, head: Buffer): void => {
    // RFC 9110 §9.3.6: a client's FIN is a half-close, even one read with the
    // CONNECT head while the destination is dialled. Set before the socket's
    // 'end' can be emitted (the tick after this event), or node would end our
    // side and the tunnel could not answer. Set here, not on the listener's
    // sockets: node's HTTP/1.1 server and h1-fast.ts rely on node closing a
    // connection whose client has ended.
    socket.allowHalfOpen = true
    const refused = refusedHead(req)
    if (refused !== null) { this.#refusedHead(req, refused); refuse(socket, refused); return }
    const table = this.#plane.current()
    socket.on('error', noop)
    if (table === null) { socket.destroy(); return }
    openTunnel(h1Client(socket, clientIp(socket.remoteAddress)), req.url ?? '', head, table, this.port, this.#tunnelEnv(), connectionSni(socket))
  }

  // ── HTTP/2 ──

  #onSession = (session: ServerHttp2Session): void => {
    const info: SessionInfo = this.#handing ?? { address: clientIp(session.socket?.remoteAddress), spiffeId: null, sni: null, streams: 0, opened: 0, resets: 0, abusive: false, idle: null }
    this.#sessions.set(session, info)
    session.on('error', noop)
    // Idle sessions (no open stream) close after keepAliveTimeout; busy ones (SSE,
    // tunnels) stay, as Envoy's idle_timeout. Our own timer, not session.setTimeout:
    // node keeps that one (and the session with it) past the close until it runs
    // out, and restarts it on every frame.
    const ms = this.#plane.limits.keepAliveTimeoutMs
    if (ms > 0) {
      info.idle = setTimeout(() => { if (info.streams === 0 && !session.closed) session.close() }, ms)
      info.idle.unref()
    }
    session.once('close', () => {
      this.#sessions.delete(session)
      if (info.idle !== null) clearTimeout(info.idle)
      info.idle = null // a stream closing after this must not start it again (refresh() would)
    })
    // Each session's streams come with its info. Not the server's 'stream' event and a
    // lookup by stream.session: a stream the client reset before node emitted it has no
    // session any more, and its access line named no client.
    session.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => {
      info.opened++
      const openedAt = performance.now()
      stream.once('close', () => {
        if (--info.streams === 0) info.idle?.refresh()
        if (stream.rstCode !== http2.constants.NGHTTP2_NO_ERROR && !stream.headersSent && performance.now() - openedAt < PREMATURE_RESET_LIFETIME_MS) {
          this.#prematureReset(session, info)
        }
      })
      this.#onStream(stream, headers, flags, rawHeaders, info)
    })
    session.once('goaway', () => probeAfterGoaway(session))
    if (this.#closing) session.close()
  }

  // hot path
  #onStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[], info: SessionInfo): void {
    const table = this.#plane.current() // the one read of the table for this request
    info.streams++
    if (table === null) { answerRefused(stream, 503, null); return }
    // SETTINGS_MAX_HEADER_LIST_SIZE is only advisory to peers; enforce it like HTTP/1.1's
    // maxHeaderSize (431), and the field limit with a reset, as Envoy answers it.
    const limits = this.#plane.limits
    const over = headerListOver(rawHeaders, limits.maxHeaderSize, limits.maxHeaders)
    if (over !== null) {
      this.#refusedStream(stream, info, headers, 431, ErrorCode.HEADERS_TOO_LARGE, over === 'size'
        ? 'request header list over the size limit'
        : 'request header list over the field limit: stream reset ENHANCE_YOUR_CALM')
      if (over === 'size') {
        answerRefused(stream, 431, null)
      } else {
        stream.on('error', noop) // node reports the reset we send as the stream's error
        stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM)
      }
      return
    }
    // RFC 9113 §8.3.1: a Host field naming another host than :authority makes the request malformed
    // (sallyport routes by :authority; a proxy in front may have taken the Host).
    const host = headers.host
    if (host !== undefined && hostDiffers(host, headers[':authority'])) {
      this.#refusedStream(stream, info, headers, HOST_DIFFERS.status, ErrorCode.BAD_REQUEST, HOST_DIFFERS.body.slice(0, -1))
      answerRefused(stream, HOST_DIFFERS.status, HOST_DIFFERS.body)
      return
    }
    // RFC 9113 §8.5: CONNECT without :protocol is a tunnel (issue 9); with :protocol it is RFC 8441 (WebSocket).
    if (headers[':method'] === 'CONNECT') {
      const protocol = headers[':protocol']
      if (protocol === undefined) {
        openTunnel(h2Client(stream, info.address), headers[':authority'] ?? '', null, table, this.port, this.#tunnelEnv(), info.sni)
        return
      }
      // h2c is never tunnelled (h2c smuggling, router/headers.ts namesH2c): an HTTP/1.1 upstream
      // would get it as `Upgrade: h2c`.
      if (namesH2c(protocol)) {
        this.#refusedStream(stream, info, headers, H2C_TUNNEL.status, ErrorCode.NOT_IMPLEMENTED, H2C_TUNNEL.body.slice(0, -1))
        answerRefused(stream, H2C_TUNNEL.status, H2C_TUNNEL.body)
        return
      }
    }
    handleExchange(new H2Exchange(stream, headers, flags, this.port, this.#scheme, info), table, this.#plane.env)
  }

  /** A stream reset before its answer began: past PREMATURE_RESET_MIN_STREAMS, a majority of them closes the connection. */
  #prematureReset(session: ServerHttp2Session, info: SessionInfo): void {
    if (++info.resets * 2 <= info.opened || info.opened < PREMATURE_RESET_MIN_STREAMS || info.abusive || session.destroyed) return
    info.abusive = true
    log.warn({ client: info.address, port: this.port, streams: info.opened, resets: info.resets },
      'HTTP/2 connection closed: most of its streams were reset before an answer (rapid reset)')
    downstreamConnectionsClosed.inc({ port: String(this.port), reason: 'premature_resets' })
    session.destroy(new Error('rapid reset'), http2.constants.NGHTTP2_ENHANCE_YOUR_CALM)
  }

  /** The access line of a stream refused before routing: 499 if its connection was gone before the answer could be given. */
  #refusedStream(stream: ServerHttp2Stream, info: SessionInfo | undefined, headers: IncomingHttpHeaders, status: number, code: ErrorCode, reason: string): void {
    const authority = headers[':authority'] ?? headers.host ?? ''
    const gone = stream.destroyed
    this.#refused('h2', info?.address ?? '', headers[':method'] ?? '', typeof authority === 'string' ? authority : '', headers[':path'] ?? '',
      gone ? 499 : status, gone ? ErrorCode.CLIENT_ABORTED : code, gone ? `${reason} (the connection closed before the answer)` : reason)
  }
}

function noop(): void {}

/**
 * The gateway's own answer on a stream it refuses before routing (`body`: text,
 * or null for none). node emits a stream's 'stream' event a tick after reading
 * its HEADERS: a protocol error later in the same read (a DATA frame longer
 * than its content-length, RFC 9113 §8.1.1, which node answers by destroying
 * the whole session) has destroyed the stream by then, and respond() on it
 * threw, out of the event handler: the process died. So did the session's
 * error, emitted on the refused streams not yet closed with nobody listening.
 */
function answerRefused(stream: ServerHttp2Stream, status: number, body: string | null): void {
  stream.on('error', noop)
  if (stream.destroyed) return
  if (body === null) { stream.respond({ ':status': status }, { endStream: true }); return }
  stream.respond({ ':status': status, 'content-type': 'text/plain; charset=utf-8' })
  stream.end(body)
}

/** Whether an HTTP/2 request's Host field names another host than its :authority (case and port aside: routes match hosts). */
function hostDiffers(host: string, authority: string | string[] | undefined): boolean {
  if (authority === undefined) return false
  return typeof authority !== 'string' || (host !== authority && hostOf(host) !== hostOf(authority))
}

/** After a grace period's cut, how long its connections' closes are waited for at most. */
const CUT_SETTLE_MS = 1000

/** How often a session whose client sent GOAWAY is asked for a PING answer, and how long it has to give one. */
const GOAWAY_PROBE_MS = 2000

type PingHandle = { ping(payload: Buffer | undefined, callback: (ack: boolean) => void): boolean }

/**
 * The native session under a node ServerHttp2Session. node's own ping() answers
 * "cancelled" without sending anything once the session is closed, and node
 * closes a server session as soon as its client sends GOAWAY (NO_ERROR) — but
 * the connection still carries PINGs until the client's last stream ends, and
 * the native session sends them. null where node no longer has one (the
 * private field's name is node's, checked in test/e2e/h2-cancel.test.ts).
 */
function nativeSession(session: ServerHttp2Session): PingHandle | null {
  for (const key of Object.getOwnPropertySymbols(session)) {
    if (key.description !== 'kHandle') continue
    const handle = (session as unknown as Record<symbol, unknown>)[key] as Partial<PingHandle> | undefined
    return handle !== undefined && handle !== null && typeof handle.ping === 'function' ? handle as PingHandle : null
  }
  return null
}

/**
 * A client that sends GOAWAY and then drops the connection while streams are
 * still open (a process exiting mid-request does) leaves node's session
 * waiting for those streams forever: after a GOAWAY it no longer notices the
 * end of the connection, so the socket, its descriptor, the streams and their
 * requests leak. A live peer answers PING whatever it sent before (its streams
 * then run on, during a drain too); a session whose PING goes unanswered
 * within GOAWAY_PROBE_MS, or cannot be sent, is destroyed. Probed until it closes.
 */
function probeAfterGoaway(session: ServerHttp2Session): void {
  let waiting: NodeJS.Timeout | null = null
  const answered = (ack: boolean): void => {
    if (waiting !== null) clearTimeout(waiting)
    waiting = null
    if (!ack && !session.destroyed) session.destroy()
  }
  const timer = setInterval(() => {
    if (session.destroyed) { clearInterval(timer); return }
    if (waiting !== null) return
    waiting = setTimeout(() => session.destroy(), GOAWAY_PROBE_MS).unref()
    try {
      const native = session.closed ? nativeSession(session) : null
      if (native !== null) {
        if (!native.ping(undefined, answered)) session.destroy()
      } else if (session.closed) {
        session.destroy() // nothing left to probe with
      } else {
        session.ping((err) => answered(err === null))
      }
    } catch {
      session.destroy()
    }
  }, GOAWAY_PROBE_MS).unref()
  session.once('close', () => {
    clearInterval(timer)
    if (waiting !== null) clearTimeout(waiting)
  })
}

// hot path
/**
 * Which of an HTTP/2 request's header limits its list is over, in one pass:
 * 'size' (RFC 9113 §6.5.2: name + value + 32 per field, over the fields as they
 * came, node's flat name, value list: a name repeated is counted each time, as
 * the RFC counts it, where node's header object joins such fields into one
 * value), else 'fields' (more regular fields than allowed, pseudo-headers
 * aside); null when within both.
 */
function headerListOver(raw: readonly string[], maxSize: number, maxFields: number): 'size' | 'fields' | null {
  let size = 0
  let fields = 0
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]
    size += name.length + raw[i + 1].length + 32
    if (name.charCodeAt(0) !== 58 /* ':' */) fields++
  }
  if (size > maxSize) return 'size'
  return fields > maxFields ? 'fields' : null
}

/** Connections whose request refuseResponse answered: nothing more is answered on them. */
const refusedSockets = new WeakSet<Duplex>()

/** The last answer node's server began on a connection, until it closes (#onRequest). */
const kAnswering = Symbol('sallyport.h1Answering')
type PipelinedSocket = Socket & { [kAnswering]?: ServerResponse | undefined }

/** A head RFC 9112 has refused (exchange-h1.ts refusedHead): 400 or 501, then the connection closes, its body unread. */
function refuseResponse(res: ServerResponse, refused: Refusal): void {
  if (res.socket !== null) refusedSockets.add(res.socket)
  res.shouldKeepAlive = false
  res.writeHead(refused.status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(refused.body), connection: 'close' }).end(refused.body)
}

/** The same for a request node hands over with its socket (Upgrade, CONNECT). */
function refuse(socket: Socket, refused: Refusal): void {
  socket.on('error', noop)
  if (socket.writable) endAndDiscard(socket, closingResponse(refused.status, refused.body))
  else socket.destroy()
}

/**
 * What a client that spoke plain HTTP to an HTTPS port is told (as nginx's 400
 * "The plain HTTP request was sent to HTTPS port"), in plain text: a bare close
 * left `curl http://gateway:8443/` with "Empty reply from server".
 */
const PLAIN_HTTP_ANSWER = closingResponse(400, 'plain HTTP request sent to an HTTPS port: use https://\n')

/** OpenSSL's codes for a first record that reads as an HTTP request line (GET, POST, HEAD, PUT; CONNECT). */
const PLAIN_HTTP_CODES: ReadonlySet<string> = new Set(['ERR_SSL_HTTP_REQUEST', 'ERR_SSL_HTTPS_PROXY_REQUEST'])

/** The longest a plain-HTTP answer may take to leave before its connection is cut. */
const PLAIN_HTTP_ANSWER_MS = 1000

/**
 * A handshake that failed or stalled past `handshakeTimeout` (reason `timeout`):
 * counted and logged (tls-handshake-errors.ts), then closed. With this listener
 * attached node leaves the socket open (it destroys it only when nobody
 * listens): a client that sent nothing, or half a ClientHello, held it for good.
 */
function onTlsError(port: number, err: Error, socket: TLSSocket): void {
  handshakeFailed(port, err, socket) // first: it reads the socket's server name, client and verdict
  // The TCP socket under the TLS one (node's TLSSocket keeps it as _parent): writes to it
  // bypass TLS, which has failed and sent nothing.
  const raw = (socket as TLSSocket & { _parent?: unknown })._parent
  if (!PLAIN_HTTP_CODES.has((err as NodeJS.ErrnoException).code ?? '') || !(raw instanceof net.Socket) || !raw.writable) {
    socket.destroy()
    return
  }
  const cut = setTimeout(() => { socket.destroy() }, PLAIN_HTTP_ANSWER_MS)
  cut.unref()
  raw.end(PLAIN_HTTP_ANSWER, () => { clearTimeout(cut); socket.destroy() })
}

/**
 * A connection without a server name that settled below TLS 1.3 on a port one
 * of whose listeners wants TLS 1.3 (`sallyport.io/min-version`): its requests
 * for that listener's hosts are refused (router/misdirected.ts), as a
 * connection with that listener's name would have been at the handshake.
 * null otherwise (the common case: routed by host, as before).
 */
function withoutNameBelowFloor(tls: ServerTls | null, socket: TLSSocket): ConnectionSni | null {
  if (tls === null || socket.getProtocol() === 'TLSv1.3' || !hasTls13Floor(tls)) return null
  return new ConnectionSni('', true)
}
