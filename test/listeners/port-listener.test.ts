// What an HTTP/1.1 client sees, byte for byte, when the port listener refuses
// its request before routing (lib/listeners/port-listener.ts, exchange-h1.ts
// refusedHead): one answer per request, saying why, the connection closed
// after it, and one access line for it.

import t, { type Test } from 'tap'
import net from 'node:net'
import { PassThrough } from 'node:stream'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { echoH1, startPlane } from './fixtures.ts'

configureLogger({ level: 'silent' })

/** Every byte the gateway sends back for `text` until it closes the connection (bounded: `ms`). */
function exchange(port: number, text: string, ms = 3000): Promise<{ data: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    let data = ''
    const timer = setTimeout(() => { socket.destroy(); resolve({ data, closed: false }) }, ms)
    socket.setEncoding('latin1')
    socket.on('data', (c: string) => { data += c })
    socket.on('error', () => {})
    socket.on('close', () => { clearTimeout(timer); resolve({ data, closed: true }) })
    socket.write(text, 'latin1')
  })
}

/** A gateway on one port with the access log captured; its parsed access records. */
async function loggedGateway(t: Test): Promise<{ port: number; records: () => Array<Record<string, unknown>>; seen: () => number }> {
  const lines: string[] = []
  const sink = new PassThrough()
  sink.on('data', (c: Buffer) => lines.push(...c.toString().split('\n').filter((l) => l.length > 0)))
  configureLogger({ level: 'info', destination: sink })
  t.teardown(() => configureLogger({ level: 'silent' }))
  const up = await echoH1(t)
  const port = await freePort()
  const table = buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)])
  await startPlane(t, table, { accessLog: true })
  const records = (): Array<Record<string, unknown>> => lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((r) => r.component === 'access')
  return { port, records, seen: () => up.seen.length }
}

const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 100))
const STATUS_LINES = /HTTP\/1\.1 \d{3} /g

t.test('a transfer coding node cannot frame (not chunked last) gets one 501, not a 501 and then a 400', async (t) => {
  const gw = await loggedGateway(t)
  // (`chunked, gzip` never gets this far: node's parser refuses that head itself, one 400.)
  for (const te of ['xchunked', 'gzip', 'identity']) {
    const before = gw.records().length
    const r = await exchange(gw.port, `POST /x HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: ${te}\r\n\r\n3\r\nabc\r\n0\r\n\r\n`)
    t.match(r.data, /^HTTP\/1\.1 501 [^]*\r\n\r\nnot implemented: a transfer coding other than chunked\n$/, `${te}: the 501 and nothing after it`)
    t.equal(r.data.match(STATUS_LINES)?.length, 1, `${te}: one response`)
    t.ok(r.closed, `${te}: the connection closes`)
    await settle()
    const lines = gw.records().slice(before)
    t.equal(lines.length, 1, `${te}: one access line`)
    t.match(lines[0], { method: 'POST', path: '/x', status: 501, code: 'SP_ERR_NOT_IMPLEMENTED' })
  }
  t.equal(gw.seen(), 0, 'nothing forwarded')
})

t.test('an HTTP/1.1 request without Host is a 400 saying so, with an access line', async (t) => {
  const gw = await loggedGateway(t)
  for (const [what, text] of [
    ['GET', 'GET /x HTTP/1.1\r\nAccept: */*\r\n\r\n'],
    ['a POST with a body', 'POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc'],
    ['an upgrade', 'GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n'],
  ] as const) {
    const before = gw.records().length
    const r = await exchange(gw.port, text)
    t.match(r.data, /^HTTP\/1\.1 400 [^]*\r\n\r\nbad request: no Host field\n$/, `${what}: 400, the body says why`)
    t.equal(r.data.match(STATUS_LINES)?.length, 1, `${what}: one response`)
    t.ok(r.closed, `${what}: the connection closes`)
    await settle()
    const lines = gw.records().slice(before)
    t.equal(lines.length, 1, `${what}: one access line`)
    t.match(lines[0], { path: text.includes('/ws') ? '/ws' : '/x', status: 400, code: 'SP_ERR_BAD_REQUEST', reason: 'bad request: no Host field' })
  }
  // HTTP/1.0 has no Host requirement: routed (here by no host, to the catch-all route).
  const r10 = await exchange(gw.port, 'GET /old HTTP/1.0\r\n\r\n')
  t.match(r10.data, /^HTTP\/1\.1 200 /, 'HTTP/1.0 without Host is served')
  t.equal(gw.seen(), 1, 'only the HTTP/1.0 request forwarded')
})

t.test('a request pipelined behind an answer that closes the connection is never sent upstream (RFC 9112 §9.6)', async (t) => {
  const seen: string[] = []
  const up = await echoH1(t, 'h1', (req, res) => {
    seen.push(`${req.method} ${req.url}`)
    req.resume()
    req.on('end', () => {
      // A body without a length: to an HTTP/1.0 client the gateway can only end it by closing.
      if (req.url === '/unframed') { res.write('o'); setTimeout(() => res.end('k'), 20); return }
      res.end('ok')
    })
  })
  const port = await freePort()
  const table = buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)])
  await startPlane(t, table)
  const HOST = 'Host: example.com\r\n'
  // A warm upstream connection: what the gateway sends goes out at once, before the client connection closes.
  const warm = (): Promise<unknown> => exchange(port, `GET /warm HTTP/1.1\r\n${HOST}Connection: close\r\n\r\n`)

  // Refused (two Host fields): 400 and close; the POST behind it is the client's, never answered.
  await warm()
  seen.length = 0
  let r = await exchange(port, `GET /two HTTP/1.1\r\n${HOST}Host: other.example\r\n\r\nPOST /after-refusal HTTP/1.1\r\n${HOST}Content-Length: 1\r\n\r\nx`)
  t.match(r.data, /^HTTP\/1\.1 400 [^]*bad request: more than one Host field\n$/, 'the refusal, and nothing after it')
  t.ok(r.closed, 'the connection closes')
  await settle()
  t.same(seen, [], 'the request behind the refusal was not sent upstream')

  // HTTP/1.0 keep-alive, but the answer has no length: the gateway closes after it.
  await warm()
  seen.length = 0
  r = await exchange(port, `GET /unframed HTTP/1.0\r\n${HOST}Connection: keep-alive\r\n\r\nPOST /after-close HTTP/1.0\r\n${HOST}Connection: keep-alive\r\nContent-Length: 1\r\n\r\nx`)
  t.match(r.data, /^HTTP\/1\.1 200 [^]*\r\nConnection: close\r\n\r\nok$/i, 'the answer, close-delimited')
  t.equal(r.data.match(STATUS_LINES)?.length, 1, 'one response')
  t.ok(r.closed, 'the connection closes')
  await settle()
  t.same(seen, ['GET /unframed'], 'the request behind it was not sent upstream')

  // Pipelined requests whose answers keep the connection are all served, in order.
  seen.length = 0
  const post = (p: string): string => `POST ${p} HTTP/1.1\r\n${HOST}Content-Length: 1\r\n\r\nx`
  const socket = net.connect(port, '127.0.0.1')
  t.teardown(() => socket.destroy())
  let data = ''
  socket.setEncoding('latin1')
  socket.on('data', (c: string) => { data += c })
  socket.write(post('/1') + post('/unframed') + post('/3'))
  for (let i = 0; i < 100 && (data.match(STATUS_LINES)?.length ?? 0) < 3; i++) await new Promise((resolve) => setTimeout(resolve, 20))
  t.equal(data.match(STATUS_LINES)?.length, 3, 'three answers')
  t.same(seen, ['POST /1', 'POST /unframed', 'POST /3'], 'each sent upstream, in order')
  t.ok(data.endsWith('\r\n\r\nok'), 'the last answer whole')
})

t.test('an answer given before the whole request body came closes the connection after it', async (t) => {
  const up = await echoH1(t, 'h1', (req, res) => {
    // Answers at once, reading nothing (an early 401), or after the whole body.
    if (req.url === '/early') { res.writeHead(401, { 'content-length': '0' }); res.end(); return }
    req.resume()
    req.on('end', () => res.end('ok'))
  })
  const port = await freePort()
  const table = buildTable({ [port]: { routes: [{ name: 'r', hostnames: ['example.com'], rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)])
  await startPlane(t, table)
  const owed = 'Content-Length: 100000\r\n\r\n0123456789'
  for (const [what, text, status] of [
    ['the gateway\'s own answer (no route)', `POST /x HTTP/1.1\r\nHost: nowhere.example\r\n${owed}`, 404],
    ['the gateway\'s own answer (400)', `POST /x#f HTTP/1.1\r\nHost: example.com\r\n${owed}`, 400],
    ['an upstream\'s early answer', `POST /early HTTP/1.1\r\nHost: example.com\r\n${owed}`, 401],
  ] as const) {
    const r = await exchange(port, text)
    t.match(r.data, new RegExp(`^HTTP/1\\.1 ${status} [^]*\\r\\nConnection: close\\r\\n`, 'i'), `${what}: ${status}, saying the connection closes`)
    t.ok(r.closed, `${what}: and it closes (99,990 body bytes were still owed)`)
  }
  // A body that was all there when the answer came: the connection stays.
  const r = await exchange(port, 'POST /whole HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\n\r\nabc', 500)
  t.match(r.data, /^HTTP\/1\.1 200 [^]*\r\nConnection: keep-alive\r\n/i, 'a whole body: kept alive')
  t.notOk(r.closed, 'and open')
})
