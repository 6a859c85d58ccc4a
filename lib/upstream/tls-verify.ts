// Checks run after OpenSSL accepted the chain and checkServerIdentity the name
// and pins: revocation (CRLs for the whole chain, revocation.ts) and stapled
// OCSP (ocsp.ts). They need the peer chain and the staple, which Node hands to
// the socket, not to checkServerIdentity, and fetching a CRL is asynchronous;
// so the Connector runs them on 'secureConnect' and hands the socket to a pool
// only when they pass. Built once per pool, like the rest of the client TLS.
//
// Resumed sessions skip them, as Node skips checkServerIdentity: a resumed
// handshake carries no certificates to check. The session was verified when it
// was made, and any change of CRLs or settings changes the pool key
// (identityHash), so no session survives it. Time changes no key, though: a
// verdict holds only until the earliest nextUpdate it relied on (configured or
// fetched CRLs when stale ones fail, the stapled OCSP response) or the leaf's
// notAfter, and the Connector offers a session only until then (connect.ts).
//
// The chain checked is the one Node reports (getPeerCertificate(true)), which
// is not the chain OpenSSL verified: Node links each certificate to the first
// certificate the server sent carrying its issuer's Name (and key identifier),
// without checking a signature, while OpenSSL prefers a currently valid
// issuer, or a trusted one. A server could put a decoy with the issuer's Name
// and its own key before the real issuer: the CRLs, signed by the real issuer,
// would then not verify with the decoy's key and be passed over (a revoked leaf
// accepted), and a staple the decoy signed would pass for the issuer's. So the
// reported chain must hold up by itself: each certificate signed by the next,
// up to a trust anchor of this backend; otherwise the connection is refused.

import { createHash, X509Certificate } from 'node:crypto'
import { getCACertificates, type PeerCertificate, type TLSSocket } from 'node:tls'
import type { ClusterTls } from '../compile/table.ts'
import { certFacts, type CertFacts } from './tls-cert.ts'
import { checkStaple } from './ocsp.ts'
import { CrlCache, RevocationChecker, parseCrlPem, revocationError, type CrlSource, type Validity } from './revocation.ts'
import { pemBlocks } from './tls-der.ts'

export interface PeerVerifier {
  /** Whether to ask the server for a stapled OCSP response. */
  readonly requestOCSP: boolean
  /**
   * null: accepted, until `validity.until` (lowered here; resumed sessions leave it alone).
   * A Promise only when a CRL has to be fetched.
   */
  verify(socket: TLSSocket, staple: Buffer | null, validity: Validity): Error | null | Promise<Error | null>
}

let sharedCrlCache: CrlCache | null = null

/** The process-wide cache of fetched CRLs. */
export function crlCache(): CrlSource {
  if (sharedCrlCache === null) sharedCrlCache = new CrlCache()
  return sharedCrlCache
}

/** null when nothing is to be checked after the handshake (verification off, or no CRL and OCSP off). */
export function buildPeerVerifier(tls: ClusterTls, fetcher: CrlSource | null = null): PeerVerifier | null {
  if (tls.insecureSkipVerify) return null
  let checker: RevocationChecker | null = null
  let buildError: Error | null = null
  try {
    const crls = tls.crlPem === null ? [] : parseCrlPem(tls.crlPem)
    checker = new RevocationChecker({ crls, stale: tls.crlStale, fetcher: tls.crlFetch ? (fetcher ?? crlCache()) : null })
  } catch (err) {
    // compile validates CRLs; should one still not parse, refuse rather than skip revocation.
    buildError = revocationError('SP_TLS_CRL_INVALID', `configured CRL cannot be parsed: ${err instanceof Error ? err.message : String(err)}`)
  }
  if (buildError === null && checker !== null && !checker.active && tls.ocsp === 'off') return null
  return new Verifier(checker, buildError, tls.ocsp, tls.caPem)
}

/** An anchor as OpenSSL matches one: its subject Name and public key (a cross-signed copy of a root is the root). */
function anchorKey(cert: X509Certificate): string {
  return createHash('sha256').update(cert.subject).update('\0').update(cert.publicKey.export({ type: 'spki', format: 'der' })).digest('base64')
}

function anchorsOf(pems: readonly string[]): ReadonlySet<string> {
  const out = new Set<string>()
  for (const pem of pems) {
    for (const der of pemBlocks(pem, 'CERTIFICATE')) {
      try { out.add(anchorKey(new X509Certificate(der))) } catch { /* compile refused unreadable bundles; Node skips them too */ }
    }
  }
  return out
}

let systemAnchors: ReadonlySet<string> | null = null

/** The anchors of Node's default store (bundled, plus NODE_EXTRA_CA_CERTS and --use-system-ca), read once. */
function defaultAnchors(): ReadonlySet<string> {
  if (systemAnchors === null) systemAnchors = anchorsOf(getCACertificates('default'))
  return systemAnchors
}

class Verifier implements PeerVerifier {
  readonly requestOCSP: boolean
  readonly #checker: RevocationChecker | null
  readonly #buildError: Error | null
  readonly #ocsp: ClusterTls['ocsp']
  /** The referenced bundle's anchors; null: the default store's (read on first use). */
  readonly #anchors: ReadonlySet<string> | null

  constructor(checker: RevocationChecker | null, buildError: Error | null, ocsp: ClusterTls['ocsp'], caPem: string | null) {
    this.#checker = checker
    this.#buildError = buildError
    this.#ocsp = ocsp
    this.#anchors = caPem === null ? null : anchorsOf([caPem])
    this.requestOCSP = ocsp !== 'off'
  }

  verify(socket: TLSSocket, staple: Buffer | null, validity: Validity): Error | null | Promise<Error | null> {
    if (this.#buildError !== null) return this.#buildError
    if (socket.isSessionReused()) return null
    let chain: CertFacts[]
    try {
      chain = peerChain(socket.getPeerCertificate(true))
    } catch (err) {
      return revocationError('SP_TLS_BAD_CERT', `cannot read the peer certificate chain: ${err instanceof Error ? err.message : String(err)}`)
    }
    if (chain.length === 0) return revocationError('SP_TLS_BAD_CERT', 'the peer sent no certificate')
    const chainError = this.#holdUp(chain)
    if (chainError !== null) return chainError
    const now = Date.now()
    const ocspError = this.#checkOcsp(chain, staple, now, validity)
    if (ocspError !== null) return ocspError
    const checker = this.#checker
    return checker === null || !checker.active ? null : checker.check(chain, now, validity)
  }

  /**
   * Cuts `chain` after its first trust anchor, once every certificate below it
   * is signed by the next; an error when that does not hold (see the top).
   */
  #holdUp(chain: CertFacts[]): Error | null {
    const anchors = this.#anchors ?? defaultAnchors()
    for (let i = 0; i < chain.length; i++) {
      const cert = chain[i] as CertFacts
      if (anchors.has(anchorKey(cert.x509))) { chain.length = i + 1; return null }
      const issuer = chain[i + 1]
      if (issuer === undefined) {
        return revocationError('SP_TLS_BAD_CERT', `the served chain does not reach a trust anchor (it ends at ${cert.x509.subject.replace(/\n/g, ', ')})`)
      }
      if (!cert.x509.verify(issuer.x509.publicKey)) {
        return revocationError('SP_TLS_BAD_CERT', `the served chain links ${cert.x509.subject.replace(/\n/g, ', ')} to a certificate that did not sign it (a decoy carrying its issuer's name)`)
      }
    }
    return null
  }

  #checkOcsp(chain: readonly CertFacts[], staple: Buffer | null, now: number, validity: Validity): Error | null {
    const mode = this.#ocsp
    if (mode === 'off') return null
    const leaf = chain[0]
    const issuer = chain[1]
    if (staple !== null && staple.length > 0 && issuer !== undefined) {
      const verdict = checkStaple(staple, leaf, issuer, now)
      if (verdict.status === 'revoked') {
        return revocationError('CERT_REVOKED', `certificate ${leaf.serial} is revoked (stapled OCSP, since ${new Date(verdict.revokedAt).toISOString()})`)
      }
      if (verdict.status === 'invalid') return revocationError('SP_TLS_OCSP_INVALID', verdict.message)
      if (verdict.status === 'good') {
        if (verdict.until < validity.until) validity.until = verdict.until
        return null
      }
    }
    // No staple (or status unknown): RFC 7633 says a must-staple certificate without one is refused.
    if (mode === 'require' || (mode === 'must-staple' && leaf.mustStaple)) {
      return revocationError('SP_TLS_OCSP_MISSING', leaf.mustStaple ? 'must-staple certificate came without a good OCSP staple' : 'no good OCSP staple and the backend requires one')
    }
    return null
  }
}

/** getPeerCertificate(true) → leaf-first facts, ending at the self-signed anchor Node appends (cycle-safe). */
function peerChain(peer: PeerCertificate | Record<string, never>): CertFacts[] {
  const out: CertFacts[] = []
  let cert = peer as (PeerCertificate & { issuerCertificate?: PeerCertificate }) | undefined
  const seen = new Set<string>()
  while (cert !== undefined && cert.raw !== undefined && out.length < 16) {
    if (seen.has(cert.fingerprint256)) break
    seen.add(cert.fingerprint256)
    out.push(certFacts(cert.raw))
    const next = cert.issuerCertificate
    cert = next === cert ? undefined : next
  }
  return out
}
