// The real CLI in forward-proxy mode, at the edges of a CONNECT tunnel's
// life: bytes pipelined behind the CONNECT head (the SNI check must see
// them; a refusal must still release the connection; a FIN during the dial
// is a half-close), resets carried across HTTP/2 tunnels both ways
// (RFC 9113 §8.5), and targets that are not host:port.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import tls from 'node:tls'
import { Duplex } from 'node:stream'
import { createCa, serverCert } from '../helpers/pki.ts'
import { eventually, freePort, gatewayYaml, metricSum, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'

const ca = createCa('forward-proxy tunnel test CA')
// Both names: a hello naming web.test that got through would be answered, not fail verification.
const leaf = serverCert(ca, ['sni.test', 'web.test'])

async function listen(server: net.Server): Promise<number> {
  const sockets = new Set<net.Socket>()
  server.on('connection', (s: net.Socket) => { sockets.add(s); s.once('close', () => sockets.delete(s)) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  return (server.address() as net.AddressInfo).port
}

// web.test: plain HTTP, so a request smuggled past the SNI check would be answered.
const webRequests: string[] = []
const webPort = await listen(http.createServer((req, res) => {
  webRequests.push(`${req.method} ${req.url} ${req.headers.host}`)
  res.end(`secret answer for ${req.headers.host}\n`)
}))
// sni.test: TLS, answers with the name it was asked for.
const tlsServer = tls.createServer({ cert: leaf.certPem, key: leaf.keyPem }, (s) => { s.end(`tls ok ${s.servername}\n`) })
tlsServer.on('tlsClientError', () => {})
const tlsPort = await listen(tlsServer)
// echo.test: reads to the client's FIN, then answers with what it got (needs half-close).
const echoPort = await listen(net.createServer({ allowHalfOpen: true }, (s) => {
  const chunks: Buffer[] = []
  s.on('data', (d: Buffer) => chunks.push(d))
  s.on('end', () => s.end(`echo:${Buffer.concat(chunks).toString('latin1')}`))
  s.on('error', () => {})
}))
// sink.test: takes bytes; says how each connection ended (a FIN, or an error such as a reset).
const sinkReceived: number[] = []
const sinkEnds: string[] = []
const sinkPort = await listen(net.createServer({ allowHalfOpen: true }, (s) => {
  const i = sinkReceived.push(0) - 1
  let ended: string | null = null
  s.on('data', (d: Buffer) => { sinkReceived[i] += d.length })
  s.on('end', () => { ended ??= 'FIN'; s.end() })
  s.on('error', (e: NodeJS.ErrnoException) => { ended ??= e.code ?? e.message })
  s.on('close', () => { sinkEnds[i] = ended ?? 'closed' })
}))
// rst.test: resets the connection on the first byte it gets.
const rstPort = await listen(net.createServer((s) => {
  s.on('error', () => {})
  s.once('data', () => { s.resetAndDestroy() })
}))
// dead.test: nothing listens there (a 502).
const deadPort = await freePort()

function connectRoute(name: string, host: string, port: number, verifySni = false): string {
  return `---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
  endpoints:
    - ip: { address: 127.0.0.1, port: ${port} }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
  annotations: { sallyport.io/connect-ports: "443"${verifySni ? ', sallyport.io/connect-verify-sni: "true"' : ''} }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [${host}]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${name}, port: ${port} }]
`
}

const [gwPort, adminPort] = [await freePort(), await freePort()]
const dir = tempDir(t)
fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(gwPort)
  + connectRoute('web', 'web.test', webPort, true)
  + connectRoute('tlsweb', 'sni.test', tlsPort, true)
  + connectRoute('dead', 'dead.test', deadPort)
  + connectRoute('echo', 'echo.test', echoPort)
  + connectRoute('sink', 'sink.test', sinkPort)
  + connectRoute('rst', 'rst.test', rstPort))
const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'on'])
await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

function connectHead(authority: string): Buffer {
  return Buffer.from(`CONNECT ${authority} HTTP/1.1\r\nhost: ${authority}\r\n\r\n`)
}

/** What a raw client receives until the gateway closes (bounded: 15 s, then it gives up and says so). */
function exchange(first: Buffer, onData: (s: net.Socket, received: Buffer) => void = () => {}): Promise<{ received: string; closedBy: 'gateway' | 'timeout' }> {
  return new Promise((resolve) => {
    const sock = net.connect(gwPort, '127.0.0.1', () => sock.write(first))
    let received = Buffer.alloc(0)
    sock.on('data', (d: Buffer) => { received = Buffer.concat([received, d]); onData(sock, received) })
    sock.on('error', () => {})
    const timer = setTimeout(() => { sock.destroy(); resolve({ received: received.toString('latin1'), closedBy: 'timeout' }) }, 15_000)
    sock.on('close', () => { clearTimeout(timer); resolve({ received: received.toString('latin1'), closedBy: 'gateway' }) })
  })
}

/** A real ClientHello from node's TLS client for `servername`, captured without a network. */
function clientHello(servername: string): Promise<Buffer> {
  return new Promise((resolve) => {
    const wire = new Duplex({ read() {}, write(chunk: Buffer, _e, cb) { resolve(Buffer.from(chunk)); cb(); setImmediate(() => s.destroy()) } })
    const s = tls.connect({ socket: wire, servername, rejectUnauthorized: false })
    s.on('error', () => {})
  })
}

/**
 * A TLS client whose first flight leaves in one write with the CONNECT head
 * (a client that does not wait for the 200); the 200 is taken off what comes back.
 */
function pipelinedTls(authority: string, servername: string): Promise<string> {
  return new Promise((resolve) => {
    const sock = net.connect(gwPort, '127.0.0.1')
    let head: Buffer | null = connectHead(authority)
    let answered = false
    let pending = Buffer.alloc(0)
    const wire: Duplex = new Duplex({
      read() {},
      write(chunk: Buffer, _e, cb) {
        const out = head === null ? chunk : Buffer.concat([head, chunk])
        head = null
        sock.write(out, cb)
      },
      final(cb) { sock.end(); cb() },
    })
    sock.on('data', (d: Buffer) => {
      if (answered) { wire.push(d); return }
      pending = Buffer.concat([pending, d])
      const end = pending.indexOf('\r\n\r\n')
      if (end === -1) return
      answered = true
      if (!pending.subarray(0, end).toString('latin1').startsWith('HTTP/1.1 200 ')) { sock.destroy(); return }
      if (pending.length > end + 4) wire.push(pending.subarray(end + 4))
    })
    sock.on('end', () => wire.push(null))
    sock.on('error', () => {})
    let text = ''
    const timer = setTimeout(() => { sock.destroy(); resolve(`timed out; got ${JSON.stringify(text)}`) }, 15_000)
    sock.on('close', () => { clearTimeout(timer); resolve(text === '' ? 'closed without an answer' : text) })
    const inner = tls.connect({ socket: wire, servername, ca: ca.certPem })
    inner.setEncoding('utf8').on('data', (d: string) => { text += d })
    inner.on('error', () => {})
  })
}

t.test('connect-verify-sni: bytes pipelined with the CONNECT are the start of the ClientHello', async (t) => {
  // A plaintext request in the same write as the CONNECT, then a ClientHello naming the host.
  const helloForWeb = await clientHello('web.test')
  let sentHello = false
  const smuggled = await exchange(Buffer.concat([connectHead('web.test:443'), Buffer.from('GET /admin HTTP/1.1\r\nhost: evil.example\r\n\r\n')]), (s, received) => {
    if (sentHello || !received.includes('\r\n\r\n')) return
    sentHello = true
    s.write(helloForWeb)
  })
  t.equal(smuggled.closedBy, 'gateway', 'the gateway closes the tunnel')
  t.notMatch(smuggled.received, /secret answer/, 'no answer from the destination comes back')
  t.same(webRequests, [], 'the pipelined plaintext never reached the destination')
  await cli.waitFor(/"component":"forward-proxy"[^\n]*"destination":"web.test:443"[^\n]*SNI does not match/, 10000)
  t.pass('logged as an SNI mismatch')

  // A real TLS client whose ClientHello leaves with the CONNECT head.
  t.equal(await pipelinedTls('sni.test:443', 'sni.test'), 'tls ok sni.test\n', 'a pipelined ClientHello naming the host is checked and passed on')
  // And one naming another host is refused just the same.
  t.equal(await pipelinedTls('sni.test:443', 'web.test'), 'closed without an answer', 'a pipelined ClientHello naming another host closes the tunnel')
})

async function activeConnections(): Promise<number> {
  const metrics = await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')
  return metricSum(metrics.body, 'sallyport_downstream_active_connections', { port: String(gwPort) })
}

t.test('a refused CONNECT followed by more bytes than the socket buffers hold is still released', async (t) => {
  await eventually(activeConnections, (n) => n === 0, 10000, 'no client connection open before')
  const twoHosts = Buffer.from('CONNECT web.test:443 HTTP/1.1\r\nhost: web.test:443\r\nhost: web.test:443\r\n\r\n')
  const cases: Array<[string, Buffer, string, 'reset' | 'close']> = [
    ['no route', connectHead('nope.test:443'), 'HTTP/1.1 403 ', 'reset'],
    ['no route', connectHead('nope.test:443'), 'HTTP/1.1 403 ', 'close'],
    ['dial failed', connectHead('dead.test:443'), 'HTTP/1.1 502 ', 'reset'],
    ['not host:port', connectHead('nope.test'), 'HTTP/1.1 400 ', 'reset'],
    ['two Host fields', twoHosts, 'HTTP/1.1 400 ', 'reset'],
  ]
  for (const [what, head, status, how] of cases) {
    const answer = await new Promise<string>((resolve) => {
      const sock = net.connect(gwPort, '127.0.0.1', () => {
        sock.write(head)
        sock.write(Buffer.alloc(512 * 1024, 0x41)) // a client that does not wait for the 200
      })
      let text = ''
      sock.setEncoding('latin1').on('data', (d: string) => {
        text += d
        if (!text.includes('\r\n\r\n')) return
        if (how === 'reset') sock.resetAndDestroy()
        else sock.destroy()
      })
      sock.on('error', () => {})
      sock.on('close', () => resolve(text))
    })
    t.ok(answer.startsWith(status), `${what}: ${status.trim()}`)
    await eventually(activeConnections, (n) => n === 0, 10000, `the gateway's side of the refused CONNECT (${what}, client ${how}) closed`)
    t.pass(`${what}, client ${how}: the gateway released the connection`)
  }
  // A client that keeps its side open after the answer: released after a bounded wait.
  const sock = net.connect({ port: gwPort, host: '127.0.0.1', allowHalfOpen: true }, () => {
    sock.write(connectHead('nope.test:443'))
    sock.write(Buffer.alloc(512 * 1024, 0x41))
  })
  t.teardown(() => { sock.destroy() })
  sock.on('error', () => {})
  await new Promise<void>((resolve) => { sock.once('data', () => { sock.resume(); resolve() }) })
  t.equal(await activeConnections(), 1, 'answered, and still open')
  await eventually(activeConnections, (n) => n === 0, 15000, 'the gateway\'s side of a refused CONNECT whose client stays')
  t.pass('a client that never closes is let go')
})

t.test('HTTP/1.1 CONNECT: a FIN sent with the CONNECT, before the 200, is a half-close', async (t) => {
  // Bytes and FIN in one go, while the destination is still being dialled (RFC 9110 §9.3.6).
  // Which of the dial and the FIN the gateway sees first is a race: run it a few times.
  const answers = new Set<string>()
  for (let i = 0; i < 10; i++) {
    const answer = await new Promise<string>((resolve) => {
      const sock = net.connect({ port: gwPort, host: '127.0.0.1', allowHalfOpen: true }, () => {
        sock.end(Buffer.concat([connectHead('echo.test:443'), Buffer.from(`hello ${i}`)]))
      })
      let text = ''
      sock.setEncoding('latin1').on('data', (d: string) => { text += d })
      sock.on('error', () => {})
      const timer = setTimeout(() => { sock.destroy() }, 10_000)
      sock.on('close', () => { clearTimeout(timer); resolve(text.replace(`hello ${i}`, 'hello N')) })
    })
    answers.add(answer)
  }
  t.same([...answers], ['HTTP/1.1 200 Connection Established\r\n\r\necho:hello N'], 'every time: the 200, then the destination\'s answer to the bytes sent')
})

/** Waits (bounded) until `cond` holds. */
async function until(cond: () => boolean, what: string): Promise<void> {
  await eventually(async () => cond(), (v) => v, 10000, what)
}

/**
 * A bare HTTP/2 client (prior knowledge) with one CONNECT stream, speaking frames
 * itself: node's client sends END_STREAM before any RST_STREAM it is asked for,
 * and turns a received reset into an 'end', so it cannot show what a reset does.
 */
interface Frame { type: number; flags: number; stream: number; payload: Buffer }
const DATA = 0x0
const HEADERS = 0x1
const RST_STREAM = 0x3
const END_STREAM = 0x1

function frame(type: number, flags: number, stream: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(9)
  h.writeUIntBE(payload.length, 0, 3)
  h[3] = type
  h[4] = flags
  h.writeUInt32BE(stream, 5)
  return Buffer.concat([h, payload])
}

function literal(index: number, value: string): Buffer {
  // HPACK literal without indexing, name from the static table (RFC 7541 §6.2.2); short values only.
  return Buffer.concat([Buffer.from([index, value.length]), Buffer.from(value, 'latin1')])
}

function rawH2Connect(authority: string): { frames: Frame[]; send(type: number, flags: number, payload: Buffer): void; socket: net.Socket } {
  const frames: Frame[] = []
  const socket = net.connect(gwPort, '127.0.0.1')
  socket.on('error', () => {})
  let buf = Buffer.alloc(0)
  socket.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d])
    while (buf.length >= 9 && buf.length >= 9 + buf.readUIntBE(0, 3)) {
      const len = buf.readUIntBE(0, 3)
      frames.push({ type: buf[3], flags: buf[4], stream: buf.readUInt32BE(5) & 0x7fffffff, payload: buf.subarray(9, 9 + len) })
      buf = buf.subarray(9 + len)
    }
  })
  // :method (static 2) CONNECT, :authority (static 1); END_HEADERS.
  socket.write(Buffer.concat([
    Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
    frame(0x4, 0, 0, Buffer.alloc(0)),
    frame(HEADERS, 0x4, 1, Buffer.concat([literal(2, 'CONNECT'), literal(1, authority)])),
  ]))
  return { frames, socket, send: (type, flags, payload) => { socket.write(frame(type, flags, 1, payload)) } }
}

function rstCode(code: number): Buffer {
  const b = Buffer.alloc(4)
  b.writeUInt32BE(code)
  return b
}

t.test('resets cross a tunnel as resets, both ways (RFC 9113 §8.5)', async (t) => {
  // An HTTP/2 client cancels mid-upload: the destination must not see an orderly end.
  const before = sinkReceived.length
  const cancelled = rawH2Connect('sink.test:443')
  t.teardown(() => { cancelled.socket.destroy() })
  await until(() => cancelled.frames.some((f) => f.type === HEADERS && f.stream === 1), 'the answer to the CONNECT')
  cancelled.send(DATA, 0, Buffer.alloc(1000, 0x61))
  await until(() => sinkReceived.length > before && sinkReceived[before] === 1000, 'the bytes at the destination')
  cancelled.send(RST_STREAM, 0, rstCode(http2.constants.NGHTTP2_CANCEL))
  await until(() => sinkEnds[before] !== undefined, 'the destination connection closing')
  t.equal(sinkEnds[before], 'ECONNRESET', 'RST_STREAM from the client: the destination connection is reset, not ended')
  await cli.waitFor(/"component":"access"[^\n]*"via":"h2"[^\n]*"route":"default\/sink"[^\n]*"reason":"client_reset"/, 10000)
  t.pass('logged as client_reset')

  // The destination resets: the client's stream is reset with CONNECT_ERROR, never ended as if complete.
  const reset = rawH2Connect('rst.test:443')
  t.teardown(() => { reset.socket.destroy() })
  await until(() => reset.frames.some((f) => f.type === HEADERS && f.stream === 1), 'the answer to the CONNECT')
  reset.send(DATA, 0, Buffer.from('x'))
  await until(() => reset.frames.some((f) => f.type === RST_STREAM && f.stream === 1), 'the stream reset')
  const onStream = reset.frames.filter((f) => f.stream === 1)
  const rst = onStream.findIndex((f) => f.type === RST_STREAM)
  t.equal(onStream[rst]?.payload.readUInt32BE(0), http2.constants.NGHTTP2_CONNECT_ERROR, 'TCP reset from the destination: RST_STREAM CONNECT_ERROR')
  t.same(onStream.slice(0, rst).filter((f) => (f.flags & END_STREAM) !== 0).map((f) => f.type), [], 'and no END_STREAM before it')

  // The same over HTTP/1.1: a client's reset reaches the destination as a reset...
  const client = net.connect(gwPort, '127.0.0.1', () => client.write(connectHead('sink.test:443')))
  client.on('error', () => {})
  await new Promise<void>((resolve) => client.once('data', () => resolve()))
  const h1At = sinkReceived.length - 1
  client.write(Buffer.alloc(1000, 0x61))
  await until(() => sinkReceived[h1At] === 1000, 'the HTTP/1.1 bytes at the destination')
  client.resetAndDestroy()
  await until(() => sinkEnds[h1At] !== undefined, 'the destination connection closing')
  t.equal(sinkEnds[h1At], 'ECONNRESET', 'HTTP/1.1 client reset: the destination connection is reset, not ended')

  // ...and the destination's reset reaches the client as one.
  const h1Reset = await new Promise<string>((resolve) => {
    const sock = net.connect(gwPort, '127.0.0.1', () => sock.write(connectHead('rst.test:443')))
    let outcome = 'closed'
    sock.once('data', () => { sock.write('x') })
    sock.on('end', () => { outcome = 'FIN' })
    sock.on('error', (e: NodeJS.ErrnoException) => { outcome = e.code ?? e.message })
    sock.on('close', () => resolve(outcome))
  })
  t.equal(h1Reset, 'ECONNRESET', 'TCP reset from the destination: the HTTP/1.1 client connection is reset')
})

t.test('a CONNECT target that is not host:port with a decimal port is a 400', async (t) => {
  const statusOf = async (authority: string): Promise<string> => {
    const { received } = await exchange(Buffer.from(`CONNECT ${authority} HTTP/1.1\r\nhost: echo.test\r\n\r\n`), (s, got) => {
      if (got.includes('\r\n')) s.destroy()
    })
    return received.slice(0, received.indexOf('\r\n'))
  }
  t.equal(await statusOf('echo.test:443'), 'HTTP/1.1 200 Connection Established', 'echo.test:443 is tunnelled')
  // RFC 3986 §3.2.3: port = *DIGIT; Number() also read these as 443.
  for (const port of ['0x1bb', '+443', '443.0', '4.43e2', ' 443', '']) {
    t.equal(await statusOf(`echo.test:${port}`), 'HTTP/1.1 400 Bad Request', `port ${JSON.stringify(port)}: 400`)
  }
  t.equal(await statusOf('echo.test:65536'), 'HTTP/1.1 400 Bad Request', 'a port past 65535: 400')
  // A host is a DNS name or an IP literal: no path, no percent-encoding, at most 253 characters.
  for (const host of ['echo.test/x', 'echo.test%2fx', 'a'.repeat(5000), '[not-ip]', 'echo..test']) {
    t.equal(await statusOf(`${host}:443`), 'HTTP/1.1 400 Bad Request', `host ${JSON.stringify(host.length > 40 ? `${host.slice(0, 10)}… (${host.length})` : host)}: 400`)
  }
  // Refusals log the destination as host:port, like tunnels.
  await statusOf('nope.test:8443')
  await cli.waitFor(/"component":"forward-proxy"[^\n]*"destination":"nope.test:8443"[^\n]*CONNECT refused/, 10000)
  t.pass('the refusal log names host:port')
})
