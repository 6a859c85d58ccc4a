// CRL checking for the WHOLE served chain (RFC 5280 §6.3), done by us rather
// than by OpenSSL. Node's `crl` option adds the CRLs to the context's store
// and turns on X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL: every
// certificate of the chain then needs a CRL from its issuer (a missing one is
// UNABLE_TO_GET_CRL), and a CRL past nextUpdate always fails (CRL_HAS_EXPIRED),
// with no way to configure either. So sallyport keeps CRLs out of the
// SecureContext and checks after the handshake:
//
// - every certificate of the chain except the trust anchor is looked up in the
//   CRLs whose issuer Name equals its issuer Name and whose signature verifies
//   with the issuing certificate's key (the next one in the chain);
// - a certificate listed there is refused (CERT_REVOKED);
// - a CRL past its nextUpdate fails closed (CRL_HAS_EXPIRED) unless the
//   backend says `sallyport.io/crl-stale: allow`;
// - a certificate whose issuer published no configured CRL is accepted,
//   unless CRL fetching is on (`sallyport.io/crl-fetch: "true"`) and the
//   certificate names http(s) distribution points: then the CRL is fetched
//   (cached until its nextUpdate) and a fetch that fails refuses the
//   connection (SP_TLS_CRL_UNAVAILABLE) — fail closed, never "no news is good news".
//
// Not handled: delta CRLs, indirect CRLs, issuingDistributionPoint scoping.

import { bitString, children, integerHex, isContext, isTime, readTlv, sequence, time, pemBlocks, type Tlv } from './tls-der.ts'
import { verifySignature, type CertFacts } from './tls-cert.ts'
import { readBoundedBytes } from '../read-bounded.ts'

export interface Crl {
  readonly issuerDer: Buffer
  readonly thisUpdate: number
  readonly nextUpdate: number | null
  /** Revoked serials, upper-case hex without leading zeros. */
  readonly revoked: ReadonlySet<string>
  readonly tbs: Buffer
  readonly algorithm: Tlv
  readonly signature: Buffer
  /** Where it came from: 'config' or the distribution point URL (log fields). */
  readonly source: string
  /** Issuing certificate fingerprint → did the signature verify with its key (memo). */
  readonly verifiedBy: Map<string, boolean>
}

export function parseCrl(der: Buffer, source: string): Crl {
  const list = sequence(readTlv(der), 'CertificateList')
  const tbsTlv = list[0]
  const tbs = sequence(tbsTlv, 'TBSCertList')
  let i = tbs[0].tag === 2 && tbs[0].cls === 0 ? 1 : 0 // version v2
  i++ // signature AlgorithmIdentifier
  const issuer = tbs[i++]
  const thisUpdate = time(tbs[i++])
  let nextUpdate: number | null = null
  if (isTime(tbs[i])) nextUpdate = time(tbs[i++])
  const revoked = new Set<string>()
  if (tbs[i] !== undefined && !isContext(tbs[i], 0)) {
    for (const entry of sequence(tbs[i], 'revokedCertificates')) revoked.add(integerHex(children(entry)[0]))
  }
  return {
    issuerDer: der.subarray(issuer.start, issuer.end), thisUpdate, nextUpdate, revoked,
    tbs: der.subarray(tbsTlv.start, tbsTlv.end), algorithm: list[1], signature: bitString(list[2]), source,
    verifiedBy: new Map(),
  }
}

/** Every `X509 CRL` block of a PEM bundle; throws on a malformed one. */
export function parseCrlPem(pem: string): Crl[] {
  return pemBlocks(pem, 'X509 CRL').map((der) => parseCrl(der, 'config'))
}

export function revocationError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code })
}

/** Fetches CRLs from distribution points, cached per URL until their nextUpdate. */
export interface CrlSource {
  get(url: string): Promise<Crl>
}

/** Until when a verdict holds (ms since the epoch): the checks lower it to the earliest time that would change it. */
export interface Validity {
  until: number
}

export interface RevocationOptions {
  readonly crls: readonly Crl[]
  readonly stale: 'fail' | 'allow'
  /** null: CRL fetching off (the default). */
  readonly fetcher: CrlSource | null
}

export class RevocationChecker {
  readonly #crls: readonly Crl[]
  readonly #stale: 'fail' | 'allow'
  readonly #fetcher: CrlSource | null

  constructor(options: RevocationOptions) {
    this.#crls = options.crls
    this.#stale = options.stale
    this.#fetcher = options.fetcher
  }

  get active(): boolean {
    return this.#crls.length > 0 || this.#fetcher !== null
  }

  /**
   * `chain`: leaf first, each certificate followed by its issuer. Sync unless a CRL must be fetched.
   * `validity` is lowered to the nextUpdate of every CRL relied on (when stale ones fail).
   */
  check(chain: readonly CertFacts[], now: number, validity: Validity = { until: Infinity }): Error | null | Promise<Error | null> {
    const missing: number[] = []
    for (let i = 0; i < chain.length; i++) {
      const cert = chain[i]
      const issuer = chain[i + 1]
      if (issuer === undefined) break // the trust anchor (or a chain we could not complete): nothing to check
      const verdict = this.#checkOne(cert, issuer, this.#crls, now, validity)
      if (verdict === 'none' && this.#fetcher !== null && cert.crlUrls.length > 0) missing.push(i)
      else if (verdict instanceof Error) return verdict
    }
    if (missing.length === 0) return null
    return this.#checkFetched(chain, missing, now, validity)
  }

  async #checkFetched(chain: readonly CertFacts[], missing: readonly number[], now: number, validity: Validity): Promise<Error | null> {
    const fetcher = this.#fetcher as CrlSource
    for (const i of missing) {
      const cert = chain[i]
      const fetched: Crl[] = []
      let lastError: unknown = null
      for (const url of cert.crlUrls) {
        try {
          fetched.push(await fetcher.get(url))
          break
        } catch (err) {
          lastError = err
        }
      }
      if (fetched.length === 0) {
        return revocationError('SP_TLS_CRL_UNAVAILABLE', `no CRL could be fetched for ${cert.x509.subject.replace(/\n/g, ', ')}: ${lastError instanceof Error ? lastError.message : String(lastError)}`)
      }
      const verdict = this.#checkOne(cert, chain[i + 1] as CertFacts, fetched, now, validity)
      if (verdict === 'none') return revocationError('SP_TLS_CRL_UNAVAILABLE', `the CRL fetched for ${cert.x509.subject.replace(/\n/g, ', ')} is not signed by its issuer`)
      if (verdict instanceof Error) return verdict
    }
    return null
  }

  /**
   * 'none': no usable CRL from this issuer; null: checked and not revoked. A
   * certificate any of the issuer's CRLs lists is revoked; the issuer's CRLs
   * are stale only when none of them is current (OpenSSL too prefers a current
   * CRL): a bundle appended to at rotation keeps the old one beside the new.
   */
  #checkOne(cert: CertFacts, issuer: CertFacts, crls: readonly Crl[], now: number, validity: Validity): Error | null | 'none' {
    let stale: Crl | null = null
    let current = false
    for (const crl of crls) {
      if (!crl.issuerDer.equals(cert.issuerDer)) continue
      if (!isSignedBy(crl, issuer)) continue
      if (crl.revoked.has(cert.serial)) {
        return revocationError('CERT_REVOKED', `certificate ${cert.serial} (${cert.x509.subject.replace(/\n/g, ', ')}) is revoked by CRL (${crl.source})`)
      }
      if (crl.nextUpdate !== null && crl.nextUpdate < now) { stale ??= crl; continue }
      current = true
      if (crl.nextUpdate !== null && this.#stale === 'fail' && crl.nextUpdate < validity.until) validity.until = crl.nextUpdate
    }
    if (!current && stale === null) return 'none'
    if (!current && stale !== null && this.#stale === 'fail') {
      return revocationError('CRL_HAS_EXPIRED', `CRL (${stale.source}) of ${issuer.x509.subject.replace(/\n/g, ', ')} is past its nextUpdate ${new Date(stale.nextUpdate as number).toISOString()}`)
    }
    return null
  }
}

function isSignedBy(crl: Crl, issuer: CertFacts): boolean {
  const fp = issuer.x509.fingerprint256
  let ok = crl.verifiedBy.get(fp)
  if (ok === undefined) {
    ok = verifySignature(crl.tbs, crl.algorithm, crl.signature, issuer.x509.publicKey)
    if (crl.verifiedBy.size < 64) crl.verifiedBy.set(fp, ok)
  }
  return ok
}

const MAX_CRL_BYTES = 16 * 1024 * 1024
const FETCH_TIMEOUT_MS = 5_000
/** Used when a CRL has no nextUpdate, and as the floor between refetches of a stale one. */
const DEFAULT_TTL_MS = 3_600_000
const MIN_TTL_MS = 30_000
const MAX_ENTRIES = 256

/** A process-wide cache of CRLs fetched from distribution points (bounded, in-flight fetches shared). */
export class CrlCache implements CrlSource {
  readonly #entries = new Map<string, { crl: Promise<Crl>; expires: number }>()
  readonly #now: () => number

  constructor(now: () => number = Date.now) {
    this.#now = now
  }

  get(url: string): Promise<Crl> {
    const now = this.#now()
    const hit = this.#entries.get(url)
    if (hit !== undefined && hit.expires > now) return hit.crl
    if (this.#entries.size >= MAX_ENTRIES) this.#entries.delete(this.#entries.keys().next().value as string)
    const entry = { crl: fetchCrl(url), expires: now + MIN_TTL_MS }
    this.#entries.set(url, entry)
    entry.crl.then(
      (crl) => { entry.expires = Math.max(now + MIN_TTL_MS, crl.nextUpdate ?? now + DEFAULT_TTL_MS) },
      () => { if (this.#entries.get(url) === entry) this.#entries.delete(url) },
    )
    return entry.crl
  }
}

async function fetchCrl(url: string): Promise<Crl> {
  const res = await fetch(url, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS), redirect: 'follow' })
  if (res.status !== 200) {
    void res.body?.cancel().catch(() => {})
    throw new Error(`GET ${url} answered ${res.status}`)
  }
  const body = await readBoundedBytes(res, MAX_CRL_BYTES, `the CRL distribution point ${url}`)
  // RFC 5280 §4.2.1.13: DER; accept PEM too, servers get this wrong.
  const text = body.subarray(0, 64).toString('latin1')
  const der = text.includes('-----BEGIN') ? pemBlocks(body.toString('latin1'), 'X509 CRL')[0] : body
  if (der === undefined) throw new Error(`no CRL in the answer of ${url}`)
  return parseCrl(der, url)
}

