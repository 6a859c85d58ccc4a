// What revocation checking needs to know about a certificate, read once from
// its DER (RFC 5280 §4.1): issuer and subject Names as raw bytes (CRLs and
// OCSP CertIDs match on them), serial, public key bits, CRL distribution
// points, the TLS Feature (must-staple) extension. Plus signature checks over
// raw signed bytes with node:crypto (synchronous, no WebCrypto round trips).

import { createHash, verify as cryptoVerify, X509Certificate, type KeyObject } from 'node:crypto'
import { bitString, children, content, isContext, oid, integerHex, raw, readTlv, sequence, smallInt, Tag, type Tlv } from './tls-der.ts'

const OID_CRL_DP = '2.5.29.31'
const OID_TLS_FEATURE = '1.3.6.1.5.5.7.1.24'
/** RFC 7633: status_request (TLS extension 5) in the TLS Feature extension = "must staple". */
const STATUS_REQUEST = 5

export interface CertFacts {
  readonly x509: X509Certificate
  readonly der: Buffer
  readonly issuerDer: Buffer
  readonly subjectDer: Buffer
  readonly serial: string
  /** subjectPublicKey BIT STRING content (what OCSP issuerKeyHash hashes). */
  readonly publicKeyBits: Buffer
  /** http(s) URIs of the CRL distribution points. */
  readonly crlUrls: readonly string[]
  readonly mustStaple: boolean
  readonly selfIssued: boolean
}

export function certFacts(der: Buffer): CertFacts {
  const cert = sequence(readTlv(der), 'Certificate')
  const tbs = sequence(cert[0], 'TBSCertificate')
  let i = isContext(tbs[0], 0) ? 1 : 0 // [0] version
  const serial = integerHex(tbs[i++])
  i++ // signature AlgorithmIdentifier
  const issuer = tbs[i++]
  i++ // validity
  const subject = tbs[i++]
  const spki = sequence(tbs[i++], 'SubjectPublicKeyInfo')
  let crlUrls: string[] = []
  let mustStaple = false
  for (; i < tbs.length; i++) {
    if (!isContext(tbs[i], 3)) continue
    for (const ext of sequence(children(tbs[i])[0], 'Extensions')) {
      const parts = sequence(ext, 'Extension')
      const id = oid(parts[0])
      const value = parts[parts.length - 1]
      if (id === OID_CRL_DP) crlUrls = distributionPointUrls(content(value))
      else if (id === OID_TLS_FEATURE) mustStaple = tlsFeatures(content(value)).includes(STATUS_REQUEST)
    }
  }
  const issuerDer = raw(issuer)
  const subjectDer = raw(subject)
  return {
    x509: new X509Certificate(der), der, issuerDer, subjectDer, serial,
    publicKeyBits: bitString(spki[1]), crlUrls, mustStaple, selfIssued: issuerDer.equals(subjectDer),
  }
}

/** CRLDistributionPoints: SEQUENCE OF DistributionPoint { [0] distributionPoint { [0] fullName GeneralNames } }; URI = [6]. */
function distributionPointUrls(der: Buffer): string[] {
  const urls: string[] = []
  for (const dp of sequence(readTlv(der), 'CRLDistributionPoints')) {
    const name = children(dp).find((c) => isContext(c, 0))
    if (name === undefined) continue
    const full = children(name).find((c) => isContext(c, 0))
    if (full === undefined) continue
    for (const gn of children(full)) {
      if (gn.cls !== 2 || gn.tag !== 6) continue
      const uri = content(gn).toString('latin1')
      if (/^https?:\/\//i.test(uri)) urls.push(uri)
    }
  }
  return urls
}

function tlsFeatures(der: Buffer): number[] {
  return sequence(readTlv(der), 'TLSFeature').filter((t) => t.tag === Tag.INTEGER).map(smallInt)
}

/** Signature algorithm OID → node:crypto digest name (null: the key type implies it, e.g. Ed25519). */
const SIG_ALGS: Readonly<Record<string, string | null>> = {
  '1.2.840.113549.1.1.5': 'sha1',
  '1.2.840.113549.1.1.11': 'sha256',
  '1.2.840.113549.1.1.12': 'sha384',
  '1.2.840.113549.1.1.13': 'sha512',
  '1.2.840.10045.4.1': 'sha1',
  '1.2.840.10045.4.3.2': 'sha256',
  '1.2.840.10045.4.3.3': 'sha384',
  '1.2.840.10045.4.3.4': 'sha512',
  '1.3.101.112': null,
  '1.3.101.113': null,
}

/**
 * Checks a signature over `signed` (the raw TBS bytes). `algorithm` is the
 * AlgorithmIdentifier TLV. Unknown algorithms (e.g. RSASSA-PSS) verify as false:
 * an input we cannot check is not trusted.
 */
export function verifySignature(signed: Buffer, algorithm: Tlv, signature: Buffer, key: KeyObject): boolean {
  const id = oid(sequence(algorithm, 'AlgorithmIdentifier')[0])
  if (!(id in SIG_ALGS)) return false
  try {
    return cryptoVerify(SIG_ALGS[id] ?? null, signed, key, signature)
  } catch {
    return false
  }
}

/** Hash names by OID for OCSP CertID. */
export const HASH_OIDS: Readonly<Record<string, string>> = {
  '1.3.14.3.2.26': 'sha1',
  '2.16.840.1.101.3.4.2.1': 'sha256',
  '2.16.840.1.101.3.4.2.2': 'sha384',
  '2.16.840.1.101.3.4.2.3': 'sha512',
}

export function digest(alg: string, data: Buffer): Buffer {
  return createHash(alg).update(data).digest()
}
