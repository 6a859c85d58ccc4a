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

import type { ListenerNames } from '../compile/table.ts'
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
  readonly servername: string
  #names: ListenerNames | null = null
  #listener: number | null = null

  constructor(servername: string) {
    this.servername = servername
  }

  // hot path
  /**
   * Whether a request for `host` (lowercased, without port) must be refused
   * on this connection: another listener than the SNI's takes that host. A
   * host no listener takes is not: it gets the 404 it gets anywhere.
   */
  misdirects(names: ListenerNames, host: string): boolean {
    if (host === this.servername) return false
    if (names !== this.#names) {
      this.#listener = selectListener(names, this.servername)
      this.#names = names
    }
    const listener = selectListener(names, host)
    return listener !== null && listener !== this.#listener
  }
}
