// `serve --workers 2`: both workers serve the shared port, the primary's /metrics aggregates them,
// and keeps a killed worker's counts once it is replaced.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { backendYaml, eventually, freePort, gatewayYaml, metricSum, request, routeYaml, settleLogs, startCli, tempDir, type Cli } from './harness.ts'

/** A demo upstream and `serve --workers 2` routing demo.example.test to it, all workers ready. */
async function startWorkers(t: Test, extra: readonly string[]): Promise<{ upstream: Awaited<ReturnType<typeof startDemoUpstream>>; httpPort: number; admin: string; cli: Cli; dir: string }> {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0 })
  t.teardown(() => upstream.close())
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(httpPort), backendYaml('demo', upstream.address.port), routeYaml('demo', 'demo.example.test', 'demo', upstream.address.port),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--workers', '2', '--access-log', 'off', ...extra])
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 30000, 'all workers ready')
  return { upstream, httpPort, admin, cli, dir }
}

t.test('serve --workers 2', async (t) => {
  const { upstream, httpPort, admin, cli, dir } = await startWorkers(t, ['--drain-seconds', '2'])

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

t.test('serve --workers 2: counters do not go back when a worker is killed and replaced', async (t) => {
  const { httpPort, admin, cli } = await startWorkers(t, ['--drain-seconds', '1'])
  const scrape = async (): Promise<string> => (await request(`${admin}/metrics`)).body
  const requests = (m: string): number => metricSum(m, 'sallyport_downstream_requests_total', { code: '200' })
  const durations = (m: string): number => metricSum(m, 'sallyport_downstream_request_duration_seconds_count')
  const cpu = (m: string): number => metricSum(m, 'sallyport_process_process_cpu_seconds_total')

  // Fresh connections: the primary hands them to the workers in turn, so both serve some.
  const N = 40
  for (let i = 0; i < N; i++) t.equal((await request(`http://127.0.0.1:${httpPort}/n${i}`, { host: 'demo.example.test' })).status, 200)
  const before = await eventually(scrape, (m) => requests(m) === N, 5000, `${N} requests counted`)
  t.equal(durations(before), N, 'and observed in the duration histogram')
  const cpuBefore = cpu(before)

  // The workers are the pids other than the primary's in the log.
  const workerPids = async (): Promise<number[]> => {
    await settleLogs()
    return [...new Set([...cli.stdout().matchAll(/"pid":(\d+)/g)].map((m) => Number(m[1])))].filter((pid) => pid !== cli.child.pid)
  }
  const [victim] = await workerPids()
  t.ok(victim !== undefined, 'a worker pid')
  process.kill(victim as number, 'SIGKILL')
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 503, 5000, '/readyz 503 while a worker is missing')
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 30000, '/readyz 200 once the worker is replaced')

  const after = await scrape()
  t.equal(requests(after), N, 'the aggregated request counter did not go down (the dead worker\'s counts are kept)')
  t.equal(durations(after), N, 'nor the histogram count')
  t.ok(cpu(after) >= cpuBefore, 'nor a process counter (CPU seconds)')
  for (let i = 0; i < 10; i++) t.equal((await request(`http://127.0.0.1:${httpPort}/m${i}`, { host: 'demo.example.test' })).status, 200)
  t.equal(requests(await scrape()), N + 10, 'and counts on from there')

  // A per-process limit is not summed over the workers.
  let limits = ''
  try { limits = fs.readFileSync(`/proc/${cli.child.pid}/limits`, 'utf8') } catch { /* not Linux: no max_fds metric either */ }
  const soft = /^Max open files\s+(\d+)/m.exec(limits)?.[1]
  if (soft !== undefined) t.equal(metricSum(after, 'sallyport_process_process_max_fds'), Number(soft), 'max fds: the per-process limit, not the sum over workers')

  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0)
})

t.test('serve --workers: a worker whose event loop stops answering is killed and replaced by the watchdog', async (t) => {
  const { httpPort, admin, cli } = await startWorkers(t, ['--worker-watchdog-seconds', '2', '--drain-seconds', '1'])
  await settleLogs()
  const [victim] = [...new Set([...cli.stdout().matchAll(/"pid":(\d+)/g)].map((m) => Number(m[1])))].filter((pid) => pid !== cli.child.pid)
  t.ok(victim !== undefined, 'a worker pid')
  // SIGSTOP stands in for an event loop that never returns: the process is alive, and answers nothing.
  process.kill(victim as number, 'SIGSTOP')
  t.teardown(() => { try { process.kill(victim as number, 'SIGKILL') } catch { /* gone */ } })
  await cli.waitFor(new RegExp(`"pid":${victim},"silentMs":\\d+,"msg":"worker stopped answering; killing it \\(it is replaced\\)"`), 15000)
  t.pass('the watchdog names the worker it kills')
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 30000, '/readyz 200 once the worker is replaced')
  for (let i = 0; i < 10; i++) t.equal((await request(`http://127.0.0.1:${httpPort}/w${i}`, { host: 'demo.example.test' })).status, 200, 'fresh connections are all served')
  t.equal(cli.child.exitCode, null, 'the gateway keeps running')
})
