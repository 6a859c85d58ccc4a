// The real CLI with a PayloadProcessor redacting responses: an upstream that
// answers compressed anyway (we ask for identity) is decoded within the bound
// and redacted, or fails per failOpen, never passed on unredacted in silence;
// a HEAD, 204 or 304 answer keeps its headers (there is no body to see);
// numbers the rules do not select keep their text; a body that is not JSON is
// never read, so it streams through unbuffered whatever its size (an SSE
// stream event by event, a download or upload past maxBodyBytes whole).
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import zlib from 'node:zlib'
import { eventually, freePort, gatewayYaml, request, settleLogs, startCli, tempDir } from './harness.ts'
import { egressBackend, recorder, route, sample } from './extensions-helpers.ts'

const PII = JSON.stringify({ m: 'bob@example.com', n: 1 })
const REDACTED = JSON.stringify({ m: '[REDACTED]', n: 1 })
const BOUND = 4096
// Compresses to far less than BOUND, decodes to far more.
const BIG = JSON.stringify({ m: 'bob@example.com', pad: 'x'.repeat(BOUND * 8) })

interface Raw { status: number; headers: http.IncomingHttpHeaders; body: Buffer }

/** One request on a fresh connection; the body as bytes (never decoded). */
function raw(port: number, host: string, p: string, method = 'GET', body: string | Buffer | null = null, type = 'application/json'): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { host, 'accept-encoding': 'gzip, br' }
    if (body !== null) headers['content-type'] = type
    const req = http.request({ host: '127.0.0.1', port, path: p, method, agent: false, headers }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }))
    })
    req.setTimeout(10000, () => req.destroy(new Error('timeout')))
    req.on('error', reject)
    req.end(body ?? undefined)
  })
}

t.test('CLI: PayloadProcessor on compressed and bodiless responses', async (t) => {
  // The SSE upstream holds its stream open until the test saw the first event.
  let release: () => void = () => {}
  const released = new Promise<void>((resolve) => { release = resolve })
  t.teardown(release)
  const up = await recorder(t, (req, res) => {
    const json = { 'content-type': 'application/json' }
    switch (req.url) {
      case '/gzip': res.writeHead(200, { ...json, 'content-encoding': 'gzip', etag: '"v1"' }); res.end(zlib.gzipSync(PII)); return
      case '/x-gzip': res.writeHead(200, { ...json, 'content-encoding': 'x-gzip' }); res.end(zlib.gzipSync(PII)); return
      case '/br': res.writeHead(200, { ...json, 'content-encoding': 'br' }); res.end(zlib.brotliCompressSync(PII)); return
      case '/deflate': res.writeHead(200, { ...json, 'content-encoding': 'deflate' }); res.end(zlib.deflateSync(PII)); return
      case '/deflate-raw': res.writeHead(200, { ...json, 'content-encoding': 'deflate' }); res.end(zlib.deflateRawSync(PII)); return
      case '/corrupt': res.writeHead(200, { ...json, 'content-encoding': 'gzip' }); res.end('not gzip at all'); return
      case '/big': res.writeHead(200, { ...json, 'content-encoding': 'gzip' }); res.end(zlib.gzipSync(BIG)); return
      case '/compress': res.writeHead(200, { ...json, 'content-encoding': 'compress' }); res.end('LZW bytes'); return
      case '/json':
        res.writeHead(200, { ...json, 'content-length': String(Buffer.byteLength(PII)) })
        res.end(req.method === 'HEAD' ? undefined : PII)
        return
      case '/numbers':
        res.writeHead(200, json)
        res.end(`{"email":"ann@example.com","id":12345678901234567890,"price":1.10,"big":1e400,"echo":${req.body}}`)
        return
      case '/sse':
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write(`data: ${PII}\n\n`)
        void released.then(() => res.end('data: [DONE]\n\n'))
        return
      case '/download': res.writeHead(200, { 'content-type': 'application/octet-stream' }); res.end(Buffer.alloc(BOUND * 4, 'bob@example.com ')); return
      case '/upload': res.writeHead(200, { 'content-type': 'text/plain' }); res.end(`${req.headers['content-type']} ${req.body.length}`); return
      // What the upstream got of a request body: its coding and bytes (base64), as text (never processed).
      case '/echo': res.writeHead(200, { 'content-type': 'text/plain' }); res.end(`${req.headers['content-encoding'] ?? 'identity'} ${Buffer.from(req.body).toString('base64')}`); return
      case '/204': res.writeHead(204, { 'x-kept': 'yes' }); res.end(); return
      case '/304': res.writeHead(304, { etag: '"v1"', 'content-length': '55' }); res.end(); return
    }
    res.writeHead(404); res.end()
  })
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  const pp = (name: string, failOpen: boolean): string => egressBackend(name, up.port, `  - name: ${name}
    type: PayloadProcessor
    failOpen: ${failOpen}
    config:
      maxBodyBytes: ${BOUND}
      request: { redact: { patterns: [email] } }
      response: { redact: { patterns: [email] } }
`)
  fs.writeFileSync(path.join(dir, 'backends.yaml'), `${pp('closed', false)}---\n${pp('open', true)}`)
  fs.writeFileSync(path.join(dir, 'routes.yaml'), `${route('closed', 'closed.example.test', 'closed', up.port)}---\n${route('open', 'open.example.test', 'open', up.port)}`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const metrics = async (): Promise<string> => (await request(`http://127.0.0.1:${adminPort}/metrics`)).body

  t.test('a compressed answer is decoded, redacted and sent as identity', async (t) => {
    for (const p of ['/gzip', '/x-gzip', '/br', '/deflate', '/deflate-raw']) {
      const r = await raw(httpPort, 'closed.example.test', p)
      t.equal(r.status, 200, p)
      t.equal(r.body.toString(), REDACTED, `${p}: redacted`)
      t.equal(r.headers['content-encoding'], undefined, `${p}: no Content-Encoding`)
      t.equal(r.headers['content-length'], String(r.body.length), `${p}: the length of what is sent`)
    }
    t.equal((await raw(httpPort, 'closed.example.test', '/gzip')).headers.etag, 'W/"v1"', 'the ETag of the gzip representation is weakened')
  })

  t.test('a body that cannot be decoded fails per failOpen, never silently', async (t) => {
    for (const p of ['/corrupt', '/compress']) {
      const closed = await raw(httpPort, 'closed.example.test', p)
      t.equal(closed.status, 500, `${p}: failOpen false`)
      t.match(closed.body.toString(), /SP_ERR_EXTENSION_FAILED/)
      const open = await raw(httpPort, 'open.example.test', p)
      t.equal(open.status, 200, `${p}: failOpen true passes`)
      t.equal(open.headers['content-encoding'], p === '/corrupt' ? 'gzip' : 'compress', `${p}: untouched`)
    }
    const m = await metrics()
    t.ok(sample(m, 'sallyport_extension_failures_total', { extension: 'closed', outcome: 'closed' }) >= 2, 'closed failures counted')
    t.ok(sample(m, 'sallyport_extension_failures_total', { extension: 'open', outcome: 'open' }) >= 2, 'open failures counted')
    await cli.waitFor(/"msg":"extension failed"/, 5000)
  })

  t.test('a compressed request body is decoded, redacted and sent as identity; one that cannot be decoded fails per failOpen', async (t) => {
    const post = (host: string, coding: string, body: Buffer): Promise<{ status: number; coding: string; body: Buffer }> => new Promise((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: httpPort, path: '/echo', method: 'POST', agent: false,
        headers: { host, 'content-type': 'application/json', 'content-encoding': coding, 'content-length': String(body.length) } }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => {
          const [got, b64] = Buffer.concat(chunks).toString().split(' ')
          resolve({ status: res.statusCode ?? 0, coding: got ?? '', body: Buffer.from(b64 ?? '', 'base64') })
        })
      })
      req.on('error', reject)
      req.end(body)
    })
    for (const [coding, encode] of [['gzip', zlib.gzipSync], ['br', zlib.brotliCompressSync], ['deflate', zlib.deflateSync]] as const) {
      const r = await post('closed.example.test', coding, encode(Buffer.from(PII)))
      t.equal(r.status, 200, coding)
      t.same([r.coding, r.body.toString()], ['identity', REDACTED], `${coding}: the upstream got it decoded and redacted`)
    }
    const corrupt = await post('closed.example.test', 'gzip', Buffer.from('not gzip at all'))
    t.equal(corrupt.status, 500, 'corrupt, failOpen false: 500')
    const unknown = await post('closed.example.test', 'compress', Buffer.from('LZW bytes'))
    t.equal(unknown.status, 500, 'an unknown coding, failOpen false: 500')
    const open = await post('open.example.test', 'compress', Buffer.from('LZW bytes'))
    t.same([open.status, open.coding, open.body.toString()], [200, 'compress', 'LZW bytes'], 'failOpen true: passed as sent')
    const big = await post('closed.example.test', 'gzip', zlib.gzipSync(BIG))
    t.equal(big.status, 413, 'decoded past maxBodyBytes: 413')
  })

  t.test('decoded past maxBodyBytes: 502, or passed through unprocessed when failOpen', async (t) => {
    const closed = await raw(httpPort, 'closed.example.test', '/big')
    t.equal(closed.status, 502)
    t.match(closed.body.toString(), /SP_ERR_RESPONSE_TOO_LARGE/)
    const open = await raw(httpPort, 'open.example.test', '/big')
    t.equal(open.status, 200)
    t.equal(open.headers['content-encoding'], 'gzip')
    t.equal(zlib.gunzipSync(open.body).toString(), BIG, 'the original bytes')
  })

  t.test('numbers the rules do not touch pass as written, both ways', async (t) => {
    const r = await raw(httpPort, 'closed.example.test', '/numbers', 'POST', '{"msg":"mail bob@example.com","amount":12345678901234567890,"price":1.10,"big":1e400}')
    t.equal(r.status, 200)
    t.equal(r.body.toString(), '{"email":"[REDACTED]","id":12345678901234567890,"price":1.10,"big":1e400,' +
      '"echo":{"msg":"mail [REDACTED]","amount":12345678901234567890,"price":1.10,"big":1e400}}')
  })

  t.test('an SSE stream (not JSON) passes event by event', async (t) => {
    // Not buffered: the first event arrives while the upstream still holds the stream open.
    const events = await new Promise<string>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: httpPort, path: '/sse', agent: false, headers: { host: 'closed.example.test' } }, (res) => {
        t.equal(res.statusCode, 200)
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (s: string) => { if (body === '') { t.equal(s, `data: ${PII}\n\n`, 'the first event, untouched, before the stream ended'); release() } body += s })
        res.on('end', () => resolve(body))
      })
      req.setTimeout(5000, () => req.destroy(new Error('no event before the stream ended')))
      req.on('error', reject)
      req.end()
    })
    t.equal(events, `data: ${PII}\n\ndata: [DONE]\n\n`)
  })

  t.test('a body that is not JSON is not held to maxBodyBytes, either way', async (t) => {
    const download = await raw(httpPort, 'closed.example.test', '/download')
    t.equal(download.status, 200, 'a download past maxBodyBytes: no 502')
    t.ok(download.body.equals(Buffer.alloc(BOUND * 4, 'bob@example.com ')), 'as the upstream sent it')
    const upload = await raw(httpPort, 'closed.example.test', '/upload', 'POST', Buffer.alloc(BOUND * 4, 'bob@example.com '), 'application/octet-stream')
    t.equal(upload.status, 200, 'an upload past maxBodyBytes: no 413')
    t.equal(upload.body.toString(), `application/octet-stream ${BOUND * 4}`, 'the upstream got it whole')
    const json = await raw(httpPort, 'closed.example.test', '/upload', 'POST', JSON.stringify({ pad: 'x'.repeat(BOUND * 4) }))
    t.equal(json.status, 413, 'a JSON upload past maxBodyBytes is still refused')
  })

  t.test('HEAD, 204 and 304 keep their headers', async (t) => {
    const head = await raw(httpPort, 'closed.example.test', '/json', 'HEAD')
    t.equal(head.status, 200)
    t.equal(head.headers['content-length'], String(Buffer.byteLength(PII)), 'HEAD: the length of the GET answer')
    const get = await raw(httpPort, 'closed.example.test', '/json')
    t.equal(get.body.toString(), REDACTED)
    t.equal(get.headers['content-length'], String(Buffer.byteLength(REDACTED)))
    const noContent = await raw(httpPort, 'closed.example.test', '/204')
    t.equal(noContent.status, 204)
    t.equal(noContent.headers['x-kept'], 'yes')
    t.equal(noContent.headers['content-length'], undefined, '204: no Content-Length')
    const notModified = await raw(httpPort, 'closed.example.test', '/304')
    t.equal(notModified.status, 304)
    t.equal(notModified.headers['content-length'], '55', '304: the Content-Length as sent')
    await settleLogs()
  })
})
