// `serve --workers N` whose primary is killed hard (SIGKILL, an OOM kill): each
// worker drains what it has in flight, then exits. node's cluster child exits
// at once on an unexpected disconnect, which reset those requests.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from './harness.ts'
import { listenLoopback } from '../helpers/ports.ts'

function alive(pid: number): boolean {
  try { process.kill(pid, 0); return true } catch { return false }
}

t.test('serve --workers 1: a primary killed hard leaves its worker to drain, then exit', async (t) => {
  let arrived = 0
  const up = http.createServer((req, res) => {
    arrived++
    if (req.url === '/slow') setTimeout(() => res.end('finished'), 1500)
    else res.end('ok')
  })
  const upPort = await listenLoopback(up)
  t.teardown(() => { up.closeAllConnections(); up.close() })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(port), backendYaml('api', upPort), routeYaml('api', 'api.example.test', 'api', upPort)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--workers', '1', '--drain-seconds', '10'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 30000, 'the worker ready')
  const primary = cli.child.pid as number
  const worker = Number(execFileSync('pgrep', ['-P', String(primary)], { encoding: 'utf8' }).trim().split('\n')[0])
  t.ok(worker > 0, 'found the worker')
  t.teardown(() => { if (alive(worker)) process.kill(worker, 'SIGKILL') })

  const slow = request(`http://127.0.0.1:${port}/slow`, { host: 'api.example.test', timeoutMs: 10000 }).catch((err: Error) => err)
  await eventually(async () => arrived, (n) => n === 1, 5000, 'the request at the upstream')
  cli.child.kill('SIGKILL')
  const r = await slow
  t.notOk(r instanceof Error, `the request in flight was not reset (${r instanceof Error ? r.message : 'ok'})`)
  if (!(r instanceof Error)) t.same([r.status, r.body], [200, 'finished'], 'it finished through the orphaned worker')
  await eventually(async () => alive(worker), (a) => !a, 15000, 'the worker exited after its drain')
  t.pass('the worker exited')
})
