// The real CLI: HTTP/2 streams cancelled by the client (RST_STREAM) while an
// extension is still buffering their request body. The flow then fails the
// request and answers, on a stream that is closed but not yet destroyed: that
// answer must go nowhere, not throw (it ended the process).
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, metricSum, routeYaml, startCli, tempDir, type Cli } from './harness.ts'
import { listenLoopback } from '../helpers/ports.ts'
import http from 'node:http'
import { egressBackend, get, recorder, route } from './extensions-helpers.ts'

t.test('CLI: HTTP/2 uploads cancelled while an extension buffers the body', async (t) => {
  const echo = await recorder(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'body.mjs'), 'export default () => ({ requestBody() {} })\n')
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), egressBackend('buffered', echo.port, `  - name: body
    type: Plugin
    config: { path: ${JSON.stringify(path.join(dir, 'body.mjs'))} }
`))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), route('buffered', 'buffered.example.test', 'buffered', echo.port))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  for (let round = 0; round < 20; round++) {
    await Promise.all(Array.from({ length: 10 }, (_, i) => new Promise<void>((resolve) => {
      const stream = session.request({ ':method': 'POST', ':path': '/up', ':authority': 'buffered.example.test' })
      stream.on('error', () => {})
      stream.on('close', () => resolve())
      stream.write(Buffer.alloc(16 * 1024, 0x61))
      // Cancelled at once, or after the gateway has read some of it.
      setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), i % 3)
    })))
  }
  // Whole sessions dropped mid-upload (every stream of it closed at once).
  for (let round = 0; round < 30; round++) {
    const s = http2.connect(`http://127.0.0.1:${port}`)
    s.on('error', () => {})
    for (let i = 0; i < 5; i++) {
      const stream = s.request({ ':method': 'POST', ':path': '/up', ':authority': 'buffered.example.test' })
      stream.on('error', () => {})
      stream.write(Buffer.alloc(16 * 1024, 0x62))
    }
    await new Promise((resolve) => setTimeout(resolve, round % 4))
    s.destroy()
  }
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(cli.child.exitCode, null, 'the process is alive')
  const done = await new Promise<number>((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': '/whole', ':authority': 'buffered.example.test' })
    stream.on('response', (h) => { stream.resume(); stream.on('end', () => resolve(Number(h[':status']))) })
    stream.on('error', reject)
    stream.end('whole body')
  })
  t.equal(done, 200, 'a whole upload on the same session is served')
})

/** The CLI with one route, plain.example.test, to the upstream on `upPort`; ready. */
async function plainGateway(t: Test, upPort: number): Promise<{ port: number, adminPort: number, cli: Cli }> {
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(port), backendYaml('up', upPort), routeYaml('plain', 'plain.example.test', 'up', upPort)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off'])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  return { port, adminPort, cli }
}

t.test('CLI: clients that send GOAWAY and drop the connection mid-request leave nothing open', async (t) => {
  // node's server session stops noticing the end of the connection after a
  // GOAWAY; without the gateway's PING probe each of these sessions kept its
  // socket, descriptor and streams for good.
  const up = http.createServer((req, res) => { req.resume(); res.end('ok') })
  const upPort = await listenLoopback(up)
  t.teardown(() => { up.closeAllConnections(); up.close() })
  const { port, adminPort, cli } = await plainGateway(t, upPort)
  for (let round = 0; round < 300; round++) {
    await new Promise<void>((resolve) => {
      const s = http2.connect(`http://127.0.0.1:${port}`)
      s.on('error', () => {})
      s.on('close', () => resolve())
      let open = 0
      for (let i = 0; i < 6; i++) {
        const stream = s.request({ ':path': `/r${i}`, ':authority': 'plain.example.test' })
        open++
        stream.on('error', () => {})
        stream.on('close', () => { if (--open === 0) s.close() })
        stream.resume()
      }
      // destroy() sends GOAWAY, then closes the connection with the streams in flight.
      setTimeout(() => s.destroy(), round % 7)
    })
  }
  const gauges = await eventually(async () => {
    const m = (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body
    return { connections: metricSum(m, 'sallyport_downstream_active_connections'), streams: metricSum(m, 'sallyport_downstream_active_streams') }
  }, (g) => g.connections === 0 && g.streams === 0, 15000, 'no active connections or streams').catch((err: Error) => ({ error: err.message }))
  t.same(gauges, { connections: 0, streams: 0 }, 'every session closed, every stream ended')
  t.equal(cli.child.exitCode, null, 'the process is alive')
})

t.test('CLI: a live client that sends GOAWAY keeps its open streams until they end', async (t) => {
  // node closes a server session as soon as its client's GOAWAY arrives, and its
  // ping() then answers "cancelled" without sending: the probe took every such
  // client for gone and reset its streams 2 s later (a drain too: clients answer
  // the gateway's GOAWAY with their own). The probe now pings through the native
  // session, which a live client answers.
  const up = http.createServer((req, res) => {
    req.resume()
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write('first ')
    setTimeout(() => res.end('last'), 5000)
  })
  const upPort = await listenLoopback(up)
  t.teardown(() => { up.closeAllConnections(); up.close() })
  const { port } = await plainGateway(t, upPort)
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  let pings = 0
  session.on('ping', () => { pings++ })
  const answer = await new Promise<{ status: number; body: string; rst: number | undefined }>((resolve) => {
    const stream = session.request({ ':path': '/slow', ':authority': 'plain.example.test' })
    let status = 0
    let body = ''
    stream.setEncoding('utf8')
    stream.on('response', (h) => {
      status = Number(h[':status'])
      session.close() // GOAWAY; the stream goes on
    })
    stream.on('data', (c: string) => { body += c })
    stream.on('error', () => {})
    stream.on('close', () => resolve({ status, body, rst: stream.rstCode }))
  })
  t.same(answer, { status: 200, body: 'first last', rst: 0 }, 'the stream ran to its end, 5 s after the GOAWAY')
  t.ok(pings >= 1, `the client was probed (${pings} PINGs) and answered`)
})

t.test('CLI: a client session dropped with requests waiting on the upstream cancels every one of them', async (t) => {
  // Streams closed with their session read as cleanly ended (no reset code);
  // all but one were taken for answered, and their upstream requests (here to
  // an upstream that never answers) stayed open for good.
  let upOpen = 0
  const up = http.createServer((req) => { req.resume() })
  up.on('connection', (s) => { upOpen++; s.on('close', () => upOpen--) })
  const upPort = await listenLoopback(up)
  t.teardown(() => { up.closeAllConnections(); up.close() })
  const { port, adminPort, cli } = await plainGateway(t, upPort)
  for (let round = 0; round < 3; round++) {
    const s = http2.connect(`http://127.0.0.1:${port}`)
    s.on('error', () => {})
    for (let i = 0; i < 6; i++) {
      const stream = s.request({ ':path': `/hang${i}`, ':authority': 'plain.example.test' })
      stream.on('error', () => {})
      stream.resume()
    }
    await eventually(async () => upOpen, (n) => n >= 6, 5000, 'six upstream requests waiting')
    s.destroy()
    await eventually(async () => upOpen, (n) => n === 0, 5000, 'every upstream request cancelled').catch(() => {})
    t.equal(upOpen, 0, `round ${round}: no upstream connection left open`)
  }
  const m = (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body
  t.equal(metricSum(m, 'sallyport_upstream_active_requests'), 0, 'no upstream request counted as active')
  t.equal(cli.child.exitCode, null)
})
