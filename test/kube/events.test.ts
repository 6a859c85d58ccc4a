// Events: aggregation into one Event with a count, the per-object rate limit,
// and config-level Events for objects from the API server.
import './quiet.ts'
import t from 'tap'
import { KubeEventRecorder } from '../../lib/runtime/events.ts'
import { ConfigEvents } from '../../lib/runtime/events-config.ts'
import { clientFor, startFake } from './fixtures.ts'

const route = { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', namespace: 'team-a', name: 'r' }

t.test('aggregated and rate-limited', async (t) => {
  const fake = await startFake(t)
  const rec = new KubeEventRecorder({ client: clientFor(fake), instance: 'pod-1', burst: 3, flushMs: 60_000 })
  t.teardown(() => rec.close())
  for (let i = 0; i < 10; i++) rec.record(route, 'Warning', 'Denied', 'request to evil.example.com denied')
  await rec.flush()
  await rec.flush()
  const events = fake.list('v1', 'Event')
  t.equal(events.length, 1, 'one Event for ten identical records')
  t.equal(events[0]?.count, 10, 'with count 10')
  t.match(events[0], { involvedObject: { kind: 'HTTPRoute', name: 'r', namespace: 'team-a' }, type: 'Warning', reason: 'Denied', reportingInstance: 'pod-1' })
  for (let i = 0; i < 5; i++) rec.record(route, 'Warning', 'TransformFailed', `failure ${i}`)
  await rec.flush()
  t.equal(fake.list('v1', 'Event').length, 3, 'burst of 3 per object: two more Events')
  t.equal(rec.dropped, 3, 'the rest dropped')
})

t.test('config problems of API objects become Events once', async (t) => {
  const fake = await startFake(t)
  const rec = new KubeEventRecorder({ client: clientFor(fake), flushMs: 60_000 })
  t.teardown(() => rec.close())
  const events = new ConfigEvents(rec)
  const problems = [
    { source: { file: 'kube:gateway.networking.k8s.io/v1/HTTPRoute', doc: 0 }, kind: 'HTTPRoute', namespace: 'default', name: 'bad', field: 'spec.rules[0]', message: 'bad match', severity: 'error' as const },
    { source: { file: 'kube:gateway.networking.k8s.io/v1alpha1/Backend', doc: 0 }, kind: 'Backend', namespace: 'default', name: 'b', field: 'spec.tls.insecureSkipVerify', message: 'certificate verification is disabled', severity: 'warning' as const },
    { source: { file: '/etc/sallyport/x.yaml', doc: 0 }, kind: 'HTTPRoute', namespace: 'default', name: 'file', field: '', message: 'from a file: logged, no Event', severity: 'error' as const },
  ]
  events.update(problems)
  events.update(problems)
  await rec.flush()
  const list = fake.list('v1', 'Event')
  t.same(list.map((e) => e.reason).sort(), ['InsecureSkipVerify', 'Invalid'])
  t.ok(list.every((e) => e.count === 1), 'a repeated reload does not repeat them')
  t.match(list.find((e) => e.reason === 'Invalid'), { involvedObject: { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', name: 'bad' } })
})
