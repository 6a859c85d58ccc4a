// Listener isolation on a shared HTTPS port (GEP-3567, Gateway API Listener
// hostname docs). A client may send on one TLS connection requests for every
// name the certificate covers (HTTP/2 connection coalescing, RFC 9113 §9.1.1),
// and any client can send any Host. The listener its SNI selected — the one
// whose certificate and client-certificate validation the handshake used — is
// the only one the connection serves: a request whose host selects another
// listener of the port is answered 421 Misdirected Request (RFC 9110
// §15.5.20), and the client retries on a connection made for that name
// (browsers and curl do). A connection without SNI (a client of the gateway's
// address) has nothing to tell its listener by: its requests route by host.

import type { ListenerNames, ServerTls } from '../compile/table.ts'
import { lookupHostname } from '../hostname-index.ts'

// hot path
/** The listener (index in PortEntry.listeners) `name` selects: exact, longest wildcard, the one without hostname; null for none. */
export function selectListener(names: ListenerNames, name: string): number | null {
  return lookupHostname(names, name)
}

/**
 * An HTTPS connection's server name (SNI, lowercased), and the listener it
 * selects, worked out once per table (a reload may renumber the listeners).
 * One per connection that sent SNI.
 */
export class ConnectionSni {
  /** '' for a connection without one (see belowTls13). */
  readonly servername: string
  /**
   * A connection without a server name (or a resumed TLS 1.2 session, for
   * which node reports none) that settled below TLS 1.3, on a port where a
   * listener's `sallyport.io/min-version` is TLSv1.3: no handshake checked that
   * floor for it, so its requests for such a listener's hosts are refused.
   */
  readonly belowTls13: boolean
  #names: ListenerNames | null = null
  #listener: number | null = null

  constructor(servername: string, belowTls13 = false) {
    this.servername = servername
    this.belowTls13 = belowTls13
  }

  // hot path
  /**
   * Whether a request for `host` (lowercased, without port) must be refused
   * on this connection: another listener than the SNI's takes that host, or
   * (belowTls13) its listener wants TLS 1.3. A host no listener takes is not:
   * it gets the 404 it gets anywhere.
   */
  refuses(tls: ServerTls, host: string): boolean {
    if (this.servername === '') return this.belowTls13 && lookupHostname(tls, host)?.minVersion === 'TLSv1.3'
    return tls.listenerNames !== null && this.misdirects(tls.listenerNames, host)
  }

  /** Whether another listener than the SNI's takes `host`. */
  misdirects(names: ListenerNames, host: string): boolean {
    if (this.servername === '') return false
    if (host === this.servername) return false
    if (names !== this.#names) {
      this.#listener = selectListener(names, this.servername)
      this.#names = names
    }
    const listener = selectListener(names, host)
    return listener !== null && listener !== this.#listener
  }
}
