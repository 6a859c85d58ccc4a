// The Redis of a global rate limit (RateLimit and AIUsage `global`): a
// secretRef of the shape compile resolves.
import t from 'tap'
import { validateDocument } from '../../lib/validate/validate.ts'
import { formatProblem } from '../../lib/resources/problem.ts'

const src = { file: 'limits.yaml', doc: 2 }

function backend(type: string, config: Record<string, unknown>): unknown {
  return {
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name: 'api', namespace: 'default' },
    spec: { endpoints: [{ ip: { address: '192.0.2.1', port: 80 } }], extensions: [{ name: 'limit', type, config }] },
  }
}

const limit = (global: unknown): unknown => backend('RateLimit', { requests: 5, unit: 'Minute', global })

function errorsOf(doc: unknown): string[] {
  return validateDocument(doc, src).problems.filter((p) => p.severity === 'error').map(formatProblem)
}

t.test('global.secretRef: a Secret name, and only the fields compile reads', async (t) => {
  const at = 'limits.yaml:2: Backend default/api: spec.extensions[0].config.global.secretRef'
  t.same(errorsOf(limit({ redis: 'r:6379', secretRef: { name: 'redis-auth', namespace: 'infra', usernameKey: 'user', passwordKey: 'pass' } })), [])
  t.same(errorsOf(limit({ redis: 'r:6379', secretRef: {} })), [`${at}.name: required: the Secret name`])
  t.same(errorsOf(limit({ redis: 'r:6379', secretRef: 'redis-auth' })), [`${at}.name: required: the Secret name`])
  t.same(errorsOf(limit({ redis: 'r:6379', secretRef: { name: 'redis-auth', key: 'password' } })), [`${at}.key: unknown field; expected one of name, namespace, usernameKey, passwordKey`])
  t.same(errorsOf(limit({ redis: 'r:6379', secretRef: { name: 'redis-auth', passwordKey: 7 } })), [`${at}.passwordKey: must be a non-empty string, got 7`])
  t.same(errorsOf(limit({ redis: 'r:6379', password: 'x' })), ['limits.yaml:2: Backend default/api: spec.extensions[0].config.global.password: unknown field; expected one of redis, secretRef, timeoutMs, failureMode'])
  t.match(errorsOf(backend('AIUsage', { budget: { tokens: 1000, global: { redis: 'r:6379', secretRef: { name: '' } } } })), [/config\.budget\.global\.secretRef\.name: required: the Secret name$/])
})
