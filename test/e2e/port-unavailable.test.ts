// `sallyport serve` with a listener whose port another socket holds: the other
// listener serves, /readyz says ready (one listener's port is not the replica's
// problem), and the status (/config_dump, and what Kubernetes mode writes) says
// the listener is not programmed and why, until the bind retry gets the port.
import t from 'tap'
import fs from 'node:fs'
import net, { type AddressInfo } from 'node:net'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { backendYaml, eventually, freePort, gatewayYaml, metricSum, request, routeYaml, runCli, startCli, tempDir } from './harness.ts'

interface Condition { type: string; status: string; reason: string; message: string }
interface ObjectStatus { kind: string; namespace: string; name: string; conditions: Condition[]; listeners: Array<{ name: string; conditions: Condition[] }> }

function programmed(conditions: readonly Condition[] | undefined): Condition | undefined {
  return conditions?.find((c) => c.type === 'Programmed')
}

t.test('a listener whose port is taken is Programmed=False until the port frees up', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0 })
  t.teardown(() => upstream.close())
  const [freeListenerPort, heldPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const squatter = net.createServer((s) => s.destroy())
  await new Promise<void>((resolve) => squatter.listen(heldPort, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { if (squatter.listening) squatter.close(() => resolve()); else resolve() }))
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(freeListenerPort, `    - name: http1
      protocol: HTTP
      port: ${heldPort}
`),
    backendYaml('up', upstream.address.port), routeYaml('r1', 'a.example.test', 'up', upstream.address.port),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--access-log', 'off'])
  const admin = `http://127.0.0.1:${adminPort}`
  const gatewayStatus = async (): Promise<ObjectStatus | undefined> => {
    const dump = JSON.parse((await request(`${admin}/config_dump`)).body) as { status: ObjectStatus[] }
    return dump.status.find((s) => s.kind === 'Gateway' && s.name === 'egress')
  }
  const listener = (gw: ObjectStatus | undefined, name: string): Condition | undefined => programmed(gw?.listeners.find((l) => l.name === name)?.conditions)

  await cli.waitFor(/route table applied/)
  const gw = await eventually(gatewayStatus, (g) => g !== undefined && listener(g, 'http1')?.status === 'False', 5000, 'listener http1 Programmed=False')
  const failed = listener(gw, 'http1')
  t.equal(failed?.reason, 'Pending', 'reason Pending: not online yet, the bind is retried')
  t.match(failed?.message, new RegExp(`\\b${heldPort}\\b`), 'the message names the port')
  t.match(failed?.message, /EADDRINUSE/, 'and the OS error')
  t.equal(listener(gw, 'http')?.status, 'True', 'the other listener is programmed')
  const gwProgrammed = programmed(gw?.conditions)
  t.equal(gwProgrammed?.status, 'True', 'the Gateway is programmed: one of its listeners is')
  t.match(gwProgrammed?.message, /1 of 2 listeners .*http1/, 'its message says which listener is not')

  t.equal((await request(`http://127.0.0.1:${freeListenerPort}/`, { host: 'a.example.test' })).status, 200, 'the free port serves')
  t.equal((await request(`${admin}/readyz`)).status, 200, '/readyz: ready, a port of the table serves (the other is its listener\'s problem, in status)')

  // The error line names the Gateway and listener, not only the port.
  const line = (cli.stdout() + cli.stderr()).split('\n').find((l) => l.includes('cannot listen on port'))
  t.ok(line !== undefined, 'the bind failure is logged')
  t.match(line, /"listeners":\["default\/egress\/http1"\]/, 'naming the Gateway and listener')
  t.match(line, new RegExp(`"port":${heldPort}\\b`))

  // Each bind retry re-applies the table, but only the reload counts as a failure (it counted every retry).
  const bindErrors = (): number => (cli.stdout() + cli.stderr()).split('\n').filter((l) => l.includes('cannot listen on port')).length
  await eventually(async () => bindErrors(), (n) => n >= 3, 10000, 'two bind retries')
  const m = (await request(`${admin}/metrics`)).body
  t.equal(metricSum(m, 'sallyport_config_reload_failures_total', { reason: 'listen' }), 1, 'one reload with a listen failure, however many retries')
  t.equal(metricSum(m, 'sallyport_config_reloads_total'), 1, 'one reload')

  // Freeing the port: the retry binds it and the status says so.
  await new Promise<void>((resolve) => squatter.close(() => resolve()))
  const after = await eventually(gatewayStatus, (g) => listener(g, 'http1')?.status === 'True', 20000, 'listener http1 Programmed=True after the port frees up')
  t.equal(listener(after, 'http1')?.reason, 'Programmed')
  t.equal(programmed(after?.conditions)?.message, '', 'the Gateway message is clear again')
  t.equal((await request(`${admin}/readyz`)).status, 200, '/readyz 200 still')
  t.equal((await request(`http://127.0.0.1:${heldPort}/`, { host: 'a.example.test' })).status, 200, 'the freed port serves')

  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0)
})

t.test('an admin address that cannot be bound: one line naming it and --admin, no stack, exit 1', async (t) => {
  const held = net.createServer()
  await new Promise<void>((resolve) => held.listen(0, '127.0.0.1', resolve))
  t.teardown(() => held.close())
  const port = (held.address() as AddressInfo).port
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(await freePort()))
  const r = await runCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${port}`])
  t.equal(r.code, 1)
  t.match(r.stderr, new RegExp(`^sallyport: cannot listen on the admin address 127\\.0\\.0\\.1:${port} \\(--admin\\): .*EADDRINUSE`))
  t.notMatch(r.stderr, /\n\s+at /, 'no stack trace')
})
