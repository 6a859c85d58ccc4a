// Status that the CRDs' schemas would refuse: a condition message longer than
// metav1.Condition allows (32768 characters) is cut to fit, so the rest of the
// status still reaches the object.
import './quiet.ts'
import t from 'tap'
import { Runtime } from '../../lib/runtime/runtime.ts'
import { createKubeMode } from '../../lib/runtime/kube-mode.ts'
import { fitMessage } from '../../lib/runtime/status-writer.ts'
import { freePort } from '../e2e/harness.ts'
import { clientFor, gateway, gatewayClass, startFake, until } from './fixtures.ts'

const HTTP_ROUTE = 'gateway.networking.k8s.io/v1'
const LEASE = { durationMs: 1000, renewDeadlineMs: 700, retryPeriodMs: 100 }

interface Cond { type: string; status: string; reason: string; message: string }

t.test('a ResolvedRefs message naming 256 missing Backends is cut to 32768 characters and written', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  fake.apply(gateway(await freePort()))
  // The most an HTTPRoute holds: 16 rules of 16 backendRefs, each to a Backend that does not exist.
  const rules = Array.from({ length: 16 }, (_, r) => ({
    backendRefs: Array.from({ length: 16 }, (_, b) => ({ group: 'gateway.envoyproxy.io', kind: 'Backend', name: `missing-${r}-${b}-${'x'.repeat(180)}`, port: 443 })),
  }))
  fake.apply({ apiVersion: HTTP_ROUTE, kind: 'HTTPRoute', metadata: { name: 'wide', namespace: 'default' }, spec: { parentRefs: [{ name: 'egress' }], hostnames: ['wide.example.test'], rules } })

  const kube = createKubeMode({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 50, max: 200 }, lease: { ...LEASE, identity: 'only', namespace: 'sallyport-system' } })
  const runtime = new Runtime({ configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, ...kube.runtimeOptions })
  t.teardown(async () => { await kube.stop(); await runtime.stop(100) })
  await runtime.start()
  kube.start()

  const resolvedRefs = (): Cond | undefined => {
    const parents = ((fake.get(HTTP_ROUTE, 'HTTPRoute', 'default', 'wide')?.status as { parents?: Array<{ conditions: Cond[] }> } | undefined)?.parents ?? [])
    return parents[0]?.conditions.find((c) => c.type === 'ResolvedRefs')
  }
  await until('the route status written', () => resolvedRefs() !== undefined)
  const c = resolvedRefs() as Cond
  t.match(c, { status: 'False', reason: 'BackendNotFound' })
  t.ok([...c.message].length <= 32768, `${[...c.message].length} characters`)
  t.match(c.message, /^Backend default\/missing-0-0-x+ \(gateway\.envoyproxy\.io\) not found/, 'it starts as compiled')
  t.match(c.message, /\(truncated\)$/, 'and says it was cut')
  t.equal(fake.requests.filter((r) => r.method === 'PUT' && r.path.endsWith('/httproutes/wide/status')).length, 1, 'one write, not refused')
})

t.test('fitMessage: short messages as they are; long ones cut on a character boundary', async (t) => {
  t.equal(fitMessage('ok'), 'ok')
  const exact = 'a'.repeat(32768)
  t.equal(fitMessage(exact), exact, 'exactly the limit is kept whole')
  for (const pad of ['', 'a']) {
    const cut = fitMessage(pad + '\u{1F600}'.repeat(20_000)) // 40,000 UTF-16 units
    t.ok([...cut].length <= 32768 && cut.length <= 32768, `${cut.length} units`)
    t.notOk(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])/.test(cut), 'no lone high surrogate')
    t.match(cut, /\(truncated\)$/)
  }
})
