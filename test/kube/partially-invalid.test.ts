// Kubernetes mode, a route with one rule the gateway cannot serve (a regular
// expression JavaScript cannot compile, which the API server admits) and one
// it can: the good rule serves, and the status written to the API server says
// Accepted=True with PartiallyInvalid=True "Dropped Rule(s) 0: ..." (Gateway
// API RouteConditionPartiallyInvalid), with a Warning Event RuleDropped on the
// route.
import './quiet.ts'
import t from 'tap'
import { Runtime } from '../../lib/runtime/runtime.ts'
import { createKubeMode } from '../../lib/runtime/kube-mode.ts'
import { KubeEventRecorder } from '../../lib/runtime/events.ts'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { freePort, request } from '../e2e/harness.ts'
import { backend, clientFor, gateway, gatewayClass, route, startFake, until } from './fixtures.ts'

const GW = 'gateway.networking.k8s.io/v1'
const CONTROLLER = 'sallyport.io/gateway-controller'

interface Condition { type: string; status: string; reason: string; message: string; observedGeneration: number }

t.test('a route with a bad-regex rule and a good rule: the good one serves; Accepted=True, PartiallyInvalid=True written; a RuleDropped Event', async (t) => {
  const up = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'a' })
  t.teardown(() => up.close())
  const port = await freePort()
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(port))
  fake.apply(backend('a', up.address.port))
  const r = route('partial', 'partial.example.test', 'a', up.address.port, { path: '/good' }) as { spec: { rules: Array<Record<string, unknown>> } }
  const good = r.spec.rules[0] as Record<string, unknown>
  r.spec.rules = [{ ...good, matches: [{ path: { type: 'RegularExpression', value: '/bad/(?P<id>[0-9]+)' } }] }, good]
  fake.apply(r)

  const kube = createKubeMode({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 50, max: 200 }, lease: { durationMs: 1000, renewDeadlineMs: 700, retryPeriodMs: 100, identity: 'only', namespace: 'sallyport-system' } })
  const runtime = new Runtime({ configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, ...kube.runtimeOptions })
  t.teardown(async () => { await kube.stop(); await runtime.stop(100) })
  await runtime.start()
  kube.start()

  const url = `http://127.0.0.1:${port}`
  await until('the good rule serves', async () => (await request(`${url}/good`, { host: 'partial.example.test' })).status === 200)
  t.equal((await request(`${url}/bad/12`, { host: 'partial.example.test' })).status, 404, 'the dropped rule\'s paths are 404')

  const ours = (): Condition[] => {
    const status = fake.get(GW, 'HTTPRoute', 'default', 'partial')?.status as { parents?: Array<{ controllerName: string; conditions: Condition[] }> } | undefined
    return status?.parents?.find((p) => p.controllerName === CONTROLLER)?.conditions ?? []
  }
  await until('route status written', () => ours().some((c) => c.type === 'PartiallyInvalid'))
  const accepted = ours().find((c) => c.type === 'Accepted')
  const partial = ours().find((c) => c.type === 'PartiallyInvalid')
  t.equal(accepted?.status, 'True', 'the route stays Accepted')
  t.equal(partial?.status, 'True')
  t.equal(partial?.reason, 'UnsupportedValue')
  t.match(partial?.message, /^Dropped Rule\(s\) 0: spec\.rules\[0\]\.matches\[0\]\.path\.value: regular expression .* does not compile/)
  t.equal(partial?.observedGeneration, 1)

  await (kube.events as KubeEventRecorder).flush()
  await until('the RuleDropped Event', () => fake.list('v1', 'Event').some((e) => e.reason === 'RuleDropped'))
  const event = fake.list('v1', 'Event').find((e) => e.reason === 'RuleDropped')
  t.match(event, { type: 'Warning', involvedObject: { kind: 'HTTPRoute', namespace: 'default', name: 'partial' } })
  t.match(String(event?.message), /spec\.rules\[0\]\.matches\[0\]\.path\.value/)
})
