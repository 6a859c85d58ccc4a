import t from 'tap'
import { parseDuration } from '../../lib/resources/duration.ts'

t.test('Gateway API durations', async (t) => {
  t.equal(parseDuration('1h'), 3_600_000)
  t.equal(parseDuration('10s'), 10_000)
  t.equal(parseDuration('500ms'), 500)
  t.equal(parseDuration('1h30m'), 5_400_000)
  t.equal(parseDuration('1h2m3s4ms'), 3_723_004)
  t.equal(parseDuration('0s'), 0)
})

t.test('Go duration superset (metav1.Duration in Envoy Gateway fields)', async (t) => {
  t.equal(parseDuration('0'), 0)
  t.equal(parseDuration('1.5s'), 1500)
  t.equal(parseDuration('250us'), 0.25)
  t.equal(parseDuration(' 3s '), 3000)
})

t.test('malformed durations are null', async (t) => {
  for (const bad of ['', '10', 's', '1x', '1h 30m', '-1s', '1.2.3s', 'ms', '5sec', '1m-']) {
    t.equal(parseDuration(bad), null, bad)
  }
  t.equal(parseDuration(undefined as unknown as string), null)
})
