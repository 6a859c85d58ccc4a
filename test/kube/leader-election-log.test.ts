// A Lease request that keeps failing (the Role for Leases missing: 403) is
// retried every retry period as before, but logged once per distinct error and
// then at most every few minutes, not every 2 s forever.
import '../helpers/capture-logs.ts'
import t from 'tap'
import { LeaderElector } from '../../lib/runtime/leader-election.ts'
import { clearLogs, linesWith, logLines } from '../helpers/capture-logs.ts'
import { clientFor, startFake, until } from './fixtures.ts'

const FAILED = /^leader election: /

t.test('a 403 on Leases is logged once, retried all along, and its end is logged', async (t) => {
  const fake = await startFake(t)
  fake.forbid('leases')
  clearLogs()
  const elector = new LeaderElector({ client: clientFor(fake), namespace: 'sallyport-system', name: 'sallyport-x', identity: 'p1', leaseDurationMs: 3000, renewDeadlineMs: 1500, retryPeriodMs: 20 })
  t.teardown(() => elector.stop({ release: false }))
  elector.start()
  await until('retried many times', () => fake.count('GET', /\/leases\/sallyport-x$/) >= 20)
  const failed = linesWith(FAILED)
  t.equal(failed.length, 1, `one line for ${fake.count('GET', /\/leases\/sallyport-x$/)} failed attempts`)
  t.match(failed[0], { lease: 'sallyport-x', err: /403/, msg: /forbidden.*deploy\/kubernetes\/rbac\.yaml/ })

  fake.allow('leases')
  await until('leader once allowed', () => elector.isLeader())
  t.ok(logLines.some((l) => /^leader election: lease requests succeed again/.test(l.msg)), 'the recovery is logged')

  // A new failure after a success is logged again, once; the leader stepping down at its renew
  // deadline (it cuts the attempt in flight short) is not a failure of the Lease requests.
  clearLogs()
  fake.forbid('leases')
  const forbidden = (): number => linesWith(FAILED).filter((l) => /403/.test(String(l.err))).length
  await until('the new failure logged', () => forbidden() === 1)
  await until('stepped down', () => !elector.isLeader())
  await new Promise((r) => setTimeout(r, 300))
  t.equal(forbidden(), 1, 'once')
  t.same(linesWith(FAILED).filter((l) => !/403/.test(String(l.err))), [], 'and nothing else')
})

t.test('the same error keeps being logged, at most once per interval, with how many were left out', async (t) => {
  const fake = await startFake(t)
  fake.forbid('leases')
  clearLogs()
  const elector = new LeaderElector({ client: clientFor(fake), namespace: 'sallyport-system', name: 'sallyport-y', identity: 'p1', retryPeriodMs: 20, failureLogEveryMs: 300 })
  t.teardown(() => elector.stop({ release: false }))
  elector.start()
  await new Promise((r) => setTimeout(r, 1000))
  const failed = linesWith(FAILED)
  const attempts = fake.count('GET', /\/leases\/sallyport-y$/)
  t.ok(failed.length >= 2 && failed.length <= 5, `${failed.length} lines for ${attempts} attempts in 1 s`)
  t.ok(Number(failed[1]?.repeats) > 0, 'a repeat says how many failures it stands for')
})
