import t from 'tap'
import { WeightedRoundRobin } from '../../lib/upstream/balancer.ts'
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
