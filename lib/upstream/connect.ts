// Opens one transport connection to one endpoint: resolve (hostname
// endpoints), then TCP (or unix socket), then TLS with the pool's prebuilt
// options. Connection attempts fall back across the resolved addresses on
// connect-class failures; a TLS failure is an answer about the backend, not the
// address, so it is returned at once. Used by undici pools (as their `connect`
// function) and by the HTTP/2 session manager alike.
//
// TLS: one session ticket per pool is offered on the next connection
// (resumption skips the full handshake); after the handshake the pool's
// PeerVerifier (revocation, stapled OCSP) must accept the peer before the
// socket is handed over. Handshake failures are counted and logged here, once
// per handshake, by reason class.

import { connect as netConnect, type Socket } from 'node:net'
import { connect as tlsConnect, type TLSSocket } from 'node:tls'
import type { Endpoint, UpstreamProxy } from '../compile/table.ts'
import { connectTarget, openProxyTunnel } from './proxy-connect.ts'
import type { Resolver } from './resolve.ts'
import type { ClientTls } from './tls.ts'
import { localError, codeOf } from './normalize-error.ts'
import { tlsFailureReason } from './tls.ts'
import { logger } from '../observe/log.ts'
import { upstreamTlsHandshakeErrors } from '../observe/upstream-metrics.ts'

const log = logger('upstream')

/** TLS failures already counted and logged by a Connector (the exchange must not count them again). */
const countedTlsErrors = new WeakSet<object>()

export function isCountedTlsError(err: unknown): boolean {
  return typeof err === 'object' && err !== null && countedTlsErrors.has(err)
}

/** Upper bound on waiting for a TLS 1.3 server's verdict on our client certificate (servers that send no ticket). */
const CLIENT_CERT_VERDICT_MS = 250

export type ConnectCallback = (err: Error | null, socket: Socket | null) => void

/**
 * A connection being opened. cancel() stops it wherever it is (resolving, TCP,
 * the proxy tunnel, TLS, the peer checks) and destroys its socket; the callback
 * then gets SP_CONNECT_CANCELLED, once, on a later tick, unless the connection
 * was already handed over (then cancel does nothing).
 */
export interface PendingConnect {
  cancel(): void
}

class Opening implements PendingConnect {
  readonly #callback: ConnectCallback
  #done = false
  /** What cancel() destroys: the socket or tunnel request being opened. */
  current: { destroy(): unknown } | null = null
  /** The current step's connect timer. */
  timer: NodeJS.Timeout | null = null

  constructor(callback: ConnectCallback) {
    this.#callback = callback
  }

  get done(): boolean {
    return this.#done
  }

  finish(err: Error | null, socket: Socket | null): void {
    if (this.#done) return
    this.#done = true
    this.current = null
    this.#callback(err, socket)
  }

  cancel(): void {
    if (this.#done) return
    this.#done = true
    if (this.timer !== null) clearTimeout(this.timer)
    const current = this.current
    this.current = null
    current?.destroy()
    process.nextTick(this.#callback, localError('SP_CONNECT_CANCELLED', 'connect cancelled: no request wants the connection any more'), null)
  }
}

export interface ConnectorOptions {
  readonly endpoint: Endpoint
  readonly tls: ClientTls | null
  readonly resolver: Resolver
  readonly timeoutMs: number
  /** Cluster id for metrics and logs. */
  readonly backend?: string
  /** Offer the last session ticket on new connections (default true; bench/tls.ts turns it off). */
  readonly resumeSessions?: boolean
  /**
   * Issue 9: open each connection as a CONNECT tunnel through this proxy
   * (proxy-connect.ts), TLS inside it. Hostname endpoints are then not
   * resolved here: the proxy is asked for the name.
   */
  readonly proxy?: UpstreamProxy | null
}

export class Connector {
  readonly endpoint: Endpoint
  readonly #tls: ClientTls | null
  readonly #resolver: Resolver
  readonly #timeoutMs: number
  /**
   * Cluster id for metrics and logs. Several clusters may share the pool; when
   * the one that made it leaves the configuration, the registry names one that
   * remains (a removed backend's series would come back with each failure).
   */
  backend: string
  readonly #resume: boolean
  readonly #proxy: UpstreamProxy | null
  /** Last TLS session ticket of this pool: offered on the next connection (resumption). */
  #session: Buffer | undefined = undefined
  /** When the verdict #session was made under stops holding (tls-verify.ts): not offered from then on. */
  #sessionUntil = Infinity

  constructor(options: ConnectorOptions) {
    this.endpoint = options.endpoint
    this.#tls = options.tls
    this.#resolver = options.resolver
    this.#timeoutMs = options.timeoutMs
    this.backend = options.backend ?? ''
    this.#resume = options.resumeSessions ?? true
    this.#proxy = options.proxy ?? null
  }

  get secure(): boolean {
    return this.#tls !== null
  }

  /** `alpn`: protocols to offer over TLS (ignored in cleartext); null offers none. */
  connect(alpn: readonly string[] | null, callback: ConnectCallback): PendingConnect {
    const opening = new Opening(callback)
    const endpoint = this.endpoint
    if (endpoint.kind !== 'hostname' || this.#proxy !== null) {
      this.#attempt([endpoint.host], 0, alpn, opening)
      return opening
    }
    this.#resolver.resolve(endpoint.host).then(
      (addresses) => {
        if (opening.done) return
        if (addresses.length === 0) opening.finish(localError('ENOTFOUND', `no addresses for ${endpoint.host}`), null)
        else this.#attempt(addresses, 0, alpn, opening)
      },
      (err: unknown) => opening.finish(err instanceof Error ? err : localError('ENOTFOUND', String(err)), null),
    )
    return opening
  }

  #attempt(addresses: readonly string[], index: number, alpn: readonly string[] | null, opening: Opening, tunnel?: Socket): void {
    const endpoint = this.endpoint
    const address = addresses[index]
    const proxy = this.#proxy
    if (proxy !== null && tunnel === undefined) {
      // Issue 9: the tunnel first (its own connect timeout), then TLS (or nothing) inside it.
      const pending = openProxyTunnel(proxy, connectTarget(address, endpoint.port), (err, socket) => {
        clearTimeout(timer)
        if (opening.done) { socket?.destroy(); return }
        if (socket === null) opening.finish(err, null)
        else this.#attempt(addresses, index, alpn, opening, socket)
      })
      const timer = setTimeout(() => {
        pending.destroy(localError('SP_CONNECT_TIMEOUT', `CONNECT ${address}:${endpoint.port} through ${proxy.host}:${proxy.port} timed out after ${this.#timeoutMs} ms`))
      }, this.#timeoutMs)
      opening.current = pending
      opening.timer = timer
      return
    }
    let socket: Socket
    const tls = this.#tls
    let staple: Buffer | null = null
    // A session is kept only once its connection passed every check, and with
    // the time that verdict holds until: a ticket from a handshake refused after
    // OpenSSL accepted it (revoked, stale CRL, bad staple) would otherwise let the
    // next connection resume past those checks. A resumed connection's tickets
    // inherit the verdict of the session it resumed.
    const offered = this.#resume && this.#session !== undefined && Date.now() < this.#sessionUntil ? this.#session : undefined
    const validity = { until: offered === undefined ? Infinity : this.#sessionUntil }
    let accepted = false
    let issued: Buffer | undefined
    const keep = (session: Buffer): void => {
      this.#session = session
      this.#sessionUntil = validity.until
    }
    if (tls !== null) {
      let tlsSocket: TLSSocket
      try {
        tlsSocket = tlsConnect({
          ...tls.options,
          // Through a tunnel, `host` is only the name Node checks the certificate against
          // when the cluster names none (no SNI: a backend reached by IP); without it, Node
          // takes the tunnel socket's host, the proxy's.
          ...(tunnel !== undefined ? { socket: tunnel, host: address } : endpoint.kind === 'unix' ? { path: address } : { host: address, port: endpoint.port }),
          servername: tls.servername,
          ALPNProtocols: alpn === null || alpn.length === 0 ? undefined : [...alpn],
          session: offered,
        })
      } catch (err) {
        // TLS material OpenSSL refuses (buildClientTls could make no context of it): this
        // connection fails as a TLS failure of the backend, never an exception out of the pool.
        tunnel?.destroy()
        const failure = err instanceof Error ? err : new Error(String(err))
        const code = codeOf(failure)
        this.#countTlsFailure(failure, tlsFailureReason(code) ?? 'handshake', code, address)
        queueMicrotask(() => { if (!opening.done) opening.finish(failure, null) })
        return
      }
      if (this.#resume) tlsSocket.on('session', (session: Buffer) => { if (accepted) keep(session); else issued = session })
      if (tls.verifier !== null && tls.verifier.requestOCSP) tlsSocket.once('OCSPResponse', (response: Buffer) => { staple = response })
      socket = tlsSocket
    } else if (tunnel !== undefined) {
      socket = tunnel
    } else {
      socket = endpoint.kind === 'unix' ? netConnect({ path: address }) : netConnect({ host: address, port: endpoint.port })
    }
    const connectEvent = tls !== null ? 'secureConnect' : 'connect'
    let settled = false
    const timer = setTimeout(() => {
      socket.destroy(localError('SP_CONNECT_TIMEOUT', `connect to ${address}:${endpoint.port} timed out after ${this.#timeoutMs} ms`))
    }, this.#timeoutMs)
    opening.current = socket
    opening.timer = timer
    const accept = (): void => {
      if (settled || opening.done) return
      settled = true
      accepted = true
      if (issued !== undefined) keep(issued)
      clearTimeout(timer)
      socket.removeListener('error', onError)
      socket.setNoDelay(true)
      socket.setKeepAlive(true, 60_000)
      opening.finish(null, socket)
    }
    const verified = (): void => {
      // TLS 1.3 (RFC 8446 §4.4.2): the server judges our certificate after our
      // handshake is done, and says no with an alert one round trip later. Wait
      // for its verdict — a session ticket (accepted), an alert or a close — so a
      // rejected client certificate is a handshake failure of its own reason
      // (client_cert_rejected) and not a reset of the first request.
      if (tls === null || !tls.clientCert || (socket as TLSSocket).getProtocol() !== 'TLSv1.3') return accept()
      const waited = setTimeout(accept, CLIENT_CERT_VERDICT_MS)
      // Out of the 'session' callback: it runs inside OpenSSL's read of the ticket.
      socket.once('session', () => { clearTimeout(waited); setImmediate(accept) })
      socket.once('close', () => { clearTimeout(waited); onError(localError('SP_TLS_CLIENT_CERT_REJECTED', 'upstream closed the connection instead of accepting our client certificate')) })
    }
    const onConnect = (): void => {
      if (tls !== null && !(socket as TLSSocket).isSessionReused()) {
        // A full handshake (also when the offered session was declined) is judged
        // afresh. OpenSSL checked notAfter now; a resumed session is not checked again.
        const notAfter = Date.parse((socket as TLSSocket).getPeerCertificate().valid_to)
        validity.until = Number.isFinite(notAfter) ? notAfter : Infinity
      }
      const verifier = tls === null ? null : tls.verifier
      if (verifier === null) return verified()
      const verdict = verifier.verify(socket as TLSSocket, staple, validity)
      if (verdict === null) return verified()
      if (verdict instanceof Error) return onError(verdict)
      verdict.then((err) => { if (err === null) verified(); else onError(err) }, onError)
    }
    const onError = (err: Error): void => {
      if (settled || opening.done) return
      settled = true
      clearTimeout(timer)
      socket.removeListener(connectEvent, onConnect)
      socket.destroy()
      const code = codeOf(err)
      const reason = tlsFailureReason(code)
      if (reason !== null) this.#countTlsFailure(err, reason, code, address)
      // A TLS verdict is about the backend, not this address: do not try the next one.
      if (index + 1 < addresses.length && reason === null) {
        this.#attempt(addresses, index + 1, alpn, opening)
        return
      }
      opening.finish(err, null)
    }
    if (tls === null && tunnel !== undefined) queueMicrotask(onConnect) // the tunnel is already connected
    else socket.once(connectEvent, onConnect)
    socket.once('error', onError)
  }

  #countTlsFailure(err: Error, reason: string, code: string, address: string): void {
    countedTlsErrors.add(err)
    upstreamTlsHandshakeErrors.inc({ backend: this.backend, reason })
    log.warn({ backend: this.backend, endpoint: `${address}:${this.endpoint.port}`, reason, code, detail: err.message }, 'upstream TLS handshake failed')
  }
}
