// In Kubernetes mode, denials and transform failures the data path reports
// (extension denials, CONNECT refusals) become Events in the API server on the
// object that declared the rule; before this test they only reached the log.
import './quiet.ts'
import t from 'tap'
import { createKubeMode } from '../../lib/runtime/kube-mode.ts'
import { defaultExtensionRuntime } from '../../lib/extensions/chain.ts'
import { clientFor, startFake, until } from './fixtures.ts'

t.test('a data-path denial is an Event on the declaring object', async (t) => {
  const fake = await startFake(t)
  const kube = createKubeMode({ client: clientFor(fake), writeStatus: false, lease: { identity: 'events-test', namespace: 'sallyport-system' } })
  t.teardown(() => kube.stop())
  const events = defaultExtensionRuntime().events
  events.emit({ type: 'Warning', reason: 'ExtensionDenied', object: { kind: 'Backend', namespace: 'team-a', name: 'openai' }, message: 'request denied by guardrail: card number', count: 1 })
  await until('the Event reaches the API server', async () => fake.list('v1', 'Event').length > 0)
  const ev = fake.list('v1', 'Event')[0] as Record<string, any>
  t.equal(ev.reason, 'ExtensionDenied')
  t.equal(ev.type, 'Warning')
  t.equal(ev.involvedObject.kind, 'Backend')
  t.equal(ev.involvedObject.namespace, 'team-a')
  t.equal(ev.involvedObject.name, 'openai')
  t.match(ev.message, /guardrail/)
  events.flush()
})
