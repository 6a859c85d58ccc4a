// Client TLS handshakes that fail on a listener: counted by port and reason
// class in sallyport_downstream_tls_handshake_errors_total, and logged (debug:
// scanners and plain-HTTP clients make these routine) with the reason, the
// server name and the client.
//
// Reasons (a fixed set; another may join it, never a free-form value):
//   client_cert_missing        AllowValidOnly, and the client sent no certificate
//   client_cert_unknown_ca     its certificate does not chain to the frontend CA bundle
//   client_cert_expired, client_cert_not_yet_valid
//   client_cert_invalid        refused for another reason (bad signature, purpose...)
//   protocol_version           no TLS version both sides accept, or one below the listener's min-version
//   no_shared_cipher           no cipher suite in common, or (TLS 1.3) none of the client's signature algorithms suits the certificate
//   no_application_protocol    no ALPN protocol in common
//   no_certificate             no listener of the port has a certificate for the server name
//   server_certificate         a listener certificate TLS refused (compile lets none through)
//   not_tls                    not a TLS ClientHello (plain HTTP to a TLS port...)
//   peer_alert                 the client ended the handshake with an alert (it refused our certificate...)
//   timeout                    the handshake did not complete in time
//   client_closed              the client went away mid-handshake
//   handshake                  anything else

import type { TLSSocket } from 'node:tls'
import { downstreamTlsHandshakeErrors } from '../observe/http-metrics.ts'
import { logger } from '../observe/log.ts'

const log = logger('listener')

/** The code of an SNI callback error: no listener certificate covers the name. */
export const NO_CERTIFICATE = 'SP_TLS_NO_CERTIFICATE'
/** A handshake that settled below its listener's min-version (tls-contexts.ts refusedBelowFloor). */
export const BELOW_MIN_VERSION = 'SP_TLS_BELOW_MIN_VERSION'

const BY_CODE: Readonly<Record<string, string>> = {
  ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE: 'client_cert_missing',
  ERR_SSL_UNSUPPORTED_PROTOCOL: 'protocol_version',
  ERR_SSL_WRONG_SSL_VERSION: 'protocol_version',
  ERR_SSL_VERSION_TOO_LOW: 'protocol_version',
  ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION: 'protocol_version',
  ERR_SSL_NO_SHARED_CIPHER: 'no_shared_cipher',
  // TLS 1.3's form of the same refusal (an ECDSA-only client of an RSA certificate): TLS 1.2 says NO_SHARED_CIPHER.
  ERR_SSL_NO_SUITABLE_SIGNATURE_ALGORITHM: 'no_shared_cipher',
  ERR_SSL_NO_APPLICATION_PROTOCOL: 'no_application_protocol',
  ERR_SSL_HTTP_REQUEST: 'not_tls',
  ERR_SSL_HTTPS_PROXY_REQUEST: 'not_tls',
  ERR_SSL_WRONG_VERSION_NUMBER: 'not_tls',
  ERR_SSL_PACKET_LENGTH_TOO_LONG: 'not_tls',
  ERR_SSL_RECORD_LENGTH_MISMATCH: 'not_tls',
  ERR_TLS_HANDSHAKE_TIMEOUT: 'timeout',
  ECONNRESET: 'client_closed',
  EPIPE: 'client_closed',
  [NO_CERTIFICATE]: 'no_certificate',
  [BELOW_MIN_VERSION]: 'protocol_version',
}

// The client's certificate, refused after OpenSSL's handshake (node destroys the socket: ECONNRESET).
const BY_AUTHORIZATION: Readonly<Record<string, string>> = {
  UNABLE_TO_GET_ISSUER_CERT: 'client_cert_unknown_ca',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'client_cert_unknown_ca',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'client_cert_unknown_ca',
  SELF_SIGNED_CERT_IN_CHAIN: 'client_cert_unknown_ca',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'client_cert_unknown_ca',
  CERT_UNTRUSTED: 'client_cert_unknown_ca',
  CERT_HAS_EXPIRED: 'client_cert_expired',
  CERT_NOT_YET_VALID: 'client_cert_not_yet_valid',
}

/** The reason class of a failed client handshake (see the list above). */
export function handshakeErrorReason(err: Error, socket: TLSSocket | null): string {
  const refused = socket === null ? null : (socket as TLSSocket & { authorizationError?: string | null }).authorizationError ?? null
  if (typeof refused === 'string' && refused !== '') return BY_AUTHORIZATION[refused] ?? 'client_cert_invalid'
  const code = (err as NodeJS.ErrnoException).code ?? ''
  const reason = BY_CODE[code]
  if (reason !== undefined) return reason
  if (code.startsWith('ERR_OSSL_')) return 'server_certificate' // raised building a listener's SecureContext, not by the handshake
  if (code.startsWith('ERR_SSL_') && code.includes('_ALERT_')) return 'peer_alert'
  return 'handshake'
}

/** Counts and logs one failed client handshake on `port`. */
export function handshakeFailed(port: number, err: Error, socket: TLSSocket | null): void {
  const reason = handshakeErrorReason(err, socket)
  downstreamTlsHandshakeErrors.labels(String(port), reason).inc()
  if (log.isLevelEnabled('debug')) {
    const servername = socket === null ? null : (socket as TLSSocket & { servername?: string | false | null }).servername
    log.debug({ port, reason, servername: typeof servername === 'string' ? servername : null, client: socket?.remoteAddress ?? null, err: err.message }, 'tls handshake failed')
  }
}
