import t from 'tap'
import { readFileSync } from 'node:fs'
import { validateHeaderName, validateHeaderValue } from 'node:http'
import { externalHostnameProblem, gatewayDurationMs, headerNameProblem, headerValueProblem, hostnameProblem, httpPathProblem, isBase64, isIPAddress, pathValueProblem, regexProblem } from '../../lib/validate/checks.ts'

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

t.test('header names, header values and paths: what node sends, checked as the schemas check them', async (t) => {
  const defs = (JSON.parse(readFileSync(new URL('../../schemas/common.json', import.meta.url), 'utf8')) as { $defs: Record<string, { pattern: string }> }).$defs
  const schema = (name: string): RegExp => new RegExp(defs[name]?.pattern ?? '', 'u')
  const sends = (fn: () => void): boolean => { try { fn(); return true } catch { return false } }
  for (const v of ['Bearer x', 'a\tb', '', 'caf\u00e9', 'a\r\nb', 'a\nb', 'a\u0000', 'a\u007f', ' a', 'a ', 'a\t', '\u20ac']) {
    const ok = headerValueProblem(v) === null
    t.equal(schema('headerValue').test(v), ok, `schema agrees: ${JSON.stringify(v)}`)
    if (ok) t.ok(sends(() => validateHeaderValue('x', v)), `node sends ${JSON.stringify(v)}`)
    if (/[\r\n\u0000]/.test(v)) t.notOk(ok, `${JSON.stringify(v)} refused`)
  }
  t.match(headerValueProblem('a\r\nX: 1'), /^"a\\r\\nX: 1" is not a valid header value \(RFC 9110/)
  for (const n of ['x-api-key', 'Authorization', 'a b', 'a\r\n', 'a:b', '', 'caf\u00e9']) {
    const ok = headerNameProblem(n) === null
    t.equal(schema('headerName').test(n), ok, `schema agrees: ${JSON.stringify(n)}`)
    t.equal(sends(() => validateHeaderName(n)), ok, `node agrees: ${JSON.stringify(n)}`)
  }
  for (const p of ['/', '/a/b?c=d', '/%2F', '', '/a b', '/a\r\nb', '/\u0000', 'a', '/caf\u00e9']) {
    t.equal(schema('httpPath').test(p), httpPathProblem(p) === null, `schema agrees: ${JSON.stringify(p)}`)
  }
  t.equal(httpPathProblem('/v1/chat'), null)
  t.match(httpPathProblem('/a\r\nb'), /is not a valid path/)
})
