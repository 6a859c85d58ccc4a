// Server certificates for HTTPS listeners: SNI selection (exact, longest
// wildcard, listener without hostname) and SecureContexts cached by the
// certificate's content hash, so a table swap reuses them.

import { createSecureContext, type SecureContext } from 'node:tls'
import type { RouteTable, ServerCert, ServerTls } from '../compile/table.ts'

/** The certificate for an SNI name (lowercase); null when none covers it. */
export function selectCert(tls: ServerTls, servername: string): ServerCert | null {
  if (servername.length > 0) {
    const exact = tls.exact.get(servername)
    if (exact !== undefined) return exact
    const wildcards = tls.wildcards
    for (let i = 0; i < wildcards.length; i++) {
      const w = wildcards[i]
      if (servername.length > w.suffix.length && servername.endsWith(w.suffix)) return w.cert
    }
  }
  return tls.fallback
}

/** Any certificate of the port, for clients that send no SNI. */
export function defaultCert(tls: ServerTls): ServerCert | null {
  if (tls.fallback !== null) return tls.fallback
  for (const cert of tls.exact.values()) return cert
  return tls.wildcards.length > 0 ? tls.wildcards[0].cert : null
}

export class SecureContexts {
  /** client CA PEM ('' = no client validation) → cert id → context. */
  readonly #byCa = new Map<string, Map<string, SecureContext>>()

  get(cert: ServerCert, tls: ServerTls): SecureContext {
    const ca = tls.clientValidation === null ? '' : tls.clientValidation.caPem
    let byId = this.#byCa.get(ca)
    if (byId === undefined) {
      byId = new Map()
      this.#byCa.set(ca, byId)
    }
    let ctx = byId.get(cert.id)
    if (ctx === undefined) {
      ctx = createSecureContext({
        cert: cert.certPem, key: cert.keyPem, minVersion: 'TLSv1.2',
        ...(ca === '' ? {} : { ca }),
      })
      byId.set(cert.id, ctx)
    }
    return ctx
  }

  /** Drops contexts the table no longer references. */
  retain(table: RouteTable): void {
    const keep = new Map<string, Set<string>>()
    for (const entry of table.ports.values()) {
      const tls = entry.serverTls
      if (tls === null) continue
      const ca = tls.clientValidation === null ? '' : tls.clientValidation.caPem
      let ids = keep.get(ca)
      if (ids === undefined) { ids = new Set(); keep.set(ca, ids) }
      for (const c of tls.exact.values()) ids.add(c.id)
      for (const w of tls.wildcards) ids.add(w.cert.id)
      if (tls.fallback !== null) ids.add(tls.fallback.id)
    }
    for (const [ca, byId] of this.#byCa) {
      const ids = keep.get(ca)
      if (ids === undefined) { this.#byCa.delete(ca); continue }
      for (const id of byId.keys()) if (!ids.has(id)) byId.delete(id)
    }
  }
}
