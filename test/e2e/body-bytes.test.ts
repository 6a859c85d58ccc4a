// The access line's bytesIn and sallyport_downstream_bytes_received_total count
// a request's body bytes, however they arrive: in the same read as the head
// (every small POST), chunked, pipelined behind another request in one write,
// over HTTP/2. They were counted from the socket's bytes read after node
// emitted the request, so a body that came with its head counted 0 and a
// request pipelined behind it was counted with the one before.
import t from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, metricSum, rawExchange, routeYaml, startCli, tempDir } from './harness.ts'
import { get, recorder } from './extensions-helpers.ts'

/** What one connection gets back until `responses` whole "ok" responses are in (bounded). */
const raw = (port: number, text: string, responses: number): Promise<string> =>
  rawExchange(port, text, { until: new RegExp(`^(?:HTTP/1\\.1 200 [^]*?\\r\\n\\r\\nok){${responses}}$`) })

t.test('CLI: request body bytes are counted however they arrive', async (t) => {
  const up = await recorder(t, (_s, res) => res.end('ok'))
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', up.port))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', up.port))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const body = 'a'.repeat(1000)
  await raw(port, `POST /one-read HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 1000\r\n\r\n${body}`, 1)
  await raw(port, 'POST /chunked HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n' +
    `3e8\r\n${body}\r\n3e8\r\n${body}\r\n0\r\n\r\n`, 1)
  await raw(port, `GET /first HTTP/1.1\r\nHost: api.example.test\r\n\r\nPOST /pipelined HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 1000\r\n\r\n${body}`, 2)
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  await new Promise<void>((resolve) => {
    const s = session.request({ ':method': 'POST', ':path': '/h2', ':authority': 'api.example.test' })
    s.on('error', () => {})
    s.resume()
    s.on('close', () => resolve())
    s.end(body)
  })
  session.close()

  const line = async (p: string): Promise<Record<string, unknown>> =>
    JSON.parse(await cli.waitFor(new RegExp(`\\{[^\\n]*"component":"access"[^\\n]*"path":"${p}"[^\\n]*\\}`), 5000)) as Record<string, unknown>
  t.equal((await line('/one-read')).bytesIn, 1000, 'a body in the same read as its head: 1000')
  t.equal((await line('/chunked')).bytesIn, 2000, 'a chunked body: its 2000 bytes (the chunk framing aside)')
  t.equal((await line('/first')).bytesIn, 0, 'a GET with a POST pipelined behind it in one write: 0')
  t.equal((await line('/pipelined')).bytesIn, 1000, 'the pipelined POST: its own 1000')
  t.equal((await line('/h2')).bytesIn, 1000, 'over HTTP/2: 1000')
  t.same(up.seen.map((s) => s.body.length), [1000, 2000, 0, 1000, 1000], 'what the upstream got')

  const metrics = (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body
  t.equal(metricSum(metrics, 'sallyport_downstream_bytes_received_total'), 5000, 'sallyport_downstream_bytes_received_total: 5000')
})
