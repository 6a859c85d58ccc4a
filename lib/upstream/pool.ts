// What the registry needs from a protocol pool. One pool serves one key:
// (endpoint, cluster protocol, TLS identity hash).

import type { Exchange } from './exchange.ts'

export interface PoolSettings {
  readonly connectTimeoutMs: number
  /** Default max silence of an exchange (UpstreamTimeouts.idleMs null). */
  readonly idleTimeoutMs: number
  /** How long an unused pooled connection (or h2 session) stays open. */
  readonly keepAliveTimeoutMs: number
  readonly connectionsPerPool: number
  /**
   * Requests one HTTP/1.1 connection or HTTP/2 session carries before it is
   * retired (circuitBreaker.maxRequestsPerConnection); null: no limit.
   */
  readonly maxRequestsPerConnection: number | null
  /**
   * Which HTTP/1.1 client carries ordinary requests: sallyport's own
   * (h1-client.ts, the default) or undici's Pool (`--http1-client undici`).
   * Upgrades go through undici either way.
   */
  readonly http1Client: Http1Client
}

export type Http1Client = 'sallyport' | 'undici'

export interface PoolStats {
  readonly connected: number
  readonly pending: number
  readonly running: number
}

export interface UpstreamPool {
  /** What the pool speaks now: 'h1' | 'h2' | 'h2c' | 'alpn' (not negotiated yet). */
  readonly protocol: string
  readonly closed: boolean
  // hot path
  dispatch(ex: Exchange): void
  // hot path
  /**
   * Exchanges waiting for a connection (or stream) that someone still waits
   * for: circuitBreaker maxPendingRequests counts these on every request, so
   * it must be O(1)-ish, and an exchange its client gave up on no longer counts.
   */
  pending(): number
  stats(): PoolStats
  /** Stop taking requests; resolves when in-flight exchanges finished and connections closed. */
  close(): Promise<void>
}

/** Exchanges of a pool's own queue that someone still waits for (UpstreamPool.pending). */
export function stillWaiting(queue: readonly Exchange[]): number {
  let n = 0
  for (let i = 0; i < queue.length; i++) if (!queue[i].answered) n++
  return n
}

/** Idle timeout (ms) of one exchange. */
export function idleMsOf(ex: Exchange, settings: PoolSettings): number {
  return ex.req.timeouts.idleMs ?? settings.idleTimeoutMs
}
