// Requests still running when a drain's grace period (--drain-seconds) runs
// out are cut by the gateway: their access lines say so (SP_ERR_SHUTTING_DOWN,
// 503), on HTTP/1.1 and HTTP/2. They were logged 499 "client aborted", so the
// gateway's own shutdown cuts counted as clients going away.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, routeYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

t.test('CLI: requests cut when the drain period runs out are logged as the gateway\'s cut', async (t) => {
  // An upstream that never answers.
  let requests = 0
  const up = http.createServer(() => { requests++ })
  const upPort = await listenLoopback(up)
  t.teardown(() => { up.closeAllConnections(); up.close() })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', upPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', upPort))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1'])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const h1 = net.connect(port, '127.0.0.1')
  h1.on('error', () => {})
  h1.write('GET /h1-slow HTTP/1.1\r\nHost: api.example.test\r\n\r\n')
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  const stream = session.request({ ':path': '/h2-slow', ':authority': 'api.example.test' })
  stream.on('error', () => {})
  await eventually(async () => requests, (n) => n === 2, 5000, 'both requests at the upstream')
  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0, 'exits 0 after the grace period')
  h1.destroy()
  session.destroy()
  const line = (p: string): Record<string, unknown> => {
    const m = new RegExp(`\\{[^\\n]*"component":"access"[^\\n]*"path":"${p}"[^\\n]*\\}`).exec(cli.stdout())
    return m === null ? {} : JSON.parse(m[0]) as Record<string, unknown>
  }
  t.match(line('/h1-slow'), { status: 503, code: 'SP_ERR_SHUTTING_DOWN', reason: 'cut when the listener closed (its grace period ran out)' }, 'HTTP/1.1: the gateway\'s cut, not a client abort')
  t.match(line('/h2-slow'), { status: 503, code: 'SP_ERR_SHUTTING_DOWN' }, 'HTTP/2: the same')
})
