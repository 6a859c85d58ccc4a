// Status that the CRDs' schemas would refuse: a condition message longer than
// metav1.Condition allows (32768 characters) is cut to fit, and a policy's
// ancestors beyond PolicyStatus's 16 are not added, so the rest of the status
// still reaches the object. A BackendTLSPolicy is limited in compile: the
// ancestors written are the Gateways it leaves the policy to.
import './quiet.ts'
import t from 'tap'
import { Runtime } from '../../lib/runtime/runtime.ts'
import { createKubeMode } from '../../lib/runtime/kube-mode.ts'
import { fitMessage } from '../../lib/runtime/status-writer.ts'
import { freePort } from '../e2e/harness.ts'
import { backend, clientFor, gateway, gatewayClass, startFake, until } from './fixtures.ts'

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

t.test('a policy used through 17 Gateways lists 16 of them as ancestors (PolicyStatus holds no more) instead of none', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  const gateways = Array.from({ length: 17 }, (_, i) => `egress-${String(i).padStart(2, '0')}`)
  for (const name of gateways) {
    const g = gateway(await freePort()) as { metadata: { name: string } }
    fake.apply({ ...g, metadata: { ...g.metadata, name } })
  }
  fake.apply(backend('a', 9000))
  fake.apply({
    apiVersion: HTTP_ROUTE, kind: 'HTTPRoute', metadata: { name: 'shared', namespace: 'default' },
    spec: { parentRefs: gateways.map((name) => ({ name })), hostnames: ['shared.example.test'], rules: [{ backendRefs: [{ group: 'gateway.envoyproxy.io', kind: 'Backend', name: 'a', port: 9000 }] }] },
  })
  fake.apply({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'BackendTrafficPolicy', metadata: { name: 'p', namespace: 'default' },
    spec: { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'shared' }], timeout: { http: { requestTimeout: '5s' } } },
  })
  const kube = createKubeMode({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 50, max: 200 }, lease: { ...LEASE, identity: 'only', namespace: 'sallyport-system' } })
  const runtime = new Runtime({ configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, ...kube.runtimeOptions })
  t.teardown(async () => { await kube.stop(); await runtime.stop(100) })
  await runtime.start()
  kube.start()

  const ancestors = (): Array<{ ancestorRef: { name: string } }> =>
    ((fake.get('gateway.envoyproxy.io/v1alpha1', 'BackendTrafficPolicy', 'default', 'p')?.status as { ancestors?: Array<{ ancestorRef: { name: string } }> } | undefined)?.ancestors ?? [])
  await until('the policy status written', () => ancestors().length > 0)
  t.same(ancestors().map((a) => a.ancestorRef.name), gateways.slice(0, 16), 'the first 16 Gateways')
  const parents = (): unknown[] => (fake.get(HTTP_ROUTE, 'HTTPRoute', 'default', 'shared')?.status as { parents?: unknown[] } | undefined)?.parents ?? []
  await until('the route has all its parents (RouteStatus holds 32)', () => parents().length === 17)
})

t.test('a BackendTLSPolicy used through 17 Gateways, 2 of its entries another controller\'s: 14 ancestors written, the rest fail closed', async (t) => {
  const fake = await startFake(t)
  fake.apply(gatewayClass())
  const gateways = Array.from({ length: 17 }, (_, i) => `egress-${String(i).padStart(2, '0')}`)
  for (const name of gateways) {
    const g = gateway(await freePort()) as { metadata: { name: string } }
    fake.apply({ ...g, metadata: { ...g.metadata, name } })
  }
  fake.apply({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'api', namespace: 'default' }, spec: { ports: [{ name: 'https', port: 443 }] } })
  fake.apply({
    apiVersion: HTTP_ROUTE, kind: 'HTTPRoute', metadata: { name: 'shared', namespace: 'default' },
    spec: { parentRefs: gateways.map((name) => ({ name })), hostnames: ['shared.example.test'], rules: [{ backendRefs: [{ name: 'api', port: 443 }] }] },
  })
  const foreign = ['theirs-1', 'theirs-2'].map((name) => ({
    ancestorRef: { group: 'gateway.networking.k8s.io', kind: 'Gateway', name }, controllerName: 'example.com/other',
    conditions: [{ type: 'Accepted', status: 'True', reason: 'Accepted', message: '', lastTransitionTime: '2024-01-01T00:00:00Z' }],
  }))
  fake.apply({
    apiVersion: 'gateway.networking.k8s.io/v1', kind: 'BackendTLSPolicy', metadata: { name: 'api-tls', namespace: 'default' },
    spec: { targetRefs: [{ group: '', kind: 'Service', name: 'api' }], validation: { hostname: 'api.internal', wellKnownCACertificates: 'System' } },
    status: { ancestors: foreign },
  })
  const kube = createKubeMode({ client: clientFor(fake), debounceMs: 10, backoffMs: { base: 50, max: 200 }, lease: { ...LEASE, identity: 'only', namespace: 'sallyport-system' } })
  const runtime = new Runtime({ configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, ...kube.runtimeOptions })
  t.teardown(async () => { await kube.stop(); await runtime.stop(100) })
  await runtime.start()
  kube.start()

  const ancestors = (): Array<{ ancestorRef: { name: string }; controllerName: string }> =>
    ((fake.get('gateway.networking.k8s.io/v1', 'BackendTLSPolicy', 'default', 'api-tls')?.status as { ancestors?: Array<{ ancestorRef: { name: string }; controllerName: string }> } | undefined)?.ancestors ?? [])
  await until('the policy status written', () => ancestors().length > 2)
  t.same(ancestors().map((a) => a.ancestorRef.name), ['theirs-1', 'theirs-2', ...gateways.slice(0, 14)], 'the other controller\'s entries kept, then the first 14 Gateways')
  const parents = (): Array<{ parentRef: { name: string }; conditions: Cond[] }> =>
    (fake.get(HTTP_ROUTE, 'HTTPRoute', 'default', 'shared')?.status as { parents?: Array<{ parentRef: { name: string }; conditions: Cond[] }> } | undefined)?.parents ?? []
  await until('the route has all its parents', () => parents().length === 17)
  for (const p of parents()) {
    const refs = p.conditions.find((c) => c.type === 'ResolvedRefs')
    t.match(refs, gateways.indexOf(p.parentRef.name) < 14 ? { status: 'True' } : { status: 'False', reason: 'PolicyAncestorsFull' }, p.parentRef.name)
  }
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
