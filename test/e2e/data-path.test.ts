// The HTTP data path through the real CLI and YAML configuration: protocol
// pairings (h1→h1, h1→h2c, h2c→h1, and h2 over TLS → h2 over TLS with a test
// PKI), a WebSocket upgrade, 256 MiB streamed up and down with checksums, and a
// client abort reaching the upstream.

import t, { type Test } from 'tap'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from './harness.ts'
import { createCa, serverCert } from '../helpers/pki.ts'
import { listenLoopback } from '../helpers/ports.ts'

const BIG = 256 * 1024 * 1024
const CHUNK = Buffer.alloc(64 * 1024)
for (let i = 0; i < CHUNK.length; i++) CHUNK[i] = (i * 31 + 7) & 0xff

/** sha256 of `bytes` bytes of the CHUNK pattern, computed without holding them. */
function patternSha(bytes: number): string {
  const h = createHash('sha256')
  for (let left = bytes; left > 0; left -= CHUNK.length) h.update(left >= CHUNK.length ? CHUNK : CHUNK.subarray(0, left))
  return h.digest('hex')
}

/** Writes `bytes` bytes of the pattern to `out` with backpressure. */
async function writePattern(out: NodeJS.WritableStream, bytes: number): Promise<void> {
  for (let left = bytes; left > 0; left -= CHUNK.length) {
    const ok = out.write(left >= CHUNK.length ? CHUNK : CHUNK.subarray(0, left))
    if (!ok) await new Promise((resolve) => out.once('drain', resolve))
  }
}

interface Upstream { readonly h1: number; readonly h2c: number; readonly hangs: string[] }

async function startUpstreams(t: Test): Promise<Upstream> {
  const hangs: string[] = []
  const h1 = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x')
    if (url.pathname === '/upload') {
      const h = createHash('sha256')
      let bytes = 0
      req.on('data', (c: Buffer) => { h.update(c); bytes += c.length })
      req.on('end', () => res.end(JSON.stringify({ bytes, sha: h.digest('hex') })))
      return
    }
    if (url.pathname === '/download') {
      const n = Number(url.searchParams.get('n'))
      res.writeHead(200, { 'content-length': String(n) })
      void writePattern(res, n).then(() => res.end())
      return
    }
    if (url.pathname === '/hang') {
      hangs.push('arrived')
      res.on('close', () => { if (!res.writableFinished) hangs.push('closed') })
      return
    }
    res.end(JSON.stringify({ httpVersion: req.httpVersion, host: req.headers.host, path: url.pathname }))
  })
  h1.on('upgrade', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64')
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: ${accept}\r\n\r\n`)
    if (head.length > 0) socket.write(head)
    socket.pipe(socket) // echo the raw frames back
  })
  const h2c = http2.createServer()
  h2c.on('stream', (stream, headers) => {
    stream.respond({ ':status': 200, 'content-type': 'application/json' })
    stream.end(JSON.stringify({ httpVersion: '2.0', host: headers[':authority'], path: headers[':path'] }))
  })
  const ports = { h1: await listenLoopback(h1), h2c: await listenLoopback(h2c) }
  t.teardown(() => { h1.closeAllConnections(); h1.close(); h2c.close() })
  return { ...ports, hangs }
}

t.test('data path through the CLI: pairings, WebSocket, 256 MiB both ways, client abort', async (t) => {
  const up = await startUpstreams(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const h2cBackend = backendYaml('h2c', up.h2c).replace('spec:\n', 'spec:\n  appProtocols:\n    - gateway.envoyproxy.io/h2c\n')
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(port), backendYaml('one', up.h1), h2cBackend,
    routeYaml('to-h1', 'h1.example.test', 'one', up.h1), routeYaml('to-h2c', 'h2c.example.test', 'h2c', up.h2c),
  ].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off', '--drain-seconds', '1'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 30000, 'ready')
  const base = `http://127.0.0.1:${port}`

  // h1 → h1
  const a = await request(`${base}/a`, { host: 'h1.example.test' })
  t.equal(a.status, 200)
  t.match(JSON.parse(a.body), { httpVersion: '1.1', host: 'h1.example.test', path: '/a' })

  // One keep-alive connection, three pipelined requests in one write: two served
  // without node:http (lib/listeners/h1-fast.ts), the upload in between by node's server.
  const pipe = net.connect(port, '127.0.0.1')
  t.teardown(() => pipe.destroy())
  pipe.on('error', () => {})
  const hostLine = 'host: h1.example.test\r\n'
  pipe.write(`GET /p1 HTTP/1.1\r\n${hostLine}\r\nPOST /upload HTTP/1.1\r\n${hostLine}content-length: 5\r\n\r\nhelloGET /p3 HTTP/1.1\r\n${hostLine}\r\n`)
  let piped = ''
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`pipelined responses incomplete: ${piped}`)), 10000)
    pipe.on('data', (c: Buffer) => {
      piped += c.toString('latin1')
      if (piped.includes('"path":"/p3"')) { clearTimeout(timer); resolve() }
    })
  })
  t.equal(piped.match(/HTTP\/1\.1 200 OK\r\n/g)?.length, 3, 'three 200s on one connection')
  const order = ['"path":"/p1"', '"bytes":5', '"path":"/p3"'].map((s) => piped.indexOf(s))
  t.ok(order[0] !== -1 && order[0] < order[1] && order[1] < order[2], `answered in request order: ${order.join(' < ')}`)
  t.equal(piped.match(/Connection: keep-alive\r\n/g)?.length, 3, 'kept alive throughout')

  // h1 → h2c (Backend appProtocols h2c)
  const b = await request(`${base}/b`, { host: 'h2c.example.test' })
  t.equal(b.status, 200)
  t.match(JSON.parse(b.body), { httpVersion: '2.0', host: 'h2c.example.test', path: '/b' })

  // h2c (prior knowledge) → h1 and → h2c
  const session = http2.connect(base)
  session.on('error', () => {})
  t.teardown(() => session.close())
  for (const [host, version] of [['h1.example.test', '1.1'], ['h2c.example.test', '2.0']] as const) {
    const reply = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const s = session.request({ ':path': '/c', ':authority': host })
      let status = 0
      let body = ''
      s.on('response', (h) => { status = Number(h[':status']) })
      s.setEncoding('utf8')
      s.on('data', (d: string) => { body += d })
      s.on('end', () => resolve({ status, body }))
      s.on('error', reject)
    })
    t.equal(reply.status, 200, `h2c client → ${host}`)
    t.match(JSON.parse(reply.body), { httpVersion: version, path: '/c' })
  }

  // WebSocket upgrade (HTTP/1.1 client → HTTP/1.1 upstream), then bytes both ways.
  const key = Buffer.from('0123456789abcdef').toString('base64')
  const ws = net.connect(port, '127.0.0.1')
  t.teardown(() => ws.destroy())
  ws.write(`GET /ws HTTP/1.1\r\nhost: h1.example.test\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: ${key}\r\nsec-websocket-version: 13\r\n\r\n`)
  let got = ''
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no 101: ${got}`)), 10000)
    ws.on('data', (c: Buffer) => {
      got += c.toString('latin1')
      if (got.includes('\r\n\r\n') && !got.includes('ping-frame')) ws.write('ping-frame')
      if (got.includes('ping-frame')) { clearTimeout(timer); resolve() }
    })
    ws.on('error', reject)
  })
  t.match(got, /^HTTP\/1\.1 101 /)
  const expected = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64')
  t.match(got.toLowerCase(), `sec-websocket-accept: ${expected.toLowerCase()}`)
  t.ok(got.endsWith('ping-frame'), 'bytes came back through the tunnel')
  ws.destroy()

  // 256 MiB up, checksummed at the upstream.
  const upload = await new Promise<{ bytes: number; sha: string }>((resolve, reject) => {
    const req = http.request(`${base}/upload`, { method: 'POST', agent: false, headers: { host: 'h1.example.test', 'content-length': String(BIG) } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => { text += c.toString() })
      res.on('end', () => resolve(JSON.parse(text) as { bytes: number; sha: string }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.setTimeout(120_000, () => req.destroy(new Error('upload timed out')))
    void writePattern(req, BIG).then(() => req.end())
  })
  const sha = patternSha(BIG)
  t.equal(upload.bytes, BIG, 'upload: every byte arrived')
  t.equal(upload.sha, sha, 'upload: checksum matches')

  // 256 MiB down, checksummed at the client.
  const download = await new Promise<{ bytes: number; sha: string }>((resolve, reject) => {
    const req = http.get(`${base}/download?n=${BIG}`, { agent: false, headers: { host: 'h1.example.test' } }, (res) => {
      const h = createHash('sha256')
      let bytes = 0
      res.on('data', (c: Buffer) => { h.update(c); bytes += c.length })
      res.on('end', () => resolve({ bytes, sha: h.digest('hex') }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.setTimeout(120_000, () => req.destroy(new Error('download timed out')))
  })
  t.equal(download.bytes, BIG, 'download: every byte arrived')
  t.equal(download.sha, sha, 'download: checksum matches')

  // A client that goes away mid-request: the upstream request is cancelled too.
  const hung = http.get(`${base}/hang`, { agent: false, headers: { host: 'h1.example.test' } })
  hung.on('error', () => {})
  await eventually(async () => up.hangs.length, (n) => n >= 1, 10000, 'upstream saw the request')
  hung.destroy()
  await eventually(async () => up.hangs.join(','), (s) => s === 'arrived,closed', 10000, 'upstream saw the abort')
  t.pass('client abort reached the upstream')
})

t.test('h2 over TLS (HTTPS listener, ALPN) → h2 over TLS upstream (Backend TLS, CA from a ConfigMap)', async (t) => {
  const ca = createCa('data-path e2e CA')
  const listenerCert = serverCert(ca, ['h2s.example.test'])
  const upstreamCert = serverCert(ca, ['api.test'])
  const up = http2.createSecureServer({ key: upstreamCert.keyPem, cert: upstreamCert.fullChainPem, allowHTTP1: false })
  up.on('stream', (stream, headers) => {
    stream.respond({ ':status': 200 })
    stream.end(JSON.stringify({ httpVersion: '2.0', alpn: (stream.session?.socket as { alpnProtocol?: string } | undefined)?.alpnProtocol, path: headers[':path'] }))
  })
  const upPort = await listenLoopback(up)
  t.teardown(() => up.close())

  const [httpPort, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const b64 = (s: string): string => Buffer.from(s).toString('base64')
  const indent = (pem: string): string => pem.trim().split(/\r?\n/).map((l) => `    ${l}`).join('\n')
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(httpPort, `    - name: https
      protocol: HTTPS
      port: ${httpsPort}
      hostname: h2s.example.test
      tls:
        certificateRefs:
          - name: listener-cert
`),
    `apiVersion: v1
kind: Secret
metadata:
  name: listener-cert
  namespace: default
type: kubernetes.io/tls
data:
  tls.crt: ${b64(listenerCert.fullChainPem)}
  tls.key: ${b64(listenerCert.keyPem)}
`,
    `apiVersion: v1
kind: ConfigMap
metadata:
  name: upstream-ca
  namespace: default
data:
  ca.crt: |
${indent(ca.certPem)}
`,
    backendYaml('secure', upPort).replace('spec:\n', 'spec:\n  tls:\n    sni: api.test\n    caCertificateRefs:\n      - kind: ConfigMap\n        name: upstream-ca\n'),
    routeYaml('secure', 'h2s.example.test', 'secure', upPort),
  ].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off', '--drain-seconds', '1'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 30000, 'ready')

  const session = http2.connect(`https://127.0.0.1:${httpsPort}`, { ca: ca.certPem, servername: 'h2s.example.test' })
  session.on('error', () => {})
  t.teardown(() => session.close())
  const reply = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const s = session.request({ ':path': '/secure', ':authority': 'h2s.example.test' })
    let status = 0
    let body = ''
    s.on('response', (h) => { status = Number(h[':status']) })
    s.setEncoding('utf8')
    s.on('data', (d: string) => { body += d })
    s.on('end', () => resolve({ status, body }))
    s.on('error', reject)
    s.setTimeout(10_000, () => s.close())
  })
  t.equal((session.socket as { alpnProtocol?: string }).alpnProtocol, 'h2', 'client negotiated h2 with the listener')
  t.equal(reply.status, 200, reply.body)
  t.match(JSON.parse(reply.body), { httpVersion: '2.0', alpn: 'h2', path: '/secure' }, 'the gateway negotiated h2 with the upstream')
})
