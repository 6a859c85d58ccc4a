// RateLimit through its hooks, as the chain calls them, on the process's local
// buckets: a spent limit on one route is not reset by a flood of distinct keys
// on another (more keys than the map holds), and a key built from a huge
// header value stays small.
import t from 'tap'
import type { CompiledExtension } from '../../lib/compile/table.ts'
import type { ClientInfo, HookResult, RequestView } from '../../lib/extensions/plugin-api.ts'
import { Limiter, rateLimit } from '../../lib/extensions/rate-limit.ts'
import { LocalBuckets, type Decision } from '../../lib/extensions/token-bucket.ts'
import { RedisPool } from '../../lib/extensions/redis-client.ts'
import { closedPort } from '../helpers/ports.ts'

function spec(name: string, config: Record<string, unknown>): CompiledExtension {
  return {
    key: `Backend default/${name}/${name}`, name, type: 'RateLimit', phases: ['request-headers'], priority: 0, failOpen: false,
    scope: 'Backend', source: `Backend default/${name}`, namespace: 'default', config, secrets: {}, error: null,
  }
}

const client: ClientInfo = { address: '127.0.0.1', namespace: null, serviceAccount: null, pod: null, spiffeId: null }

function view(route: string, headers: Record<string, string> = {}): RequestView {
  return { method: 'GET', path: '/', authority: route, headers, client, route, rule: `${route}/rule/0`, backend: `Backend/default/${route}:80`, gateway: 'default/egress', scheme: 'http' }
}

async function status(r: HookResult | Promise<HookResult>): Promise<number> {
  const v = await r
  return v !== undefined && v !== null && 'deny' in v ? v.deny.status : 200
}

t.test('a spent limit survives a flood of distinct keys on another limit (more keys than the map holds)', async (t) => {
  const redis = new RedisPool()
  const strict = rateLimit(spec('strict-flood', { requests: 2, unit: 'Hour', key: ['route'] }), redis)
  const perUser = rateLimit(spec('per-user-flood', { requests: 100, unit: 'Second', key: [{ header: 'x-user' }] }), redis)
  const hook = (h: typeof strict, v: RequestView): HookResult | Promise<HookResult> => (h.requestHeaders as (r: RequestView) => HookResult | Promise<HookResult>)(v)
  const codes = []
  for (let i = 0; i < 3; i++) codes.push(await status(hook(strict, view('default/strict'))))
  t.same(codes, [200, 200, 429], 'strict: 2 per hour')
  for (let i = 0; i < 70_000; i++) await hook(perUser, view('default/other', { 'x-user': `u${i}` }))
  t.equal(await status(hook(strict, view('default/strict'))), 429, 'strict still spent after the flood')
})

t.test('a key part longer than 64 characters counts by its digest: the key stays small', async (t) => {
  const l = new Limiter(spec('per-user-long', { requests: 1, unit: 'Hour', key: [{ header: 'x-user' }, 'route'] }), { requests: 1, unit: 'Hour', key: [{ header: 'x-user' }, 'route'] }, new RedisPool(), 'requests')
  const long = 'p'.repeat(12_000)
  const k1 = l.key(view('default/r', { 'x-user': long }))
  t.ok(k1.length < 200, `key of ${k1.length} characters`)
  t.not(l.key(view('default/r', { 'x-user': long + 'q' })), k1, 'another long value: another key')
  t.equal(l.key(view('default/r', { 'x-user': long })), k1, 'the same value: the same key')
  const short = l.key(view('default/r', { 'x-user': 'alice' }))
  t.ok(short.endsWith('alice|default/r'), 'short parts as they are')
  // A short value that looks like a digest is hashed too: it cannot share the bucket of a long value.
  const lookalike = k1.slice(k1.lastIndexOf(':') + 1, k1.lastIndexOf('|'))
  t.not(l.key(view('default/r', { 'x-user': lookalike })), k1)
})

t.test('key parts are told apart whatever their values: a "|" in one, or a header left out', async (t) => {
  const parts = [{ header: 'x-team' }, { header: 'x-user' }]
  const l = new Limiter(spec('per-team-user', { requests: 1, unit: 'Hour', key: parts }), { requests: 1, unit: 'Hour', key: parts }, new RedisPool(), 'requests')
  const key = (headers: Record<string, string>): string => l.key(view('default/r', headers))
  // "a|b" + "c" and "a" + "b|c" joined as "a|b|c": one client spent the other's bucket.
  t.not(key({ 'x-team': 'a|b', 'x-user': 'c' }), key({ 'x-team': 'a', 'x-user': 'b|c' }), 'a "|" inside a value does not move the boundary')
  // A header sent as "-" read as the header left out, which is every client that does not send it.
  t.not(key({ 'x-team': 'a', 'x-user': '-' }), key({ 'x-team': 'a' }), 'a value "-" is not a missing header')
  t.not(key({ 'x-team': 'a', 'x-user': '#' }), key({ 'x-team': 'a' }), 'nor is a value "#"')
  t.equal(key({ 'x-team': 'a' }), key({ 'x-team': 'a' }), 'a missing header is one key part')
  const three = new Limiter(spec('three', { requests: 1, unit: 'Hour', key: [...parts, { header: 'x-app' }] }), { requests: 1, unit: 'Hour', key: [...parts, { header: 'x-app' }] }, new RedisPool(), 'requests')
  t.not(three.key(view('default/r', { 'x-team': 'a|b', 'x-user': 'c', 'x-app': 'd' })), three.key(view('default/r', { 'x-team': 'a', 'x-user': 'b|c', 'x-app': 'd' })), 'and so with three parts')
})

t.test('Redis unreachable, failureMode open: RateLimit-Policy but no RateLimit field (the count is unknown)', async (t) => {
  const port = await closedPort()
  const redis = new RedisPool()
  t.teardown(() => redis.close())
  const config = { requests: 5, unit: 'Minute', key: ['route'], global: { redis: `127.0.0.1:${port}`, timeoutMs: 1000 }, failureMode: 'open' }
  const hooks = rateLimit(spec('open-when-down', config), redis)
  const r = await (hooks.requestHeaders as (v: RequestView) => HookResult | Promise<HookResult>)(view('default/r'))
  t.same(r, { responseHeaders: { 'ratelimit-policy': '"open-when-down";q=5;w=60' } }, 'allowed, the policy only')
  // Several rules: the field names the tightest known count; none known, the policy of the first.
  const local = { requests: 3, unit: 'Minute', key: ['route'] }
  const two = rateLimit(spec('two-rules', { rules: [config, local] }), redis)
  const r2 = await (two.requestHeaders as (v: RequestView) => HookResult | Promise<HookResult>)(view('default/r'))
  t.same(r2, { responseHeaders: { 'ratelimit-policy': '"two-rules-1";q=3;w=60', ratelimit: '"two-rules-1";r=2;t=20' } }, 'a known count wins over an unknown one')
})

t.test('a limit that left the configuration leaves the local buckets: families and keys stay bounded over renames', async (t) => {
  const buckets = new LocalBuckets()
  const redis = new RedisPool()
  const config = { requests: 5, unit: 'Minute', key: ['route'] }
  // A reload keeps the limit under its name: the new Limiter is built before the old one closes (chain.ts, after a grace).
  const kept = new Limiter(spec('kept', config), config, redis, 'requests', { buckets })
  kept.decide(kept.key(view('default/r')), 'take', 1)
  const keptAgain = new Limiter(spec('kept', config), config, redis, 'requests', { buckets })
  kept.close()
  t.equal((keptAgain.decide(keptAgain.key(view('default/r')), 'take', 1) as Decision).remaining, 3, 'a limit found again keeps its tokens')
  // Each reload renames a limit (generated names): the old one closes.
  for (let i = 0; i < 1000; i++) {
    const l = new Limiter(spec(`renamed-${i}`, config), config, redis, 'requests', { buckets })
    l.decide(l.key(view(`default/r${i}`)), 'take', 1)
    l.close()
  }
  t.equal(buckets.families, 1, 'only the limit still configured keeps a family')
  t.equal(buckets.size, 1, 'and only its key')
  keptAgain.close()
  keptAgain.close() // once
  t.equal(buckets.families, 0)
  t.equal(buckets.size, 0)
})

t.test('a decision on a limit closed while a request still held it stores nothing', async (t) => {
  const buckets = new LocalBuckets()
  const config = { tokens: 100, unit: 'Minute', key: ['route'] }
  const l = new Limiter(spec('budget-closed', config), config, new RedisPool(), 'tokens', { buckets })
  l.close()
  t.equal((l.decide(l.key(view('default/r')), 'charge', 10) as Decision).allowed, true, 'a charge after the close is accepted')
  t.equal(buckets.size, 0, 'and kept nowhere')
  t.equal(buckets.families, 0)
})

t.test('a BackendTrafficPolicy rule of requests: 0 refuses every request it selects (429, Retry-After one unit); the others pass', async (t) => {
  const redis = new RedisPool()
  const rl = rateLimit(spec('block-free', { rules: [
    { requests: 0, unit: 'Minute', match: { headers: [{ name: 'x-plan', value: 'free' }] } },
    { requests: 100, unit: 'Minute' },
  ] }), redis)
  const hook = (v: RequestView): HookResult | Promise<HookResult> => (rl.requestHeaders as (r: RequestView) => HookResult | Promise<HookResult>)(v)
  for (let i = 0; i < 3; i++) {
    const refused = await hook(view('default/r', { 'x-plan': 'free' }))
    t.equal(await status(refused), 429, `free request ${i + 1}: refused`)
    t.equal((refused as { deny: { headers: Record<string, string> } }).deny.headers['retry-after'], '60')
  }
  t.equal(await status(hook(view('default/r', { 'x-plan': 'paid' }))), 200, 'a request the rule does not select passes')
  rl.close?.()
  redis.close()
})
