// `--max-connections`: open client connections per listening port (HTTP, HTTPS,
// TCP and TLS alike; per process, so per worker with --workers). Past it node
// closes a new connection at accept, before TLS or a byte of HTTP ('drop'), as
// Envoy's listener connection limit does (downstream_cx_overflow): a workload
// that opens connections without end is held to the limit instead of taking the
// process to its file-descriptor limit, where every port, the admin server and
// upstream dials would fail together. Each one closed is counted in
// sallyport_downstream_connections_rejected_total{port}; a warning says so at
// most once per 10 s per port.

import type net from 'node:net'
import { capConnections } from '../bind.ts'
import { downstreamConnectionsRejected } from '../observe/http-metrics.ts'
import { logger } from '../observe/log.ts'

const log = logger('listener')

/** Default of --max-connections. */
export const DEFAULT_MAX_CONNECTIONS = 10_000

/** Holds `server` to `max` open connections; `onDrop` runs for each connection closed at accept. */
export function limitConnections(server: net.Server, port: number, max: number, onDrop?: () => void): void {
  capConnections(server, max, () => {
    downstreamConnectionsRejected.labels(String(port)).inc()
    onDrop?.()
  }, () => log.warn({ port, maxConnections: max }, 'connection limit reached: new connections are closed at accept'))
}
