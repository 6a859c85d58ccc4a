// The real CLI and an HTTP/2 client whose stream is aborted before anything
// reads its request body: the body's failure (SP_CLIENT_GONE) was emitted as an
// 'error' nobody listened to yet (the upstream was still being dialled), and
// the process died. Two ways a client makes it happen: a DATA frame longer than
// its content-length in the same read as its HEADERS (node ends the session),
// and a RST_STREAM in that read. The gateway stays up, the other streams and
// connections are served, the access line says what happened.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, routeYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'
import { PREFACE, frame, postFields, rstStream } from '../helpers/h2-frames.ts'

/** Writes `first` on a new connection, `then` 300 ms later, and waits for it to close (bounded: 2 s). */
async function send(port: number, first: Buffer, then: Buffer): Promise<void> {
  const socket = net.connect(port, '127.0.0.1')
  socket.on('error', () => {})
  socket.resume()
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => { socket.destroy(); resolve() }, 2000)
    socket.on('close', () => { clearTimeout(timer); resolve() })
    socket.write(first)
    setTimeout(() => { if (socket.writable) socket.write(then) }, 300)
  })
}

t.test('CLI: an HTTP/2 stream aborted before its body is read does not take the gateway down', async (t) => {
  // /hang-*: never answered.
  const up = http.createServer((req, res) => { req.resume(); req.on('end', () => { if (!(req.url ?? '').startsWith('/hang')) res.end('ok') }) })
  const upPort = await listenLoopback(up)
  t.teardown(() => { up.closeAllConnections(); up.close() })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', upPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', upPort))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  // A first stream waits on the upstream (its connection busy), so the next one needs a new connection dialled.
  const waiting = (p: string): Buffer => Buffer.concat([PREFACE, frame(1, 0x4, 1, postFields(p, 'api.example.test', 3)), frame(0, 1, 1, Buffer.from('abc'))])
  await send(port, waiting('/hang-1'), Buffer.concat([frame(1, 0x4, 3, postFields('/too-long', 'api.example.test', 3)), frame(0, 1, 3, Buffer.from('hello'))]))
  await send(port, waiting('/hang-2'), Buffer.concat([frame(1, 0x4, 3, postFields('/reset', 'api.example.test', 3)), frame(0, 0, 3, Buffer.from('a')), rstStream(3, 8)]))
  for (const p of ['/too-long', '/reset', '/hang-1', '/hang-2']) {
    await cli.waitFor(new RegExp(`"path":"${p}","status":499[^\\n]*"code":"SP_ERR_CLIENT_ABORTED"`), 5000)
    t.pass(`${p}: logged as the client going away`)
  }
  const after = await get(`http://127.0.0.1:${port}/after`, 'api.example.test')
  t.equal(after.status, 200, 'the gateway is still serving')
  t.equal(cli.child.exitCode, null, 'and still running')
})
