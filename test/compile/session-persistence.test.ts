// Gateway API sessionPersistence (HTTPRoute rule) is not implemented: the
// rule is still served, and the route status says so (PartiallyInvalid,
// reason UnsupportedValue) instead of ignoring it silently.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import * as b from './builders.ts'

t.test('a rule with sessionPersistence is served and reported as unsupported in the route status', async t => {
  const rule = { ...b.rule([b.match('/')], [b.backendRef('svc', 80)]), sessionPersistence: { sessionName: 'sticky', type: 'Cookie' as const, absoluteTimeout: null, idleTimeout: null } }
  const route = b.httpRoute('r', [rule], { hostnames: ['r.example'] })
  const out = compile(b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 8080)]), b.service('svc'), route]), b.opts)
  t.ok(out.table.ports.get(8080)?.http?.exact.get('r.example')?.prefixes.matches[0]?.rule, 'the rule is routed')
  const conditions = out.status.objects.get('HTTPRoute/default/r')?.parents[0]?.conditions ?? []
  const partial = conditions.find(c => c.type === 'PartiallyInvalid')
  t.equal(partial?.status, 'True')
  t.equal(partial?.reason, 'UnsupportedValue')
  t.match(partial?.message, /rules\[0\]\.sessionPersistence: not supported/)
  t.equal(conditions.find(c => c.type === 'Accepted')?.status, 'True', 'still Accepted')
})
