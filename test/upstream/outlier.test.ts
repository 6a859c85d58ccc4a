// Passive outlier detection's counters (Envoy's outlier detection, as Envoy
// Gateway's healthCheck.passive exposes it), on OutlierDetector directly with
// a clock passed in.
import t from 'tap'
import { EndpointHealth, OutlierDetector } from '../../lib/upstream/outlier.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import type { PassiveHealthCheck } from '../../lib/compile/table.ts'

configureLogger({ level: 'silent' })

const SPLIT: PassiveHealthCheck = {
  consecutive5xxErrors: 5, consecutiveGatewayErrors: 0, consecutiveLocalOriginFailures: 2, splitExternalLocalOriginErrors: true,
  intervalMs: 1000, baseEjectionTimeMs: 30_000, maxEjectionPercent: 100,
}

t.test('splitExternalLocalOriginErrors: an answer, even a 5xx, means the connection worked and ends a run of local-origin failures', (t) => {
  const now = 1000
  const eps = [new EndpointHealth('b', 'a', 0), new EndpointHealth('b', 'b', 0)]
  const d = new OutlierDetector(SPLIT)
  d.setEndpoints(eps)
  const [a] = eps
  d.onLocalFailure(a, now)
  d.onStatus(a, 500, now)
  d.onLocalFailure(a, now)
  t.notOk(a.isEjected(now), 'connect failure, 500, connect failure: not two local-origin failures in a row')
  d.onLocalFailure(a, now)
  t.ok(a.isEjected(now), 'two in a row: ejected')
  t.end()
})
