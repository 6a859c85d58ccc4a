// Test PKI minted at run time (never committed): a CA, leaf certificates for
// servers (DNS + IP SANs) and clients. Keys come from node:crypto (fast),
// certificates are assembled and signed with node-forge.

import { generateKeyPairSync, randomBytes } from 'node:crypto'
import forge from 'node-forge'

export interface Issued {
  readonly certPem: string
  readonly keyPem: string
}

export interface Ca extends Issued {
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

export function makeCa(name: string): Ca {
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
  return { cert, key, certPem: forge.pki.certificateToPem(cert), keyPem }
}

export interface LeafOptions {
  readonly cn: string
  readonly dns?: readonly string[]
  readonly ips?: readonly string[]
  readonly uris?: readonly string[]
  readonly client?: boolean
  readonly notBefore?: Date
  readonly notAfter?: Date
}

export function issue(ca: Ca, options: LeafOptions): Issued {
  const { pub, keyPem } = keyPair()
  const cert = forge.pki.createCertificate()
  cert.publicKey = pub
  cert.serialNumber = serial()
  cert.validity.notBefore = options.notBefore ?? new Date(Date.now() - 3600_000)
  cert.validity.notAfter = options.notAfter ?? new Date(Date.now() + 86400_000)
  cert.setSubject([{ name: 'commonName', value: options.cn }])
  cert.setIssuer(ca.cert.subject.attributes)
  const altNames: Array<{ type: number; value?: string; ip?: string }> = []
  for (const d of options.dns ?? []) altNames.push({ type: 2, value: d })
  for (const u of options.uris ?? []) altNames.push({ type: 6, value: u })
  for (const ip of options.ips ?? []) altNames.push({ type: 7, ip })
  const extensions: object[] = [
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
    { name: 'extKeyUsage', serverAuth: options.client !== true, clientAuth: options.client === true },
  ]
  if (altNames.length > 0) extensions.push({ name: 'subjectAltName', altNames })
  cert.setExtensions(extensions)
  cert.sign(ca.key, forge.md.sha256.create())
  return { certPem: forge.pki.certificateToPem(cert), keyPem }
}
