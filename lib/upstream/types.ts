// The contract between the request path (listeners/, router/) and the upstream
// layer (pools, TLS, protocols). The router decides *what* to send and *which*
// cluster; upstream/ decides *how*: which endpoint, which pooled connection,
// which protocol on the wire. Errors cross this boundary only as SallyportError
// with a stable code (the original kept as `cause`).

import type { Socket } from 'node:net'
import type { Duplex, Readable } from 'node:stream'
import type { SallyportError } from '../errors.ts'
import type { Cluster, RouteTable } from '../compile/table.ts'
import type { CancelSignal } from './cancel.ts'

/** Header values as both node:http and undici accept them; names lowercased, no hop-by-hop headers. */
export type OutgoingHeaders = Record<string, string | string[]>

export interface UpstreamTimeouts {
  /** TCP+TLS connect; null = the default (10 s). */
  readonly connectMs: number | null
  /** Until the response headers arrive, restarted by upload progress; null = the idle bound. */
  readonly headersMs: number | null
  /**
   * HTTPRoute backendRequest: this try, from its request going out to the response's
   * last byte (a response already begun is cut); absent or null = none.
   */
  readonly deadlineMs?: number | null
  /** Max silence on an established exchange (body bytes either way); null = the default (5 min). */
  readonly idleMs: number | null
}

export interface UpstreamRequest {
  readonly cluster: Cluster
  readonly method: string
  /** Path and query exactly as they go on the wire. */
  readonly path: string
  /** Host / :authority to send (the Backend's hostname for ExternalHostname backends). */
  readonly authority: string
  readonly headers: OutgoingHeaders
  /** null: no request body. Streamed with backpressure; never buffered by upstream/. */
  readonly body: Readable | null
  readonly timeouts: UpstreamTimeouts
  /** Aborted when the client goes away or the route timeout fires: the upstream exchange is cancelled. */
  readonly signal: CancelSignal
  /**
   * Tunnel request: 'websocket' etc. for HTTP/1.1 Upgrade, or the RFC 8441 :protocol of
   * an HTTP/2 extended CONNECT. null for ordinary requests.
   */
  readonly upgrade: string | null
  /** For hash-based balancing and metrics. */
  readonly clientAddress: string
  /**
   * Issue 6: whether a connect failure (nothing sent) moves on to the
   * backend's next endpoint inside this forward() (each endpoint once).
   * Absent/true: yes. The router's attempt loop sets false when its retry
   * policy retries connect failures itself, so a connect failure is retried
   * in one place and counted once (lib/router/attempts.ts).
   */
  readonly connectFallback?: boolean
  /**
   * Issue 6: the endpoints (`host:port`, as UpstreamResponse.endpoint names
   * them) earlier attempts of this request went to. The pick avoids them while
   * the backend has another available endpoint, as Envoy Gateway's retries do
   * (Envoy's previous_hosts retry predicate). Absent or null: none.
   */
  readonly avoid?: readonly string[] | null
  /**
   * MCP clusters: whether a session id the gateway tagged sends the request to
   * the endpoint the tag names (upstream/mcp-session.ts). Absent/true: yes; false:
   * balanced as usual (the tag still removed) — the attempt loop's retries after
   * that endpoint failed to connect.
   */
  readonly pinSession?: boolean
}

export interface UpstreamResponse {
  readonly status: number
  /** Lowercased names; hop-by-hop headers already removed. */
  readonly headers: OutgoingHeaders
  /** Streamed; destroy it to cancel. */
  readonly body: Readable
  /** `host:port` of the endpoint that answered (access log, metrics). */
  readonly endpoint: string
  /** 'h1' | 'h2' | 'h2c': what was spoken on the wire. */
  readonly protocol: string
  /**
   * Response trailers (gRPC's grpc-status travels there), read once `body` has
   * ended; absent or null when the upstream sent none. Optional so pools that
   * cannot see trailers need not set it.
   */
  readonly trailers?: () => OutgoingHeaders | null
}

export interface UpstreamTunnel {
  /** 101 for HTTP/1.1 Upgrade, 200 for extended CONNECT; other statuses come as onResponse. */
  readonly status: number
  readonly headers: OutgoingHeaders
  /** Raw bidirectional stream to the upstream after the handshake. */
  readonly stream: Duplex
  readonly endpoint: string
}

/**
 * Callbacks of one forwarded request; exactly one of onResponse / onTunnel / onError is called once.
 * Before it, onInformational may come any number of times (bounded) for interim responses.
 */
export interface UpstreamHandler {
  /**
   * An interim (1xx) response the upstream sent before its final one (RFC 9110 §15.2:
   * a proxy forwards them), hop-by-hop fields removed. Never 100 Continue (the gateway
   * speaks for itself to its client there) or 101. Optional: handlers that have no
   * client to tell (mirrors, health checks) leave it out.
   */
  onInformational?(status: number, headers: OutgoingHeaders): void
  onResponse(res: UpstreamResponse): void
  onTunnel(tunnel: UpstreamTunnel): void
  /**
   * `endpoint`: the endpoint (`host:port`) the request was at when it failed
   * (the last one tried); absent when it got to none (no endpoint, breaker open,
   * DNS, a client gone before the first attempt).
   */
  onError(err: SallyportError, endpoint?: string): void
}

/** One L4 connection (TCPRoute / TLSRoute, issue 8) to open to a cluster. */
export interface L4DialRequest {
  readonly cluster: Cluster
  /** Dial with the cluster's TLS (when it has one); false for TLSRoute passthrough. */
  readonly originateTls: boolean
  /** null = the registry's default connect timeout. */
  readonly connectMs: number | null
}

export interface L4Connection {
  /** Connected (and, with TLS, verified) socket; allowHalfOpen is set. */
  readonly socket: Socket
  /** `address:port` connected to (access log). */
  readonly endpoint: string
}

export type L4DialCallback = (err: SallyportError | null, conn: L4Connection | null) => void

/** A dial in progress: cancel() stops it (the client left); the callback then gets CLIENT_ABORTED. */
export interface PendingDial {
  cancel(): void
}

/**
 * Resilience state the router's failover and retry loop read (issue 6);
 * lib/upstream/resilience.ts implements it.
 */
export interface ResilienceView {
  // hot path
  /** The cluster takes traffic now: some endpoint is neither ejected nor failing checks, and the cluster is not marked overloaded. */
  available(cluster: Cluster): boolean
  /** null: a retry to the cluster may start (it counts until retryDone); else why not ('budget', 'max_parallel_retries'). */
  admitRetry(cluster: Cluster): string | null
  retryDone(cluster: Cluster): void
  /** Health, ejection, overload and circuit state per cluster of the current table (/config_dump). */
  health(): ReadonlyArray<Readonly<Record<string, unknown>>>
}

/** Pool registry: outlives route tables; keyed by (endpoint, protocol, TLS identity hash). */
export interface Upstreams {
  /** Failover and retry state (issue 6); absent in test doubles. */
  readonly resilience?: ResilienceView
  // hot path
  forward(req: UpstreamRequest, handler: UpstreamHandler): void
  /** L4: connect to an endpoint of the cluster, the next endpoint on connect failure (lib/upstream/l4-dial.ts). */
  dialL4(req: L4DialRequest, callback: L4DialCallback): PendingDial
  /** MCP: whether an endpoint of `cluster` issued the sessions tagged `tag` (absent in test doubles: none). */
  issuedSession?(cluster: Cluster, tag: string): boolean
  /** After a swap: keep pools the new table references, drain and close the rest. */
  retain(table: RouteTable): void
  /** Pool statistics for /config_dump and metrics. */
  stats(): ReadonlyArray<{ readonly key: string; readonly cluster: string; readonly protocol: string; readonly connected: number; readonly pending: number; readonly running: number }>
  close(): Promise<void>
}
