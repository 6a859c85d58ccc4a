// The real CLI in front of an HTTP/1.1 upstream that answers with what no
// HTTP/1.1 server may send: a head with bare LF line ends, no status line at
// all (HTTP/0.9), a status code past 599, a head of more than 128 fields, a
// malformed chunked body. Each is a
// 502 (or a cut body once the head went out) at once, the access line saying
// it was the upstream's protocol error, and the connection that carried it is
// never used for the next request (counted at the upstream).
import t from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, curl, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from './harness.ts'

const ANSWERS: Readonly<Record<string, string>> = {
  '/plain': 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok',
  // Neither ends its head with CRLFCRLF, and the upstream keeps the connection open.
  '/bare-lf': 'HTTP/1.1 200 OK\nContent-Length: 2\n\nok',
  '/http09': 'hello from 1991\n',
  '/status-600': 'HTTP/1.1 600 Beyond\r\nContent-Length: 2\r\n\r\nok',
  '/status-999': 'HTTP/1.1 999 Beyond\r\nContent-Length: 2\r\n\r\nok',
  '/bad-chunk': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\nzz\r\n',
  // 1,000 fields in under 16 KiB: within the size bound, past the field count (128).
  '/many-fields': `HTTP/1.1 200 OK\r\nContent-Length: 2\r\n${Array.from({ length: 1000 }, (_, i) => `x${i}: v\r\n`).join('')}\r\nok`,
}

t.test('CLI: malformed HTTP/1.1 responses are 502s or cut at once, logged as protocol errors, their connection not reused', async (t) => {
  let connections = 0
  const seen: Array<{ conn: number, target: string }> = []
  const upstream = net.createServer((socket) => {
    const conn = ++connections
    let buffered = ''
    socket.setEncoding('latin1')
    socket.on('error', () => {})
    socket.on('data', (chunk: string) => {
      buffered += chunk
      for (let end = buffered.indexOf('\r\n\r\n'); end !== -1; end = buffered.indexOf('\r\n\r\n')) {
        const target = buffered.slice(0, end).split(' ')[1] ?? ''
        buffered = buffered.slice(end + 4)
        seen.push({ conn, target })
        socket.write(ANSWERS[target.split('?')[0]] ?? 'HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n', 'latin1')
      }
    })
  })
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => { upstream.close(() => r()); for (const s of sockets) s.destroy() }))
  const sockets = new Set<net.Socket>()
  upstream.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)) })
  const upPort = (upstream.address() as net.AddressInfo).port
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(port), backendYaml('api', upPort), routeYaml('api', 'api.example.test', 'api', upPort)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '0'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')

  const line = async (p: string, proto: string): Promise<Record<string, unknown>> =>
    JSON.parse(await cli.waitFor(new RegExp(`\\{[^\\n]*"path":"${p}"[^\\n]*"protocol":"${proto}"[^\\n]*`), 5000)) as Record<string, unknown>
  const connOf = (p: string, proto: string): number | undefined => seen.find((s) => s.target === `${p}?${proto}`)?.conn

  for (const proto of ['h1', 'h2']) {
    const flags = proto === 'h2' ? ['--http2-prior-knowledge'] : []
    const get = (p: string): ReturnType<typeof curl> =>
      curl([...flags, '-i', '--max-time', '4', '-H', 'Host: api.example.test', `http://127.0.0.1:${port}${p}?${proto}`])
    for (const p of ['/bare-lf', '/http09', '/status-600', '/status-999', '/many-fields']) {
      const started = Date.now()
      const r = await get(p)
      t.equal(r.code, 0, `${p} (${proto}): answered, not timed out`)
      t.ok(Date.now() - started < 3000, `${p} (${proto}): at once`)
      t.match(r.stdout, /^HTTP\/(?:1\.1|2) 502 [^]*\r\n\r\nupstream protocol error\n$/, `${p} (${proto}): a 502 saying so`)
      t.match(await line(p, proto), { status: 502, code: 'SP_ERR_UPSTREAM_PROTOCOL' }, `${p} (${proto}): the access line says why`)
      const after = await get('/plain')
      t.match(after.stdout, /\r\n\r\nok$/, `${p} (${proto}): the next request is answered`)
      t.not(seen.at(-1)?.conn, connOf(p, proto), `${p} (${proto}): on another upstream connection`)
    }
    // After the head: a cut body, never a whole one; logged as the upstream's protocol error, not a reset.
    const cut = await get('/bad-chunk')
    t.not(cut.code, 0, `/bad-chunk (${proto}): the client sees a cut response`)
    t.match(await line('/bad-chunk', proto), { status: 200, code: 'SP_ERR_UPSTREAM_PROTOCOL' }, `/bad-chunk (${proto}): the access line says why`)
    const after = await get('/plain')
    t.match(after.stdout, /\r\n\r\nok$/, `/bad-chunk (${proto}): the next request is answered`)
    t.not(seen.at(-1)?.conn, connOf('/bad-chunk', proto), `/bad-chunk (${proto}): on another upstream connection`)
  }
  t.equal(cli.child.exitCode, null, 'still serving')
})

/** An HTTP/2 frame: 9-byte header, then `payload`. */
function frame(type: number, flags: number, stream: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9)
  head.writeUIntBE(payload.length, 0, 3)
  head[3] = type
  head[4] = flags
  head.writeUInt32BE(stream, 5)
  return Buffer.concat([head, payload])
}

/** An HPACK header block of literal fields (not indexed, no Huffman; names and values under 127 bytes). */
function fieldBlock(fields: ReadonlyArray<readonly [string, string]>): Buffer {
  return Buffer.concat(fields.map(([n, v]) => Buffer.concat([Buffer.from([0, n.length]), Buffer.from(n, 'latin1'), Buffer.from([v.length]), Buffer.from(v, 'latin1')])))
}

t.test('CLI: an h2c upstream\'s :status past 599 is a 502 to both clients, logged as a protocol error', async (t) => {
  // nghttp2 takes any three digits for :status; node's HTTP/2 server will not send 600, so the frames are written by hand.
  const upstream = net.createServer((socket) => {
    socket.on('error', () => {})
    let buffered = Buffer.alloc(0)
    let preface = false
    socket.write(frame(4, 0, 0, Buffer.alloc(0))) // SETTINGS
    socket.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk])
      if (!preface) {
        if (buffered.length < 24) return
        buffered = buffered.subarray(24)
        preface = true
      }
      while (buffered.length >= 9) {
        const length = buffered.readUIntBE(0, 3)
        if (buffered.length < 9 + length) return
        const [type, flags, stream] = [buffered[3], buffered[4], buffered.readUInt32BE(5) & 0x7fffffff]
        buffered = buffered.subarray(9 + length)
        if (type === 4 && (flags & 1) === 0) socket.write(frame(4, 1, 0, Buffer.alloc(0))) // SETTINGS ACK
        if (type === 1) {
          const status = stream === 1 || stream === 5 ? '600' : '200' // each client's first request, then one after it
          socket.write(frame(1, 4, stream, fieldBlock([[':status', status], ['content-length', '2']]))) // HEADERS, END_HEADERS
          socket.write(frame(0, 1, stream, Buffer.from('ok'))) // DATA, END_STREAM
        }
      }
    })
  })
  const sockets = new Set<net.Socket>()
  upstream.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)) })
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => { upstream.close(() => r()); for (const s of sockets) s.destroy() }))
  const upPort = (upstream.address() as net.AddressInfo).port
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(port),
    backendYaml('api', upPort).replace('spec:\n', 'spec:\n  appProtocols:\n    - gateway.envoyproxy.io/h2c\n'),
    routeYaml('api', 'api.example.test', 'api', upPort),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '0'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')

  for (const proto of ['h1', 'h2']) {
    const flags = proto === 'h2' ? ['--http2-prior-knowledge'] : []
    const r = await curl([...flags, '-i', '--max-time', '4', '-H', 'Host: api.example.test', `http://127.0.0.1:${port}/beyond`])
    t.match(r.stdout, /^HTTP\/(?:1\.1|2) 502 [^]*\r\n\r\nupstream protocol error\n$/, `${proto}: a 502 saying so`)
    const line = JSON.parse(await cli.waitFor(new RegExp(`\\{[^\\n]*"path":"/beyond"[^\\n]*"protocol":"${proto}"[^\\n]*`), 5000)) as Record<string, unknown>
    t.match(line, { status: 502, code: 'SP_ERR_UPSTREAM_PROTOCOL' }, `${proto}: the access line says why`)
    const after = await curl([...flags, '-i', '--max-time', '4', '-H', 'Host: api.example.test', `http://127.0.0.1:${port}/after`])
    t.match(after.stdout, /^HTTP\/(?:1\.1|2) 200 [^]*\r\n\r\nok$/, `${proto}: the next request is answered`)
  }
})
