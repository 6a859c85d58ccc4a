// Gateway API sessionPersistence (HTTPRoute rule) is not implemented: the
// rule is still served, balanced as without it. No rule is dropped, so the
// route is not PartiallyInvalid (whose message must start "Dropped Rule"):
// its Accepted condition says what is served without, and `validate` warns.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import * as b from './builders.ts'

t.test('a rule with sessionPersistence is served; Accepted=True names the field, no PartiallyInvalid', async t => {
  const rule = { ...b.rule([b.match('/')], [b.backendRef('svc', 80)]), sessionPersistence: { sessionName: 'sticky', type: 'Cookie' as const, absoluteTimeout: null, idleTimeout: null } }
  const route = b.httpRoute('r', [rule], { hostnames: ['r.example'] })
  const out = compile(b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 8080)]), b.service('svc'), route]), b.opts)
  t.ok(out.table.ports.get(8080)?.http?.exact.get('r.example')?.prefixes.matches[0]?.rule, 'the rule is routed')
  const conditions = out.status.objects.get('HTTPRoute/default/r')?.parents[0]?.conditions ?? []
  t.notOk(conditions.some(c => c.type === 'PartiallyInvalid'), 'no rule dropped: not PartiallyInvalid')
  const accepted = conditions.find(c => c.type === 'Accepted')
  t.equal(accepted?.status, 'True', 'still Accepted')
  t.equal(accepted?.reason, 'Accepted')
  t.match(accepted?.message, /not supported: spec\.rules\[0\]\.sessionPersistence/)
})
