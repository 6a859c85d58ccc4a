import t from 'tap'
import { ConsistentHash, WeightedRoundRobin } from '../../lib/upstream/balancer.ts'
import { EndpointHealth } from '../../lib/upstream/outlier.ts'
import { endpoint } from './fixtures.ts'

t.test('smooth weighted round robin honours weights and interleaves', async (t) => {
  const rr = new WeightedRoundRobin([endpoint(1, '127.0.0.1', 5), endpoint(2, '127.0.0.1', 1), endpoint(3, '127.0.0.1', 1)])
  const picks = Array.from({ length: 7 }, () => rr.pick())
  t.same(picks.filter((i) => i === 0).length, 5)
  t.same(picks.filter((i) => i === 1).length, 1)
  t.same(picks.filter((i) => i === 2).length, 1)
  t.same(picks, [0, 0, 1, 0, 2, 0, 0], 'nginx smooth order')
})

t.test('edge cases: none, one, all-zero weights', async (t) => {
  t.equal(new WeightedRoundRobin([]).pick(), null, 'nothing available is null')
  t.equal(new WeightedRoundRobin([endpoint(1)]).pick(), 0)
  const zero = new WeightedRoundRobin([endpoint(1, '127.0.0.1', 0), endpoint(2, '127.0.0.1', 0)])
  t.same([zero.pick(), zero.pick(), zero.pick(), zero.pick()], [0, 1, 0, 1])
  const some = new WeightedRoundRobin([endpoint(1, '127.0.0.1', 0), endpoint(2, '127.0.0.1', 3)])
  t.same([some.pick(), some.pick()], [1, 1], 'weight 0 is out of rotation')
})

t.test('ConsistentHash: a request without the hash key gets a random endpoint among the available ones, never an ejected or weight-0 one', async (t) => {
  const now = 1_000_000
  const health = [new EndpointHealth('b', 'a', 0), new EndpointHealth('b', 'b', 0), new EndpointHealth('b', 'c', 0), new EndpointHealth('b', 'd', 0)]
  health[0].ejectedUntil = now + 60_000
  health[1].activeHealthy = false
  const ch = new ConsistentHash([endpoint(1), endpoint(2), endpoint(3, '127.0.0.1', 0), endpoint(4)], health, { type: 'Header', header: 'x-user', cookie: null })
  const picks = new Set<number | null>()
  for (let i = 0; i < 200; i++) picks.add(ch.pick({ headers: {}, clientAddress: '10.0.0.1' }, now))
  t.same([...picks], [3], 'only the available endpoint of weight > 0')
  health[3].ejectedUntil = now + 60_000
  health[1].activeHealthy = true
  const after = new Set<number | null>()
  for (let i = 0; i < 200; i++) after.add(ch.pick({ headers: {}, clientAddress: '10.0.0.1' }, now))
  t.same([...after], [1])
})
