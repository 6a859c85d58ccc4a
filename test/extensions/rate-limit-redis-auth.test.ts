// A global RateLimit and an AIUsage budget on a Redis that requires AUTH, the
// password (and ACL username) from the Secret compile resolved into
// spec.secrets: the limit counts in Redis. With the wrong password every
// decision fails at once, failureMode decides (closed: 429), the redis errors
// metric counts it, and the log names the refused AUTH, never the password.
import '../helpers/capture-logs.ts'
import t from 'tap'
import type { CompiledExtension } from '../../lib/compile/table.ts'
import type { ClientInfo, HookResult, RequestView } from '../../lib/extensions/plugin-api.ts'
import { aiUsage } from '../../lib/extensions/ai-usage.ts'
import { rateLimit } from '../../lib/extensions/rate-limit.ts'
import { RedisPool } from '../../lib/extensions/redis-client.ts'
import { clearLogs, linesWith, logLines } from '../helpers/capture-logs.ts'
import { metricValue } from '../helpers/metrics.ts'
import { hasRedis, startRedis } from '../helpers/redis-server.ts'

const skip = hasRedis ? false : 'redis-server is not installed'
const PASSWORD = 'Rl-pw-7781-secret'

function spec(name: string, type: string, config: Record<string, unknown>, secrets: CompiledExtension['secrets']): CompiledExtension {
  return {
    key: `Backend default/${name}/${name}#${Math.random()}`, name, type, phases: ['request-headers'], priority: 0, failOpen: false,
    scope: 'Backend', source: `Backend default/${name}`, namespace: 'default', config, secrets, error: null,
  }
}

const client: ClientInfo = { address: '127.0.0.1', namespace: 'team-a', serviceAccount: null, pod: null, spiffeId: null }
const view: RequestView = { method: 'GET', path: '/', authority: 'api', headers: {}, client, route: 'default/api', rule: 'default/api/rule/0', backend: 'Backend/default/api:80', gateway: 'default/egress', scheme: 'http' }

async function status(r: HookResult | Promise<HookResult>): Promise<number> {
  const v = await r
  return v !== undefined && v !== null && 'deny' in v ? v.deny.status : 200
}

const hook = (h: ReturnType<typeof rateLimit>): HookResult | Promise<HookResult> => (h.requestHeaders as (r: RequestView) => HookResult | Promise<HookResult>)(view)

t.test('RateLimit global.secretRef: AUTH with the Secret\'s password; 5 per minute in Redis', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--requirepass', PASSWORD] })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  const config = { requests: 5, unit: 'Minute', key: ['route'], global: { redis: `redis://127.0.0.1:${redis.port}`, timeoutMs: 2000, secretRef: { name: 'redis-auth' } }, failureMode: 'closed' }
  const limit = rateLimit(spec('auth-ok', 'RateLimit', config, { 'global.secretRef': { password: `${PASSWORD}\n` } }), pool)
  const codes: number[] = []
  for (let i = 0; i < 6; i++) codes.push(await status(hook(limit)))
  t.same(codes, [200, 200, 200, 200, 200, 429], 'the trailing newline of a hand-written Secret is not part of the password')
})

t.test('an ACL user: usernameKey and passwordKey name the Secret keys', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--user', 'default', 'off', '--user', 'limiter', 'on', `>${PASSWORD}`, '~sallyport:*', '+@all'] })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  const global = { redis: `127.0.0.1:${redis.port}`, timeoutMs: 2000, secretRef: { name: 'acl', usernameKey: 'user', passwordKey: 'pass' } }
  const limit = rateLimit(spec('acl', 'RateLimit', { requests: 2, unit: 'Minute', key: ['route'], global, failureMode: 'closed' }, { 'global.secretRef': { user: 'limiter', pass: PASSWORD } }), pool)
  t.same([await status(hook(limit)), await status(hook(limit)), await status(hook(limit))], [200, 200, 429])
  // AIUsage's budget reads budget.global.secretRef; `username` is read when the Secret has it.
  const budget = aiUsage(spec('budget', 'AIUsage', { budget: { tokens: 10, unit: 'Hour', failureMode: 'closed', global: { redis: `127.0.0.1:${redis.port}`, secretRef: { name: 'acl' } } } }, { 'budget.global.secretRef': { username: 'limiter', password: PASSWORD } }), pool)
  t.equal(await status(hook(budget)), 200, 'a budget with tokens left')
})

t.test('a wrong password: closed answers 429 at once, counted, and the log names the refused AUTH without the password', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--requirepass', 'another-password'] })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  clearLogs()
  const before = await metricValue('sallyport_rate_limit_redis_errors_total', { outcome: 'closed' })
  const global = { redis: `127.0.0.1:${redis.port}`, timeoutMs: 5000, secretRef: { name: 'redis-auth' } }
  const closed = rateLimit(spec('wrong-closed', 'RateLimit', { requests: 5, unit: 'Minute', key: ['route'], global, failureMode: 'closed' }, { 'global.secretRef': { password: PASSWORD } }), pool)
  const started = Date.now()
  t.same([await status(hook(closed)), await status(hook(closed))], [429, 429])
  t.ok(Date.now() - started < 2000, 'without waiting for the command timeout')
  t.equal(await metricValue('sallyport_rate_limit_redis_errors_total', { outcome: 'closed' }) - before, 2)
  const lines = linesWith('global rate limit unavailable')
  t.equal(lines.length, 1, 'one line for two failed decisions (the metric counts each)')
  t.match(lines[0], { component: 'rate-limit', limit: 'wrong-closed', code: 'auth_refused', failOpen: false, error: /^redis 127\.0\.0\.1:\d+ refused AUTH: WRONGPASS/ })
  t.notMatch(JSON.stringify(logLines), PASSWORD, 'no password in any log line')

  const open = rateLimit(spec('wrong-open', 'RateLimit', { requests: 5, unit: 'Minute', key: ['route'], global, failureMode: 'open' }, { 'global.secretRef': { password: PASSWORD } }), pool)
  t.equal(await status(hook(open)), 200, 'open lets it through')

  // No Secret at all on a Redis that wants one: NOAUTH, said plainly.
  clearLogs()
  const none = rateLimit(spec('no-auth', 'RateLimit', { requests: 5, unit: 'Minute', key: ['route'], global: { redis: `127.0.0.1:${redis.port}` }, failureMode: 'closed' }, {}), pool)
  t.equal(await status(hook(none)), 429)
  t.match(linesWith('global rate limit unavailable')[0], { code: 'noauth', error: /requires AUTH and no password is configured: NOAUTH/ })
})

t.test('an extension that leaves the table gives its Redis client back: the last one closes it', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--requirepass', PASSWORD] })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  const global = { redis: `127.0.0.1:${redis.port}`, timeoutMs: 2000, secretRef: { name: 'redis-auth' } }
  const secrets = { 'global.secretRef': { password: PASSWORD } }
  const one = rateLimit(spec('one', 'RateLimit', { requests: 5, unit: 'Minute', key: ['route'], global, failureMode: 'closed' }, secrets), pool)
  const rules = rateLimit(spec('rules', 'RateLimit', { global, failureMode: 'closed', rules: [{ requests: 5 }, { requests: 9, global: { ...global, timeoutMs: 3000 } }] }, { ...secrets, 'rules[1].global.secretRef': { password: PASSWORD } }), pool)
  const budget = aiUsage(spec('budget', 'AIUsage', { budget: { tokens: 10, global } }, { 'budget.global.secretRef': { password: PASSWORD } }), pool)
  t.equal(pool.size, 2, 'one client per address, credentials and timeout')
  t.equal(await status(hook(one)), 200)
  await one.close?.()
  await one.close?.()
  t.equal(pool.size, 2, 'still used by the others (closing twice releases once)')
  t.equal(await status(hook(rules)), 200)
  await rules.close?.()
  t.equal(pool.size, 1)
  await budget.close?.()
  t.equal(pool.size, 0, 'no connection left behind')
  // A rule that cannot run fails the extension; the rules built before it give their clients back.
  t.throws(() => rateLimit(spec('broken', 'RateLimit', { global, rules: [{ requests: 5 }, { requests: -1 }] }, secrets), pool), /requests must be a positive number/)
  t.equal(pool.size, 0)
})

t.test('a Redis that stays down under load: one log line per limit and error, then at most one every 10 s saying how many it stands for', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--requirepass', 'another-password'] })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  clearLogs()
  const before = await metricValue('sallyport_rate_limit_redis_errors_total', { outcome: 'open' })
  const global = { redis: `127.0.0.1:${redis.port}`, timeoutMs: 5000, secretRef: { name: 'redis-auth' } }
  const limit = rateLimit(spec('flood', 'RateLimit', { requests: 5, unit: 'Minute', key: ['route'], global, failureMode: 'open' }, { 'global.secretRef': { password: PASSWORD } }), pool)
  for (let i = 0; i < 200; i++) t.equal(await status(hook(limit)), 200)
  t.equal(await metricValue('sallyport_rate_limit_redis_errors_total', { outcome: 'open' }) - before, 200, 'every failed decision counted')
  t.equal(linesWith('global rate limit unavailable').length, 1, '200 failed decisions, one line')
  // Another limit on the same Redis has its own line.
  const other = rateLimit(spec('flood-2', 'RateLimit', { requests: 5, unit: 'Minute', key: ['route'], global, failureMode: 'open' }, { 'global.secretRef': { password: PASSWORD } }), pool)
  await status(hook(other))
  t.same(linesWith('global rate limit unavailable').map((l) => l.limit), ['flood', 'flood-2'])
})
