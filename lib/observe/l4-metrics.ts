// L4 (TCPRoute / TLSRoute) connection metrics, labelled like the HTTP ones
// (STYLE.md §7): `gateway` is the Gateway `ns/name`, `listener` its listener
// name, `route` the route `ns/name` ('' when none matched), `backend` the
// Cluster id ('' when none was reached). `code` is how the connection ended:
// 'ok' for a normal close by either side, otherwise the error reason (the
// same bounded list as sallyport_l4_errors_total{reason}, see L4Reason).
// Per-connection (not per-byte) cost, so plain prom-client labels are fine.

import { Counter, Gauge, Histogram } from 'prom-client'
import { registry } from './metrics.ts'
import { noteSeries } from './series-retention.ts'

/** Why an L4 connection ended badly; bounded (metric label and access-log field). */
export type L4Reason =
  | 'no_route' // no TCPRoute on the port / no TLSRoute for the SNI and no fallback
  | 'no_backend' // the route has no backends, or every weight is 0
  | 'backend_invalid' // the chosen backendRef did not resolve (Gateway API: connection rejected)
  | 'forbidden' // destination policy denies the backend
  | 'overloaded' // circuitBreaker.maxConnections of the backend reached
  | 'max_connections' // the listener's connection limit reached (dropped at accept)
  | 'connect_failed' // every endpoint refused / timed out / did not resolve
  | 'tls_failed' // TLS origination to the upstream failed (verification, handshake)
  | 'client_hello_invalid' // passthrough: not a TLS ClientHello we can read
  | 'client_hello_too_large' // passthrough: a ClientHello over the bound (sni-client-hello.ts MAX_CLIENT_HELLO_BYTES)
  | 'client_hello_timeout' // passthrough: no complete ClientHello within the timeout
  | 'client_tls_failed' // terminate: the client's handshake failed
  | 'idle_timeout' // no bytes either way for the idle timeout
  | 'client_reset' // the client connection errored (reset) mid-stream
  | 'upstream_reset' // the upstream connection errored (reset) mid-stream
  | 'shutdown' // the listener closed and the grace period ran out

export type L4Code = 'ok' | L4Reason

export const l4Connections = new Counter({
  name: 'sallyport_l4_connections_total',
  help: 'TCP/TLS listener connections, by how they ended (code ok or the error reason).',
  labelNames: ['gateway', 'listener', 'route', 'backend', 'code'] as const,
  registers: [registry],
})

export const l4ActiveConnections = new Gauge({
  name: 'sallyport_l4_active_connections',
  help: 'Open TCP/TLS listener connections.',
  labelNames: ['gateway', 'listener'] as const,
  registers: [registry],
})

export const l4Bytes = new Counter({
  name: 'sallyport_l4_bytes_total',
  help: 'Bytes relayed on TCP/TLS listeners (in: client to upstream, out: upstream to client), counted when the connection ends.',
  labelNames: ['gateway', 'listener', 'route', 'backend', 'direction'] as const,
  registers: [registry],
})

export const l4ConnectionDuration = new Histogram({
  name: 'sallyport_l4_connection_duration_seconds',
  help: 'Lifetime of TCP/TLS listener connections, accept to close.',
  labelNames: ['gateway', 'listener', 'route', 'backend'] as const,
  buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600],
  registers: [registry],
})

export const l4Errors = new Counter({
  name: 'sallyport_l4_errors_total',
  help: 'TCP/TLS listener connections that ended in an error, by reason.',
  labelNames: ['gateway', 'listener', 'reason'] as const,
  registers: [registry],
})

export interface L4Outcome {
  readonly gateway: string
  readonly listener: string
  readonly route: string
  readonly backend: string
  readonly code: L4Code
  readonly bytesIn: number
  readonly bytesOut: number
  readonly seconds: number
}

/** Records one finished connection in every L4 metric. */
export function recordL4Connection(o: L4Outcome): void {
  l4Connections.inc({ gateway: o.gateway, listener: o.listener, route: o.route, backend: o.backend, code: o.code })
  if (o.code !== 'ok') l4Errors.inc({ gateway: o.gateway, listener: o.listener, reason: o.code })
  if (o.bytesIn > 0) l4Bytes.inc({ gateway: o.gateway, listener: o.listener, route: o.route, backend: o.backend, direction: 'in' }, o.bytesIn)
  if (o.bytesOut > 0) l4Bytes.inc({ gateway: o.gateway, listener: o.listener, route: o.route, backend: o.backend, direction: 'out' }, o.bytesOut)
  l4ConnectionDuration.observe({ gateway: o.gateway, listener: o.listener, route: o.route, backend: o.backend }, o.seconds)
  // A connection that outlived its route's removal (tunnels last hours) brings its series back: a sweep comes for them.
  noteSeries(o)
}
