// Interim (1xx) responses through the real CLI. RFC 9110 §15.2: a proxy
// forwards the 1xx responses its upstream sends ahead of the final one (103
// Early Hints lets a client start fetching what the Link fields name), except
// to an HTTP/1.0 client, which cannot read them. Upstreams speaking HTTP/1.1
// (both clients: sallyport's own and undici) and h2c; clients speaking HTTP/1.1
// over the fast path and node's server (a chunked upload), HTTP/1.0 and HTTP/2.
// 100 Continue is not passed on (the gateway answers a client's expectation
// itself), hop-by-hop fields of an interim head are dropped, and an upstream
// that sends 1xx heads without end gets a bounded number through, then a 502.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, rawExchange, routeYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'
const MAX_INFORMATIONAL = 16

const HINTS = 'HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\nConnection: x-hop\r\nX-Hop: 1\r\n\r\n'
const FINAL = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'
const ANSWERS: Readonly<Record<string, string>> = {
  '/hints': HINTS + FINAL,
  '/continue': 'HTTP/1.1 100 Continue\r\n\r\n' + FINAL,
  '/processing': 'HTTP/1.1 102 Processing\r\n\r\n' + HINTS + FINAL,
  '/flood': 'HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n'.repeat(100) + FINAL,
}

/** A raw HTTP/1.1 upstream answering each path with its bytes (a body, if any, is read and ignored). */
async function rawUpstream(t: Test): Promise<number> {
  const server = net.createServer((socket) => {
    let buffered = ''
    socket.setEncoding('latin1')
    socket.on('error', () => {})
    socket.on('data', (chunk: string) => {
      buffered += chunk
      const end = buffered.indexOf('\r\n\r\n')
      if (end === -1) return
      const head = buffered.slice(0, end)
      // Chunked uploads: answer once the last chunk is in.
      if (/transfer-encoding: chunked/i.test(head) && !buffered.includes('0\r\n\r\n', end)) return
      buffered = ''
      const target = head.split(' ')[1] ?? ''
      socket.write(ANSWERS[target] ?? 'HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n', 'latin1')
    })
  })
  const port = await listenLoopback(server)
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return port
}

/** An h2c upstream sending a 103 (and a 100, which must stay here) before its 200. */
async function h2Upstream(t: Test): Promise<number> {
  const server = http2.createServer()
  server.on('stream', (stream) => {
    stream.on('error', () => {})
    stream.additionalHeaders({ ':status': 100 })
    stream.additionalHeaders({ ':status': 103, link: '</style.css>; rel=preload; as=style' })
    stream.respond({ ':status': 200, 'content-type': 'text/plain' })
    stream.end('ok')
  })
  const port = await listenLoopback(server)
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return port
}

interface H2Answer { interim: http2.IncomingHttpHeaders[]; status: number; body: string }

function h2get(port: number, p: string): Promise<H2Answer> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`)
    session.on('error', reject)
    const s = session.request({ ':path': p, ':authority': 'api.example.test' })
    const interim: http2.IncomingHttpHeaders[] = []
    let status = 0
    let body = ''
    s.setEncoding('utf8')
    s.on('headers', (h) => interim.push(h))
    s.on('response', (h) => { status = Number(h[':status']) })
    s.on('data', (c: string) => { body += c })
    s.on('error', reject)
    s.on('close', () => { session.close(); resolve({ interim, status, body }) })
  })
}

const GET = (p: string, version = '1.1'): string => `GET ${p} HTTP/${version}\r\nHost: api.example.test\r\n\r\n`
const DONE = /\r\n\r\nok$/

for (const client of ['sallyport', 'undici']) {
  t.test(`CLI (--http1-client ${client}): 1xx from an HTTP/1.1 upstream reach the client`, async (t) => {
    const up = await rawUpstream(t)
    const [port, adminPort] = [await freePort(), await freePort()]
    const dir = tempDir(t)
    fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
    fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', up))
    fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', up))
    const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--http1-client', client])
    await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

    const hints = await rawExchange(port, GET('/hints'), { until: DONE })
    t.match(hints, /^HTTP\/1\.1 103 Early Hints\r\nlink: <\/style\.css>; rel=preload; as=style\r\n\r\nHTTP\/1\.1 200 OK\r\n/i,
      'HTTP/1.1 client (fast path): the 103 with its Link, then the 200')
    t.notMatch(hints.slice(0, hints.indexOf('HTTP/1.1 200')), /x-hop|connection/i, 'the interim head loses its hop-by-hop fields')
    t.ok(hints.endsWith('\r\n\r\nok'), 'and the body')

    const chunked = await rawExchange(port, 'POST /hints HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n', { until: DONE })
    t.match(chunked, /^HTTP\/1\.1 103 Early Hints\r\nlink: <\/style\.css>; rel=preload; as=style\r\n\r\nHTTP\/1\.1 200 OK\r\n/i,
      'HTTP/1.1 client through node\'s server (a chunked upload): the same')

    const old = await rawExchange(port, GET('/hints', '1.0'), { until: DONE })
    t.match(old, /^HTTP\/1\.1 200 OK\r\n/, 'HTTP/1.0 client: no 1xx, the 200 first (RFC 9110 §15.2)')

    if (client === 'sallyport') {
      const cont = await rawExchange(port, GET('/continue'), { until: DONE })
      t.match(cont, /^HTTP\/1\.1 200 OK\r\n/, '100 Continue stays between the gateway and the upstream')
    } else {
      // undici takes a 100 nobody asked for (no Expect sent) as a broken response.
      const cont = await rawExchange(port, GET('/continue'), { until: /upstream reset\n$/ })
      t.match(cont, /^HTTP\/1\.1 502 /, 'undici: an unasked-for 100 Continue is a 502, nothing of it passed on')
    }

    const processing = await rawExchange(port, GET('/processing'), { until: DONE })
    t.match(processing, /^HTTP\/1\.1 102 Processing\r\n\r\nHTTP\/1\.1 103 Early Hints\r\n[^]*\r\n\r\nHTTP\/1\.1 200 OK\r\n/, 'several interim heads, in order')

    const flood = await rawExchange(port, GET('/flood'), { until: /upstream protocol error: too many interim \(1xx\) responses\n$/ })
    t.equal(flood.match(/HTTP\/1\.1 103 /g)?.length, MAX_INFORMATIONAL, `100 interim heads: ${MAX_INFORMATIONAL} passed on`)
    t.match(flood, /HTTP\/1\.1 502 [^]*\r\n\r\nupstream protocol error: too many interim \(1xx\) responses\n$/, 'then a 502 saying why')
    const line = JSON.parse(await cli.waitFor(/\{[^\n]*"path":"\/flood"[^\n]*/, 5000)) as Record<string, unknown>
    t.match(line, { status: 502, code: 'SP_ERR_UPSTREAM_PROTOCOL' }, 'the access line says why')

    const h2 = await h2get(port, '/hints')
    t.same(h2.interim.map((h) => [h[':status'], h.link, h['x-hop']]), [[103, '</style.css>; rel=preload; as=style', undefined]], 'HTTP/2 client: one 103 HEADERS')
    t.same([h2.status, h2.body], [200, 'ok'], 'then the response')
  })
}

t.test('CLI: 1xx from an h2c upstream reach HTTP/1.1 and HTTP/2 clients', async (t) => {
  const up = await h2Upstream(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', up).replace('spec:\n', 'spec:\n  appProtocols:\n    - gateway.envoyproxy.io/h2c\n'))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', up))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const h1 = await rawExchange(port, GET('/'), { until: DONE })
  t.match(h1, /^HTTP\/1\.1 103 Early Hints\r\nlink: <\/style\.css>; rel=preload; as=style\r\n\r\nHTTP\/1\.1 200 OK\r\n/i, 'HTTP/1.1 client: the 103 alone (not the 100), then the 200')
  const h2 = await h2get(port, '/')
  t.same(h2.interim.map((h) => [h[':status'], h.link]), [[103, '</style.css>; rel=preload; as=style']], 'HTTP/2 client: the 103')
  t.same([h2.status, h2.body], [200, 'ok'])
})
