// Metric series of configuration that is gone leave /metrics: a reload that
// replaces route A (its Backend, listener and port) with route B drops every
// series naming A's objects once --removed-series-seconds have passed, and
// keeps B's. Before, each route/backend ever served left ~37 series behind for
// good (600 reloads with new names: 813 → 23,013 lines of /metrics). With
// --workers the primary's counts of a dead worker go the same way.
import t from 'tap'
import type { Test } from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { backendYaml, eventually, freePort, gatewayYaml, metricSum, request, routeYaml, settleLogs, startCli, tempDir, type Cli } from './harness.ts'

/** Route `name` to Backend `name` on listener `http-<name>` of port `port`. */
function config(name: string, port: number, upstreamPort: number): string {
  return [
    gatewayYaml(port).replace('- name: http\n', `- name: http-${name}\n`),
    backendYaml(name, upstreamPort),
    routeYaml(name, `${name}.example.test`, name, upstreamPort),
  ].join('---\n')
}

/** Lines of the exposition that name route A's objects. */
function namingA(text: string, portA: number, upstreamPort: number): string[] {
  return text.split('\n').filter((l) => !l.startsWith('#') && (
    l.includes('route="default/a"') || l.includes(`backend="Backend/default/a:${upstreamPort}"`) ||
    l.includes('listener="http-a"') || l.includes(`port="${portA}"`)))
}

async function swapAndCheck(t: Test, cli: Cli, dir: string, ports: { a: number; b: number; admin: number; upstream: number }): Promise<void> {
  const admin = `http://127.0.0.1:${ports.admin}`
  const scrape = async (): Promise<string> => (await request(`${admin}/metrics`)).body
  // Series of A, as before the fix: present while A serves.
  const before = await eventually(scrape, (m) => metricSum(m, 'sallyport_downstream_requests_total', { route: 'default/a', code: '200' }) === 6, 5000, 'A counted')
  t.ok(metricSum(before, 'sallyport_upstream_request_duration_seconds_count', { backend: `Backend/default/a:${ports.upstream}` }) >= 6, 'A\'s backend has its upstream series')
  t.ok(namingA(before, ports.a, ports.upstream).length > 30, 'A\'s objects name many series')

  fs.writeFileSync(path.join(dir, 'config.yaml'), config('b', ports.b, ports.upstream))
  // Fresh connections go to the workers in turn: B answers once every one has reloaded.
  await eventually(async () => {
    const codes: number[] = []
    for (let i = 0; i < 4; i++) codes.push((await request(`http://127.0.0.1:${ports.b}/b${i}`, { host: 'b.example.test' })).status)
    return codes
  }, (codes) => codes.every((c) => c === 200), 15000, 'B serves')

  // Bounded: --removed-series-seconds 1, then the next sweep.
  await eventually(async () => namingA(await scrape(), ports.a, ports.upstream), (lines) => lines.length === 0, 15000, 'no series naming route A, its Backend, listener or port')
  const after = await scrape()
  t.same(namingA(after, ports.a, ports.upstream), [], 'A\'s series are gone')
  t.ok(metricSum(after, 'sallyport_downstream_requests_total', { route: 'default/b', listener: 'http-b', code: '200' }) >= 4, 'B\'s requests are counted')
  t.ok(metricSum(after, 'sallyport_upstream_request_duration_seconds_count', { backend: `Backend/default/b:${ports.upstream}` }) >= 4, 'B\'s backend has its upstream series')
  t.match(after, /^sallyport_config_reloads_total\{source="file"\} [1-9]/m, 'series naming no configuration object stay')
  await settleLogs()
  t.notMatch(cli.stdout() + cli.stderr(), /removing the metric series/, 'no sweep failed')
}

async function setup(t: Test): Promise<{ dir: string; ports: { a: number; b: number; admin: number; upstream: number } }> {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0 })
  t.teardown(() => upstream.close())
  const ports = { a: await freePort(), b: await freePort(), admin: await freePort(), upstream: upstream.address.port }
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), config('a', ports.a, ports.upstream))
  return { dir, ports }
}

t.test('CLI: a reload that removes a route, its Backend, listener and port drops their series', async (t) => {
  const { dir, ports } = await setup(t)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${ports.admin}`, '--access-log', 'off', '--removed-series-seconds', '1'])
  await eventually(() => request(`http://127.0.0.1:${ports.admin}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  for (let i = 0; i < 6; i++) t.equal((await request(`http://127.0.0.1:${ports.a}/a${i}`, { host: 'a.example.test' })).status, 200)
  await swapAndCheck(t, cli, dir, ports)
  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0)
})

t.test('CLI --workers 2: the counts kept from a dead worker go with the objects they name', async (t) => {
  const { dir, ports } = await setup(t)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${ports.admin}`, '--access-log', 'off', '--workers', '2', '--drain-seconds', '1', '--removed-series-seconds', '1'])
  const admin = `http://127.0.0.1:${ports.admin}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 30000, 'all workers ready')
  for (let i = 0; i < 6; i++) t.equal((await request(`http://127.0.0.1:${ports.a}/a${i}`, { host: 'a.example.test' })).status, 200)
  await eventually(async () => (await request(`${admin}/metrics`)).body, (m) => metricSum(m, 'sallyport_downstream_requests_total', { route: 'default/a' }) === 6, 5000, 'A counted')
  // A worker dies: the primary keeps what it counted (workers.test.ts), A's requests among it.
  await settleLogs()
  const [victim] = [...new Set([...cli.stdout().matchAll(/"pid":(\d+)/g)].map((m) => Number(m[1])))].filter((pid) => pid !== cli.child.pid)
  t.ok(victim !== undefined, 'a worker pid')
  process.kill(victim as number, 'SIGKILL')
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 503, 5000, '/readyz 503 while a worker is missing')
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 30000, '/readyz 200 once the worker is replaced')
  await swapAndCheck(t, cli, dir, ports)
  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0)
})
