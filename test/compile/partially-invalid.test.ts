// Gateway API RouteConditionPartiallyInvalid: a route with valid and invalid
// rules serves the valid ones, Accepted=True, and PartiallyInvalid=True with a
// message starting "Dropped Rule" naming the rules dropped and why. A rule is
// dropped whole, never served with fewer matches than it was written with.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import type { HTTPRoute } from '../../lib/resources/model.ts'
import type { PrefixNode } from '../../lib/compile/table.ts'
import * as b from './builders.ts'

const world = (route: HTTPRoute) => b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 8080)]), b.service('svc'), b.service('other'), route])
const served = (out: ReturnType<typeof compile>): string[] => {
  const vhost = out.table.ports.get(8080)?.http?.exact.get('r.example')
  if (vhost === undefined) return []
  const paths: string[] = []
  for (const list of vhost.exactPaths.values()) paths.push(...list.map(m => m.path.value))
  const walk = (n: PrefixNode): void => { paths.push(...n.matches.map(m => m.path.value)); for (const c of n.children.values()) walk(c) }
  walk(vhost.prefixes)
  paths.push(...vhost.regexes.map(m => m.path.value))
  return paths.sort()
}
const conditionsOf = (out: ReturnType<typeof compile>) => out.status.objects.get('HTTPRoute/default/r')?.parents[0]?.conditions ?? []

t.test('a rule validation dropped is not served; the others are, and status says "Dropped Rule"', async t => {
  const route = b.httpRoute('r', [b.rule([b.match('/bad')]), b.rule([b.match('/good')], [b.backendRef('other')])], {
    hostnames: ['r.example'],
    droppedRules: [{ index: 0, name: null, reasons: ['spec.rules[0].matches[0].path.value: regular expression "(?P<x>y)" does not compile: Invalid group'] }],
  })
  const out = compile(world(route), b.opts)
  t.same(served(out), ['/good'])
  const conditions = conditionsOf(out)
  t.equal(conditions.find(c => c.type === 'Accepted')?.status, 'True')
  const partial = conditions.find(c => c.type === 'PartiallyInvalid')
  t.equal(partial?.status, 'True')
  t.equal(partial?.reason, 'UnsupportedValue')
  t.match(partial?.message, /^Dropped Rule\(s\) 0: spec\.rules\[0\]\.matches\[0\]\.path\.value: regular expression "\(\?P<x>y\)" does not compile/)
})

t.test('a rule one of whose matches does not compile is dropped whole, not served with its other matches', async t => {
  // `(?<a>x)` in both the service and the method of a gRPC match would be a
  // duplicate group; for HTTP, build the pattern validate would not see: a
  // model object straight to compile.
  const route = b.httpRoute('r', [
    b.rule([b.match('/kept-no-more'), b.match('/(?<a>x)(?<a>y)', 'RegularExpression')]),
    b.rule([b.match('/good')], [b.backendRef('other')], { name: 'good' }),
  ], { hostnames: ['r.example'] })
  const out = compile(world(route), b.opts)
  t.same(served(out), ['/good'], 'neither match of rule 0 is served')
  const partial = conditionsOf(out).find(c => c.type === 'PartiallyInvalid')
  t.match(partial?.message, /^Dropped Rule\(s\) 0: spec\.rules\[0\]\.matches\[1\]\.path\.value: /)
  t.equal(conditionsOf(out).find(c => c.type === 'Accepted')?.status, 'True')
})

t.test('a route none of whose rules compile is not Accepted, reason Invalid as when validation finds every rule invalid (README)', async t => {
  const route = b.httpRoute('r', [b.rule([b.match('/(?<a>x)(?<a>y)', 'RegularExpression')])], { hostnames: ['r.example'] })
  const out = compile(world(route), b.opts)
  t.same(served(out), [])
  const accepted = conditionsOf(out).find(c => c.type === 'Accepted')
  t.equal(accepted?.status, 'False')
  t.equal(accepted?.reason, 'Invalid')
  t.match(accepted?.message, /^Dropped Rule\(s\) 0: .*: no valid rule left/)
})
