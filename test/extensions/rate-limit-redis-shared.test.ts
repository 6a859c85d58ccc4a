// Global buckets in a real redis-server: two gateways (their own pools and
// connections) sharing one Redis admit the limit together, exactly, under
// concurrent requests; and a key outlives its debt (an AIUsage budget charged
// below zero is not forgotten by Redis before it has refilled).
import t from 'tap'
import type { CompiledExtension } from '../../lib/compile/table.ts'
import type { ClientInfo, HookResult, RequestView } from '../../lib/extensions/plugin-api.ts'
import { Limiter, rateLimit } from '../../lib/extensions/rate-limit.ts'
import { RedisClient, RedisPool } from '../../lib/extensions/redis-client.ts'
import { hasRedis, startRedis } from '../helpers/redis-server.ts'

const skip = hasRedis ? false : 'redis-server is not installed'

function spec(name: string, type: string, config: Record<string, unknown>): CompiledExtension {
  return {
    key: `Backend default/${name}/${name}`, name, type, phases: ['request-headers'], priority: 0, failOpen: false,
    scope: 'Backend', source: `Backend default/${name}`, namespace: 'default', config, secrets: {}, error: null,
  }
}

const client: ClientInfo = { address: '127.0.0.1', namespace: 'team-a', serviceAccount: null, pod: null, spiffeId: null }
const view: RequestView = { method: 'GET', path: '/', authority: 'api', headers: {}, client, route: 'default/api', rule: 'default/api/rule/0', backend: 'Backend/default/api:80', gateway: 'default/egress', scheme: 'http' }

async function status(r: HookResult | Promise<HookResult>): Promise<number> {
  const v = await r
  return v !== undefined && v !== null && 'deny' in v ? v.deny.status : 200
}

t.test('two gateways sharing one Redis admit the limit together, exactly', { skip }, async (t) => {
  const redis = await startRedis(t)
  const pools = [new RedisPool(), new RedisPool()]
  t.teardown(async () => { for (const p of pools) await p.close() })
  const config = { requests: 25, unit: 'Hour', key: ['namespace'], global: { redis: `127.0.0.1:${redis.port}`, timeoutMs: 5000 }, failureMode: 'closed' }
  const gateways = pools.map(p => rateLimit(spec('shared', 'RateLimit', config), p))
  const pending: Array<Promise<number>> = []
  for (let i = 0; i < 40; i++) for (const g of gateways) pending.push(status((g.requestHeaders as (r: RequestView) => HookResult | Promise<HookResult>)(view)))
  const codes = await Promise.all(pending)
  t.equal(codes.filter(c => c === 200).length, 25, 'exactly 25 of 80 admitted')
  t.equal(codes.filter(c => c === 429).length, 55)
  for (const g of gateways) g.close?.()
})

t.test('a bucket charged below zero keeps its key in Redis until it has refilled', { skip }, async (t) => {
  const redis = await startRedis(t)
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  const probe = new RedisClient({ host: '127.0.0.1', port: redis.port, tls: false }, { timeoutMs: 5000 })
  t.teardown(() => probe.close())
  // 60 tokens a minute; a 120-token answer leaves it 60 in debt: two minutes to full.
  const config = { tokens: 60, unit: 'Minute', key: ['namespace'], global: { redis: `127.0.0.1:${redis.port}`, timeoutMs: 5000 } }
  const budget = new Limiter(spec('debt', 'AIUsage', config), config, pool, 'tokens')
  t.teardown(() => budget.close())
  const key = budget.key(view)
  await budget.decide(key, 'charge', 120)
  const ttl = Number(await probe.command(['PTTL', key]))
  t.ok(ttl >= 119_000, `the key lives until the debt is paid back (PTTL ${ttl} ms, full in 120 s)`)
  const d = await budget.decide(key, 'check', 0)
  t.equal(d.allowed, false, 'and the budget is spent')
})
