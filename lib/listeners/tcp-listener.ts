// One listening port of protocol TCP or TLS (TCPRoute / TLSRoute, issue 8).
//
// - TCP: the port's TCPRoute takes every connection (compile picks one per
//   port); TLS to the backend when the backend has it (l4-dial.ts).
// - TLS Passthrough: the SNI is read from the ClientHello without terminating
//   (tls-passthrough.ts), the TLSRoute for it chosen, and the client's bytes —
//   hello included — go to the upstream untouched. Never TLS to the backend.
// - TLS Terminate: the listener's certificate (PortEntry.serverTls, chosen by
//   SNI) terminates; the decrypted stream goes to the TLSRoute's backend (with
//   TLS again when the backend has it: re-encrypt).
//
// Each connection reads the table once, at accept, and keeps that table. The
// server allows half-open sockets (FIN is forwarded, not answered), and drops
// connections past `maxConnections` at accept.

import net, { type Socket } from 'node:net'
import tls from 'node:tls'
import type { ListenerRef, PortEntry, RouteTable, ServerTls } from '../compile/table.ts'
import { bindServer } from '../bind.ts'
import { logger, type Logger } from '../observe/log.ts'
import { downstreamActiveConnections } from '../observe/http-metrics.ts'
import { l4Errors } from '../observe/l4-metrics.ts'
import type { Upstreams } from '../upstream/types.ts'
import { clientIp } from './exchange-h1.ts'
import { SecureContexts, defaultCert, noCertificate, refusedBelowFloor, selectCert, serverNameOf } from './tls-contexts.ts'
import { handshakeFailed } from './tls-handshake-errors.ts'
import { servingListener } from '../observe/serving-listener.ts'
import { DEFAULT_MAX_CONNECTIONS, limitConnections } from './connection-limit.ts'
import { matchSni, peekClientHello, readClientHello, type HelloOutcome, type PeekOutcome } from './tls-passthrough.ts'
import { L4Session, type SessionEnv } from './tcp-session.ts'

const log = logger('listener')

export interface L4Limits {
  /** Open connections per listening port (--max-connections); past it new ones are closed at accept. Default 10 000. */
  readonly maxConnections: number
  /** No byte either way for this long closes the connection (route idle timeout wins). Default 1 h (Envoy tcp_proxy). */
  readonly idleTimeoutMs: number
  /** Passthrough: a complete ClientHello must arrive within this. Default 10 s. */
  readonly clientHelloTimeoutMs: number
  /** Terminate: the client's TLS handshake must finish within this. Default 10 s. */
  readonly handshakeTimeoutMs: number
}

export const DEFAULT_L4_LIMITS: L4Limits = {
  maxConnections: DEFAULT_MAX_CONNECTIONS,
  idleTimeoutMs: 3_600_000,
  clientHelloTimeoutMs: 10_000,
  handshakeTimeoutMs: 10_000,
}

/** What an L4 listener needs from its data plane. */
export interface L4PlaneContext {
  readonly upstreams: Upstreams
  readonly contexts: SecureContexts
  /** The `access` logger, or null when the access log is off. */
  readonly accessLog: Logger | null
  readonly l4Limits: L4Limits
  current(): RouteTable | null
}

export class L4Listener {
  readonly port: number
  readonly protocol: 'TCP' | 'TLS'
  readonly #plane: L4PlaneContext
  readonly #server: net.Server
  readonly #sessions = new Map<Socket, L4Session>()
  readonly #connections: ReturnType<typeof downstreamActiveConnections.labels>
  #listener: ListenerRef | null = null

  constructor(port: number, protocol: 'TCP' | 'TLS', plane: L4PlaneContext) {
    this.port = port
    this.protocol = protocol
    this.#plane = plane
    this.#connections = downstreamActiveConnections.labels(String(port))
    this.#server = net.createServer({ allowHalfOpen: true, noDelay: true, pauseOnConnect: true }, this.#onConnection)
    limitConnections(this.#server, port, plane.l4Limits.maxConnections, this.#onDrop)
  }

  /** Binds `bind:port`; rejects with the listen error. */
  listen(bind: string, entry: PortEntry): Promise<void> {
    this.update(entry)
    return bindServer(this.#server, bind, this.port, log)
  }

  update(entry: PortEntry): void {
    this.#listener = entry.listeners[0] ?? null
  }

  /** Stops accepting; open connections get `graceMs`, then are closed. */
  close(graceMs: number): Promise<void> {
    this.#server.close()
    if (this.#sessions.size === 0) return Promise.resolve()
    return new Promise((resolve) => {
      const check = setInterval(() => {
        if (this.#sessions.size > 0) return
        clearInterval(check)
        clearTimeout(timer)
        resolve()
      }, 25)
      const timer = setTimeout(() => {
        clearInterval(check)
        for (const s of this.#sessions.values()) s.abort()
        this.#sessions.clear()
        resolve()
      }, graceMs)
    })
  }

  #onDrop = (): void => {
    const l = this.#listener
    l4Errors.inc({ gateway: l?.gateway ?? '', listener: l?.name ?? '', reason: 'max_connections' })
  }

  #onConnection = (socket: Socket): void => {
    const table = this.#plane.current() // the one read of the table for this connection
    const entry = table === null ? undefined : table.ports.get(this.port)
    socket.on('error', noop) // the splice takes errors over; before it, a reset just closes
    // Counted under the port's first listener until the server name (TLS) picks the one it belongs to.
    const listener = entry === undefined ? this.#listener : entry.listeners[0] ?? null
    const session = new L4Session(socket, {
      gateway: listener?.gateway ?? '', listener: listener?.name ?? '',
      protocol: this.protocol === 'TCP' ? 'tcp' : 'tls',
      mode: entry?.sni?.mode ?? null,
      client: clientIp(socket.remoteAddress),
      accessLog: this.#plane.accessLog,
    })
    this.#track(socket, session)
    if (table === null || entry === undefined || entry.protocol !== this.protocol) return session.fail('no_route')
    const env: SessionEnv = { upstreams: this.#plane.upstreams, clusters: table.clusters, idleTimeoutMs: this.#plane.l4Limits.idleTimeoutMs }
    if (this.protocol === 'TCP') {
      const route = entry.tcp
      session.start(env, route, socket, true, null)
      return
    }
    const sni = entry.sni
    if (sni === null) return session.fail('no_route')
    if (sni.mode === 'Passthrough') {
      socket.resume()
      readClientHello(socket, this.#plane.l4Limits.clientHelloTimeoutMs, (outcome: HelloOutcome) => {
        if (outcome.kind === 'hello') {
          named(session, entry, outcome.sni)
          session.start(env, matchSni(sni, outcome.sni), socket, false, null)
        } else if (outcome.kind === 'invalid') {
          log.debug({ port: this.port, reason: outcome.reason }, 'unreadable ClientHello')
          session.fail(outcome.reason === 'too_large' ? 'client_hello_too_large' : 'client_hello_invalid')
        } else if (outcome.kind === 'timeout') {
          session.fail('client_hello_timeout')
        } else {
          session.fail('client_reset')
        }
      })
      return
    }
    this.#terminate(socket, session, entry, env)
  }

  /**
   * TLS Terminate: handshake with the listener's certificate, then route by
   * the server name the ClientHello sent (read first, peekClientHello: a
   * resumed TLS 1.2 session has none in node, and went to the route without
   * hostnames). One timer bounds the hello and the handshake.
   */
  #terminate(socket: Socket, session: L4Session, entry: PortEntry, env: SessionEnv): void {
    const conf = entry.serverTls
    const sni = entry.sni
    if (conf === null || sni === null || defaultCert(conf) === null) return session.fail('no_route')
    const contexts = this.#plane.contexts
    const secureContext = contexts.defaultContext(conf, this.port)
    if (secureContext === null) return session.fail('client_tls_failed')
    let secure: tls.TLSSocket | null = null
    const timer = setTimeout(() => {
      handshakeFailed(this.port, Object.assign(new Error('TLS handshake timeout'), { code: 'ERR_TLS_HANDSHAKE_TIMEOUT' }), secure)
      session.fail('client_tls_failed')
    }, this.#plane.l4Limits.handshakeTimeoutMs)
    // A client's FIN mid-handshake is the client going away (the socket allows half-open
    // for the splice to come, so it raises no error: it held the connection until the timeout).
    const closed = (): void => {
      clearTimeout(timer)
      handshakeFailed(this.port, Object.assign(new Error('the client closed the connection mid-handshake'), { code: 'ECONNRESET' }), secure)
      session.fail('client_tls_failed')
    }
    peekClientHello(socket, (hello: PeekOutcome) => {
      if (hello.kind === 'closed') {
        // Its timeout or a drain's cut (the session ended it) is no client going away.
        if (session.finished) clearTimeout(timer)
        else closed()
        return
      }
      const tlsSocket = new tls.TLSSocket(socket, {
        isServer: true,
        secureContext,
        SNICallback: sniCallback(contexts, conf, this.port),
        requestCert: conf.clientValidation !== null,
        rejectUnauthorized: conf.clientValidation !== null && conf.clientValidation.required,
        ...(conf.alpn.length > 0 ? { ALPNProtocols: [...conf.alpn] } : {}),
      })
      secure = tlsSocket
      tlsSocket.allowHalfOpen = true
      session.stream = tlsSocket
      tlsSocket.once('error', (err: Error) => {
        clearTimeout(timer)
        handshakeFailed(this.port, err, tlsSocket)
        session.fail('client_tls_failed')
      })
      tlsSocket.once('end', closed)
      tlsSocket.once('close', () => { clearTimeout(timer) }) // a drain's cut, say: no late timeout counted
      tlsSocket.once('secure', () => {
        clearTimeout(timer)
        tlsSocket.removeListener('end', closed)
        const servername = serverNameOf(hello.kind === 'hello' ? hello.sni : tlsSocket.servername)
        if (refusedBelowFloor(conf, tlsSocket, this.port, servername)) return session.fail('client_tls_failed')
        tlsSocket.removeAllListeners('error')
        tlsSocket.on('error', noop)
        const name = servername === '' ? null : servername
        named(session, entry, name)
        session.start(env, matchSni(sni, name), tlsSocket, true, null)
      })
      // Not socket.resume(): the hello's bytes wait in the socket's buffer, where the
      // TLSSocket takes them (a flowing socket would hand them to nobody).
    })
  }

  #track(socket: Socket, session: L4Session): void {
    this.#sessions.set(socket, session)
    this.#connections.inc()
    socket.once('close', () => {
      this.#sessions.delete(socket)
      this.#connections.dec()
    })
  }
}

function sniCallback(contexts: SecureContexts, conf: ServerTls, port: number): (servername: string, cb: (err: Error | null, ctx?: tls.SecureContext) => void) => void {
  return (servername, cb) => {
    const name = serverNameOf(servername)
    if (name === '') { cb(null); return } // an address: the server-wide context, as for no SNI
    const cert = selectCert(conf, name)
    if (cert === null) { cb(noCertificate()); return }
    try {
      cb(null, contexts.get(cert, conf, port))
    } catch (err) {
      cb(err as Error)
    }
  }
}

/**
 * The client's server name, and the listener it selects on a port several
 * share (as routing picks it: exact hostname, longest wildcard, the one
 * without hostname); a name none takes stays with the port's first.
 */
function named(session: L4Session, entry: PortEntry, sni: string | null): void {
  session.sni = sni
  const l = servingListener(entry, sni ?? '')
  if (l !== null) session.listenedOn(l.gateway, l.name)
}

function noop(): void {}

