// TLS origination options, built ONCE per pool (STYLE.md §5, like undici's
// connector closure in lib/core/connect.js), never per connection.
//
// BackendTLSPolicy (GEP-1897): the certificate is verified against
// `validation.hostname` unless `subjectAltNames` are given, in which case one
// of them must match and the hostname only goes into SNI. Verification is on
// unless the admin set insecureSkipVerify (DESIGN.md "Safety defaults").
// Trust: `caPem` replaces the system store (CA pinning); intermediates the
// server sends are used to build the chain, never trusted by themselves.
// SPKI pins are checked here with the name; revocation (CRLs, stapled OCSP)
// runs after the handshake (tls-verify.ts). CRLs are deliberately NOT given to
// OpenSSL (`crl` option): see revocation.ts for why.

import { constants, createHash, X509Certificate } from 'node:crypto'
import { isIP } from 'node:net'
import { checkServerIdentity, createSecureContext, type ConnectionOptions, type PeerCertificate, type SecureContextOptions } from 'node:tls'
import type { ClusterTls, Endpoint } from '../compile/table.ts'
import { buildPeerVerifier, type PeerVerifier } from './tls-verify.ts'
import type { CrlSource } from './revocation.ts'

export const SpTlsCode = {
  PIN_MISMATCH: 'SP_TLS_PIN_MISMATCH',
  SAN_MISMATCH: 'SP_TLS_SAN_MISMATCH',
} as const

export interface ClientTls {
  /**
   * Options spread into tls.connect (plus host, port, ALPNProtocols, session):
   * the trust store, client certificate and protocol floor in one SecureContext
   * made here, so a connection does not parse them again (150 µs with the
   * system store alone, about 1 ms with a 20-certificate bundle).
   */
  readonly options: ConnectionOptions
  /** A client certificate is presented (mTLS). */
  readonly clientCert: boolean
  /** SNI; undefined when none may be sent (IP literal or not configured). */
  readonly servername: string | undefined
  /** Revocation and OCSP checks after the handshake; null: none. */
  readonly verifier: PeerVerifier | null
}

/**
 * The TLS server name of one endpoint's connections when the cluster's TLS
 * names none — no `sni`, validation hostname or Backend hostname, as for a
 * Backend with several fqdn endpoints: the endpoint's own hostname, sent as SNI
 * and verified against the certificate (checked against the dialled address
 * instead, every connection failed as hostname_mismatch). null: the cluster's settings
 * apply (a name of its own, an IP endpoint, mesh TLS that checks no name).
 * Decided once per pool; the pool key carries it (registry.ts).
 */
export function endpointServername(tls: ClusterTls | null, endpoint: Endpoint): string | null {
  if (tls === null || tls.servername !== null || tls.verifyHostname !== null || !tls.verifyName) return null
  const name = endpoint.name ?? (endpoint.kind === 'hostname' ? endpoint.host : null)
  return name === null || isIP(name) !== 0 ? null : name.toLowerCase()
}

/**
 * `endpointName`: the endpoint's own server name (endpointServername), used
 * when the cluster names none. `fetcher`: where fetched CRLs come from (tests);
 * default the process-wide cache.
 */
export function buildClientTls(tls: ClusterTls, endpointName: string | null = null, fetcher: CrlSource | null = null): ClientTls {
  const name = tls.servername ?? endpointName
  const servername = name !== null && isIP(name) === 0 ? name : undefined
  const context: SecureContextOptions = {
    minVersion: tls.minVersion,
    // A server's request to renegotiate (TLS 1.2) is refused, as Envoy does by default
    // (allow_renegotiation: false): Node checks the chain, name, pins and revocation
    // once, after the first handshake, and never the certificate a renegotiation brings.
    secureOptions: constants.SSL_OP_NO_RENEGOTIATION,
  }
  // null: Node's default store (tls.rootCertificates) — leaving `ca` unset keeps it.
  if (tls.caPem !== null) context.ca = tls.caPem
  const clientCert = tls.certPem !== null && tls.keyPem !== null
  if (clientCert) {
    context.cert = tls.certPem as string
    context.key = tls.keyPem as string
  }
  const options: ConnectionOptions = {
    rejectUnauthorized: !tls.insecureSkipVerify,
    checkServerIdentity: tls.insecureSkipVerify ? skipIdentity : identityChecker(tls, endpointName),
  }
  try {
    options.secureContext = createSecureContext(context)
  } catch {
    // Material OpenSSL refuses (a key that does not match its certificate): each
    // connection fails with that error, as its own handshake failure, and the pool
    // reports it where connections are made.
    Object.assign(options, context)
  }
  const verifier = buildPeerVerifier(tls, fetcher)
  if (verifier !== null && verifier.requestOCSP) options.requestOCSP = true
  return { options, clientCert, servername, verifier }
}

function skipIdentity(): undefined {
  return undefined
}

function identityChecker(tls: ClusterTls, endpointName: string | null): (host: string, cert: PeerCertificate) => Error | undefined {
  // Node passes the SNI as `host` when there is one, else the address dialled.
  const verifyHostname = tls.verifyHostname ?? endpointName
  const verifyName = tls.verifyName
  const sans = tls.subjectAltNames
  const pins: ReadonlySet<string> = new Set(tls.spkiPins.map((p) => p.replace(/^sha256\//, '')))
  return function checkIdentity(host: string, cert: PeerCertificate): Error | undefined {
    if (!verifyName) {
      // Mesh mTLS: the chain against the mesh trust bundle is the check.
    } else if (sans.length > 0) {
      if (!sans.some((san) => matchesSan(san, cert))) {
        return tlsError(SpTlsCode.SAN_MISMATCH, `certificate matches none of the ${sans.length} configured subjectAltNames`)
      }
    } else {
      const err = checkServerIdentity(verifyHostname ?? host, namesOnly(cert))
      if (err !== undefined) return err
    }
    if (pins.size > 0) {
      if (!pins.has(spkiPinOf(cert))) return tlsError(SpTlsCode.PIN_MISMATCH, 'certificate public key matches no configured SPKI pin')
    }
    return undefined
  }
}

// A pin is the sha256 of the DER SubjectPublicKeyInfo (RFC 7469 §2.4, what
// `openssl x509 -pubkey | openssl pkey -pubin -outform der` hashes). Node's
// `cert.pubkey` is that only for RSA: for EC it is the bare point, for Ed25519
// absent. Parsing the certificate again costs about as much as the hash, and
// this runs only on full handshakes (resumed sessions skip checkServerIdentity).
function spkiPinOf(cert: PeerCertificate): string {
  const spki = new X509Certificate(cert.raw).publicKey.export({ type: 'spki', format: 'der' })
  return createHash('sha256').update(spki).digest('base64')
}

// What Node's checkServerIdentity may match a name against: the DNS and IP
// subjectAltNames, nothing else (RFC 9525 §6.3, as Go, Envoy and browsers).
// - Node matches the subject CN when the certificate has no DNS
//   subjectAltName; hiding the CN leaves it only the SANs: a certificate without
//   a matching DNS or IP SAN fails ERR_TLS_CERT_ALTNAME_INVALID.
// - Node takes a wildcard inside the left-most label too (`f*.example.com`,
//   RFC 6125 §6.4.3), which RFC 9525 dropped and Envoy's dnsNameMatch never
//   matched: such names are left out, a `*` alone as the left-most label stays.
// Node's list is `, `-separated; a name with a comma in it is quoted with the
// comma escaped (\u002c), so splitting on `, ` never cuts one.
function namesOnly(cert: PeerCertificate): PeerCertificate {
  const sans = cert.subjectaltname
  const kept = sans === undefined || !sans.includes('*') ? sans : sans.split(', ').filter((name) => !isPartialWildcard(name)).join(', ')
  if (cert.subject?.CN === undefined && kept === sans) return cert
  return { ...cert, subject: { ...cert.subject, CN: '' }, subjectaltname: kept as string }
}

function isPartialWildcard(name: string): boolean {
  if (!name.startsWith('DNS:')) return false
  const first = name.slice(4, name.indexOf('.') === -1 ? undefined : name.indexOf('.'))
  return first !== '*' && first.includes('*')
}

function matchesSan(san: { readonly type: 'Hostname' | 'URI'; readonly value: string }, cert: PeerCertificate): boolean {
  if (san.type === 'Hostname') return checkServerIdentity(san.value, namesOnly(cert)) === undefined
  const list = cert.subjectaltname ?? ''
  return list.split(', ').includes(`URI:${san.value}`)
}

function tlsError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code })
}

/**
 * OpenSSL / Node / our own verification codes → a bounded reason class (the
 * metric label and the text of the 502). Alerts *from the server* about our
 * certificate (bad/unknown/expired/revoked certificate, unknown CA,
 * certificate required, access denied) mean it rejected the client certificate.
 */
const REASONS: Readonly<Record<string, string>> = {
  UNABLE_TO_GET_ISSUER_CERT: 'unknown_ca',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'unknown_ca',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'unknown_ca',
  SELF_SIGNED_CERT_IN_CHAIN: 'unknown_ca',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'unknown_ca',
  CERT_UNTRUSTED: 'unknown_ca',
  ERR_TLS_CERT_ALTNAME_INVALID: 'hostname_mismatch',
  SP_TLS_SAN_MISMATCH: 'hostname_mismatch',
  SP_TLS_PIN_MISMATCH: 'pin_mismatch',
  CERT_HAS_EXPIRED: 'expired',
  CERT_NOT_YET_VALID: 'not_yet_valid',
  CERT_REVOKED: 'revoked',
  UNABLE_TO_GET_CRL: 'crl_unavailable',
  SP_TLS_CRL_UNAVAILABLE: 'crl_unavailable',
  CRL_HAS_EXPIRED: 'crl_expired',
  CRL_NOT_YET_VALID: 'crl_expired',
  SP_TLS_CRL_INVALID: 'crl_invalid',
  SP_TLS_OCSP_INVALID: 'ocsp_invalid',
  SP_TLS_OCSP_MISSING: 'ocsp_missing',
  SP_TLS_BAD_CERT: 'bad_chain',
  CERT_SIGNATURE_FAILURE: 'bad_signature',
  CERT_CHAIN_TOO_LONG: 'bad_chain',
  INVALID_CA: 'bad_chain',
  INVALID_PURPOSE: 'bad_chain',
  ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED: 'client_cert_rejected',
  SP_TLS_CLIENT_CERT_REJECTED: 'client_cert_rejected',
  ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE: 'client_cert_rejected',
  ERR_SSL_SSLV3_ALERT_CERTIFICATE_UNKNOWN: 'client_cert_rejected',
  ERR_SSL_SSLV3_ALERT_CERTIFICATE_EXPIRED: 'client_cert_rejected',
  ERR_SSL_SSLV3_ALERT_CERTIFICATE_REVOKED: 'client_cert_rejected',
  ERR_SSL_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE: 'client_cert_rejected',
  ERR_SSL_TLSV1_ALERT_UNKNOWN_CA: 'client_cert_rejected',
  ERR_SSL_TLSV1_ALERT_ACCESS_DENIED: 'client_cert_rejected',
  ERR_SSL_PEER_DID_NOT_RETURN_A_CERTIFICATE: 'client_cert_rejected',
  // RFC 7301 §3.2: the server supports none of the protocols offered (alpnProtocols, or h2 only for HTTP2).
  ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL: 'no_application_protocol',
  ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION: 'protocol_version',
  ERR_SSL_UNSUPPORTED_PROTOCOL: 'protocol_version',
  ERR_SSL_WRONG_VERSION_NUMBER: 'not_tls',
}

/** The reason class of a TLS failure, or null when `code` is not a TLS failure. */
export function tlsFailureReason(code: string): string | null {
  const reason = REASONS[code]
  if (reason !== undefined) return reason
  if (code.startsWith('ERR_SSL_') || code.startsWith('ERR_TLS_') || code.startsWith('ERR_OSSL_')) {
    return code.includes('ALERT') ? 'peer_alert' : 'handshake'
  }
  return null
}
