// A global RateLimit on a rediss:// Redis of a private CA, and on one that
// requires client certificates (`tls-auth-clients yes`), against a real
// redis-server: the CA bundle and client certificate come from
// `spec.secrets['global.tls']`, as compile resolves `global.tls`
// (compile/extensions.ts). Without the CA the limit fails (counted, logged),
// with it the limit counts in Redis; without a client certificate the Redis
// refuses the connection, with one it accepts; `serverName` is the name the
// certificate must carry. The pool keys clients by that TLS identity, so a
// rotated CA or certificate gets a new connection.
import '../helpers/capture-logs.ts'
import t from 'tap'
import type { CompiledExtension } from '../../lib/compile/table.ts'
import type { ClientInfo, HookResult, RequestView } from '../../lib/extensions/plugin-api.ts'
import { aiUsage } from '../../lib/extensions/ai-usage.ts'
import { rateLimit } from '../../lib/extensions/rate-limit.ts'
import { RedisPool } from '../../lib/extensions/redis-client.ts'
import { clearLogs, linesWith, logLines } from '../helpers/capture-logs.ts'
import { metricValue } from '../helpers/metrics.ts'
import { clientCert, createCa, serverCert } from '../helpers/pki.ts'
import { hasRedis, startRedis, type RedisServer } from '../helpers/redis-server.ts'

const skip = hasRedis ? false : 'redis-server is not installed'

function spec(name: string, config: Record<string, unknown>, secrets: CompiledExtension['secrets'], type = 'RateLimit'): CompiledExtension {
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

function limitConfig(address: string, tls: Record<string, unknown> | undefined, failureMode: 'open' | 'closed' = 'closed'): Record<string, unknown> {
  return { requests: 3, unit: 'Minute', key: ['route'], global: { redis: address, timeoutMs: 3000, ...(tls === undefined ? {} : { tls }) }, failureMode }
}

/** Handshakes the Redis refused for want of a client certificate (its log says so for each). */
function refusedHandshakes(redis: RedisServer): number {
  return redis.output().split('\n').filter((l) => l.includes('Error accepting a client connection') && l.includes('peer did not return a certificate')).length
}

t.test('a Redis of a private CA: without caCertificateRefs the limit fails (counted, logged), with them it counts in Redis', { skip }, async (t) => {
  const ca = createCa('private redis CA')
  const leaf = serverCert(ca, ['localhost'])
  const redis = await startRedis(t, { tls: { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.certPem } })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  const address = `rediss://localhost:${redis.port}`

  clearLogs()
  const before = await metricValue('sallyport_rate_limit_redis_errors_total', { outcome: 'closed' })
  const untrusted = rateLimit(spec('untrusted', limitConfig(address, undefined), {}), pool)
  t.same([await status(hook(untrusted)), await status(hook(untrusted))], [429, 429], 'failureMode closed: refused, the count unknown')
  t.equal(await metricValue('sallyport_rate_limit_redis_errors_total', { outcome: 'closed' }) - before, 2, 'each failed decision counted')
  const lines = linesWith('global rate limit unavailable')
  t.equal(lines.length, 1)
  t.match(lines[0], { component: 'rate-limit', limit: 'untrusted', code: 'tls', error: new RegExp(`^redis rediss://localhost:${redis.port}: .*certificate`) })

  const trusted = rateLimit(spec('trusted', limitConfig(address, { caCertificateRefs: [{ kind: 'ConfigMap', name: 'redis-ca' }] }), { 'global.tls': { 'ca.crt': ca.certPem } }), pool)
  t.same([await status(hook(trusted)), await status(hook(trusted)), await status(hook(trusted)), await status(hook(trusted))], [200, 200, 200, 429], '3 per minute, counted in Redis')
  t.equal(linesWith('global rate limit unavailable').length, 1, 'no failure of the trusted one')

  // Only the CAs named are trusted: another CA's bundle does not let the private one through.
  const other = createCa('some other CA')
  const wrong = rateLimit(spec('wrong-ca', limitConfig(address, { caCertificateRefs: [{ kind: 'ConfigMap', name: 'other-ca' }] }), { 'global.tls': { 'ca.crt': other.certPem } }), pool)
  t.equal(await status(hook(wrong)), 429)
  t.match(linesWith('global rate limit unavailable').at(-1), { limit: 'wrong-ca', code: 'tls', error: /certificate/ })
})

t.test('tls-auth-clients yes: refused without a client certificate (not retried per request), accepted with clientCertificateRef', { skip }, async (t) => {
  const ca = createCa('redis mTLS CA')
  const leaf = serverCert(ca, ['localhost'])
  const limiterCert = clientCert(ca, 'sallyport-limiter')
  const redis = await startRedis(t, { tls: { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.certPem, authClients: true } })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  const address = `rediss://localhost:${redis.port}`
  const caOnly = { caCertificateRefs: [{ kind: 'ConfigMap', name: 'redis-ca' }] }

  clearLogs()
  const before = await metricValue('sallyport_rate_limit_redis_errors_total', { outcome: 'open' })
  const anonymous = rateLimit(spec('no-cert', limitConfig(address, caOnly, 'open'), { 'global.tls': { 'ca.crt': ca.certPem } }), pool)
  const began = Date.now()
  for (let i = 0; i < 20; i++) t.equal(await status(hook(anonymous)), 200, 'failureMode open lets it through')
  const elapsed = Date.now() - began
  t.equal(await metricValue('sallyport_rate_limit_redis_errors_total', { outcome: 'open' }) - before, 20, 'every failed decision counted')
  t.match(linesWith('global rate limit unavailable'), [{ limit: 'no-cert', code: 'tls', failOpen: true, error: /certificate required/ }])
  // TLS 1.3: the client sees its handshake done before the server refuses the
  // (absent) certificate; that refusal is a failed connection all the same,
  // tried again at most once a second, not a handshake per request.
  const started = Date.now()
  while (refusedHandshakes(redis) === 0 && Date.now() - started < 2000) await new Promise((r) => setTimeout(r, 20))
  const refused = refusedHandshakes(redis)
  t.ok(refused >= 1 && refused <= 1 + Math.floor(elapsed / 1000), `20 decisions in ${elapsed} ms: ${refused} handshake(s), each refused, at most one a second`)

  const mutual = { ...caOnly, clientCertificateRef: { name: 'limiter-cert' } }
  const withCert = rateLimit(spec('with-cert', limitConfig(address, mutual), { 'global.tls': { 'ca.crt': ca.certPem, 'tls.crt': limiterCert.certPem, 'tls.key': limiterCert.keyPem } }), pool)
  t.same([await status(hook(withCert)), await status(hook(withCert)), await status(hook(withCert)), await status(hook(withCert))], [200, 200, 200, 429])
  // AIUsage's budget reads budget.global.tls.
  const budget = aiUsage(spec('budget', { budget: { tokens: 10, unit: 'Hour', failureMode: 'closed', global: { redis: address, tls: mutual } } }, { 'budget.global.tls': { 'ca.crt': ca.certPem, 'tls.crt': limiterCert.certPem, 'tls.key': limiterCert.keyPem } }, 'AIUsage'), pool)
  t.equal(await status(hook(budget)), 200, 'a budget with tokens left, in Redis')

  // A certificate of another CA is refused by the Redis.
  const stranger = clientCert(createCa('not the redis CA'), 'stranger')
  const foreign = rateLimit(spec('foreign-cert', limitConfig(address, mutual), { 'global.tls': { 'ca.crt': ca.certPem, 'tls.crt': stranger.certPem, 'tls.key': stranger.keyPem } }), pool)
  t.equal(await status(hook(foreign)), 429)
  t.match(linesWith('global rate limit unavailable').at(-1), { limit: 'foreign-cert', code: 'tls', error: /unknown ca/ })
  t.notMatch(JSON.stringify(logLines), /PRIVATE KEY|BEGIN CERTIFICATE/, 'no key or certificate in any log line')
})

t.test('serverName: the name the certificate carries when the address does not (an IP, another name)', { skip }, async (t) => {
  const ca = createCa()
  const leaf = serverCert(ca, ['redis.limits.internal'], { ips: [] })
  const redis = await startRedis(t, { tls: { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.certPem } })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  const secrets = { 'global.tls': { 'ca.crt': ca.certPem } }
  const refs = [{ kind: 'Secret', name: 'redis-ca' }]
  clearLogs()
  const byHost = rateLimit(spec('by-host', limitConfig(`rediss://127.0.0.1:${redis.port}`, { caCertificateRefs: refs }), secrets), pool)
  t.equal(await status(hook(byHost)), 429, 'verified against the address: no such SAN')
  t.match(linesWith('global rate limit unavailable')[0], { limit: 'by-host', code: 'tls', error: /127\.0\.0\.1|altnames|does not match/ })
  const named = rateLimit(spec('named', limitConfig(`rediss://127.0.0.1:${redis.port}`, { caCertificateRefs: refs, serverName: 'Redis.Limits.Internal.' }), secrets), pool)
  t.same([await status(hook(named)), await status(hook(named)), await status(hook(named)), await status(hook(named))], [200, 200, 200, 429])
})

t.test('the pool keys clients by TLS identity: a rotated CA or client certificate gets a new connection, the old one closes', { skip }, async (t) => {
  const ca = createCa()
  const leaf = serverCert(ca, ['localhost'])
  const cert1 = clientCert(ca, 'one')
  const cert2 = clientCert(ca, 'two')
  const redis = await startRedis(t, { tls: { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.certPem, authClients: true } })
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  const target = { host: 'localhost', port: redis.port, tls: true }
  const a = pool.get(target, { ca: ca.certPem, cert: cert1.certPem, key: cert1.keyPem, timeoutMs: 3000 })
  t.equal(pool.get(target, { ca: ca.certPem, cert: cert1.certPem, key: cert1.keyPem, timeoutMs: 3000 }), a, 'the same identity: the same client')
  const b = pool.get(target, { ca: ca.certPem, cert: cert2.certPem, key: cert2.keyPem, timeoutMs: 3000 })
  t.not(b, a, 'another client certificate: another client')
  t.not(pool.get(target, { ca: `${ca.certPem}${createCa('second').certPem}`, cert: cert1.certPem, key: cert1.keyPem, timeoutMs: 3000 }), a, 'another CA bundle: another')
  t.not(pool.get(target, { ca: ca.certPem, cert: cert1.certPem, key: cert1.keyPem, servername: 'localhost', timeoutMs: 3000 }), a, 'another server name: another')
  t.equal(await a.command(['CLIENT', 'SETNAME', 'one']), 'OK')
  t.equal(await b.command(['CLIENT', 'SETNAME', 'two']), 'OK')
  const names = async (): Promise<string[]> => [...String(await b.command(['CLIENT', 'LIST'])).matchAll(/ name=(\w+)/g)].map((m) => m[1] as string).sort()
  t.same(await names(), ['one', 'two'])
  pool.release(a)
  pool.release(a)
  // The rotation's old connection: closed when its last user gave it back.
  const deadline = Date.now() + 5000
  while ((await names()).includes('one') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
  t.same(await names(), ['two'])
})

t.test('global.tls on a plain-TCP address: the limit cannot run (validate refuses it first)', async (t) => {
  const pool = new RedisPool()
  t.teardown(() => pool.close())
  t.throws(() => rateLimit(spec('plain', limitConfig('redis://127.0.0.1:6379', { serverName: 'redis.internal' }), {}), pool), /global\.tls: needs a rediss:\/\/ address/)
  t.throws(() => rateLimit(spec('unresolved', limitConfig('rediss://127.0.0.1:6379', { caCertificateRefs: [{ kind: 'ConfigMap', name: 'x' }] }), {}), pool), /the CA certificates of global\.tls are not resolved/)
  t.equal(pool.size, 0)
})
