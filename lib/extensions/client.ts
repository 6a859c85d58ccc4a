// Client attribution (issue 7): who sent a request. A verified client
// certificate's SPIFFE ID (URI SAN spiffe://trust-domain/ns/NS/sa/SA, the
// Istio/SPIFFE convention) wins over the source address; otherwise the Pod
// whose IP is the source (table.clients, from the configuration source's Pods).

import type { ClientIdentity, RouteTable } from '../compile/table.ts'
import type { ClientInfo } from './plugin-api.ts'

const SPIFFE_RE = /^spiffe:\/\/[^/]+\/ns\/([^/]+)\/sa\/([^/]+)$/

/** Interned, so metrics keyed by the identity object see one series per identity (bounded). */
const interned = new Map<string, ClientIdentity | null>()
const MAX_INTERNED = 10_000

/** `spiffe://td/ns/NS/sa/SA` → identity; null for other shapes. */
export function identityOfSpiffe(id: string): ClientIdentity | null {
  let v = interned.get(id)
  if (v !== undefined) return v
  const m = SPIFFE_RE.exec(id)
  v = m === null ? null : { namespace: m[1] as string, serviceAccount: m[2] as string, pod: '' }
  if (interned.size >= MAX_INTERNED) interned.clear()
  interned.set(id, v)
  return v
}

// hot path
export function identify(table: RouteTable, address: string, spiffeId: string | null): ClientIdentity | null {
  if (spiffeId !== null) {
    const id = identityOfSpiffe(spiffeId)
    if (id !== null) return id
  }
  const clients = table.clients
  return clients.size === 0 ? null : clients.get(address) ?? null
}

export function clientInfo(address: string, identity: ClientIdentity | null, spiffeId: string | null): ClientInfo {
  return {
    address,
    namespace: identity === null ? null : identity.namespace,
    serviceAccount: identity === null ? null : identity.serviceAccount,
    pod: identity === null || identity.pod === '' ? null : identity.pod,
    spiffeId,
  }
}

/**
 * The spiffe:// URI SAN of a peer certificate's `subjectaltname` text, or
 * null. X.509-SVID: exactly one URI SAN names the workload, so a certificate
 * with two spiffe:// ones names no one (the first was taken: the identity hung
 * on the order its CA wrote them in). node quotes a value holding a comma or
 * a quote (`URI:"spiffe://a\u002c URI:spiffe://b"`): never a SPIFFE ID.
 */
export function spiffeIdOf(subjectAltName: string | undefined): string | null {
  if (subjectAltName === undefined) return null
  let id: string | null = null
  for (const part of subjectAltName.split(', ')) {
    if (!part.startsWith('URI:spiffe://')) continue
    if (id !== null) return null
    id = part.slice(4)
  }
  return id
}

const peerIds = new WeakMap<object, string | null>()

/**
 * The SPIFFE ID of a TLS connection's client certificate — only when the
 * handshake verified it against the listener's frontend CA (`authorized`).
 * Cached per connection: read once, not per request. The listener reads it
 * when the handshake is done: a closed socket has no certificate left to give
 * (`getPeerCertificate()` is null), and a request's access line is written
 * after it ends, its connection maybe gone by then.
 */
export function peerSpiffeId(socket: object): string | null {
  const tls = socket as { authorized?: boolean; getPeerCertificate?: () => { subjectaltname?: string } | null }
  if (tls.authorized !== true) return null
  const cached = peerIds.get(socket)
  if (cached !== undefined) return cached
  const cert = typeof tls.getPeerCertificate === 'function' ? tls.getPeerCertificate() : null
  if (cert === null) return null
  const id = spiffeIdOf(cert.subjectaltname)
  peerIds.set(socket, id)
  return id
}
