import t from 'tap'
import { readObject } from '../../lib/resources/read.ts'
import type { BackendTrafficPolicy } from '../../lib/resources/model.ts'
import { loadFixture } from './load-fixture.ts'

const src = { file: 'inline.yaml', doc: 0 }

function btp(spec: Record<string, unknown>): BackendTrafficPolicy {
  return readObject({ apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'BackendTrafficPolicy', metadata: { name: 'p', namespace: 'default' }, spec }, src) as BackendTrafficPolicy
}

t.test('design-document example: targetRef + protocols.enableIPv6', async (t) => {
  const docs = loadFixture('envoy-gateway-btp-example.yaml')
  const a = readObject(docs[4]!, src) as BackendTrafficPolicy
  const b = readObject(docs[5]!, src) as BackendTrafficPolicy
  t.equal(a.kind, 'BackendTrafficPolicy')
  t.same(a.targetRefs, [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'eg', sectionName: null }])
  t.equal(a.enableIPv6, false)
  t.same(b.targetRefs, [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'ipv6-route', sectionName: null }])
  t.equal(b.enableIPv6, true)
  t.equal(b.retry, null)
  t.equal(b.timeout, null)
  t.equal(b.circuitBreaker, null)
  t.equal(b.healthCheck, null)
  t.equal(b.loadBalancer, null)
  t.equal(b.rateLimit, null)
})

t.test('retry, timeout, circuit breaker', async (t) => {
  const p = btp({
    targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'r' }],
    enableIPv6: true,
    retry: { perRetry: { timeout: '250ms', backOff: { baseInterval: '100ms', maxInterval: '10s' } }, retryOn: { triggers: ['connect-failure', 'retriable-status-codes'], httpStatusCodes: [502, 503] } },
    timeout: { tcp: { connectTimeout: '10s' }, http: { requestTimeout: '1m', connectionIdleTimeout: '1h' } },
    circuitBreaker: { maxConnections: 10, maxParallelRequests: 5 },
  })
  t.equal(p.enableIPv6, true)
  t.same(p.retry, { numRetries: 2, perTryTimeout: 250, backoffBase: 100, backoffMax: 10_000, triggers: ['connect-failure', 'retriable-status-codes'], httpStatusCodes: [502, 503] })
  t.same(p.timeout, { connectMs: 10_000, requestMs: 60_000, idleMs: 3_600_000 })
  t.same(p.circuitBreaker, { maxConnections: 10, maxPendingRequests: null, maxParallelRequests: 5, maxParallelRetries: null, maxRequestsPerConnection: null })
  t.same(btp({ retry: { numRetries: 5 } }).retry, { numRetries: 5, perTryTimeout: null, backoffBase: null, backoffMax: null, triggers: [], httpStatusCodes: [] })
})

t.test('health checks with Envoy Gateway defaults', async (t) => {
  const p = btp({ healthCheck: { active: { type: 'HTTP', http: { path: '/healthz' } }, passive: {} } })
  t.same(p.healthCheck, {
    active: { type: 'HTTP', intervalMs: 3000, timeoutMs: 1000, unhealthyThreshold: 3, healthyThreshold: 1, http: { path: '/healthz', method: 'GET', expectedStatuses: [200], hostname: null, expectedResponse: null }, tcp: null },
    passive: { consecutive5xxErrors: 5, consecutiveGatewayErrors: 0, consecutiveLocalOriginFailures: 5, splitExternalLocalOriginErrors: false, intervalMs: 3000, baseEjectionTimeMs: 30_000, maxEjectionPercent: 10 },
  })
  const q = btp({ healthCheck: { active: { type: 'TCP', interval: '5s', timeout: '2s', unhealthyThreshold: 2, healthyThreshold: 2, tcp: {} }, passive: { consecutive5XxErrors: 3, interval: '2s', baseEjectionTime: '1m', maxEjectionPercent: 50, splitExternalLocalOriginErrors: true } } })
  t.same(q.healthCheck!.active, { type: 'TCP', intervalMs: 5000, timeoutMs: 2000, unhealthyThreshold: 2, healthyThreshold: 2, http: null, tcp: null })
  t.same(q.healthCheck!.passive, { consecutive5xxErrors: 3, consecutiveGatewayErrors: 0, consecutiveLocalOriginFailures: 5, splitExternalLocalOriginErrors: true, intervalMs: 2000, baseEjectionTimeMs: 60_000, maxEjectionPercent: 50 })
  t.equal(btp({ healthCheck: { passive: {} } }).healthCheck!.active, null)
  t.equal(btp({ healthCheck: { active: { type: 'GRPC', grpc: {} } } }).healthCheck!.active!.type, 'TCP')
  // expectedResponse and TCP send/receive payloads (healthcheck_types.go ActiveHealthCheckPayload).
  const r = btp({ healthCheck: { active: { type: 'HTTP', http: { path: '/h', expectedResponse: { type: 'Text', text: 'ok' } } } } })
  t.same(r.healthCheck!.active!.http!.expectedResponse, { type: 'Text', text: 'ok', binary: null })
  const s = btp({ healthCheck: { active: { type: 'TCP', tcp: { send: { type: 'Binary', binary: 'UElORw0K' }, receive: { type: 'Text', text: '+PONG' } } } } })
  t.same(s.healthCheck!.active!.tcp, { send: { type: 'Binary', text: null, binary: 'UElORw0K' }, receive: { type: 'Text', text: '+PONG', binary: null } })
})

t.test('load balancer and rate limit', async (t) => {
  t.same(btp({ loadBalancer: { type: 'RoundRobin', slowStart: { window: '30s' } } }).loadBalancer, { type: 'RoundRobin', consistentHash: null, slowStartWindowMs: 30_000 })
  t.same(btp({ loadBalancer: { type: 'ConsistentHash', consistentHash: { type: 'Header', header: { name: 'x-user' } } } }).loadBalancer, { type: 'ConsistentHash', consistentHash: { type: 'Header', header: 'x-user', cookie: null }, slowStartWindowMs: null })
  t.same(btp({ loadBalancer: { type: 'ConsistentHash', consistentHash: { type: 'Cookie', cookie: { name: 'sid', ttl: '60s' } } } }).loadBalancer!.consistentHash, { type: 'Cookie', header: null, cookie: 'sid' })
  t.same(btp({ loadBalancer: { type: 'ConsistentHash', consistentHash: { type: 'SourceIP' } } }).loadBalancer!.consistentHash, { type: 'SourceIP', header: null, cookie: null })
  t.same(btp({
    rateLimit: { type: 'Local', local: { rules: [{ clientSelectors: [{ headers: [{ name: 'x-user-id', value: 'one' }] }], limit: { requests: 10, unit: 'Hour' } }, { limit: { requests: 3, unit: 'Second' } }] } },
  }).rateLimit, {
    type: 'Local',
    rules: [
      { clientSelectors: [{ headers: [{ name: 'x-user-id', value: 'one' }] }], requests: 10, unit: 'Hour', shared: false, cost: 1 },
      { clientSelectors: [], requests: 3, unit: 'Second', shared: false, cost: 1 },
    ],
  })
  t.same(btp({ rateLimit: { global: { rules: [{ limit: { requests: 100, unit: 'Minute' } }] } } }).rateLimit, { type: 'Global', rules: [{ clientSelectors: [], requests: 100, unit: 'Minute', shared: false, cost: 1 }] })
  t.same(btp({ rateLimit: { local: { rules: [{ limit: { requests: 5, unit: 'Minute' }, shared: true, cost: { request: { from: 'Number', number: 0 } } }] } } }).rateLimit?.rules[0],
    { clientSelectors: [], requests: 5, unit: 'Minute', shared: true, cost: 0 }, 'shared and a request cost from Number')
  t.equal(btp({ rateLimit: { local: { rules: [{ limit: { requests: 5, unit: 'Minute' }, cost: { request: { from: 'Metadata', metadata: { namespace: 'a', key: 'b' } } } }] } } }).rateLimit?.rules[0]?.cost, 1, 'a cost from Metadata is 1')
})
