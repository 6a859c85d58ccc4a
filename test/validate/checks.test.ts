import t from 'tap'
import { externalHostnameProblem, gatewayDurationMs, hostnameProblem, isBase64, isIPAddress, pathValueProblem, regexProblem } from '../../lib/validate/checks.ts'

t.test('external hostnames: no IPs, no cluster domain, no wildcard', async (t) => {
  t.equal(externalHostnameProblem('api.openai.com'), null)
  for (const bad of ['1.2.3.4', '::1', '[2001:db8::1]', 'cluster.local', 'a.svc.cluster.local', 'A.SVC.CLUSTER.LOCAL.', '*.openai.com', 'bad_name.com', `${'a'.repeat(64)}.com`]) {
    t.not(externalHostnameProblem(bad), null, bad)
  }
})

t.test('route hostnames allow a leading wildcard only', async (t) => {
  t.equal(hostnameProblem('*.example.com'), null)
  t.equal(hostnameProblem('example.com'), null)
  t.not(hostnameProblem('a.*.example.com'), null)
  t.not(hostnameProblem('192.0.2.1'), null)
})

t.test('regular expressions compile as JS RegExp; leading (?i) is a flag', async (t) => {
  t.equal(regexProblem('^/v[0-9]+$'), null)
  t.equal(regexProblem('(?i)^gpt-4'), null)
  t.match(regexProblem('(['), /does not compile/)
})

t.test('Gateway API durations', async (t) => {
  t.equal(gatewayDurationMs('1h30m'), 5_400_000)
  t.equal(gatewayDurationMs('500ms'), 500)
  t.equal(gatewayDurationMs('10s'), 10_000)
  t.equal(gatewayDurationMs('1.5s'), null)
  t.equal(gatewayDurationMs('10'), null)
})

t.test('base64 as Kubernetes decodes it (newlines skipped)', async (t) => {
  t.ok(isBase64('Y2VydA=='))
  t.ok(isBase64('Y2Vy\ndA==\n'))
  t.notOk(isBase64('not base64!'))
  t.notOk(isBase64('Y2VydA='))
})

t.test('path values', async (t) => {
  t.equal(pathValueProblem('/v1/chat'), null)
  for (const bad of ['v1', '/a//b', '/a/./b', '/a/../b', '/a%2fb', '/a#b', '/a/..', '/a/.', '/a b']) t.not(pathValueProblem(bad), null, bad)
  t.ok(isIPAddress('10.0.0.1'))
})
