// Per-backend (cluster) admission: Envoy's circuit breaker thresholds as Envoy
// Gateway's BackendTrafficPolicy circuitBreaker exposes them, the retry budget,
// and the overload marker the router's failover reads.
//
// - maxParallelRequests: exchanges in flight to the cluster; maxPendingRequests:
//   exchanges waiting for a pooled connection; maxConnections: split evenly
//   over the endpoints' pools (rounded up, at least one each) as their cap on
//   HTTP/1.1 connections and HTTP/2 sessions; maxParallelRetries: retries in
//   flight. Unset limits are Envoy's default, 1024. A cluster without a
//   circuitBreaker policy has Envoy's default maxPendingRequests (1024) and no
//   other limit (its pools keep their own connection caps): a queue nothing
//   bounded let one client's stalled requests, holding every connection, keep
//   everyone else waiting in a queue that only grew. It always has the retry budget.
// - Retry budget (Envoy's retry_budget semantics): retries in flight may be at
//   most 20 % of the cluster's active requests, and always at least 3. It keeps
//   retries from multiplying an outage: when every request fails, at most one
//   in five gets a second try.
// - Overload: a backend that answers 429/503 three times in a row, or once with
//   Retry-After, is "overloaded" for the Retry-After time (capped at 60 s) or
//   5 s; the router spills to the next priority level meanwhile, and comes back
//   once the time is over (the next answer decides again). Our own breaker
//   refusals count toward the three like 503s, and so do requests that waited a
//   pool's whole queue timeout (queue-timeout.ts): a backend at its limits is as
//   overloaded as one that says so.

import { ErrorCode, SallyportError } from '../errors.ts'
import type { CircuitBreakerPolicy } from '../compile/table.ts'
import type { OutgoingHeaders } from './types.ts'
import { upstreamOverloads } from '../observe/resilience-metrics.ts'
import { QUEUE_TIMEOUT } from './queue-timeout.ts'

export const DEFAULT_CIRCUIT_LIMIT = 1024
export const RETRY_BUDGET_PERCENT = 20
export const RETRY_BUDGET_MIN_CONCURRENCY = 3
export const OVERLOAD_CONSECUTIVE = 3
export const OVERLOAD_DEFAULT_MS = 5_000
export const OVERLOAD_MAX_MS = 60_000

export interface CircuitLimits {
  readonly maxConnections: number
  readonly maxPendingRequests: number
  readonly maxParallelRequests: number
  readonly maxParallelRetries: number
}

/** Without a circuitBreaker policy: Envoy's pending bound, nothing else (Infinity: no limit). */
export const DEFAULT_LIMITS: CircuitLimits = Object.freeze({
  maxConnections: Infinity,
  maxPendingRequests: DEFAULT_CIRCUIT_LIMIT,
  maxParallelRequests: Infinity,
  maxParallelRetries: Infinity,
})

/** Limits of a cluster's policy, Envoy's 1024 for those unset; no policy: DEFAULT_LIMITS. */
export function limitsOf(policy: CircuitBreakerPolicy | null): CircuitLimits {
  if (policy === null) return DEFAULT_LIMITS
  return {
    maxConnections: policy.maxConnections ?? DEFAULT_CIRCUIT_LIMIT,
    maxPendingRequests: policy.maxPendingRequests ?? DEFAULT_CIRCUIT_LIMIT,
    maxParallelRequests: policy.maxParallelRequests ?? DEFAULT_CIRCUIT_LIMIT,
    maxParallelRetries: policy.maxParallelRetries ?? DEFAULT_CIRCUIT_LIMIT,
  }
}

/**
 * Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, in ms from
 * `nowEpochMs`; null when absent or unreadable.
 */
export function retryAfterMs(headers: OutgoingHeaders, nowEpochMs: number): number | null {
  const v = headers['retry-after']
  if (v === undefined) return null
  const text = (Array.isArray(v) ? v[0] : v).trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  const at = Date.parse(text)
  return Number.isNaN(at) ? null : Math.max(0, at - nowEpochMs)
}

/** Counters and limits of one cluster id; outlives route tables so in-flight counts stay right across a swap. */
export class ClusterGuard {
  readonly id: string
  limits: CircuitLimits = DEFAULT_LIMITS
  active = 0
  activeRetries = 0
  consecutiveOverload = 0
  /** performance.now() until which the cluster counts as overloaded; 0: not. */
  overloadedUntil = 0

  constructor(id: string) {
    this.id = id
  }

  // hot path
  /** null: admitted; else the overload error (counted). `pending`: exchanges waiting for a connection now. */
  admit(pending: () => number): SallyportError | null {
    const limits = this.limits
    if (this.active >= limits.maxParallelRequests) return this.#overflow('max_parallel_requests')
    if (pending() >= limits.maxPendingRequests) return this.#overflow('max_pending_requests')
    return null
  }

  /** null: a retry may start; else why not ('budget' | 'max_parallel_retries'). */
  admitRetry(): string | null {
    if (this.activeRetries >= this.limits.maxParallelRetries) {
      upstreamOverloads.inc({ backend: this.id, limit: 'max_parallel_retries' })
      return 'max_parallel_retries'
    }
    const budget = Math.max(RETRY_BUDGET_MIN_CONCURRENCY, (this.active * RETRY_BUDGET_PERCENT) / 100)
    return this.activeRetries < budget ? null : 'budget'
  }

  /** An answer from the cluster: track consecutive overload answers (429/503). */
  // hot path
  onStatus(status: number, headers: OutgoingHeaders, now: number): void {
    if (status !== 429 && status !== 503) {
      this.consecutiveOverload = 0
      return
    }
    this.consecutiveOverload++
    const after = headers['retry-after'] === undefined ? null : retryAfterMs(headers, Date.now())
    if (after !== null) this.overloadedUntil = now + Math.min(after, OVERLOAD_MAX_MS)
    else if (this.consecutiveOverload >= OVERLOAD_CONSECUTIVE) this.#markOverloaded(now)
  }

  /** Overloaded for the default time from `now`, never shortening a longer (Retry-After) one. */
  #markOverloaded(now: number): void {
    this.overloadedUntil = Math.max(this.overloadedUntil, now + OVERLOAD_DEFAULT_MS)
  }

  // hot path
  isOverloaded(now: number): boolean {
    if (this.overloadedUntil === 0) return false
    if (now < this.overloadedUntil) return true
    this.overloadedUntil = 0
    this.consecutiveOverload = 0
    return false
  }

  /** A request waited a pool's whole queue timeout for a connection: counted as a refusal. */
  queueTimedOut(): void {
    this.#refused(QUEUE_TIMEOUT)
  }

  #overflow(limit: string): SallyportError {
    this.#refused(limit)
    return new SallyportError(ErrorCode.OVERLOADED, `${this.id}: circuit breaker ${limit} reached`)
  }

  #refused(limit: string): void {
    upstreamOverloads.inc({ backend: this.id, limit })
    // A refusal counts as a 503 answer toward the three (the clock is read only here, off the admitted path).
    if (++this.consecutiveOverload >= OVERLOAD_CONSECUTIVE) this.#markOverloaded(performance.now())
  }
}
