// ClusterGuard's overload marker (README Failover): 3 consecutive 429/503
// answers mark a backend overloaded for 5 s, and circuit-breaker refusals
// count toward the three.
import t from 'tap'
import { ClusterGuard, OVERLOAD_CONSECUTIVE, OVERLOAD_DEFAULT_MS } from '../../lib/upstream/circuit-breaker.ts'

const LIMITS = { maxConnections: 1024, maxPendingRequests: 1024, maxParallelRequests: 1, maxParallelRetries: 1024 }
const noPending = (): number => 0

t.test('three 503 answers in a row mark the backend overloaded; a 200 between them does not', (t) => {
  const g = new ClusterGuard('b')
  const now = performance.now()
  g.onStatus(503, {}, now); g.onStatus(200, {}, now); g.onStatus(503, {}, now); g.onStatus(503, {}, now)
  t.notOk(g.isOverloaded(now), '503, 200, 503, 503: not three in a row')
  g.onStatus(429, {}, now)
  t.ok(g.isOverloaded(now), 'third in a row')
  t.notOk(g.isOverloaded(now + OVERLOAD_DEFAULT_MS + 1), 'over after 5 s')
  t.end()
})

t.test('circuit-breaker refusals count toward the three, alone or mixed with 503 answers', (t) => {
  const g = new ClusterGuard('b')
  g.limits = LIMITS
  g.active = 1 // maxParallelRequests reached
  for (let i = 0; i < OVERLOAD_CONSECUTIVE - 1; i++) t.equal(g.admit(noPending)?.code, 'SP_ERR_OVERLOADED')
  t.notOk(g.isOverloaded(performance.now()), 'two refusals: not yet')
  t.equal(g.admit(noPending)?.code, 'SP_ERR_OVERLOADED')
  const at = performance.now()
  t.ok(g.isOverloaded(at), 'three refusals in a row: overloaded')
  t.ok(g.isOverloaded(at + OVERLOAD_DEFAULT_MS - 100), 'for 5 s')
  t.notOk(g.isOverloaded(at + OVERLOAD_DEFAULT_MS + 100), 'then not')

  const mixed = new ClusterGuard('m')
  mixed.limits = LIMITS
  mixed.onStatus(503, {}, performance.now())
  mixed.onStatus(503, {}, performance.now())
  mixed.active = 1
  mixed.admit(noPending)
  t.ok(mixed.isOverloaded(performance.now()), '503, 503, refusal: overloaded')
  t.end()
})

t.test('a refusal does not shorten a longer Retry-After overload', (t) => {
  const g = new ClusterGuard('r')
  g.limits = LIMITS
  const now = performance.now()
  g.onStatus(503, { 'retry-after': '30' }, now)
  g.active = 1
  for (let i = 0; i < 3; i++) g.admit(noPending)
  t.ok(g.isOverloaded(now + 20_000), 'still overloaded 20 s on (Retry-After 30)')
  t.end()
})
