// `serve --admin off` on a configuration with nothing to listen on yet (an empty
// directory, manifests without a Gateway) keeps running and serves the files
// that come later. It used to exit 0 at once: with no admin server and no
// listener, nothing kept the process alive but the file watches, which do not.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from './harness.ts'

t.test('CLI: serve --admin off with nothing to serve yet waits for configuration', async (t) => {
  const up = http.createServer((_req, res) => res.end('up'))
  await new Promise<void>((resolve) => up.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { up.closeAllConnections(); up.close() })
  const upPort = (up.address() as { port: number }).port
  const port = await freePort()
  const dir = tempDir(t)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', 'off'])
  await cli.waitFor(/route table applied/, 10000)
  const exited = await Promise.race([cli.exited, new Promise((resolve) => setTimeout(resolve, 1500, 'running'))])
  t.equal(exited, 'running', 'still running with nothing to listen on')
  fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(port), backendYaml('up', upPort), routeYaml('up', 'up.test', 'up', upPort)].join('---\n'))
  const r = await eventually(() => request(`http://127.0.0.1:${port}/`, { host: 'up.test' }).catch(() => ({ status: 0, body: '' })), (x) => x.status === 200, 15000, 'the new Gateway served')
  t.equal(r.body, 'up')
})
