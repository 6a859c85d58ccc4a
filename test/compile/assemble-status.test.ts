// Status for every input (lib/compile/assemble-status.ts): objects the source
// dropped as invalid (snapshot.problems) get Accepted=False naming the field;
// warnings do not; valid objects keep their own status.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import type { ConfigProblem } from '../../lib/resources/problem.ts'
import * as b from './builders.ts'

function problem(kind: string, namespace: string, name: string, field: string, message: string, severity: ConfigProblem['severity'] = 'error'): ConfigProblem {
  return { source: { file: 'x.yaml', doc: 0 }, kind, namespace, name, field, message, severity }
}

t.test('an invalid (dropped) object gets Accepted=False Invalid with the field in the message', async t => {
  const problems = [
    problem('HTTPRoute', 'default', 'bad', 'spec.rules[0].matches[0].path.value', 'must start with /'),
    problem('HTTPRoute', 'default', 'bad', 'spec.hostnames[0]', 'must not be an IP address'),
    problem('Backend', 'apps', 'ip-host', 'spec.externalHostname.hostname', 'must not be an IP'),
  ]
  const { status } = compile(b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 80)])], problems), b.opts)
  const bad = status.objects.get('HTTPRoute/default/bad')
  t.same(bad?.conditions.map(c => [c.type, c.status, c.reason]), [['Accepted', 'False', 'Invalid']])
  t.equal(bad?.conditions[0].message, 'spec.rules[0].matches[0].path.value: must start with /; spec.hostnames[0]: must not be an IP address', 'every problem, each with its field')
  t.equal(status.objects.get('Backend/apps/ip-host')?.conditions[0].message, 'spec.externalHostname.hostname: must not be an IP')
  t.equal(status.objects.get('Gateway/default/gw')?.conditions[0].status, 'True', 'the valid rest is unaffected')
})

t.test('warnings and problems without a kind or name produce no object status', async t => {
  const problems = [
    problem('Backend', 'default', 'insecure', 'spec.tls.insecureSkipVerify', 'verification is off', 'warning'),
    problem('', '', '', '', 'document is not an object'),
    problem('HTTPRoute', 'default', '', 'metadata.name', 'required'),
  ]
  const { status } = compile(b.snapshotOf([b.gatewayClass()], problems), b.opts)
  t.same([...status.objects.keys()], ['GatewayClass//sallyport'])
})

t.test('a valid object of the same key keeps its own status (a dropped duplicate does not overwrite it)', async t => {
  const problems = [problem('HTTPRoute', 'default', 'r', '', 'duplicate HTTPRoute default/r: this one is ignored')]
  const route = b.httpRoute('r', [b.rule([b.match('/')])])
  const { status } = compile(b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 80)]), b.service('svc'), route], problems), b.opts)
  t.equal(status.objects.get('HTTPRoute/default/r')?.parents[0]?.conditions[0].status, 'True')
})

t.test('Gateways of another controller\'s class are told why and not served', async t => {
  const { table, status } = compile(b.snapshotOf([b.gatewayClass('sallyport', 'example.com/other'), b.gateway('gw', [b.listener('http', 80)])]), b.opts)
  t.equal(table.ports.size, 0)
  t.same(status.objects.get('Gateway/default/gw')?.conditions.map(c => `${c.type}=${c.status}/${c.reason}`), ['Accepted=False/Invalid', 'Programmed=False/Invalid'])
  t.equal(status.objects.has('GatewayClass//sallyport'), false, 'the class is left to its controller')
})
