// Events name their object by uid: `kubectl describe` finds an object's Events
// with a field selector that includes involvedObject.uid (k8s.io/kubectl
// pkg/describe searchEvents), so an Event without it is never shown there.
// Data-path Events name the object's real apiVersion: an Envoy Gateway Backend
// is gateway.envoyproxy.io/v1alpha1, not the Gateway API's Backend.
import './quiet.ts'
import t from 'tap'
import { Runtime } from '../../lib/runtime/runtime.ts'
import { createKubeMode } from '../../lib/runtime/kube-mode.ts'
import { defaultExtensionRuntime } from '../../lib/extensions/chain.ts'
import { backend, clientFor, gateway, gatewayClass, startFake, until } from './fixtures.ts'
import { freePort } from '../e2e/harness.ts'

type Ev = { reason: string; involvedObject: Record<string, unknown> }

t.test('a config Event carries the uid and resourceVersion of the object it is about', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(await freePort()))
  const bad = fake.apply({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'bad', namespace: 'default' }, spec: { parentRefs: [{ name: 'egress' }], rules: [{ matches: [{ path: { type: 'Nope', value: '/' } }] }] } })
  const kube = createKubeMode({ client: clientFor(fake), writeStatus: false, debounceMs: 10, lease: { identity: 'uid-test', namespace: 'sallyport-system' } })
  const runtime = new Runtime({ configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, ...kube.runtimeOptions })
  t.teardown(async () => { await kube.stop(); await runtime.stop(100) })
  await runtime.start()
  await until('the Invalid Event', () => fake.list('v1', 'Event').some((e) => (e as unknown as Ev).reason === 'Invalid'))
  const ev = fake.list('v1', 'Event').find((e) => (e as unknown as Ev).reason === 'Invalid') as unknown as Ev
  t.match(ev.involvedObject, { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', namespace: 'default', name: 'bad' })
  t.equal(ev.involvedObject.uid, bad.metadata.uid, "involvedObject.uid is the route's uid")
  t.equal(ev.involvedObject.resourceVersion, bad.metadata.resourceVersion, 'and its resourceVersion')
})

t.test('a data-path Event on an Envoy Gateway Backend names its group and uid', async (t) => {
  const fake = await startFake(t)
  const openai = fake.apply(backend('openai', 443, 'team-a'))
  const kube = createKubeMode({ client: clientFor(fake), writeStatus: false, debounceMs: 10, lease: { identity: 'uid-test', namespace: 'sallyport-system' } })
  t.teardown(() => kube.stop())
  await kube.kubeSource.start(() => {})
  const events = defaultExtensionRuntime().events
  events.emit({ type: 'Warning', reason: 'ExtensionDenied', object: { kind: 'Backend', namespace: 'team-a', name: 'openai' }, message: 'request denied by guardrail', count: 1 })
  events.flush()
  await until('the Event reaches the API server', () => fake.list('v1', 'Event').length > 0)
  const ev = fake.list('v1', 'Event')[0] as unknown as Ev
  t.match(ev.involvedObject, { apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', namespace: 'team-a', name: 'openai' })
  t.equal(ev.involvedObject.uid, openai.metadata.uid, "involvedObject.uid is the Backend's uid")
})
