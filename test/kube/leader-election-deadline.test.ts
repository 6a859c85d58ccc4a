// A leader whose renewal gets no answer steps down at its renew deadline; the
// attempt in flight ends then too, and that is the step-down, reported once as
// such, not also as a failed Lease request (two timers end at the same
// instant, and which fires first is up to the timer lists).
import '../helpers/capture-logs.ts'
import t from 'tap'
import { LeaderElector } from '../../lib/runtime/leader-election.ts'
import { clearLogs, linesWith } from '../helpers/capture-logs.ts'
import { clientFor, startFake, until } from './fixtures.ts'

t.test('a renewal cut by the renew deadline is the step-down, not a failed request', async (t) => {
  for (let round = 0; round < 8; round++) {
    const fake = await startFake(t)
    const elector = new LeaderElector({ client: clientFor(fake, `token-${round}`), namespace: 'sallyport-system', name: `sallyport-${round}`, identity: 'p1', leaseDurationMs: 1000, renewDeadlineMs: 300, retryPeriodMs: 50 })
    t.teardown(() => elector.stop({ release: false }))
    elector.start()
    await until('leader', () => elector.isLeader())
    clearLogs()
    fake.hang((r) => r.path.includes('/leases/'))
    await until('stepped down', () => !elector.isLeader())
    await new Promise((r) => setTimeout(r, 50))
    elector.stop({ release: false })
    t.same(linesWith(/^leader election: lease request failed/).map((l) => l.err), [], `round ${round}: no failed-request line`)
    t.equal(linesWith(/stepping down/).length, 1, `round ${round}: one step-down line`)
  }
})
