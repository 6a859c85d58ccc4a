// Runtime in-process: readiness waits for a port of the table to bind.
import t from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { configureLogger } from '../../lib/observe/log.ts'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, tempDir } from '../e2e/harness.ts'

configureLogger({ level: 'silent' })
const { Runtime } = await import('../../lib/runtime/runtime.ts')
const { startDemoUpstream } = await import('../../lib/runtime/demo-upstream.ts')

t.test('a table whose only port cannot bind holds readiness back until it binds', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0 })
  t.teardown(() => upstream.close())
  const port = await freePort()
  const blocker = net.createServer()
  await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve))
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'c.yaml'), [gatewayYaml(port), backendYaml('b', upstream.address.port), routeYaml('r', 'r.example.test', 'b', upstream.address.port), 'kind: Nonsense\n'].join('---\n'))
  const changes: boolean[] = []
  const runtime = new Runtime({ configPaths: [dir], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, watch: false, onReadyChange: (r) => changes.push(r) })
  t.teardown(() => runtime.stop(0))
  await runtime.start()
  t.equal(runtime.ready(), false, 'port taken: not ready')
  t.ok(runtime.table() !== null, 'the table is applied all the same')
  const dump = runtime.configDump() as { failedPorts: Array<{ port: number }>; problems: Array<{ line: string }> }
  t.same(dump.failedPorts.map((f) => f.port), [port])
  t.match(dump.problems[0]?.line, /c\.yaml:4: Nonsense <no name>: apiVersion: required/)

  await new Promise<void>((resolve) => blocker.close(() => resolve()))
  await eventually(async () => runtime.ready(), (r) => r, 15000, 'ready after the port frees up')
  const r = await request(`http://127.0.0.1:${port}/`, { host: 'r.example.test' })
  t.equal(r.status, 200)
  t.same(changes, [true])

  await runtime.stop(0)
  t.equal(runtime.ready(), false, 'not ready once draining')
  t.same(changes, [true, false])
})

t.test('the swapped-in table serves at once; freeze, lookup index and status follow', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0 })
  t.teardown(() => upstream.close())
  const port = await freePort()
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'c.yaml'), [gatewayYaml(port), backendYaml('b', upstream.address.port), routeYaml('r', 'r.example.test', 'b', upstream.address.port)].join('---\n'))
  const applied: number[] = []
  let servedBeforeSettle: number | null = null
  const runtime = new Runtime({
    configPaths: [dir], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, watch: false,
    onApplied: ({ table }) => { applied.push(table.version) },
  })
  t.teardown(() => runtime.stop(0))
  const started = runtime.start()
  // The table is swapped in (and its port bound) before the runtime's settle step runs.
  await eventually(async () => runtime.table(), (table) => table !== null, 5000, 'table swapped in')
  const table = runtime.table()
  if (table === null) throw new Error('no table')
  if (applied.length === 0) {
    const r = await request(`http://127.0.0.1:${port}/`, { host: 'r.example.test' })
    servedBeforeSettle = r.status
  }
  await started
  t.equal(applied.length, 1, 'onApplied once, after the settle step')
  if (servedBeforeSettle !== null) t.equal(servedBeforeSettle, 200, 'served before the lookup index existed (the matcher walks the host maps)')
  t.ok(Object.isFrozen(table), 'the table is frozen once applied')
  const http = table.ports.get(port)?.http
  t.ok(http !== undefined && http !== null && Object.isFrozen(http.exact.get('r.example.test')), 'deeply')
  t.ok(http?.lookup?.index !== undefined, 'its lookup index is built')
  const dump = runtime.configDump() as { status: Array<{ kind: string; name: string }> }
  t.ok(dump.status.some((s) => s.kind === 'HTTPRoute' && s.name === 'r'), 'status is there')
  t.equal((await request(`http://127.0.0.1:${port}/`, { host: 'r.example.test' })).status, 200)
})
