// TLS material read in compile, so a Secret a handshake could not use is a
// status condition and a problem naming its field, never a listener that fails
// every handshake (or a port that cannot bind) at run time.

import { X509Certificate, createPrivateKey, type KeyObject } from 'node:crypto'
import { createSecureContext } from 'node:tls'
import type { Secret } from '../resources/model.ts'

/** What keeps a kubernetes.io/tls Secret from serving TLS: the key it is in and why. */
export interface MaterialFault {
  readonly field: 'data[tls.crt]' | 'data[tls.key]'
  readonly message: string
}

const CERT_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g

// Sources keep the object of an unchanged Secret (compile-cache.ts): a reload
// checks only the Secrets that changed (~0.4 ms each, most of it the trial
// SecureContext).
const FAULTS = new WeakMap<Secret, MaterialFault | null>()

/** The fault of a Secret's tls.crt / tls.key (absent keys read as empty); null when TLS can use them. */
export function tlsSecretFault(secret: Secret): MaterialFault | null {
  let fault = FAULTS.get(secret)
  if (fault === undefined) {
    fault = keyPairFault(secret.data['tls.crt']?.toString('utf8') ?? '', secret.data['tls.key']?.toString('utf8') ?? '')
    FAULTS.set(secret, fault)
  }
  return fault
}

/**
 * tls.crt: PEM certificates, the leaf first (then its intermediates), each
 * one parsing; tls.key: the leaf's private key. Last, the SecureContext a
 * listener would build from them: whatever else OpenSSL refuses (a key too
 * small for its security level) is caught here too.
 */
export function keyPairFault(certPem: string, keyPem: string): MaterialFault | null {
  const blocks = certPem.match(CERT_BLOCK) ?? []
  if (blocks.length === 0) return { field: 'data[tls.crt]', message: 'holds no PEM certificate' }
  let leaf: X509Certificate | null = null
  for (let i = 0; i < blocks.length; i++) {
    try {
      const cert = new X509Certificate(blocks[i] as string)
      leaf ??= cert
    } catch {
      return { field: 'data[tls.crt]', message: blocks.length === 1 ? 'the certificate cannot be parsed' : `certificate ${i + 1} of ${blocks.length} cannot be parsed` }
    }
  }
  let key: KeyObject
  try {
    key = createPrivateKey(keyPem)
  } catch (err) {
    const encrypted = /passphrase/i.test((err as Error).message)
    return { field: 'data[tls.key]', message: encrypted ? 'the private key is encrypted (a passphrase cannot be given)' : 'the private key cannot be parsed' }
  }
  let matches = false
  try { matches = (leaf as X509Certificate).checkPrivateKey(key) } catch { /* another key type: no match */ }
  if (!matches) return { field: 'data[tls.key]', message: 'the private key does not match the certificate in tls.crt (its first certificate)' }
  try {
    createSecureContext({ cert: certPem, key: keyPem })
  } catch (err) {
    return { field: 'data[tls.crt]', message: `TLS cannot use this certificate and key: ${openSslReason(err)}` }
  }
  return null
}

// A leaf's dates, read once per Secret object; compared with `now` at every compile.
const VALIDITY = new WeakMap<Secret, { readonly from: number; readonly to: number } | null>()

/**
 * Why the leaf of a Secret TLS can use (tlsSecretFault null) is outside its
 * validity at `now`: expired, or not valid yet; null when within it. It is
 * served all the same (certificateProblems says why), so this is a warning.
 */
export function tlsSecretDates(secret: Secret, now: number): string | null {
  let validity = VALIDITY.get(secret)
  if (validity === undefined) {
    const block = (secret.data['tls.crt']?.toString('utf8') ?? '').match(CERT_BLOCK)?.[0]
    validity = null
    if (block !== undefined) {
      try {
        const leaf = new X509Certificate(block)
        validity = { from: Date.parse(leaf.validFrom), to: Date.parse(leaf.validTo) }
      } catch { /* tlsSecretFault says so */ }
    }
    VALIDITY.set(secret, validity)
  }
  if (validity === null) return null
  if (now > validity.to) return `the certificate expired at ${new Date(validity.to).toISOString()}`
  if (now < validity.from) return `the certificate is not valid before ${new Date(validity.from).toISOString()}`
  return null
}

// Per Secret object: listener hostname → whether its leaf names it.
const NAMES = new WeakMap<Secret, Map<string, boolean>>()

/**
 * Why the leaf of a Secret TLS can use does not serve `hostname` (a listener's,
 * exact or `*.suffix`): its DNS names (the subject's CN is not read, as
 * browsers and Go do not) cover no name the listener takes; null when they do.
 * Served all the same (a warning): another listener's certificate would not
 * name the host either.
 */
export function tlsSecretNameProblem(secret: Secret, hostname: string): string | null {
  let byName = NAMES.get(secret)
  if (byName === undefined) NAMES.set(secret, byName = new Map())
  let names = byName.get(hostname)
  if (names === undefined) {
    names = true
    const block = (secret.data['tls.crt']?.toString('utf8') ?? '').match(CERT_BLOCK)?.[0]
    if (block !== undefined) {
      try {
        // A wildcard listener takes one label more: a name of that form stands for them.
        const probe = hostname.startsWith('*.') ? `sallyport-probe${hostname.slice(1)}` : hostname
        names = new X509Certificate(block).checkHost(probe, { subject: 'never' }) !== undefined
      } catch { /* tlsSecretFault says so */ }
    }
    byName.set(hostname, names)
  }
  return names ? null : `the certificate does not name the listener's hostname ${hostname}`
}

// CA bundles are read for every listener or backend naming them, at every
// compile: the verdict is kept per bundle text (a few bundles in practice).
const BUNDLES = new Map<string, string | null>()
const BUNDLES_KEPT = 64

/** Every CERTIFICATE block of a CA bundle parses; at least one. null: fine, else what is wrong. */
export function checkCertificates(pem: string): string | null {
  let verdict = BUNDLES.get(pem)
  if (verdict !== undefined) return verdict
  const blocks = pem.match(CERT_BLOCK) ?? []
  verdict = blocks.length === 0 ? 'no PEM CERTIFICATE in it' : null
  for (const block of blocks) {
    try { new X509Certificate(block) } catch { verdict = 'a certificate cannot be parsed'; break }
  }
  if (BUNDLES.size >= BUNDLES_KEPT) BUNDLES.clear()
  BUNDLES.set(pem, verdict)
  return verdict
}

/** `error:0A00018F:SSL routines::ee key too small` → `ee key too small`. */
function openSslReason(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err)
  const cut = message.lastIndexOf('::')
  return cut >= 0 ? message.slice(cut + 2) : message
}
