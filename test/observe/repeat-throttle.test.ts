// RepeatThrottle: a key logs at once, then at most every `everyMs` with how
// many occurrences the line stands for; keys are apart and bounded.
import t from 'tap'
import { RepeatThrottle } from '../../lib/observe/repeat-throttle.ts'

t.test('once, then at most every interval with the count; per key; cleared', async (t) => {
  const th = new RepeatThrottle(1000, 2)
  t.same(th.note('403', 0), { log: true, repeats: null })
  t.same(th.note('403', 10), { log: false, repeats: 1 })
  t.same(th.note('timeout', 20), { log: true, repeats: null }, 'another error logs at once')
  t.same(th.note('403', 30), { log: false, repeats: 2 }, 'alternating errors do not re-log each other')
  t.same(th.note('403', 1000), { log: true, repeats: 2 }, 'after the interval, with what it stands for')
  th.note('x', 1001)
  t.same(th.note('timeout', 1002), { log: true, repeats: null }, 'past maxKeys the oldest key is forgotten')
  th.clear()
  t.same(th.note('403', 1003), { log: true, repeats: null })
})
