// The seam between listeners/ (which speak HTTP/1.1, HTTP/2, h2c and raw
// upgraded sockets) and the router (which decides what to do with a request).
// A listener wraps each request in an Exchange; the router answers through it
// and is told, once, when the downstream side is over.

import type { IncomingHttpHeaders } from 'node:http'
import type { Duplex, Readable } from 'node:stream'
import type { ErrorCode } from '../errors.ts'
import type { OutgoingHeaders } from '../upstream/types.ts'
import type { ConnectionSni } from './misdirected.ts'

export interface Exchange {
  /** Downstream wire protocol: 'h1' | 'h2' (h2c included). */
  readonly protocol: 'h1' | 'h2'
  readonly scheme: 'http' | 'https'
  /** Uppercase. */
  readonly method: string
  /** Raw request-target (origin-form '/p?q', or absolute-form for proxy-style clients). */
  readonly target: string
  /** Raw Host / :authority ('' when absent). */
  readonly authority: string
  /** Lowercased names as node parsed them; HTTP/2 pseudo-headers included. */
  readonly headers: IncomingHttpHeaders
  /** null: the request has no body. */
  readonly body: Readable | null
  /** Tunnel request: the HTTP/1.1 Upgrade token or the RFC 8441 :protocol; null otherwise. */
  readonly upgrade: string | null
  /** Client IP (IPv4-mapped IPv6 unwrapped). */
  readonly clientAddress: string
  /** Listener port the request arrived on. */
  readonly port: number
  /** The router's observer; set once before any answer. */
  observe(observer: ExchangeObserver): void
  headersSent(): boolean
  /**
   * Status + headers, then the body: streamed with backpressure, a short text,
   * or nothing. `trailers` (read after the body ends) are relayed where the
   * downstream protocol can carry them (HTTP/2). False: the client's protocol
   * cannot carry these fields (a field HTTP/2 takes once, given twice; a value
   * node will not write); nothing was sent and `body` is the caller's still.
   */
  respond(status: number, headers: OutgoingHeaders, body: Readable | string | null, trailers?: (() => OutgoingHeaders | null) | null): boolean
  /**
   * An interim (1xx) response ahead of the final one (103 Early Hints, say).
   * Dropped where the client cannot be given one: an HTTP/1.0 client (RFC 9110
   * §15.2), a tunnel request, once the final head is out, fields its protocol
   * cannot carry.
   */
  informational(status: number, headers: OutgoingHeaders): void
  /** gRPC trailers-only answer (HTTP 200, grpc-status in the only HEADERS). */
  respondGrpc(grpcStatus: number, message: string): void
  /**
   * Tunnel accepted upstream: send 101 (h1) / 200 (h2) and splice both ways.
   * Returns the status the client was sent (not the upstream's: an HTTP/2
   * upstream's 200 is a 101 to an HTTP/1.1 client, and the other way round);
   * null when nothing was (the client had gone, or this exchange takes no tunnel).
   */
  tunnel(status: number, headers: OutgoingHeaders, stream: Duplex): number | null
  /** Abrupt end once headers are out: h1 destroys the connection, h2 resets the stream. */
  reset(): void
  /** Request body bytes received so far (wire bytes for h1); a tunnel's bytes from the client. */
  bytesIn(): number
  /** Response body bytes sent so far. */
  bytesOut(): number
  /**
   * Issue 7: the spiffe:// URI SAN of the client certificate, when the listener
   * validated one (Gateway.spec.tls.frontend); null otherwise. Optional so
   * exchanges without TLS need not implement it.
   */
  spiffeId?(): string | null
  /**
   * The server name (SNI) its HTTPS connection was made for; null (or absent):
   * none sent, or not TLS. Requests for another listener's host get 421
   * (misdirected.ts).
   */
  readonly sni?: ConnectionSni | null
}

export interface ExchangeObserver {
  /**
   * Exactly once, when the downstream side closes; `completed` false: the client
   * went away or we reset. `cut`: the gateway itself closed the connection (its
   * listener's grace period ran out: a drain, a port the table no longer has).
   */
  onEnd(completed: boolean, cut?: boolean): void
  /** The response body failed after headers were sent (upstream reset mid-body). */
  onBodyError(err: Error): void
  /**
   * The request itself turned out malformed after it was handed over (a bad chunk
   * in its body): fail it as the client's (`code`, `detail` shown to the client).
   */
  onRequestError(code: ErrorCode, detail: string): void
}

/**
 * Connections (sockets, HTTP/2 sessions) the gateway closes itself when a
 * listener's grace period runs out: what ends on them is not the client's doing.
 */
const cutByGateway = new WeakSet<object>()

/** Marks a connection about to be destroyed by the gateway (ExchangeObserver.onEnd's `cut`). */
export function markCut(connection: object): void { cutByGateway.add(connection) }

/** Whether the gateway closed this connection itself (markCut). */
export function wasCut(connection: object | undefined): boolean { return connection !== undefined && cutByGateway.has(connection) }

/** The observer of an exchange the router has not taken. */
export const NOOP_OBSERVER: ExchangeObserver = { onEnd() {}, onBodyError() {}, onRequestError() {} }
