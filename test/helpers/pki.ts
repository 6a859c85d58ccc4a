// Reusable test PKI minted at run time (never committed): a CA, server
// certificates for given DNS names (plus 127.0.0.1), client certificates.
// RSA keys from node:crypto (fast), certificates signed with node-forge.

import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto'
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
  return b.toString('hex')
}

function id(certPem: string, keyPem: string): string {
  return createHash('sha256').update(certPem).update(keyPem).digest('hex')
}

export function createCa(name = 'sallyport test CA'): TestCa {
  const { key, pub, keyPem } = keyPair()
  const cert = forge.pki.createCertificate()
  cert.publicKey = pub
  cert.serialNumber = serial()
  cert.validity.notBefore = new Date(Date.now() - 3600_000)
  cert.validity.notAfter = new Date(Date.now() + 86400_000)
  const attrs = [{ name: 'commonName', value: name }]
  cert.setSubject(attrs)
  cert.setIssuer(attrs)
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ])
  cert.sign(key, forge.md.sha256.create())
  const certPem = forge.pki.certificateToPem(cert)
  return { cert, key, certPem, keyPem, id: id(certPem, keyPem) }
}

function leaf(ca: TestCa, cn: string, dns: readonly string[], ips: readonly string[], client: boolean): Issued {
  const { pub, keyPem } = keyPair()
  const cert = forge.pki.createCertificate()
  cert.publicKey = pub
  cert.serialNumber = serial()
  cert.validity.notBefore = new Date(Date.now() - 3600_000)
  cert.validity.notAfter = new Date(Date.now() + 86400_000)
  cert.setSubject([{ name: 'commonName', value: cn }])
  cert.setIssuer(ca.cert.subject.attributes)
  const altNames: Array<{ type: number; value?: string; ip?: string }> = []
  for (const d of dns) altNames.push({ type: 2, value: d })
  for (const ip of ips) altNames.push({ type: 7, ip })
  const extensions: object[] = [
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
    { name: 'extKeyUsage', serverAuth: !client, clientAuth: client },
  ]
  if (altNames.length > 0) extensions.push({ name: 'subjectAltName', altNames })
  cert.setExtensions(extensions)
  cert.sign(ca.key, forge.md.sha256.create())
  const certPem = forge.pki.certificateToPem(cert)
  return { certPem, keyPem, id: id(certPem, keyPem) }
}

/** A server certificate for `dnsNames` (first is the CN), also valid for 127.0.0.1. */
export function serverCert(ca: TestCa, dnsNames: readonly string[]): Issued {
  return leaf(ca, dnsNames[0] ?? 'localhost', dnsNames, ['127.0.0.1'], false)
}

export function clientCert(ca: TestCa, cn: string): Issued {
  return leaf(ca, cn, [], [], true)
}

/** CN of a PEM certificate (for asserting which one a server presented). */
export function commonName(certPem: string): string {
  const field = forge.pki.certificateFromPem(certPem).subject.getField('CN') as { value: string } | null
  return field === null ? '' : field.value
}
