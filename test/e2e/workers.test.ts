// `serve --workers 2`: both workers serve the shared port, the primary's /metrics aggregates them.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, settleLogs, startCli, tempDir } from './harness.ts'

t.test('serve --workers 2', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0 })
  t.teardown(() => upstream.close())
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(httpPort), backendYaml('demo', upstream.address.port), routeYaml('demo', 'demo.example.test', 'demo', upstream.address.port),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--workers', '2', '--drain-seconds', '2', '--access-log', 'off'])
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 30000, 'all workers ready')

  for (let i = 0; i < 10; i++) {
    const r = await request(`http://127.0.0.1:${httpPort}/w${i}`, { host: 'demo.example.test' })
    t.equal(r.status, 200)
  }
  t.equal(upstream.requests(), 10)

  // Counters are summed across workers: each worker loaded the configuration once.
  const m = await request(`${admin}/metrics`)
  t.equal(m.status, 200)
  t.match(m.body, /^sallyport_config_reloads_total\{source="file"\} 2$/m)

  const dump = JSON.parse((await request(`${admin}/config_dump`)).body) as { version: number; table: unknown }
  t.ok(dump.version >= 1)
  t.ok(dump.table !== null)

  // Every worker watches and reloads by itself: a new route answers on all of them.
  fs.appendFileSync(path.join(dir, 'config.yaml'), `---\n${routeYaml('more', 'more.example.test', 'demo', upstream.address.port)}`)
  await eventually(() => request(`http://127.0.0.1:${httpPort}/`, { host: 'more.example.test' }), (r) => r.status === 200, 15000, 'new route')
  await eventually(async () => {
    const codes = []
    for (let i = 0; i < 8; i++) codes.push((await request(`http://127.0.0.1:${httpPort}/`, { host: 'more.example.test' })).status)
    return codes
  }, (codes) => codes.every((c) => c === 200), 15000, 'new route on every worker')

  // Two worker pids plus the primary appear in the logs.
  await settleLogs()
  const pids = new Set([...cli.stdout().matchAll(/"pid":(\d+)/g)].map((m) => m[1]))
  t.ok(pids.size >= 3, `pids seen: ${[...pids].join(',')}`)

  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0)
})
