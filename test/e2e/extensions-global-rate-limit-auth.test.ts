// The global rate limit on a production-like Redis: AUTH required, and TLS.
// Two gateway processes share one bucket in a redis-server that takes only TLS
// (rediss://, its certificate from a test CA the children trust through
// NODE_EXTRA_CA_CERTS) and requires a password, which comes from the Secret of
// global.secretRef: 5 per minute in total, the sixth is 429. With a wrong
// password in the Secret, failureMode closed answers 429 and the log names the
// refused AUTH, never the password; a BackendTrafficPolicy gets its password
// from the Secret of sallyport.io/rate-limit-redis-secret. `validate` refuses
// a Redis URL with credentials in it, naming file, object and field.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { backendYaml, eventually, freePort, gatewayYaml, runCli, settleLogs, startCli, tempDir, type Cli } from './harness.ts'
import { egressBackend, get, route } from './extensions-helpers.ts'
import { hasRedis, startRedis } from '../helpers/redis-server.ts'
import { createCa, serverCert } from '../helpers/pki.ts'

const skip = hasRedis ? false : 'redis-server is not installed'
const PASSWORD = 'e2e-Redis-pw-5521'

function secretYaml(name: string, data: Record<string, string>): string {
  return `apiVersion: v1
kind: Secret
metadata: { name: ${name}, namespace: default }
stringData: ${JSON.stringify(data)}
`
}

function limitYaml(redis: string, failureMode: 'open' | 'closed'): string {
  return `  - name: per-route
    type: RateLimit
    config:
      requests: 5
      unit: Minute
      key: [route]
      global:
        redis: ${redis}
        timeoutMs: 2000
        secretRef: { name: redis-auth }
      failureMode: ${failureMode}
`
}

interface Started { readonly cli: Cli; readonly http: number; readonly admin: number }

async function serve(t: Test, docs: Record<string, string>, env: Record<string, string> = {}): Promise<Started> {
  const [http, admin] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(http))
  for (const [name, text] of Object.entries(docs)) fs.writeFileSync(path.join(dir, name), text)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${admin}`], { env })
  await eventually(() => get(`http://127.0.0.1:${admin}/readyz`, 'x'), (r) => r.status === 200, 20000, 'ready')
  return { cli, http, admin }
}

t.test('CLI ×2: rediss:// with AUTH from global.secretRef, one bucket for both', { skip }, async (t) => {
  const ca = createCa()
  const leaf = serverCert(ca, ['localhost'])
  const redis = await startRedis(t, { args: ['--requirepass', PASSWORD], tls: { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.certPem } })
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'api' })
  t.teardown(() => upstream.close())
  const up = upstream.address.port
  const caFile = path.join(tempDir(t), 'ca.pem')
  fs.writeFileSync(caFile, ca.certPem)
  const docs = {
    'backend.yaml': egressBackend('api', up, limitYaml(`rediss://localhost:${redis.port}`, 'closed')),
    'route.yaml': route('api', 'api.example.test', 'api', up),
    'secret.yaml': secretYaml('redis-auth', { password: PASSWORD }),
  }
  const [g1, g2] = await Promise.all([serve(t, docs, { NODE_EXTRA_CA_CERTS: caFile }), serve(t, docs, { NODE_EXTRA_CA_CERTS: caFile })])

  const statuses: number[] = []
  for (let i = 0; i < 5; i++) statuses.push((await get(`http://127.0.0.1:${(i % 2 === 0 ? g1 : g2).http}/`, 'api.example.test')).status)
  t.same(statuses, [200, 200, 200, 200, 200], 'five requests across both processes pass (failureMode closed: Redis answered each)')
  const sixth = await get(`http://127.0.0.1:${g2.http}/`, 'api.example.test')
  t.equal(sixth.status, 429, 'the sixth is limited')
  t.match(String(sixth.headers.ratelimit), /^"per-route";r=0;t=\d+$/, 'by the count in Redis')
  t.equal((await get(`http://127.0.0.1:${g1.http}/`, 'api.example.test')).status, 429, 'on either process')

  const dump = (await get(`http://127.0.0.1:${g1.admin}/config_dump`, 'x')).body
  t.match(dump, `rediss://localhost:${redis.port}`)
  t.notMatch(dump, PASSWORD, 'the password is not in /config_dump')
  await settleLogs()
  t.notMatch(g1.cli.stdout() + g1.cli.stderr(), PASSWORD, 'nor in the log')
  t.notMatch(g1.cli.stdout(), 'global rate limit unavailable', 'no Redis failure')
})

t.test('CLI: a wrong password in the Secret: failureMode closed answers 429, the log names the refused AUTH', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--requirepass', 'the-real-password'] })
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'api' })
  t.teardown(() => upstream.close())
  const up = upstream.address.port
  const g = await serve(t, {
    'backend.yaml': egressBackend('api', up, limitYaml(`127.0.0.1:${redis.port}`, 'closed')),
    'route.yaml': route('api', 'api.example.test', 'api', up),
    'secret.yaml': secretYaml('redis-auth', { password: PASSWORD }),
  })
  const r = await get(`http://127.0.0.1:${g.http}/`, 'api.example.test')
  t.equal(r.status, 429, 'closed: refused')
  t.equal(r.headers['retry-after'], '1')
  const line = await g.cli.waitFor(/\{[^\n]*"msg":"global rate limit unavailable"[^\n]*\}/)
  t.match(JSON.parse(line), { component: 'rate-limit', limit: 'per-route', code: 'auth_refused', failOpen: false, error: /^redis 127\.0\.0\.1:\d+ refused AUTH: WRONGPASS/ })
  const metrics = await get(`http://127.0.0.1:${g.admin}/metrics`, 'x')
  t.match(metrics.body, /sallyport_rate_limit_redis_errors_total\{outcome="closed"\} [1-9]/, 'counted')
  await settleLogs()
  t.notMatch(g.cli.stdout() + g.cli.stderr(), PASSWORD, 'the password is in no log line')
  t.notMatch((await get(`http://127.0.0.1:${g.admin}/config_dump`, 'x')).body, PASSWORD, 'nor in /config_dump')
})

t.test('CLI: BackendTrafficPolicy Global with sallyport.io/rate-limit-redis-secret', { skip }, async (t) => {
  const redis = await startRedis(t, { args: ['--user', 'default', 'off', '--user', 'limiter', 'on', `>${PASSWORD}`, '~*', '+@all'] })
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'api' })
  t.teardown(() => upstream.close())
  const up = upstream.address.port
  const g = await serve(t, {
    'backend.yaml': backendYaml('api', up),
    'route.yaml': route('api', 'api.example.test', 'api', up),
    'secret.yaml': secretYaml('redis-acl', { username: 'limiter', password: PASSWORD }),
    'policy.yaml': `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: per-route
  namespace: default
  annotations:
    sallyport.io/rate-limit-redis: "redis://127.0.0.1:${redis.port}"
    sallyport.io/rate-limit-redis-secret: redis-acl
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: api }]
  rateLimit:
    type: Global
    global:
      rules:
      - limit: { requests: 3, unit: Minute }
`,
  })
  const statuses: number[] = []
  for (let i = 0; i < 4; i++) statuses.push((await get(`http://127.0.0.1:${g.http}/`, 'api.example.test')).status)
  t.same(statuses, [200, 200, 200, 429])
  await settleLogs()
  t.notMatch(g.cli.stdout(), 'global rate limit unavailable', 'counted in Redis as the ACL user (default is off)')
})

t.test('CLI validate: credentials in global.redis are an error naming file, object and field', async (t) => {
  const dir = tempDir(t)
  const file = path.join(dir, 'backend.yaml')
  fs.writeFileSync(file, egressBackend('api', 8080, limitYaml(`rediss://limiter:${PASSWORD}@redis.infra:6380`, 'open')))
  const v = await runCli(t, ['validate', file])
  t.equal(v.code, 1)
  t.equal(v.stdout.trim(), `${file}:0: Backend default/api: spec.extensions[0].config.global.redis: credentials in the Redis URL would show in logs and /config_dump: put them in the Secret named by global.secretRef`)
  t.notMatch(v.stdout + v.stderr, PASSWORD)
})
