// The Redis AUTH Secret of a global rate limit (RateLimit and AIUsage
// `global.secretRef`, the BackendTrafficPolicy annotation
// sallyport.io/rate-limit-redis-secret) is resolved in compile like any
// extension Secret: into the compiled extension's `secrets` by config path,
// under the same ReferenceGrant rule, with the same ResolvedRefs problems; never
// shown in /config_dump; and read through the snapshot, so a change to it
// reloads.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import { dumpTable } from '../../lib/compile/print.ts'
import { References } from '../../lib/compile/references.ts'
import * as b from './builders.ts'
import { POLICY, backend, extensionOf, snapshotOf } from './redis-fixtures.ts'

const PASSWORD = 'redis-PW-0xC0FFEE'


function secret(name: string, data: Record<string, string>, namespace = 'default'): string {
  return `apiVersion: v1
kind: Secret
metadata: { name: ${name}, namespace: ${namespace} }
stringData: ${JSON.stringify(data)}
`
}




t.test('global.secretRef: the Secret reaches the compiled extension by its path, and /config_dump shows only its keys', async t => {
  const snapshot = snapshotOf(
    backend('rl', 'RateLimit', `{ requests: 5, global: { redis: "rediss://redis.infra:6380", secretRef: { name: redis-auth } } }`),
    backend('ai', 'AIUsage', `{ budget: { tokens: 1000, global: { redis: "redis.infra:6379", secretRef: { name: redis-auth } } } }`),
    backend('rules', 'RateLimit', `{ global: { redis: "redis.infra:6379" }, rules: [{ requests: 1 }, { requests: 2, global: { redis: "other:6379", secretRef: { name: acl, usernameKey: user, passwordKey: pass } } }] }`),
    secret('redis-auth', { password: PASSWORD }),
    secret('acl', { user: 'limiter', pass: `${PASSWORD}-acl` }),
  )
  t.same(snapshot.problems, [])
  const { table, problems } = compile(snapshot, b.opts)
  t.same(problems, [])
  const rl = extensionOf(table, 'rl.test')
  t.equal(rl?.error, null)
  t.same(rl?.secrets, { 'global.secretRef': { password: PASSWORD } })
  t.same(extensionOf(table, 'ai.test')?.secrets, { 'budget.global.secretRef': { password: PASSWORD } })
  t.same(extensionOf(table, 'rules.test')?.secrets, { 'rules[1].global.secretRef': { user: 'limiter', pass: `${PASSWORD}-acl` } })

  const dump = JSON.stringify(dumpTable(table))
  t.notMatch(dump, PASSWORD, 'no password in /config_dump')
  t.notMatch(dump, 'limiter', 'nor the username')
  t.match(dump, '"secrets":{"global.secretRef":{"password":"[redacted]"}}', 'the keys that were resolved, redacted')
})

t.test('a missing Secret, a missing key, another namespace without a grant: ResolvedRefs problems naming the field; the extension fails', async t => {
  const snapshot = snapshotOf(
    backend('missing', 'RateLimit', `{ requests: 5, global: { redis: "r:6379", secretRef: { name: no-such-secret } } }`),
    backend('nokey', 'RateLimit', `{ requests: 5, global: { redis: "r:6379", secretRef: { name: only-user } } }`),
    backend('nouser', 'AIUsage', `{ budget: { tokens: 9, global: { redis: "r:6379", secretRef: { name: redis-auth, usernameKey: user } } } }`),
    backend('xns', 'RateLimit', `{ requests: 5, global: { redis: "r:6379", secretRef: { name: redis-auth, namespace: infra } } }`),
    secret('only-user', { username: 'limiter', token: 'x' }),
    secret('redis-auth', { password: PASSWORD }),
    secret('redis-auth', { password: PASSWORD }, 'infra'),
  )
  const { table, status, problems } = compile(snapshot, b.opts)
  t.same(problems.map(p => [p.kind, p.name, p.field, p.severity, p.message]), [
    ['Backend', 'missing', 'spec.extensions[0].config.global.secretRef', 'error', 'Secret default/no-such-secret not found; requests through extension limit fail'],
    ['Backend', 'nokey', 'spec.extensions[0].config.global.secretRef', 'error', 'Secret default/only-user has no key password; requests through extension limit fail'],
    ['Backend', 'nouser', 'spec.extensions[0].config.budget.global.secretRef', 'error', 'Secret default/redis-auth has no key user; requests through extension limit fail'],
    ['Backend', 'xns', 'spec.extensions[0].config.global.secretRef', 'error', 'Secret infra/redis-auth is in another namespace and no ReferenceGrant allows it; requests through extension limit fail'],
  ])
  const cond = (name: string) => status.objects.get(`Backend/default/${name}`)?.conditions.find(c => c.type === 'ResolvedRefs')
  t.match(cond('missing'), { status: 'False', reason: 'InvalidSecretRef' })
  t.match(cond('nokey'), { status: 'False', reason: 'InvalidSecretRef' })
  t.match(cond('xns'), { status: 'False', reason: 'RefNotPermitted' })
  t.match(extensionOf(table, 'missing.test')?.error, /not found/)
  t.match(extensionOf(table, 'nokey.test')?.error, /has no key password/)
  t.same(extensionOf(table, 'xns.test')?.secrets, {}, 'nothing of a Secret it may not read')
  t.notMatch(JSON.stringify(problems), PASSWORD)

  const granted = compile(snapshotOf(
    backend('xns', 'RateLimit', `{ requests: 5, global: { redis: "r:6379", secretRef: { name: redis-auth, namespace: infra } } }`),
    secret('redis-auth', { password: PASSWORD }, 'infra'),
    `apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: limits-read-redis, namespace: infra }
spec:
  from: [{ group: gateway.envoyproxy.io, kind: Backend, namespace: default }]
  to: [{ group: "", kind: Secret }]
`), b.opts)
  t.same(granted.problems, [])
  t.same(extensionOf(granted.table, 'xns.test')?.secrets, { 'global.secretRef': { password: PASSWORD } }, 'a ReferenceGrant lets it read another namespace')
})


t.test('BackendTrafficPolicy: sallyport.io/rate-limit-redis-secret feeds the same secretRef; a missing Secret is a problem on the policy', async t => {
  const annotations = { 'sallyport.io/rate-limit-redis': 'rediss://redis.infra:6380', 'sallyport.io/rate-limit-redis-secret': 'redis-auth' }
  const good = compile(snapshotOf(POLICY(annotations), secret('redis-auth', { username: 'limiter', password: PASSWORD })), b.opts)
  t.same(good.problems, [])
  const ext = extensionOf(good.table, 'api.test', 'rate-limit')
  t.same(ext?.config.global, { redis: 'rediss://redis.infra:6380', secretRef: { name: 'redis-auth' } })
  t.same(ext?.secrets, { 'global.secretRef': { username: 'limiter', password: PASSWORD } })
  t.equal(ext?.error, null)
  t.notMatch(JSON.stringify(dumpTable(good.table)), PASSWORD)

  const missing = compile(snapshotOf(POLICY(annotations)), b.opts)
  t.same(missing.problems.map(p => [p.kind, p.name, p.field, p.message]), [
    ['BackendTrafficPolicy', 'per-tenant', 'metadata.annotations[sallyport.io/rate-limit-redis-secret]', 'Secret default/redis-auth not found; requests this policy\'s rate limit applies to fail'],
  ])
  t.match(missing.status.objects.get('BackendTrafficPolicy/default/per-tenant')?.conditions.find(c => c.type === 'ResolvedRefs'), { status: 'False', reason: 'InvalidSecretRef', message: /rate-limit-redis-secret\]: Secret default\/redis-auth not found/ })
  t.match(extensionOf(missing.table, 'api.test', 'rate-limit')?.error, /Secret default\/redis-auth not found/)

  // Credentials in the address: the annotation is ignored (validate warns), nothing of it reaches the table.
  const inUrl = compile(snapshotOf(POLICY({ 'sallyport.io/rate-limit-redis': `redis://limiter:${PASSWORD}@redis.infra:6379` })), b.opts)
  t.equal(extensionOf(inUrl.table, 'api.test', 'rate-limit')?.config.global, undefined, 'counted per process')
  t.notMatch(JSON.stringify(dumpTable(inUrl.table)), PASSWORD)
})

t.test('the Redis Secret is a referenced Secret: a change to it reloads', async t => {
  for (const docs of [
    [backend('rl', 'RateLimit', `{ requests: 5, global: { redis: "r:6379", secretRef: { name: redis-auth } } }`)],
    [POLICY({ 'sallyport.io/rate-limit-redis': 'r:6379', 'sallyport.io/rate-limit-redis-secret': 'redis-auth' })],
  ]) {
    const references = new References()
    compile(references.track(snapshotOf(...docs, secret('redis-auth', { password: PASSWORD }), secret('unrelated', { password: 'x' }))), b.opts)
    t.ok(references.referenced('secrets', 'default/redis-auth'), 'the Redis Secret')
    t.notOk(references.referenced('secrets', 'default/unrelated'), 'not every Secret')
  }
})
