// A global rate limit shared by two gateway processes over one real
// redis-server: 5 requests per minute in total, whichever process serves them;
// the sixth gets 429 with Retry-After and the RateLimit fields. Then Redis goes
// away: failureMode open lets requests through (counted), without a RateLimit
// field (the count is unknown).
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { spawn, spawnSync } from 'node:child_process'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { eventually, freePort, gatewayYaml, startCli, tempDir } from './harness.ts'
import { egressBackend, get, route } from './extensions-helpers.ts'

const hasRedis = spawnSync('redis-server', ['--version']).status === 0

t.test('CLI ×2: one global token bucket in Redis', { skip: hasRedis ? false : 'redis-server is not installed' }, async (t) => {
  const redisPort = await freePort()
  const redis = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  const redisExited = new Promise((r) => redis.once('exit', r))
  t.teardown(async () => { if (redis.exitCode === null) { redis.kill('SIGKILL'); await redisExited } })
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'api' })
  t.teardown(() => upstream.close())
  const up = upstream.address.port
  const dir = tempDir(t)
  const [p1, p2, a1, a2] = [await freePort(), await freePort(), await freePort(), await freePort()]
  const files = (port: number): string => {
    const d = path.join(dir, String(port))
    fs.mkdirSync(d)
    fs.writeFileSync(path.join(d, 'gateway.yaml'), gatewayYaml(port))
    fs.writeFileSync(path.join(d, 'backend.yaml'), egressBackend('api', up, `  - name: per-route
    type: RateLimit
    config:
      requests: 5
      unit: Minute
      key: [route]
      global:
        redis: 127.0.0.1:${redisPort}
      failureMode: open
`))
    fs.writeFileSync(path.join(d, 'route.yaml'), route('api', 'api.example.test', 'api', up))
    return d
  }
  const c1 = startCli(t, ['serve', '--config', files(p1), '--bind', '127.0.0.1', '--admin', `127.0.0.1:${a1}`])
  const c2 = startCli(t, ['serve', '--config', files(p2), '--bind', '127.0.0.1', '--admin', `127.0.0.1:${a2}`])
  for (const a of [a1, a2]) await eventually(() => get(`http://127.0.0.1:${a}/readyz`, 'x'), (r) => r.status === 200, 20000, 'ready')
  // Redis ready?
  await eventually(async () => spawnSync('redis-cli', ['-p', String(redisPort), 'ping']).stdout.toString(), (s) => s.includes('PONG'), 10000, 'redis up')

  const statuses: number[] = []
  for (let i = 0; i < 5; i++) statuses.push((await get(`http://127.0.0.1:${i % 2 === 0 ? p1 : p2}/`, 'api.example.test')).status)
  t.same(statuses, [200, 200, 200, 200, 200], 'five requests across both processes pass')
  const sixth = await get(`http://127.0.0.1:${p2}/`, 'api.example.test')
  t.equal(sixth.status, 429, 'the sixth, on either process, is limited')
  const seventh = await get(`http://127.0.0.1:${p1}/`, 'api.example.test')
  t.equal(seventh.status, 429, 'the budget is shared')
  t.ok(Number(sixth.headers['retry-after']) >= 1, 'Retry-After')
  t.equal(sixth.headers['ratelimit-policy'], '"per-route";q=5;w=60', 'RateLimit-Policy')
  t.match(String(sixth.headers.ratelimit), /^"per-route";r=0;t=\d+$/, 'RateLimit')

  redis.kill('SIGKILL')
  await redisExited
  const open = await eventually(() => get(`http://127.0.0.1:${p1}/`, 'api.example.test'), (r) => r.status === 200, 10000, 'fail open')
  t.equal(open.status, 200, 'Redis down: failureMode open lets requests through')
  t.equal(open.headers['ratelimit-policy'], '"per-route";q=5;w=60', 'with RateLimit-Policy')
  t.equal(open.headers.ratelimit, undefined, 'but no RateLimit field: the count is unknown, not zero')
  const metrics = await get(`http://127.0.0.1:${a1}/metrics`, 'x')
  t.match(metrics.body, /sallyport_rate_limit_redis_errors_total\{outcome="open"\} [1-9]/, 'counted')
  void c1; void c2
})
