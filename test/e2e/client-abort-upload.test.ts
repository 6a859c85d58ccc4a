// The real CLI and clients that go away in the middle of an upload: an HTTP/2
// client resetting its stream (raw frames: a RST_STREAM without END_STREAM), an
// HTTP/2 client whose connection drops, an HTTP/1.1 client whose connection
// drops. The upstream must never get the cut body as a complete request, and
// the access line must say the client went away (499, SP_ERR_CLIENT_ABORTED);
// with an HTTP/1.1 upstream and with an h2c one, whose stream must be cancelled
// (RST_STREAM CANCEL; node's close() sends END_STREAM first) and not left open.
// HTTP/2 clients were logged as 502 SP_ERR_UPSTREAM_PROTOCOL, which passive
// health checking counts against the endpoint: a client dropping uploads could
// have a healthy endpoint ejected.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, routeYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'
import { PREFACE, frame, postFields, rstStream } from '../helpers/h2-frames.ts'

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

for (const upstream of ['h1', 'h2c']) {
  t.test(`CLI (${upstream} upstream): a client gone mid-upload never reaches the upstream as a whole request`, async (t) => {
  const outcomes = new Map<string, string>()
  let upPort: number
  if (upstream === 'h1') {
    const up = http.createServer((req, res) => {
      let n = 0
      req.on('data', (d: Buffer) => { n += d.length })
      req.on('end', () => { outcomes.set(req.url ?? '', `complete ${n}`); res.end('ok') })
      req.on('close', () => { if (!req.complete) outcomes.set(req.url ?? '', `aborted ${n}`) })
    })
    upPort = await listenLoopback(up)
    t.teardown(() => { up.closeAllConnections(); up.close() })
  } else {
    const up = http2.createServer()
    up.on('stream', (stream, headers) => {
      const p = String(headers[':path'])
      let n = 0
      let aborted = false
      stream.on('error', () => {})
      stream.on('data', (d: Buffer) => { n += d.length })
      // node's server emits 'end' on a RST_STREAM(CANCEL) too, after 'aborted'.
      stream.on('aborted', () => { aborted = true })
      stream.on('end', () => { if (!aborted) { outcomes.set(p, `complete ${n}`); stream.respond({ ':status': 200 }); stream.end('ok') } })
      stream.on('close', () => { if (!outcomes.has(p)) outcomes.set(p, `aborted ${n}, RST_STREAM ${stream.rstCode}`) })
    })
    up.on('session', (session) => { up.once('close', () => session.destroy()) })
    upPort = await listenLoopback(up)
    t.teardown(() => new Promise<void>((resolve) => up.close(() => resolve())))
  }
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  const backend = backendYaml('api', upPort)
  fs.writeFileSync(path.join(dir, 'backend.yaml'), upstream === 'h1' ? backend : backend.replace('spec:\n', 'spec:\n  appProtocols:\n    - gateway.envoyproxy.io/h2c\n'))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', upPort))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const h2Upload = async (p: string, cut: (c: http2.ClientHttp2Session, s: http2.ClientHttp2Stream) => void): Promise<void> => {
    const session = http2.connect(`http://127.0.0.1:${port}`)
    session.on('error', () => {})
    const stream = session.request({ ':method': 'POST', ':path': p, ':authority': 'api.example.test' })
    stream.on('error', () => {})
    stream.write(Buffer.alloc(1000, 97))
    await eventually(async () => outcomes.size, () => true, 100, 'sent') // a moment for the head to go upstream
    await sleep(100)
    cut(session, stream)
    await sleep(50)
    session.destroy()
  }
  // A stream reset mid-body, the connection kept: raw frames, because node's own client
  // sends END_STREAM before its RST_STREAM (the body is then whole, by the protocol).
  const h2raw = net.connect(port, '127.0.0.1')
  h2raw.on('error', () => {})
  h2raw.resume()
  await new Promise<void>((resolve) => h2raw.once('connect', () => resolve()))
  h2raw.write(Buffer.concat([PREFACE, frame(1, 0x4, 1, postFields('/h2-reset', 'api.example.test')), frame(0, 0, 1, Buffer.alloc(1000, 97))]))
  await sleep(150)
  h2raw.write(rstStream(1, http2.constants.NGHTTP2_CANCEL))
  t.teardown(() => h2raw.destroy())
  await h2Upload('/h2-dropped', (c) => c.socket.destroy())

  const socket = net.connect(port, '127.0.0.1')
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
  socket.write('POST /h1-dropped HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n' + 'a'.repeat(1000) + '\r\n')
  await sleep(100)
  socket.destroy()

  for (const p of ['/h2-reset', '/h2-dropped', '/h1-dropped']) {
    await eventually(async () => outcomes.get(p), (o) => o !== undefined, 5000, `${p} reached the upstream`)
    // CANCEL: a gRPC server reads a streaming call cancelled through sallyport as CANCELLED.
    t.equal(outcomes.get(p), upstream === 'h1' ? 'aborted 1000' : `aborted 1000, RST_STREAM ${http2.constants.NGHTTP2_CANCEL}`, `${p}: the upstream sees an aborted request, not a complete one`)
    await cli.waitFor(new RegExp(`"path":"${p}","status":499[^\\n]*"code":"SP_ERR_CLIENT_ABORTED"`), 5000)
    t.pass(`${p}: logged as the client going away`)
  }
})
}
