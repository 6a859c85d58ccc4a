// The real CLI between clients and an upstream whose responses are framed in
// ways RFC 9110/9112 allow a recipient to read but not a sender to send on:
// a 204 with a Content-Length, a Content-Length repeated with the same value,
// a transfer coding other than chunked. What the client gets must be one
// well-framed message (HTTP/1.1 raw bytes, and HTTP/2, where a 204 with a
// non-zero content-length is a malformed stream); a coding the gateway cannot
// pass on is a 502, and so are fields an HTTP/2 client cannot be sent (a field
// node's HTTP/2 takes once, twice), saying so. A request with a transfer coding
// other than chunked is a 501 (RFC 9112 §6.1): its body would reach the upstream
// still coded without saying so. Both HTTP/1.1 clients (sallyport's own and
// undici, which refuses a repeated Content-Length, so that one is a 502 there).
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, routeYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

const BIG = 1 << 20
const ANSWERS: Readonly<Record<string, string>> = {
  '/no-content': 'HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-Up: 1\r\n\r\n',
  '/length-twice': 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello',
  '/length-list': 'HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello',
  '/gzip-chunked': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
  '/plain': 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok',
  // Two Content-Type lines: an HTTP/1.1 client gets both, as sent; HTTP/2 (node's) cannot carry them.
  '/type-twice': 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nok',
  // Large enough that the head goes to the client before the body has all arrived.
  '/length-twice-big': `HTTP/1.1 200 OK\r\nContent-Length: ${BIG}\r\nContent-Length: ${BIG}\r\n\r\n${'a'.repeat(BIG)}`,
}

/** A raw upstream answering each path with its bytes, as written; counts the requests it reads. */
async function rawUpstream(t: Test): Promise<{ port: number; requests: string[] }> {
  const requests: string[] = []
  const server = net.createServer((socket) => {
    let buffered = ''
    socket.setEncoding('latin1')
    socket.on('error', () => {})
    socket.on('data', (chunk: string) => {
      buffered += chunk
      for (let end = buffered.indexOf('\r\n\r\n'); end !== -1; end = buffered.indexOf('\r\n\r\n')) {
        const head = buffered.slice(0, end)
        buffered = buffered.slice(end + 4)
        const target = head.split(' ')[1] ?? ''
        requests.push(target)
        socket.write(ANSWERS[target] ?? 'HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n', 'latin1')
      }
    })
  })
  const port = await listenLoopback(server)
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { port, requests }
}

/** Sends `text` on one connection and collects what comes back until the server closes or `until` matches (bounded: 5 s). */
function raw(port: number, text: string, until: RegExp | null = null): Promise<{ data: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    let data = ''
    let done = false
    const finish = (closed: boolean): void => {
      if (done) return
      done = true
      clearTimeout(timer)
      socket.destroy()
      resolve({ data, closed })
    }
    const timer = setTimeout(() => finish(false), 5000)
    socket.setEncoding('latin1')
    socket.on('data', (c: string) => {
      data += c
      if (until !== null && until.test(data)) finish(false)
    })
    socket.on('error', () => {})
    socket.on('close', () => finish(true))
    socket.write(text, 'latin1')
  })
}

interface H2Answer { status: number; headers: http2.IncomingHttpHeaders; body: string; error: string | null }

function h2get(session: http2.ClientHttp2Session, p: string): Promise<H2Answer> {
  return new Promise((resolve) => {
    const s = session.request({ ':path': p, ':authority': 'api.example.test' })
    let status = 0
    let headers: http2.IncomingHttpHeaders = {}
    let body = ''
    s.setEncoding('utf8')
    s.on('response', (h) => { headers = h; status = Number(h[':status']) })
    s.on('data', (c: string) => { body += c })
    s.on('error', (err: NodeJS.ErrnoException) => resolve({ status, headers, body, error: err.code ?? err.message }))
    s.on('close', () => resolve({ status, headers, body, error: s.rstCode === 0 ? null : `rst ${s.rstCode}` }))
  })
}

const GET = (p: string): string => `GET ${p} HTTP/1.1\r\nHost: api.example.test\r\n\r\n`
/** A whole response with a Content-Length body, or a bodiless 204 head. */
const ONE_RESPONSE = /^HTTP\/1\.1 \d{3} [^\r]*\r\n(?:[^\r]*\r\n)*?\r\n/

for (const client of ['sallyport', 'undici']) {
  t.test(`CLI (--http1-client ${client}): responses framed one way to the client; odd codings refused`, async (t) => {
    const up = await rawUpstream(t)
    const [port, adminPort] = [await freePort(), await freePort()]
    const dir = tempDir(t)
    fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
    fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', up.port))
    fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', up.port))
    const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--http1-client', client])
    await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

    // HTTP/1.1 client. A 204 and then another request on the same connection.
    const twice = await raw(port, GET('/no-content') + GET('/plain'), /\r\n\r\nok$/)
    const [first, second] = [ONE_RESPONSE.exec(twice.data)?.[0] ?? '', twice.data.slice((ONE_RESPONSE.exec(twice.data)?.[0] ?? '').length)]
    t.match(first, /^HTTP\/1\.1 204 /, '204 passed on')
    t.notMatch(first, /content-length|transfer-encoding/i, 'without the Content-Length a 204 must not carry, nor chunking')
    t.match(first, /\r\nx-up: 1\r\n/i, 'its other fields kept')
    t.match(second, /^HTTP\/1\.1 200 [^]*\r\n\r\nok$/, 'the next response on the connection is whole: nothing of the 204 was taken for a body')

    // Identical values may be taken as one (RFC 9110 §8.6): sallyport's client does and
    // passes one on; undici refuses such a head (a length mismatch) before its body: a 502.
    const oneLength = client === 'sallyport'
    for (const p of ['/length-twice', '/length-list']) {
      if (!oneLength) {
        t.match((await raw(port, GET(p), /upstream [a-z ]+\n$/)).data, /^HTTP\/1\.1 502 [^]*\r\n\r\nupstream (?:protocol error|reset)\n$/, `${p}: 502 through undici`)
        continue
      }
      const r = await raw(port, GET(p), /\r\n\r\nhello$/)
      const head = r.data.slice(0, r.data.indexOf('\r\n\r\n'))
      t.equal(head.match(/\r\ncontent-length: /gi)?.length, 1, `${p}: one Content-Length line`)
      t.match(head, /\r\ncontent-length: 5(?:\r\n|$)/i, `${p}: of 5`)
      t.notMatch(head, /transfer-encoding/i, `${p}: not chunked as well`)
      t.ok(r.data.endsWith('\r\n\r\nhello'), `${p}: the body`)
    }

    if (oneLength) {
      const whole = await raw(port, GET('/length-twice-big'), new RegExp(`\\r\\n\\r\\na{${BIG}}$`))
      t.match(whole.data, new RegExp(`^HTTP/1\\.1 200 OK\\r\\ncontent-length: ${BIG}\\r\\n`, 'i'), '1 MiB body: one Content-Length')
      t.ok(whole.data.endsWith(`\r\n\r\n${'a'.repeat(BIG)}`), 'and the whole body')
    } else {
      const big = await raw(port, GET('/length-twice-big'), /upstream [a-z ]+\n$/)
      t.match(big.data, /^HTTP\/1\.1 502 [^]*\r\n\r\nupstream (?:protocol error|reset)\n$/, '1 MiB body: 502 before anything of it is sent')
    }

    const coded = await raw(port, GET('/gzip-chunked'), /upstream protocol error\n$/)
    t.match(coded.data, /^HTTP\/1\.1 502 [^]*\r\n\r\nupstream protocol error\n$/, 'a transfer coding other than chunked: 502')
    await cli.waitFor(/"path":"\/gzip-chunked","status":502[^\n]*"code":"SP_ERR_UPSTREAM_PROTOCOL"/, 5000)
    t.pass('logged as an upstream protocol error')

    // HTTP/2 client: a 204 with content-length 5 and no DATA would be a malformed stream.
    const session = http2.connect(`http://127.0.0.1:${port}`)
    session.on('error', () => {})
    t.teardown(() => session.close())
    const noContent = await h2get(session, '/no-content')
    t.equal(noContent.status, 204)
    t.equal(noContent.error, null, 'the stream ends cleanly')
    t.equal(noContent.headers['content-length'], undefined, 'no content-length')
    for (const p of ['/length-twice', '/length-list']) {
      const r = await h2get(session, p)
      if (oneLength) t.same([r.status, r.error, r.headers['content-length'], r.body], [200, null, '5', 'hello'], `${p} over HTTP/2: one content-length`)
      else {
        t.equal(r.status, 502, `${p} over HTTP/2: 502 through undici`)
        t.match(r.body, /^upstream (?:protocol error|reset)\n$/, 'before any of it reached the client')
      }
    }
    const typeTwiceH1 = await raw(port, GET('/type-twice'), /\r\n\r\nok$/)
    t.equal(typeTwiceH1.data.match(/\r\ncontent-type: /gi)?.length, 2, 'two Content-Type lines reach an HTTP/1.1 client as sent')
    const typeTwice = await h2get(session, '/type-twice')
    t.same([typeTwice.status, typeTwice.body, typeTwice.error], [502, 'upstream protocol error: response fields HTTP/2 cannot carry\n', null],
      'over HTTP/2, which cannot carry them: a 502 saying why')
    await cli.waitFor(/"path":"\/type-twice","status":502[^\n]*"protocol":"h2"[^\n]*"code":"SP_ERR_UPSTREAM_PROTOCOL","reason":"upstream protocol error: response fields HTTP\/2 cannot carry"/, 5000)
    t.pass('and the access line says so (not a client abort)')
    const h2coded = await h2get(session, '/gzip-chunked')
    t.same([h2coded.status, h2coded.body], [502, 'upstream protocol error\n'], 'a transfer coding other than chunked over HTTP/2: 502')

    // A request with a transfer coding other than chunked: 501, never forwarded.
    const before = up.requests.length
    const gz = await raw(port, 'POST /plain HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n')
    t.match(gz.data, /^HTTP\/1\.1 501 [^]*\r\n\r\nnot implemented: a transfer coding other than chunked\n$/, 'request coded gzip then chunked: 501 saying why')
    t.ok(gz.closed, 'and the connection closes')
    t.equal(up.requests.length, before, 'nothing reached the upstream')
    const chunked = await raw(port, 'POST /plain HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n', /\r\n\r\nok$/)
    t.match(chunked.data, /^HTTP\/1\.1 200 /, 'plain chunked is forwarded')
  })
}
