// Stapled OCSP responses (RFC 6066 §8 status_request, RFC 6960 §4.2): the
// gateway asks for a staple on every TLS connection (`requestOCSP`), and a
// staple that comes back is verified against the issuer of the leaf:
//
// - signed by the issuer itself, or by a responder certificate the issuer
//   signed for id-kp-OCSPSigning (RFC 6960 §4.2.2.2);
// - a SingleResponse for the leaf's CertID (issuer name/key hash + serial);
// - thisUpdate not in the future, nextUpdate (if any) not in the past (5 min skew).
//
// A certificate reported revoked is refused. What to do without a usable
// staple is the backend's choice (`sallyport.io/ocsp`, see tls-verify.ts).

import { X509Certificate, type KeyObject } from 'node:crypto'
import { children, content, integerHex, isContext, oid, readTlv, sequence, smallInt, time, bitString, raw, type Tlv } from './tls-der.ts'
import { HASH_OIDS, digest, verifySignature, type CertFacts } from './tls-cert.ts'

const OID_BASIC = '1.3.6.1.5.5.7.48.1.1'
const OID_OCSP_SIGNING = '1.3.6.1.5.5.7.3.9'
const SKEW_MS = 5 * 60_000

export type StapleVerdict =
  /** nextUpdate plus the allowed skew: when this answer stops being accepted (Infinity: never). */
  | { readonly status: 'good'; readonly until: number }
  | { readonly status: 'unknown' }
  | { readonly status: 'revoked'; readonly revokedAt: number }
  | { readonly status: 'invalid'; readonly message: string }

/** Verdict on one stapled OCSPResponse for `leaf` issued by `issuer`. Never throws. */
export function checkStaple(staple: Buffer, leaf: CertFacts, issuer: CertFacts, now: number): StapleVerdict {
  try {
    return verify(staple, leaf, issuer, now)
  } catch (err) {
    return { status: 'invalid', message: `malformed OCSP response: ${err instanceof Error ? err.message : String(err)}` }
  }
}

function invalid(message: string): StapleVerdict {
  return { status: 'invalid', message }
}

function verify(staple: Buffer, leaf: CertFacts, issuer: CertFacts, now: number): StapleVerdict {
  const top = sequence(readTlv(staple), 'OCSPResponse')
  const responseStatus = smallInt(top[0])
  if (responseStatus !== 0) return invalid(`OCSP responseStatus ${responseStatus} (not successful)`)
  if (!isContext(top[1], 0)) return invalid('OCSP response without responseBytes')
  const bytes = sequence(children(top[1])[0], 'ResponseBytes')
  if (oid(bytes[0]) !== OID_BASIC) return invalid(`unsupported OCSP response type ${oid(bytes[0])}`)
  const basicDer = content(bytes[1])
  const basic = sequence(readTlv(basicDer), 'BasicOCSPResponse')
  const tbsTlv = basic[0]
  const algorithm = basic[1]
  const signature = bitString(basic[2])
  const certs = isContext(basic[3], 0) ? sequence(children(basic[3])[0], 'certs').map((c) => new X509Certificate(raw(c))) : []

  const signer = signerKey(tbsTlv, issuer, certs, now)
  if (signer === null) return invalid('OCSP response not signed by the issuer or a responder it authorized')
  if (!verifySignature(raw(tbsTlv), algorithm, signature, signer)) return invalid('OCSP response signature does not verify')

  const data = sequence(tbsTlv, 'ResponseData')
  let i = isContext(data[0], 0) ? 1 : 0
  i++ // responderID
  i++ // producedAt
  for (const single of sequence(data[i], 'responses')) {
    const parts = sequence(single, 'SingleResponse')
    if (!matchesCertId(parts[0], leaf, issuer)) continue
    const status = parts[1]
    const thisUpdate = time(parts[2])
    const next = parts.slice(3).find((p) => isContext(p, 0))
    const nextUpdate = next === undefined ? null : time(children(next)[0])
    if (thisUpdate > now + SKEW_MS) return invalid('OCSP response thisUpdate is in the future')
    if (nextUpdate !== null && nextUpdate < now - SKEW_MS) return invalid(`OCSP response expired at ${new Date(nextUpdate).toISOString()}`)
    if (status.cls !== 2) return invalid('bad OCSP certStatus')
    if (status.tag === 0) return { status: 'good', until: nextUpdate === null ? Infinity : nextUpdate + SKEW_MS }
    if (status.tag === 1) return { status: 'revoked', revokedAt: time(children(status)[0]) }
    return { status: 'unknown' }
  }
  return invalid('OCSP response has no answer for this certificate')
}

function matchesCertId(certId: Tlv, leaf: CertFacts, issuer: CertFacts): boolean {
  const parts = sequence(certId, 'CertID')
  const hash = HASH_OIDS[oid(sequence(parts[0], 'AlgorithmIdentifier')[0])]
  if (hash === undefined) return false
  return integerHex(parts[3]) === leaf.serial &&
    content(parts[2]).equals(digest(hash, issuer.publicKeyBits)) &&
    content(parts[1]).equals(digest(hash, issuer.subjectDer))
}

/** The issuer's key, or a delegated responder's (issued by the issuer, EKU OCSPSigning, valid now). */
function signerKey(tbs: Tlv, issuer: CertFacts, certs: readonly X509Certificate[], now: number): KeyObject | null {
  const data = sequence(tbs, 'ResponseData')
  const responder = data[isContext(data[0], 0) ? 1 : 0]
  const byIssuer = isContext(responder, 1)
    ? raw(children(responder)[0]).equals(issuer.subjectDer)
    : isContext(responder, 2) && content(children(responder)[0]).equals(digest('sha1', issuer.publicKeyBits))
  if (byIssuer) return issuer.x509.publicKey
  for (const c of certs) {
    if (!c.checkIssued(issuer.x509) || !c.verify(issuer.x509.publicKey)) continue
    if (!(c.keyUsage ?? []).includes(OID_OCSP_SIGNING)) continue
    if (Date.parse(c.validFrom) > now + SKEW_MS || Date.parse(c.validTo) < now - SKEW_MS) continue
    return c.publicKey
  }
  return null
}
