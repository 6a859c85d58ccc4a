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

const frame = (type: number, flags: number, stream: number, payload: Buffer): Buffer => {
  const head = Buffer.alloc(9)
  head.writeUIntBE(payload.length, 0, 3)
  head[3] = type
  head[4] = flags
  head.writeUInt32BE(stream, 5)
  return Buffer.concat([head, payload])
}
const literal = (index: number, value: string): Buffer => Buffer.concat([Buffer.from([index, value.length]), Buffer.from(value)])
/** POST, http, :path, :authority and content-length: 3 (static index 28, without indexing). */
const postHead = (p: string): Buffer =>
  Buffer.concat([Buffer.from([0x83, 0x86]), literal(0x04, p), literal(0x01, 'api.example.test'), Buffer.from([0x0f, 0x0d, 1]), Buffer.from('3')])
const PREFACE = Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), frame(4, 0, 0, Buffer.alloc(0))])

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

  const cancel = Buffer.alloc(4)
  cancel.writeUInt32BE(8)
  // A first stream waits on the upstream (its connection busy), so the next one needs a new connection dialled.
  const waiting = (p: string): Buffer => Buffer.concat([PREFACE, frame(1, 0x4, 1, postHead(p)), frame(0, 1, 1, Buffer.from('abc'))])
  await send(port, waiting('/hang-1'), Buffer.concat([frame(1, 0x4, 3, postHead('/too-long')), frame(0, 1, 3, Buffer.from('hello'))]))
  await send(port, waiting('/hang-2'), Buffer.concat([frame(1, 0x4, 3, postHead('/reset')), frame(0, 0, 3, Buffer.from('a')), frame(3, 0, 3, cancel)]))
  for (const p of ['/too-long', '/reset', '/hang-1', '/hang-2']) {
    await cli.waitFor(new RegExp(`"path":"${p}","status":499[^\\n]*"code":"SP_ERR_CLIENT_ABORTED"`), 5000)
    t.pass(`${p}: logged as the client going away`)
  }
  const after = await get(`http://127.0.0.1:${port}/after`, 'api.example.test')
  t.equal(after.status, 200, 'the gateway is still serving')
  t.equal(cli.child.exitCode, null, 'and still running')
})
