// Reusable test PKI minted at run time (never committed): roots and
// intermediates; leaves good / expired / not yet valid / for the wrong host /
// revoked; URI SANs (SPIFFE IDs); must-staple and CRL distribution points;
// client certificates; CRLs (fresh or past nextUpdate) and OCSP responses
// (good / revoked / unknown, signed by the issuer or a delegated responder).
// RSA keys from node:crypto (fast), certificates with node-forge, CRLs and OCSP
// responses assembled with forge's ASN.1 and signed with node:crypto. Leaves
// with EC or Ed25519 keys (forge knows only RSA keys) are forge's certificate
// with the key swapped, re-signed by the RSA test CA.

import { createHash, generateKeyPairSync, randomBytes, sign, X509Certificate } from 'node:crypto'
import forge from 'node-forge'

export interface Issued {
  readonly certPem: string
  readonly keyPem: string
  /** sha256 of the PEMs: a stable id, like compile's ServerCert.id. */
  readonly id: string
}

export interface TestCa extends Issued {
  readonly cert: forge.pki.Certificate
  readonly key: forge.pki.rsa.PrivateKey
  /** Serial as forge writes it (hex). */
  readonly serial: string
  /** This CA and its issuers up to (not including) the root: what a server sends after its leaf. */
  readonly chainPem: string
}

export interface Leaf extends Issued {
  readonly cert: forge.pki.Certificate
  readonly serial: string
  /** Leaf + intermediates (what a server should serve); the leaf alone when issued by a root. */
  readonly fullChainPem: string
}

function keyPair(): { key: forge.pki.rsa.PrivateKey; pub: forge.pki.rsa.PublicKey; keyPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  })
  return {
    key: forge.pki.privateKeyFromPem(privateKey) as forge.pki.rsa.PrivateKey,
    pub: forge.pki.publicKeyFromPem(publicKey) as forge.pki.rsa.PublicKey,
    keyPem: privateKey,
  }
}

function serial(): string {
  const b = randomBytes(8)
  b[0] &= 0x7f
  if (b[0] === 0) b[0] = 1
  return b.toString('hex')
}

function id(certPem: string, keyPem: string): string {
  return createHash('sha256').update(certPem).update(keyPem).digest('hex')
}

const HOUR = 3600_000
const DAY = 24 * HOUR

export interface CaOptions {
  /** Issue an intermediate under this CA; absent: a self-signed root. */
  readonly parent?: TestCa
  readonly notBefore?: Date
  readonly notAfter?: Date
  readonly crlUrls?: readonly string[]
}

export function createCa(name = 'sallyport test CA', options: CaOptions = {}): TestCa {
  const { key, pub, keyPem } = keyPair()
  const cert = forge.pki.createCertificate()
  cert.publicKey = pub
  cert.serialNumber = serial()
  cert.validity.notBefore = options.notBefore ?? new Date(Date.now() - HOUR)
  cert.validity.notAfter = options.notAfter ?? new Date(Date.now() + DAY)
  const attrs = [{ name: 'commonName', value: name }]
  cert.setSubject(attrs)
  const parent = options.parent
  cert.setIssuer(parent === undefined ? attrs : parent.cert.subject.attributes)
  const extensions: object[] = [
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]
  if (options.crlUrls !== undefined) extensions.push({ name: 'cRLDistributionPoints', altNames: options.crlUrls.map((value) => ({ type: 6, value })) })
  cert.setExtensions(extensions)
  cert.sign(parent === undefined ? key : parent.key, forge.md.sha256.create())
  const certPem = forge.pki.certificateToPem(cert)
  const chainPem = parent === undefined ? '' : certPem + parent.chainPem
  return { cert, key, certPem, keyPem, id: id(certPem, keyPem), serial: cert.serialNumber, chainPem }
}

export function createIntermediate(parent: TestCa, name: string, options: Omit<CaOptions, 'parent'> = {}): TestCa {
  return createCa(name, { ...options, parent })
}

export interface LeafOptions {
  readonly cn: string
  readonly dns?: readonly string[]
  readonly ips?: readonly string[]
  readonly uris?: readonly string[]
  readonly client?: boolean
  readonly notBefore?: Date
  readonly notAfter?: Date
  /** RFC 7633 TLS Feature status_request ("must staple"). */
  readonly mustStaple?: boolean
  readonly crlUrls?: readonly string[]
  /** id-kp-OCSPSigning: a delegated OCSP responder certificate. */
  readonly ocspSigning?: boolean
}

export function issue(ca: TestCa, options: LeafOptions): Leaf {
  const { pub, keyPem } = keyPair()
  const cert = forge.pki.createCertificate()
  cert.publicKey = pub
  cert.serialNumber = serial()
  cert.validity.notBefore = options.notBefore ?? new Date(Date.now() - HOUR)
  cert.validity.notAfter = options.notAfter ?? new Date(Date.now() + DAY)
  cert.setSubject([{ name: 'commonName', value: options.cn }])
  cert.setIssuer(ca.cert.subject.attributes)
  const altNames: Array<{ type: number; value?: string; ip?: string }> = []
  for (const d of options.dns ?? []) altNames.push({ type: 2, value: d })
  for (const u of options.uris ?? []) altNames.push({ type: 6, value: u })
  for (const ip of options.ips ?? []) altNames.push({ type: 7, ip })
  const eku: Record<string, boolean> = options.ocspSigning === true
    ? { '1.3.6.1.5.5.7.3.9': true }
    : { serverAuth: options.client !== true, clientAuth: options.client === true }
  const extensions: object[] = [
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
    { name: 'extKeyUsage', ...eku },
  ]
  if (altNames.length > 0) extensions.push({ name: 'subjectAltName', altNames })
  if (options.crlUrls !== undefined) extensions.push({ name: 'cRLDistributionPoints', altNames: options.crlUrls.map((value) => ({ type: 6, value })) })
  if (options.mustStaple === true) {
    extensions.push({ id: '1.3.6.1.5.5.7.1.24', name: 'tlsFeature', value: seq(int('05')) })
  }
  cert.setExtensions(extensions)
  cert.sign(ca.key, forge.md.sha256.create())
  const certPem = forge.pki.certificateToPem(cert)
  return { cert, certPem, keyPem, id: id(certPem, keyPem), serial: cert.serialNumber, fullChainPem: certPem + ca.chainPem }
}

/** A server certificate for `dnsNames` (first is the CN), also valid for 127.0.0.1. */
export function serverCert(ca: TestCa, dnsNames: readonly string[], options: Partial<LeafOptions> = {}): Leaf {
  return issue(ca, { cn: dnsNames[0] ?? 'localhost', dns: dnsNames, ips: ['127.0.0.1'], ...options })
}

export function clientCert(ca: TestCa, cn: string, options: Partial<LeafOptions> = {}): Leaf {
  return issue(ca, { cn, client: true, ...options })
}

/** An expired server certificate (valid two days ago for one day). */
export function expiredCert(ca: TestCa, dnsNames: readonly string[]): Leaf {
  return serverCert(ca, dnsNames, { notBefore: new Date(Date.now() - 2 * DAY), notAfter: new Date(Date.now() - DAY) })
}

/** A server certificate valid only from tomorrow. */
export function notYetValidCert(ca: TestCa, dnsNames: readonly string[]): Leaf {
  return serverCert(ca, dnsNames, { notBefore: new Date(Date.now() + DAY), notAfter: new Date(Date.now() + 2 * DAY) })
}

export interface KeyedLeaf extends Issued {
  readonly serial: string
  readonly fullChainPem: string
}

/**
 * A server certificate for `dnsNames` and 127.0.0.1 whose key is EC P-256 or
 * Ed25519, issued by the (RSA) `ca`. forge signs only RSA keys into
 * certificates, so it builds the TBSCertificate around a throwaway RSA key,
 * and the SubjectPublicKeyInfo is swapped for the real one before signing.
 */
export function serverCertWithKey(ca: TestCa, dnsNames: readonly string[], type: 'ec' | 'ed25519'): KeyedLeaf {
  const pair = type === 'ec' ? generateKeyPairSync('ec', { namedCurve: 'P-256' }) : generateKeyPairSync('ed25519')
  const keyPem = pair.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string
  const spki = pair.publicKey.export({ type: 'spki', format: 'der' })
  const draft = issue(ca, { cn: dnsNames[0] ?? 'localhost', dns: dnsNames, ips: ['127.0.0.1'] })
  // getTBSCertificate is in forge but not in its type declarations.
  const tbs = (forge.pki as unknown as { getTBSCertificate(c: forge.pki.Certificate): Asn1 }).getTBSCertificate(draft.cert)
  const fields = tbs.value as Asn1[]
  // TBSCertificate: [0] version, serial, signature, issuer, validity, subject, subjectPublicKeyInfo, ...
  fields[6] = asn1.fromDer(spki.toString('binary'))
  const tbsDer = der(tbs)
  const signature = sign('sha256', tbsDer, ca.keyPem)
  const certDer = der(seq(asn1.fromDer(tbsDer.toString('binary')), SHA256_RSA(), bits(signature)))
  const certPem = `-----BEGIN CERTIFICATE-----\n${certDer.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END CERTIFICATE-----\n`.replace('\n\n', '\n')
  return { certPem, keyPem, id: id(certPem, keyPem), serial: draft.serial, fullChainPem: certPem + ca.chainPem }
}

/** CN of a PEM certificate (for asserting which one a server presented). */
export function commonName(certPem: string): string {
  const field = forge.pki.certificateFromPem(certPem).subject.getField('CN') as { value: string } | null
  return field === null ? '' : field.value
}

/** Base64 SHA-256 of the SubjectPublicKeyInfo (the sallyport.io/spki-pins form). */
export function spkiPin(certPem: string): string {
  // node:crypto rather than forge: forge reads only RSA keys.
  const der = new X509Certificate(certPem).publicKey.export({ type: 'spki', format: 'der' })
  return createHash('sha256').update(der).digest('base64')
}

// ── ASN.1 building blocks ──

const asn1 = forge.asn1
type Asn1 = forge.asn1.Asn1

function seq(...items: Asn1[]): Asn1 {
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, items)
}
function oid(o: string): Asn1 {
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.OID, false, asn1.oidToDer(o).getBytes())
}
function int(hex: string): Asn1 {
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.INTEGER, false, forge.util.hexToBytes(hex))
}
function octets(bytes: string): Asn1 {
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.OCTETSTRING, false, bytes)
}
function nul(): Asn1 {
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.NULL, false, '')
}
function utc(d: Date): Asn1 {
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.UTCTIME, false, asn1.dateToUtcTime(d))
}
function gen(d: Date): Asn1 {
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.GENERALIZEDTIME, false, asn1.dateToGeneralizedTime(d))
}
function ctx(n: number, items: Asn1[]): Asn1 {
  return asn1.create(asn1.Class.CONTEXT_SPECIFIC, n, true, items)
}
function bits(bytes: Buffer): Asn1 {
  return asn1.create(asn1.Class.UNIVERSAL, asn1.Type.BITSTRING, false, '\x00' + bytes.toString('binary'))
}
function der(a: Asn1): Buffer {
  return Buffer.from(asn1.toDer(a).getBytes(), 'binary')
}
const SHA256_RSA = (): Asn1 => seq(oid('1.2.840.113549.1.1.11'), nul())

function keyPemOf(signer: { keyPem: string }): string {
  return signer.keyPem
}

// ── CRLs ──

export interface CrlOptions {
  /** Certificates (or hex serials) to list as revoked. */
  readonly revoked?: ReadonlyArray<{ readonly serial: string } | string>
  readonly thisUpdate?: Date
  /** Default: a day from now. Put it in the past for a stale CRL. */
  readonly nextUpdate?: Date
  /** Sign with another key than the CA's (a forged CRL). */
  readonly signer?: { readonly keyPem: string }
}

/** An X.509 v2 CRL issued by `ca`, PEM. */
export function makeCrl(ca: TestCa, options: CrlOptions = {}): string {
  return `-----BEGIN X509 CRL-----\n${makeCrlDer(ca, options).toString('base64').replace(/.{64}/g, '$&\n')}\n-----END X509 CRL-----\n`
}

export function makeCrlDer(ca: TestCa, options: CrlOptions = {}): Buffer {
  const thisUpdate = options.thisUpdate ?? new Date(Date.now() - HOUR)
  const nextUpdate = options.nextUpdate ?? new Date(Date.now() + DAY)
  const items: Asn1[] = [int('01'), SHA256_RSA(), forge.pki.distinguishedNameToAsn1(ca.cert.subject), utc(thisUpdate), utc(nextUpdate)]
  const revoked = (options.revoked ?? []).map((r) => typeof r === 'string' ? r : r.serial)
  if (revoked.length > 0) items.push(seq(...revoked.map((s) => seq(int(s), utc(thisUpdate)))))
  items.push(ctx(0, [seq(seq(oid('2.5.29.20'), octets(asn1.toDer(int('01')).getBytes())))]))
  const tbs = der(seq(...items))
  const signature = sign('sha256', tbs, keyPemOf(options.signer ?? ca))
  return der(seq(asn1.fromDer(tbs.toString('binary')), SHA256_RSA(), bits(signature)))
}

// ── OCSP ──

export interface OcspOptions {
  readonly status?: 'good' | 'revoked' | 'unknown'
  readonly thisUpdate?: Date
  /** Default an hour from now; in the past for an expired response. */
  readonly nextUpdate?: Date
  /** A delegated responder (issue it with `ocspSigning: true`); default the issuer itself. */
  readonly responder?: Leaf
  /** Sign with a key that is not the responder's (a forged response). */
  readonly forgeWith?: { readonly keyPem: string }
}

function publicKeyBits(cert: forge.pki.Certificate): string {
  // RSA: the BIT STRING of SubjectPublicKeyInfo holds the DER RSAPublicKey.
  return asn1.toDer(forge.pki.publicKeyToRSAPublicKey(cert.publicKey as forge.pki.rsa.PublicKey)).getBytes()
}

function sha1(bytes: string): string {
  return createHash('sha1').update(Buffer.from(bytes, 'binary')).digest().toString('binary')
}

/** A DER OCSPResponse (RFC 6960) about `leaf`, issued by `issuer` (or its delegated responder). */
export function ocspResponse(issuer: TestCa, leaf: { readonly serial: string }, options: OcspOptions = {}): Buffer {
  const now = new Date()
  const thisUpdate = options.thisUpdate ?? new Date(now.getTime() - 60_000)
  const nextUpdate = options.nextUpdate ?? new Date(now.getTime() + HOUR)
  const certId = seq(
    seq(oid('1.3.14.3.2.26'), nul()),
    octets(sha1(asn1.toDer(forge.pki.distinguishedNameToAsn1(issuer.cert.subject)).getBytes())),
    octets(sha1(publicKeyBits(issuer.cert))),
    int(leaf.serial),
  )
  const status = options.status ?? 'good'
  const certStatus = status === 'good'
    ? asn1.create(asn1.Class.CONTEXT_SPECIFIC, 0, false, '')
    : status === 'revoked'
      ? ctx(1, [gen(new Date(now.getTime() - HOUR))])
      : asn1.create(asn1.Class.CONTEXT_SPECIFIC, 2, false, '')
  const single = seq(certId, certStatus, gen(thisUpdate), ctx(0, [gen(nextUpdate)]))
  const responder = options.responder
  const responderCert = responder === undefined ? issuer.cert : responder.cert
  const tbs = der(seq(ctx(2, [octets(sha1(publicKeyBits(responderCert)))]), gen(now), seq(single)))
  const signature = sign('sha256', tbs, (options.forgeWith ?? responder ?? issuer).keyPem)
  const basicItems: Asn1[] = [asn1.fromDer(tbs.toString('binary')), SHA256_RSA(), bits(signature)]
  if (responder !== undefined) basicItems.push(ctx(0, [seq(forge.pki.certificateToAsn1(responder.cert))]))
  const basic = der(seq(...basicItems))
  return der(seq(
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.ENUMERATED, false, '\x00'),
    ctx(0, [seq(oid('1.3.6.1.5.5.7.48.1.1'), octets(basic.toString('binary')))]),
  ))
}
