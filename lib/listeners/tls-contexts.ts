// Server certificates for HTTPS listeners: SNI selection (exact, longest
// wildcard, listener without hostname) and SecureContexts cached by the
// certificate's content hash, so a table swap reuses them. TLS versions: a
// port negotiates its range (ServerTls.minVersion/maxVersion, on the
// server-wide context: OpenSSL settles the version before the SNI callback
// swaps in a certificate's context, whose own range is never read), and each
// listener's higher floor is checked once the handshake names its listener.

import { constants, createHash } from 'node:crypto'
import { isIP } from 'node:net'
import { createSecureContext, type SecureContext, type Server, type TLSSocket } from 'node:tls'
import type { RouteTable, ServerCert, ServerTls } from '../compile/table.ts'
import { lookupHostname, withoutTrailingDot } from '../hostname-index.ts'
import { logger } from '../observe/log.ts'
import { BELOW_MIN_VERSION, NO_CERTIFICATE, handshakeFailed } from './tls-handshake-errors.ts'

const log = logger('listener')

/**
 * TLS 1.2 cipher suites of every listener: ECDHE key exchange with an AEAD
 * cipher, as Envoy's default. RFC 9113 §9.2.2 keeps the others (CBC, static
 * RSA) from HTTP/2, and nothing still in use needs them. TLS 1.3 keeps its
 * own suites (all AEAD).
 */
/**
 * OpenSSL options of every listener context: no renegotiation (TLS 1.2), as
 * Envoy (BoringSSL servers never renegotiate). Node's servers took three per
 * connection in ten minutes: a full handshake's work each for one record of
 * the client's, and a client certificate read once, after the first.
 */
export const LISTENER_SECURE_OPTIONS = constants.SSL_OP_NO_RENEGOTIATION

export const LISTENER_CIPHERS = [
  'ECDHE-ECDSA-AES128-GCM-SHA256', 'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-CHACHA20-POLY1305', 'ECDHE-RSA-CHACHA20-POLY1305',
  'ECDHE-ECDSA-AES256-GCM-SHA384', 'ECDHE-RSA-AES256-GCM-SHA384',
].join(':')

/**
 * The server name a client sent, as listeners select by it: lowercased, and ''
 * for none. RFC 6066 §3 allows no literal address in server_name, yet some
 * clients of the gateway's address send one: it names no listener, so it is
 * taken as no server name (the port's default certificate, routing by Host),
 * never as a name no listener covers (no handshake). One trailing dot is
 * dropped: `api.example.com.` is api.example.com, as in Host (headers.ts).
 */
export function serverNameOf(servername: unknown): string {
  if (typeof servername !== 'string' || servername.length === 0 || isIP(servername) !== 0) return ''
  // RFC 6066 forbids the trailing dot of a fully qualified name, yet clients send the name as written.
  return withoutTrailingDot(servername).toLowerCase()
}

/** The certificate for an SNI name (serverNameOf); null when none covers it. */
export function selectCert(tls: ServerTls, servername: string): ServerCert | null {
  return servername.length > 0 ? lookupHostname(tls, servername) : tls.fallback
}

/** The SNI callback's answer when no certificate covers the name. */
export function noCertificate(): Error {
  return Object.assign(new Error('no certificate for server name'), { code: NO_CERTIFICATE })
}

/** Any certificate of the port, for clients that send no SNI. */
export function defaultCert(tls: ServerTls): ServerCert | null {
  if (tls.fallback !== null) return tls.fallback
  for (const cert of tls.exact.values()) return cert
  return tls.wildcards.length > 0 ? tls.wildcards[0].value : null
}

/** The port's certificates, its default one (defaultCert) first. */
function byPreference(conf: ServerTls): ServerCert[] {
  const first = defaultCert(conf)
  const all = certificatesOf(conf)
  return first === null ? all : [first, ...all.filter(c => c !== first)]
}

/** Every certificate of a port: its listeners' exact hostnames, wildcards, then the one without hostname. */
function certificatesOf(conf: ServerTls): ServerCert[] {
  return [...conf.exact.values(), ...conf.wildcards.map(w => w.value), ...(conf.fallback === null ? [] : [conf.fallback])]
}

/** Whether a listener of a port that also takes TLS 1.2 wants TLS 1.3 (`sallyport.io/min-version`). */
export function hasTls13Floor(conf: ServerTls): boolean {
  return conf.minVersion === 'TLSv1.2' && certificatesOf(conf).some(c => c.minVersion === 'TLSv1.3')
}

function refused(port: number, cert: ServerCert, err: unknown): void {
  log.error({ port, hostname: cert.hostname, err: (err as Error).message }, 'listener certificate refused by TLS; its hostname gets no handshake')
}

/**
 * The server-wide context (the handshake's start, clients without SNI): the
 * port's default certificate, else the next of its certificates TLS takes.
 * Compile refuses material TLS cannot use; should some get through all the
 * same, it costs its own hostname, never the port (a throw here once kept
 * every listener of the port from binding).
 */
export function setDefaultContext(server: Server, conf: ServerTls, port: number): void {
  const ca = conf.clientValidation === null ? {} : { ca: conf.clientValidation.caPem }
  for (const cert of byPreference(conf)) {
    try {
      server.setSecureContext({ cert: cert.certPem, key: cert.keyPem, minVersion: conf.minVersion, maxVersion: conf.maxVersion, ciphers: LISTENER_CIPHERS, secureOptions: LISTENER_SECURE_OPTIONS, ...ca })
      return
    } catch (err) {
      refused(port, cert, err)
    }
  }
}

/**
 * What the server-wide context is made of (its certificates in the order
 * setDefaultContext tries them, TLS versions, client validation): a reload
 * that leaves it the same keeps the context, and with it the ticket keys that
 * clients' TLS sessions resume with (a new context has new keys).
 */
export function defaultContextKey(conf: ServerTls): string {
  return `${contextKey(conf)}|${byPreference(conf).map(c => c.id).join(',')}`
}

/**
 * Whether a handshake settled a TLS version below the lowest its listener
 * accepts (ServerCert.minVersion; the port offered its listeners' widest
 * range); counted as protocol_version. The caller closes the connection
 * before reading any request. `servername`: the connection's (serverNameOf),
 * which selects its listener.
 */
export function refusedBelowFloor(conf: ServerTls | null, socket: TLSSocket, port: number, servername: string): boolean {
  if (conf === null || conf.minVersion === 'TLSv1.3') return false // the port refused anything less already
  const cert = selectCert(conf, servername) ?? defaultCert(conf)
  if (cert === null || cert.minVersion !== 'TLSv1.3' || socket.getProtocol() === 'TLSv1.3') return false
  handshakeFailed(port, Object.assign(new Error(`${socket.getProtocol() ?? 'TLS'} is below the listener's min-version TLSv1.3`), { code: BELOW_MIN_VERSION }), socket)
  return true
}

/** What a port's contexts share besides the certificate: TLS versions and client validation (mode and CA). */
function contextKey(tls: ServerTls): string {
  const v = tls.clientValidation
  return `${tls.minVersion}|${tls.maxVersion}|${v === null ? 'none' : `${v.required ? 'required' : 'optional'}|${v.caPem}`}`
}

/**
 * The session id context of a context (SSL_CTX_set_session_id_context): a
 * session resumes only in the context it was made in, as OpenSSL checks it.
 * Without one, OpenSSL refuses every resumption on a context that asks for
 * client certificates with a fatal internal_error ("session id context
 * uninitialized"), and a context that does not would resume sessions of any
 * other. It names the validation (mode and CA), so a session made without a
 * certificate, or with one of another CA, never resumes where that validation
 * would have refused it: its resumption is a full handshake. 32 bytes, the most
 * OpenSSL takes.
 */
export function sessionIdContext(tls: ServerTls): string {
  return createHash('sha256').update(contextKey(tls)).digest('hex').slice(0, 32)
}

export class SecureContexts {
  /** contextKey → cert id → context, or why TLS refused it (logged once). */
  readonly #byKey = new Map<string, Map<string, SecureContext | Error>>()

  /** Throws when TLS refuses the certificate (see setDefaultContext). */
  get(cert: ServerCert, tls: ServerTls, port: number): SecureContext {
    const ca = tls.clientValidation === null ? '' : tls.clientValidation.caPem
    const key = contextKey(tls)
    let byId = this.#byKey.get(key)
    if (byId === undefined) {
      byId = new Map()
      this.#byKey.set(key, byId)
    }
    let ctx = byId.get(cert.id)
    if (ctx === undefined) {
      try {
        ctx = createSecureContext({
          cert: cert.certPem, key: cert.keyPem, minVersion: tls.minVersion, maxVersion: tls.maxVersion, ciphers: LISTENER_CIPHERS, secureOptions: LISTENER_SECURE_OPTIONS,
          sessionIdContext: sessionIdContext(tls), ...(ca === '' ? {} : { ca }),
        })
      } catch (err) {
        refused(port, cert, err)
        ctx = err as Error
      }
      byId.set(cert.id, ctx)
    }
    if (ctx instanceof Error) throw ctx
    return ctx
  }

  /** The context of the port's default certificate, else of the next one TLS takes; null when it takes none. */
  defaultContext(tls: ServerTls, port: number): SecureContext | null {
    for (const cert of byPreference(tls)) {
      try {
        return this.get(cert, tls, port)
      } catch { /* refused: logged, the next one */ }
    }
    return null
  }

  /** Drops contexts the table no longer references. */
  retain(table: RouteTable): void {
    const keep = new Map<string, Set<string>>()
    for (const entry of table.ports.values()) {
      const tls = entry.serverTls
      if (tls === null) continue
      const key = contextKey(tls)
      let ids = keep.get(key)
      if (ids === undefined) { ids = new Set(); keep.set(key, ids) }
      for (const c of tls.exact.values()) ids.add(c.id)
      for (const w of tls.wildcards) ids.add(w.value.id)
      if (tls.fallback !== null) ids.add(tls.fallback.id)
    }
    for (const [key, byId] of this.#byKey) {
      const ids = keep.get(key)
      if (ids === undefined) { this.#byKey.delete(key); continue }
      for (const id of byId.keys()) if (!ids.has(id)) byId.delete(id)
    }
  }
}
