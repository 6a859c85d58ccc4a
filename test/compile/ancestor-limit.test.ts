// Gateway API PolicyStatus.ancestors holds 16 entries; past that a policy is
// unimplementable for further ancestors (lib/compile/ancestor-limit.ts). A
// BackendTLSPolicy used through more Gateways than fit: the first by
// namespace/name use TLS, the rest fail closed (ResolvedRefs=False, 500).

import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import { CompileCache } from '../../lib/compile/compile-cache.ts'
import type { RouteTable } from '../../lib/compile/table.ts'
import type { StatusAncestor } from '../../lib/resources/model.ts'
import * as b from './builders.ts'

const names = Array.from({ length: 17 }, (_, i) => `egress-${String(i).padStart(2, '0')}`)
// Declared out of order: the order that counts is namespace/name, not the snapshot's.
const gateways = [...names].reverse().map((name) => b.gateway(name, [b.listener('http', 8000 + names.indexOf(name))]))
const svc = b.service('api', [{ name: 'https', port: 443 }])
const eps = b.slice('api-1', 'api', [{ name: 'https', port: 8443 }], [{ ip: '10.1.0.5' }])
const route = b.httpRoute('shared', [b.rule([b.match('/')], [b.backendRef('api', 443)])], {
  parentRefs: names.map((name) => ({ group: b.G, kind: 'Gateway', namespace: 'default', name, sectionName: null, port: null })),
})
const policyWith = (statusAncestors: StatusAncestor[] = []) => b.tlsPolicy('api-tls', 'Service', 'api', null, b.upstreamTls({ hostname: 'api.internal' }), {}, { statusAncestors })

/** What the rules of a port send to: cluster ids, or the status of a direct answer (500: no usable backend). */
function clustersOn(table: RouteTable, port: number): Array<string | number | null> {
  const out: Array<string | number | null> = []
  const walk = (v: unknown): void => {
    if (v instanceof Map) { for (const x of v.values()) walk(x); return }
    if (Array.isArray(v)) { for (const x of v) walk(x); return }
    if (typeof v !== 'object' || v === null) return
    const rule = v as { backends?: Array<{ cluster: string | null }> | null; direct?: { status: number } | null }
    if ('backends' in rule && 'direct' in rule) {
      if (rule.backends != null) for (const w of rule.backends) out.push(w.cluster)
      else out.push(rule.direct?.status ?? null)
      return
    }
    for (const x of Object.values(v)) walk(x)
  }
  walk(table.ports.get(port)?.http)
  return out
}

function run(statusAncestors: StatusAncestor[] = [], cache?: CompileCache) {
  return compile(b.snapshotOf([b.gatewayClass(), ...gateways, svc, eps, policyWith(statusAncestors), route]), { ...b.opts, ...(cache === undefined ? {} : { cache }) })
}

t.test('17 Gateways use one BackendTLSPolicy: the first 16 by name use TLS, the 17th fails closed', async (t) => {
  const r = run()
  t.ok(r.table.clusters.get('Service/default/api:443')?.tls, 'the cluster has the policy\'s TLS')
  for (let i = 0; i < 16; i++) t.same(clustersOn(r.table, 8000 + i), ['Service/default/api:443'], `${names[i]}: TLS`)
  t.same(clustersOn(r.table, 8016), [500], 'egress-16: 500, never the plaintext cluster')
  t.notOk([...r.table.clusters.values()].some((c) => c.name === 'api' && c.tls === null), 'no plaintext cluster to the Service')

  const policy = r.status.objects.get('BackendTLSPolicy/default/api-tls')
  t.same(policy?.parents.map((p) => p.parentRef.name), names.slice(0, 16), 'ancestors: the 16 that use it')
  const parents = r.status.objects.get('HTTPRoute/default/shared')?.parents ?? []
  t.equal(parents.length, 17)
  for (const p of parents) {
    const refs = p.conditions.find((c) => c.type === 'ResolvedRefs')
    if (p.parentRef.name === 'egress-16') {
      t.match(refs, { status: 'False', reason: 'PolicyAncestorsFull' }, 'egress-16: ResolvedRefs=False')
      t.match(refs?.message, /BackendTLSPolicy default\/api-tls .*Gateway default\/egress-16.*status\.ancestors is full/)
    } else t.match(refs, { status: 'True' }, `${p.parentRef.name}: ResolvedRefs=True`)
  }
  const warning = r.problems.find((p) => p.kind === 'BackendTLSPolicy')
  t.match(warning, { name: 'api-tls', field: 'status.ancestors', severity: 'warning' })
  t.match(warning?.message, /Gateway\(s\) default\/egress-16;/)
})

t.test('other controllers\' entries on the status take slots: fewer Gateways may use the policy', async (t) => {
  const foreign = [
    { controllerName: 'example.com/other', namespace: 'default', name: 'theirs-1' },
    { controllerName: 'example.com/other', namespace: 'default', name: 'theirs-2' },
    // Our own entries do not count against us.
    { controllerName: 'sallyport.io/gateway-controller', namespace: 'default', name: 'egress-00' },
  ]
  const r = run(foreign)
  for (let i = 0; i < 14; i++) t.same(clustersOn(r.table, 8000 + i), ['Service/default/api:443'], `${names[i]}: TLS`)
  for (let i = 14; i < 17; i++) t.same(clustersOn(r.table, 8000 + i), [500], `${names[i]}: 500`)
  t.same(r.status.objects.get('BackendTLSPolicy/default/api-tls')?.parents.map((p) => p.parentRef.name), names.slice(0, 14))
  t.match(r.problems.find((p) => p.kind === 'BackendTLSPolicy')?.message, /2 held by other controllers.*default\/egress-14, default\/egress-15, default\/egress-16/)
})

t.test('within the limit nothing changes; a cached compile decides as a fresh one', async (t) => {
  const few = compile(b.snapshotOf([b.gatewayClass(), ...gateways.slice(2), svc, eps, policyWith(), route]), b.opts)
  for (let i = 0; i < 15; i++) t.same(clustersOn(few.table, 8000 + i), ['Service/default/api:443'])
  t.notOk(few.problems.some((p) => p.kind === 'BackendTLSPolicy'))

  const cache = new CompileCache()
  const snapshot = b.snapshotOf([b.gatewayClass(), ...gateways, svc, eps, policyWith(), route])
  const first = compile(snapshot, { ...b.opts, cache })
  const again = compile(snapshot, { ...b.opts, cache })
  t.same(clustersOn(again.table, 8016), [500], 'the 17th still fails on a cached compile')
  t.same(clustersOn(first.table, 8015), clustersOn(again.table, 8015))
  t.equal(cache.stats.routesReused, 1, 'the second compile reused the route (one pass with the known limits)')
})
