// Envoy Gateway BackendTrafficPolicy (gateway.envoyproxy.io/v1alpha1), the
// parts sallyport implements. Field names and defaults follow Envoy Gateway's
// api/v1alpha1 (retry_types.go, timeout_types.go, circuitbreaker_types.go,
// healthcheck_types.go, loadbalancer_types.go, ratelimit_types.go). Where
// Envoy Gateway's CRD carries a kubebuilder default we apply it here, because
// a file source never passes through the API server that would.

import type { SourceRef } from './meta.ts'
import type {
  ActiveHealthCheck, BackendTrafficPolicy, CircuitBreakerPolicy, HealthCheckPayload, LoadBalancerPolicy, PassiveHealthCheck,
  RateLimitRule, RetryPolicy,
} from './model.ts'
import {
  type Fields, boolAt, durationAt, listAt, nonEmptyAt, numberAt, numbersAt, objectAt, readTargetRefs, stringsAt, textAt,
} from './read-fields.ts'
import { apiVersionOf, readMeta } from './read-meta.ts'

export function readBackendTrafficPolicy(doc: Fields, source: SourceRef): BackendTrafficPolicy {
  const meta = readMeta(doc, 'BackendTrafficPolicy')
  const spec = objectAt(doc, 'spec')
  const hc = objectAt(spec, 'healthCheck')
  return {
    kind: 'BackendTrafficPolicy',
    apiVersion: apiVersionOf(doc),
    meta,
    source,
    targetRefs: readTargetRefs(spec),
    // The early design document put it under spec.protocols.
    enableIPv6: boolAt(spec, 'enableIPv6') ?? boolAt(objectAt(spec, 'protocols'), 'enableIPv6'),
    retry: readRetry(objectAt(spec, 'retry')),
    timeout: readTimeout(objectAt(spec, 'timeout')),
    circuitBreaker: readCircuitBreaker(objectAt(spec, 'circuitBreaker')),
    healthCheck: hc === null ? null : { active: readActive(objectAt(hc, 'active')), passive: readPassive(objectAt(hc, 'passive')) },
    loadBalancer: readLoadBalancer(objectAt(spec, 'loadBalancer')),
    rateLimit: readRateLimit(objectAt(spec, 'rateLimit')),
  }
}

/** retry_types.go: numRetries default 2; perRetry.{timeout, backOff.{baseInterval, maxInterval}}; retryOn.{triggers, httpStatusCodes}. */
function readRetry(r: Fields | null): RetryPolicy | null {
  if (r === null) return null
  const perRetry = objectAt(r, 'perRetry')
  const backOff = objectAt(perRetry, 'backOff')
  const retryOn = objectAt(r, 'retryOn')
  return {
    numRetries: numberAt(r, 'numRetries') ?? 2,
    perTryTimeout: durationAt(perRetry, 'timeout'),
    backoffBase: durationAt(backOff, 'baseInterval'),
    backoffMax: durationAt(backOff, 'maxInterval'),
    triggers: stringsAt(retryOn, 'triggers'),
    httpStatusCodes: numbersAt(retryOn, 'httpStatusCodes'),
  }
}

/** timeout_types.go: tcp.connectTimeout, http.requestTimeout, http.connectionIdleTimeout. */
function readTimeout(t: Fields | null): BackendTrafficPolicy['timeout'] {
  if (t === null) return null
  const tcp = objectAt(t, 'tcp')
  const http = objectAt(t, 'http')
  return {
    connectMs: durationAt(tcp, 'connectTimeout'),
    requestMs: durationAt(http, 'requestTimeout'),
    idleMs: durationAt(http, 'connectionIdleTimeout'),
  }
}

/** circuitbreaker_types.go. Absent thresholds stay null: compile applies its own limits (Envoy's are 1024). */
function readCircuitBreaker(c: Fields | null): CircuitBreakerPolicy | null {
  if (c === null) return null
  return {
    maxConnections: numberAt(c, 'maxConnections'),
    maxPendingRequests: numberAt(c, 'maxPendingRequests'),
    maxParallelRequests: numberAt(c, 'maxParallelRequests'),
    maxParallelRetries: numberAt(c, 'maxParallelRetries'),
    maxRequestsPerConnection: numberAt(c, 'maxRequestsPerConnection'),
  }
}

/**
 * healthcheck_types.go defaults: interval 3s, timeout 1s, unhealthyThreshold 3,
 * healthyThreshold 1; HTTP method GET, expectedStatuses [200]. A GRPC checker
 * has no model equivalent yet and is read as a TCP connect check (the weaker
 * probe still notices dead endpoints).
 */
function readActive(a: Fields | null): ActiveHealthCheck | null {
  if (a === null) return null
  const http = objectAt(a, 'http')
  const isHttp = textAt(a, 'type') === 'HTTP' || (textAt(a, 'type') === null && http !== null)
  const statuses = numbersAt(http, 'expectedStatuses')
  return {
    type: isHttp ? 'HTTP' : 'TCP',
    intervalMs: durationAt(a, 'interval') ?? 3000,
    timeoutMs: durationAt(a, 'timeout') ?? 1000,
    unhealthyThreshold: numberAt(a, 'unhealthyThreshold') ?? 3,
    healthyThreshold: numberAt(a, 'healthyThreshold') ?? 1,
    http: isHttp
      ? {
          path: textAt(http, 'path') ?? '/', method: nonEmptyAt(http, 'method') ?? 'GET', expectedStatuses: statuses.length > 0 ? statuses : [200],
          hostname: nonEmptyAt(http, 'hostname'), expectedResponse: readPayload(objectAt(http, 'expectedResponse')),
        }
      : null,
    tcp: isHttp ? null : readTcpPayloads(objectAt(a, 'tcp')),
  }
}

function readTcpPayloads(tcp: Fields | null): ActiveHealthCheck['tcp'] {
  if (tcp === null) return null
  const send = readPayload(objectAt(tcp, 'send'))
  const receive = readPayload(objectAt(tcp, 'receive'))
  return send === null && receive === null ? null : { send, receive }
}

/** healthcheck_types.go ActiveHealthCheckPayload; the schema requires the field its type names. */
function readPayload(p: Fields | null): HealthCheckPayload | null {
  if (p === null) return null
  return { type: textAt(p, 'type') === 'Binary' ? 'Binary' : 'Text', text: textAt(p, 'text'), binary: textAt(p, 'binary') }
}

/**
 * healthcheck_types.go PassiveHealthCheck defaults: interval 3s,
 * baseEjectionTime 30s, maxEjectionPercent 10, consecutive5XxErrors 5,
 * consecutiveGatewayErrors 0, consecutiveLocalOriginFailures 5,
 * splitExternalLocalOriginErrors false.
 */
function readPassive(p: Fields | null): PassiveHealthCheck | null {
  if (p === null) return null
  return {
    consecutive5xxErrors: numberAt(p, 'consecutive5XxErrors') ?? numberAt(p, 'consecutive5xxErrors') ?? 5,
    consecutiveGatewayErrors: numberAt(p, 'consecutiveGatewayErrors') ?? 0,
    consecutiveLocalOriginFailures: numberAt(p, 'consecutiveLocalOriginFailures') ?? 5,
    splitExternalLocalOriginErrors: boolAt(p, 'splitExternalLocalOriginErrors') ?? false,
    intervalMs: durationAt(p, 'interval') ?? 3000,
    baseEjectionTimeMs: durationAt(p, 'baseEjectionTime') ?? 30_000,
    maxEjectionPercent: numberAt(p, 'maxEjectionPercent') ?? 10,
  }
}

const LB_TYPES = new Set(['RoundRobin', 'LeastRequest', 'Random', 'ConsistentHash'])

/**
 * loadbalancer_types.go. ConsistentHash by SourceIP, Header or Cookie; the
 * newer multi-header form (`Headers`) hashes on its first header here.
 * Envoy Gateway's default policy is LeastRequest.
 */
function readLoadBalancer(lb: Fields | null): LoadBalancerPolicy | null {
  if (lb === null) return null
  const t = textAt(lb, 'type')
  const type = (t !== null && LB_TYPES.has(t) ? t : 'LeastRequest') as LoadBalancerPolicy['type']
  let consistentHash: LoadBalancerPolicy['consistentHash'] = null
  if (type === 'ConsistentHash') {
    const ch = objectAt(lb, 'consistentHash')
    const chType = textAt(ch, 'type')
    const header = textAt(objectAt(ch, 'header'), 'name') ?? textAt(listAt(ch, 'headers')[0] ?? null, 'name')
    const cookie = textAt(objectAt(ch, 'cookie'), 'name')
    if ((chType === 'Header' || chType === 'Headers') && header !== null) consistentHash = { type: 'Header', header, cookie: null }
    else if (chType === 'Cookie' && cookie !== null) consistentHash = { type: 'Cookie', header: null, cookie }
    else consistentHash = { type: 'SourceIP', header: null, cookie: null }
  }
  return { type, consistentHash, slowStartWindowMs: durationAt(objectAt(lb, 'slowStart'), 'window') }
}

const UNITS = new Set(['Second', 'Minute', 'Hour', 'Day'])

/**
 * ratelimit_types.go: type Local|Global with rules under `local` / `global`;
 * each rule {clientSelectors, limit {requests, unit}, shared, cost}. Of
 * `cost`, only `request` `{from: Number, number}` is taken (validate warns of
 * the rest: Metadata is what Envoy filters write, which sallyport has not).
 */
function readRateLimit(rl: Fields | null): BackendTrafficPolicy['rateLimit'] {
  if (rl === null) return null
  const local = objectAt(rl, 'local')
  const global = objectAt(rl, 'global')
  const written = textAt(rl, 'type')
  const type: 'Local' | 'Global' = written === 'Local' || written === 'Global' ? written : local !== null ? 'Local' : 'Global'
  const rules: RateLimitRule[] = []
  for (const r of listAt(type === 'Local' ? local : global, 'rules')) {
    const limit = objectAt(r, 'limit')
    const unit = textAt(limit, 'unit')
    const request = objectAt(objectAt(r, 'cost'), 'request')
    const number = textAt(request, 'from') === 'Number' ? numberAt(request, 'number') : null
    rules.push({
      clientSelectors: listAt(r, 'clientSelectors'),
      requests: numberAt(limit, 'requests') ?? 0,
      unit: (unit !== null && UNITS.has(unit) ? unit : 'Second') as RateLimitRule['unit'],
      shared: r.shared === true,
      cost: number !== null && Number.isSafeInteger(number) && number >= 0 ? number : 1,
    })
  }
  return { type, rules }
}
