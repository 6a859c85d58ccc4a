// The real CLI and an HTTP/2 (h2c) upstream whose connection goes away in the
// middle of a response body: node's client stream then emits 'end' as if the
// body were whole. The client must see a cut response (HTTP/1.1: the
// connection closes without the last chunk; HTTP/2: the stream is reset),
// and the access line an upstream reset, never a complete 200.
import t from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import path from 'node:path'
import { backendYaml, curl, eventually, freePort, gatewayYaml, routeYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

t.test('CLI: an h2c upstream lost mid-body gives the client a cut response, logged as a reset', async (t) => {
  const up = http2.createServer()
  up.on('stream', (stream, headers) => {
    stream.on('error', () => {})
    stream.respond({ ':status': 200, 'content-type': 'text/plain' })
    if (headers[':path'] === '/whole') { stream.end('whole\n'); return }
    stream.write('part of it\n')
    setTimeout(() => stream.session?.socket?.destroy(), 50)
  })
  up.on('session', (session) => { up.once('close', () => session.destroy()) })
  const upPort = await listenLoopback(up)
  t.teardown(() => new Promise<void>((resolve) => up.close(() => resolve())))
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', upPort).replace('spec:\n', 'spec:\n  appProtocols:\n    - gateway.envoyproxy.io/h2c\n'))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', upPort))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  const base = `http://127.0.0.1:${port}`
  const host = ['-H', 'Host: api.example.test']

  const whole = await curl([...host, `${base}/whole`])
  t.same([whole.code, whole.stdout], [0, 'whole\n'], 'a whole body passes')

  const h1 = await curl([...host, `${base}/cut`])
  t.equal(h1.code, 18, 'HTTP/1.1 client: the transfer ends with data outstanding (curl 18), not as complete')
  t.equal(h1.stdout, 'part of it\n', 'what came before was passed on')
  const h2 = await curl(['--http2-prior-knowledge', ...host, `${base}/cut`])
  t.equal(h2.code, 92, 'HTTP/2 client: the stream is reset (curl 92)')
  await cli.waitFor(/"path":"\/cut","status":200[^\n]*"protocol":"h1"[^\n]*"code":"SP_ERR_UPSTREAM_RESET"/, 5000)
  await cli.waitFor(/"path":"\/cut","status":200[^\n]*"protocol":"h2"[^\n]*"code":"SP_ERR_UPSTREAM_RESET"/, 5000)
  t.pass('both logged as upstream resets')
})
