// BackendTrafficPolicy merge (lib/compile/policies.ts): Route > Backend >
// Gateway listener > Gateway; between policies on one target the oldest wins
// (then namespace/name) and the others are Conflicted; a less specific policy
// that loses somewhere is Overridden.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import type { ObjectStatus } from '../../lib/compile/status.ts'
import type { RouteRule, RouteTable } from '../../lib/compile/table.ts'
import type { BackendTrafficPolicy, LoadBalancerPolicy } from '../../lib/resources/model.ts'
import * as b from './builders.ts'

type Obj = Parameters<typeof b.snapshotOf>[0][number]

function run(objects: Obj[]): { table: RouteTable; status: ReadonlyMap<string, ObjectStatus> } {
  const gw = b.gateway('gw', [b.listener('http', 8080), b.listener('alt', 8081)])
  const r = compile(b.snapshotOf([b.gatewayClass(), gw, b.service('svc'), b.service('other'), ...objects]), b.opts)
  return { table: r.table, status: r.status.objects }
}

const lb = (type: LoadBalancerPolicy['type']): Partial<BackendTrafficPolicy> => ({ loadBalancer: { type, consistentHash: null, slowStartWindowMs: null } })
const timeout = (requestMs: number): Partial<BackendTrafficPolicy> => ({ timeout: { connectMs: null, requestMs, idleMs: null } })
const at = (day: number): { creationTimestamp: string } => ({ creationTimestamp: `2024-01-${String(day).padStart(2, '0')}T00:00:00Z` })

function ruleFor(table: RouteTable, host: string, port = 8080): RouteRule | undefined {
  return table.ports.get(port)?.http?.exact.get(host)?.prefixes.matches[0]?.rule
}

function conditions(status: ReadonlyMap<string, ObjectStatus>, name: string): Record<string, string> {
  return Object.fromEntries((status.get(`BackendTrafficPolicy/default/${name}`)?.conditions ?? []).map(c => [c.type, `${c.status}/${c.reason}`]))
}

const routeTo = (name: string, host: string, service = 'svc', port = 80) =>
  b.httpRoute(name, [b.rule([b.match('/')], [b.backendRef(service, port)])], { hostnames: [host] })

t.test('a Route policy beats the Gateway policy for its rules; the Gateway policy still serves the others and is Overridden', async t => {
  const { table, status } = run([
    routeTo('tuned', 'tuned.example'), routeTo('plain', 'plain.example', 'other'),
    b.trafficPolicy('gw-pol', { kind: 'Gateway', name: 'gw' }, timeout(30000), at(1)),
    b.trafficPolicy('route-pol', { kind: 'HTTPRoute', name: 'tuned' }, timeout(5000), at(2)),
  ])
  t.equal(ruleFor(table, 'tuned.example')?.timeouts.requestMs, 5000, 'route scope wins although newer')
  t.equal(ruleFor(table, 'plain.example')?.timeouts.requestMs, 30000)
  t.same(conditions(status, 'gw-pol'), { Accepted: 'True/Accepted', Overridden: 'True/Overridden' })
  t.same(conditions(status, 'route-pol'), { Accepted: 'True/Accepted' })
})

t.test('a listener (sectionName) policy beats the whole-Gateway policy on that listener only', async t => {
  const { table, status } = run([
    b.httpRoute('r', [b.rule([b.match('/')])], { hostnames: ['r.example'] }),
    b.trafficPolicy('whole', { kind: 'Gateway', name: 'gw' }, timeout(30000), at(1)),
    b.trafficPolicy('alt-only', { kind: 'Gateway', name: 'gw', sectionName: 'alt' }, timeout(1000), at(2)),
  ])
  t.equal(ruleFor(table, 'r.example', 8080)?.timeouts.requestMs, 30000)
  t.equal(ruleFor(table, 'r.example', 8081)?.timeouts.requestMs, 1000)
  t.equal(conditions(status, 'whole').Overridden, 'True/Overridden')
})

t.test('two policies on one target: the oldest wins, the newer is Conflicted; equal ages fall back to namespace/name', async t => {
  const byAge = run([
    routeTo('r', 'r.example'),
    b.trafficPolicy('newer', { kind: 'HTTPRoute', name: 'r' }, timeout(1000), at(5)),
    b.trafficPolicy('older', { kind: 'HTTPRoute', name: 'r' }, timeout(2000), at(3)),
  ])
  t.equal(ruleFor(byAge.table, 'r.example')?.timeouts.requestMs, 2000)
  t.equal(conditions(byAge.status, 'newer').Accepted, 'False/Conflicted')
  t.equal(conditions(byAge.status, 'older').Accepted, 'True/Accepted')

  const byName = run([
    routeTo('r', 'r.example'),
    b.trafficPolicy('b-pol', { kind: 'HTTPRoute', name: 'r' }, timeout(1000), at(3)),
    b.trafficPolicy('a-pol', { kind: 'HTTPRoute', name: 'r' }, timeout(2000), at(3)),
  ])
  t.equal(ruleFor(byName.table, 'r.example')?.timeouts.requestMs, 2000, 'a-pol sorts first')
  t.equal(conditions(byName.status, 'b-pol').Accepted, 'False/Conflicted')
})

t.test('cluster scope: Route > Backend > Gateway for load balancing', async t => {
  const backend = b.externalBackend('ext', 'api.example.com')
  const ref = b.backendRef('ext', 443, { group: 'gateway.networking.x-k8s.io', kind: 'Backend' })
  const route = b.httpRoute('r', [b.rule([b.match('/')], [ref])], { hostnames: ['r.example'] })
  const gwPol = b.trafficPolicy('gw-pol', { kind: 'Gateway', name: 'gw' }, lb('Random'), at(1))
  const bePol = b.trafficPolicy('be-pol', { group: 'gateway.networking.x-k8s.io', kind: 'XBackend', name: 'ext' }, lb('LeastRequest'), at(2))
  const rtPol = b.trafficPolicy('rt-pol', { kind: 'HTTPRoute', name: 'r' }, lb('RoundRobin'), at(3))
  const id = 'XBackend/default/ext:443'

  t.equal(run([backend, route, gwPol]).table.clusters.get(id)?.lb?.type, 'Random', 'Gateway policy alone applies')

  const two = run([backend, route, gwPol, bePol])
  t.equal(two.table.clusters.get(id)?.lb?.type, 'LeastRequest', 'Backend beats Gateway')
  t.equal(conditions(two.status, 'gw-pol').Overridden, 'True/Overridden', 'the Gateway policy lost on that cluster')

  const three = run([backend, route, gwPol, bePol, rtPol])
  t.equal(three.table.clusters.get(id)?.lb?.type, 'RoundRobin', 'Route beats Backend')
  t.equal(conditions(three.status, 'be-pol').Overridden, 'True/Overridden')
})

t.test('a policy whose target does not exist is TargetNotFound and changes nothing', async t => {
  const { table, status } = run([routeTo('r', 'r.example'), b.trafficPolicy('lost', { kind: 'HTTPRoute', name: 'nope' }, timeout(1), at(1))])
  t.equal(conditions(status, 'lost').Accepted, 'False/TargetNotFound')
  t.equal(ruleFor(table, 'r.example')?.timeouts.requestMs, null)
})

t.test('a targetRef of a kind no policy attaches to says which group and kind', async t => {
  // A Backend is one of three groups' kinds: in another group the message used to say only
  // "kind Backend is not supported", which reads as if no Backend could be targeted.
  const { status } = run([routeTo('r', 'r.example'), b.trafficPolicy('wrong', { group: 'example.com', kind: 'Backend', name: 'ext' }, timeout(1), at(1))])
  t.equal(conditions(status, 'wrong').Accepted, 'False/Invalid')
  const accepted = status.get('BackendTrafficPolicy/default/wrong')?.conditions.find((c) => c.type === 'Accepted')
  t.match(accepted?.message, /targetRef example\.com\/Backend is not supported/)
})

t.test('a policy in another namespace does not reach a target of the same name (targetRefs are local)', async t => {
  const foreign = { ...b.trafficPolicy('foreign', { kind: 'HTTPRoute', name: 'r' }, timeout(1)), meta: b.meta('foreign', 'elsewhere') }
  const { table } = run([routeTo('r', 'r.example'), foreign])
  t.equal(ruleFor(table, 'r.example')?.timeouts.requestMs, null)
})

t.test('cluster scope: a listener (sectionName) policy sets backend-level fields for clusters its routes use, between Backend and Gateway', async t => {
  const backend = b.externalBackend('ext', 'api.example.com')
  const ref = b.backendRef('ext', 443, { group: 'gateway.networking.x-k8s.io', kind: 'Backend' })
  const route = b.httpRoute('r', [b.rule([b.match('/')], [ref])], { hostnames: ['r.example'] })
  const gwPol = b.trafficPolicy('gw-pol', { kind: 'Gateway', name: 'gw' }, lb('Random'), at(1))
  const lsPol = b.trafficPolicy('ls-pol', { kind: 'Gateway', name: 'gw', sectionName: 'http' }, lb('ConsistentHash'), at(2))
  const bePol = b.trafficPolicy('be-pol', { group: 'gateway.networking.x-k8s.io', kind: 'XBackend', name: 'ext' }, lb('LeastRequest'), at(3))
  const id = 'XBackend/default/ext:443'

  const alone = run([backend, route, lsPol])
  t.equal(alone.table.clusters.get(id)?.lb?.type, 'ConsistentHash', 'the listener policy alone applies to the cluster')

  const two = run([backend, route, gwPol, lsPol])
  t.equal(two.table.clusters.get(id)?.lb?.type, 'ConsistentHash', 'listener beats Gateway')
  t.equal(conditions(two.status, 'gw-pol').Overridden, 'True/Overridden')
  t.same(conditions(two.status, 'ls-pol'), { Accepted: 'True/Accepted' })

  const three = run([backend, route, gwPol, lsPol, bePol])
  t.equal(three.table.clusters.get(id)?.lb?.type, 'LeastRequest', 'Backend beats listener')
  t.equal(conditions(three.status, 'ls-pol').Overridden, 'True/Overridden')
})

t.test('rule scope: a Backend policy sets retry and timeouts for the rules that send only to that Backend, between Route and listener', async t => {
  const ext = b.externalBackend('ext', 'api.example.com')
  const alt = b.externalBackend('alt', 'alt.example.com')
  const refTo = (name: string) => b.backendRef(name, 443, { group: 'gateway.networking.x-k8s.io', kind: 'Backend' })
  const only = b.httpRoute('only', [b.rule([b.match('/')], [refTo('ext')])], { hostnames: ['only.example'] })
  const split = b.httpRoute('split', [b.rule([b.match('/')], [refTo('ext'), refTo('alt')])], { hostnames: ['split.example'] })
  const gwPol = b.trafficPolicy('gw-pol', { kind: 'Gateway', name: 'gw' }, timeout(30000), at(1))
  const bePol = b.trafficPolicy('be-pol', { group: 'gateway.networking.x-k8s.io', kind: 'XBackend', name: 'ext' }, { timeout: { connectMs: null, requestMs: 5000, idleMs: 1000 } }, at(2))

  const r = run([ext, alt, only, split, gwPol, bePol])
  t.equal(ruleFor(r.table, 'only.example')?.timeouts.requestMs, 5000, 'the Backend policy beats the Gateway policy for a rule sending only to it')
  t.equal(ruleFor(r.table, 'only.example')?.timeouts.idleMs, 1000, 'its connectionIdleTimeout too')
  t.equal(ruleFor(r.table, 'split.example')?.timeouts.requestMs, 30000, 'a rule also sending elsewhere keeps the Gateway policy')
  t.same(conditions(r.status, 'gw-pol'), { Accepted: 'True/Accepted', Overridden: 'True/Overridden' })

  const rtPol = b.trafficPolicy('rt-pol', { kind: 'HTTPRoute', name: 'only' }, timeout(7000), at(3))
  const withRoute = run([ext, alt, only, split, gwPol, bePol, rtPol])
  t.equal(ruleFor(withRoute.table, 'only.example')?.timeouts.requestMs, 7000, 'the Route policy beats the Backend policy')
  t.equal(conditions(withRoute.status, 'be-pol').Overridden, 'True/Overridden')

  // Two Backends with the same policy: it applies.
  const both = b.trafficPolicy('both-pol', { group: 'gateway.networking.x-k8s.io', kind: 'XBackend', name: 'alt' }, timeout(9000), at(4))
  const shared = run([ext, alt, split, gwPol, { ...bePol, targetRefs: [...bePol.targetRefs, { group: 'gateway.networking.x-k8s.io', kind: 'XBackend', name: 'alt', sectionName: null }] } as Obj])
  t.equal(ruleFor(shared.table, 'split.example')?.timeouts.requestMs, 5000, 'every Backend of the rule under one policy: that policy')
  const differ = run([ext, alt, split, gwPol, bePol, both])
  t.equal(ruleFor(differ.table, 'split.example')?.timeouts.requestMs, 30000, 'Backends under different policies: neither decides the rule')
})
