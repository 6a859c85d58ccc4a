// Passive outlier detection (Envoy's outlier detection as Envoy Gateway's
// BackendTrafficPolicy healthCheck.passive exposes it): per endpoint, count
// consecutive 5xx answers, consecutive gateway errors (502/503/504 and
// connect-class failures) and consecutive local-origin failures (connect
// failures, resets, timeouts); past a threshold the endpoint is ejected for
// baseEjectionTime × (number of times it was ejected), capped at 300 s
// (Envoy's max_ejection_time default). At most maxEjectionPercent of a
// cluster's endpoints are ejected at once, but always at least one (Envoy
// ejects one host even when the percentage rounds to zero) — that is what lets
// a single-endpoint provider be failed over.
//
// State is per endpoint and outlives route tables (the registry keys it by
// cluster id and endpoint address); the clock is passed in (performance.now()).

import type { PassiveHealthCheck } from '../compile/table.ts'
import { logger } from '../observe/log.ts'
import { upstreamEjections } from '../observe/resilience-metrics.ts'

const log = logger('upstream')

/** Envoy's max_ejection_time default. */
const MAX_EJECTION_MS = 300_000

/** Health of one endpoint of one cluster: passive (ejection), active (checks) and load (in flight). */
export class EndpointHealth {
  readonly backend: string
  readonly label: string
  consecutive5xx = 0
  consecutiveGateway = 0
  consecutiveLocal = 0
  /** Times ejected; grows the ejection time, decays by one per quiet interval. */
  ejections = 0
  /** performance.now() until which the endpoint is ejected; 0: not ejected. */
  ejectedUntil = 0
  /** When the last ejection ended or decayed (decay clock). */
  quietSince = 0
  /** Active health check verdict (true until checks say otherwise). */
  activeHealthy = true
  checkFailures = 0
  checkSuccesses = 0
  /** Exchanges in flight (LeastRequest). */
  inflight = 0
  /** When the endpoint (re)entered rotation: slow start ramps from here. */
  since: number

  constructor(backend: string, label: string, now: number) {
    this.backend = backend
    this.label = label
    this.since = now
  }

  // hot path
  isAvailable(now: number): boolean {
    if (!this.activeHealthy) return false
    if (this.ejectedUntil === 0) return true
    if (now < this.ejectedUntil) return false
    // Ejection over: back into rotation (slow start ramps from now).
    this.ejectedUntil = 0
    this.quietSince = now
    this.since = now
    log.info({ backend: this.backend, endpoint: this.label }, 'upstream endpoint un-ejected')
    return true
  }

  isEjected(now: number): boolean {
    return this.ejectedUntil !== 0 && now < this.ejectedUntil
  }
}

/** Status classes an outcome falls in, for the counters. */
function isGatewayStatus(status: number): boolean {
  return status === 502 || status === 503 || status === 504
}

/** The passive detector of one cluster: thresholds plus the cluster's current endpoints (for the ejection cap). */
export class OutlierDetector {
  readonly #config: PassiveHealthCheck
  #endpoints: readonly EndpointHealth[] = []

  constructor(config: PassiveHealthCheck) {
    this.#config = config
  }

  get config(): PassiveHealthCheck {
    return this.#config
  }

  setEndpoints(endpoints: readonly EndpointHealth[]): void {
    this.#endpoints = endpoints
  }

  /** An HTTP answer from the endpoint (headers received). */
  // hot path
  onStatus(ep: EndpointHealth, status: number, now: number): void {
    // An answer means the connection worked: a run of local-origin failures ends
    // here, whatever the status (Envoy's LOCAL_ORIGIN_CONNECT_SUCCESS, split mode).
    ep.consecutiveLocal = 0
    if (status >= 500) {
      ep.consecutive5xx++
      if (isGatewayStatus(status)) ep.consecutiveGateway++
      else ep.consecutiveGateway = 0
      this.#check(ep, now)
      return
    }
    ep.consecutive5xx = 0
    ep.consecutiveGateway = 0
    if (ep.ejections > 0 && ep.ejectedUntil === 0 && now - ep.quietSince >= this.#config.intervalMs) {
      ep.ejections--
      ep.quietSince = now
    }
  }

  /**
   * A failure of local origin: connect failure, reset, timeout. Without
   * splitExternalLocalOriginErrors it counts as a gateway error (a 503) too,
   * as in Envoy.
   */
  onLocalFailure(ep: EndpointHealth, now: number): void {
    ep.consecutiveLocal++
    if (!this.#config.splitExternalLocalOriginErrors) {
      ep.consecutive5xx++
      ep.consecutiveGateway++
    }
    this.#check(ep, now)
  }

  #check(ep: EndpointHealth, now: number): void {
    const c = this.#config
    const split = c.splitExternalLocalOriginErrors
    const over =
      (c.consecutive5xxErrors !== null && c.consecutive5xxErrors > 0 && ep.consecutive5xx >= c.consecutive5xxErrors) ||
      (c.consecutiveGatewayErrors !== null && c.consecutiveGatewayErrors > 0 && ep.consecutiveGateway >= c.consecutiveGatewayErrors) ||
      (split && c.consecutiveLocalOriginFailures !== null && c.consecutiveLocalOriginFailures > 0 && ep.consecutiveLocal >= c.consecutiveLocalOriginFailures)
    if (!over || ep.isEjected(now)) return
    ep.consecutive5xx = 0
    ep.consecutiveGateway = 0
    ep.consecutiveLocal = 0
    if (!this.#mayEject(now)) return
    ep.ejections++
    const ms = Math.min(c.baseEjectionTimeMs * ep.ejections, Math.max(MAX_EJECTION_MS, c.baseEjectionTimeMs))
    ep.ejectedUntil = now + ms
    upstreamEjections.inc({ backend: ep.backend })
    log.warn({ backend: ep.backend, endpoint: ep.label, ejections: ep.ejections, ms }, 'upstream endpoint ejected')
  }

  /** maxEjectionPercent of the endpoints, at least one. */
  #mayEject(now: number): boolean {
    const endpoints = this.#endpoints
    let ejected = 0
    for (let i = 0; i < endpoints.length; i++) if (endpoints[i].isEjected(now)) ejected++
    const cap = Math.max(1, Math.floor(endpoints.length * this.#config.maxEjectionPercent / 100))
    return ejected < cap
  }
}
