// Hostile HTTP/2 clients of a port listener, with raw frames: what one client
// puts on the wire never takes the gateway (and every other client) down.

import t, { type Test } from 'tap'
import net from 'node:net'
import { PassThrough } from 'node:stream'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { PREFACE, frame, literal, postFields } from '../helpers/h2-frames.ts'
import { echoH1, h1, h2, startPlane } from './fixtures.ts'

configureLogger({ level: 'silent' })

/** HPACK: an integer with a 7-bit prefix (RFC 7541 §5.1), for string lengths. */
function int7(n: number): Buffer {
  if (n < 127) return Buffer.from([n])
  const out = [127]
  let rest = n - 127
  while (rest >= 128) { out.push((rest & 127) | 128); rest >>= 7 }
  out.push(rest)
  return Buffer.from(out)
}

/** HPACK: a literal field without indexing, new name, `n` bytes of value. */
function bigField(name: string, n: number): Buffer {
  return Buffer.concat([Buffer.from([0x00, name.length]), Buffer.from(name), int7(n), Buffer.alloc(n, 0x76)])
}

/** HPACK header block of a GET over http for `path` and `authority`. */
function getFields(path: string, authority: string): Buffer {
  return Buffer.concat([Buffer.from([0x82, 0x86]), literal(0x04, path), literal(0x01, authority)])
}

/** Stream 3: a POST announcing 3 bytes whose DATA carries 5 (node ends the whole session for it). */
const OVERLONG = Buffer.concat([frame(1, 0x4, 3, postFields('/overlong', 'example.com', 3)), frame(0, 0x1, 3, Buffer.from('hello'))])

/**
 * Sends the preface, acknowledges the gateway's SETTINGS, then writes `payload`
 * in one write; resolves with the frame types the gateway sent once the
 * connection closes (bounded: 3 s).
 */
function hostile(port: number, payload: Buffer): Promise<{ closed: boolean; goaway: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    let buf = Buffer.alloc(0)
    let acked = false
    let goaway = false
    const timer = setTimeout(() => { socket.destroy(); resolve({ closed: false, goaway }) }, 3000)
    socket.on('error', () => {})
    socket.on('close', () => { clearTimeout(timer); resolve({ closed: true, goaway }) })
    socket.on('data', (c: Buffer) => {
      buf = Buffer.concat([buf, c])
      while (buf.length >= 9) {
        const len = buf.readUIntBE(0, 3)
        if (buf.length < 9 + len) break
        const type = buf[3]
        if (type === 7) goaway = true
        if (type === 4 && (buf[4] & 1) === 0 && !acked) {
          acked = true
          socket.write(Buffer.concat([frame(4, 0x1, 0, Buffer.alloc(0)), payload]))
        }
        buf = buf.subarray(9 + len)
      }
    })
    socket.write(PREFACE)
  })
}

async function gateway(t: Test): Promise<{ port: number; lines: string[] }> {
  const lines: string[] = []
  const sink = new PassThrough()
  sink.on('data', (c: Buffer) => lines.push(...c.toString().split('\n').filter((l) => l.length > 0)))
  configureLogger({ level: 'info', destination: sink })
  t.teardown(() => configureLogger({ level: 'silent' }))
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]), { accessLog: true })
  return { port, lines }
}

t.test('a stream refused before routing, its connection ended by a protocol error in the same read, does not crash the gateway', async (t) => {
  const { port, lines } = await gateway(t)
  const refusals: Array<[string, Buffer]> = [
    // 431: a header list over 16 KiB (HEADERS + CONTINUATION).
    ['header list over the size limit', Buffer.concat([
      frame(1, 0x0, 1, Buffer.concat([getFields('/big', 'example.com'), bigField('x-a', 9000)])),
      frame(9, 0x4, 1, bigField('x-b', 9000)),
    ])],
    // A reset (ENHANCE_YOUR_CALM): more than 100 fields.
    ['header list over the field limit', frame(1, 0x5, 1, Buffer.concat([getFields('/fields', 'example.com'), ...Array.from({ length: 101 }, (_, i) => bigField(`x-${i}`, 1))]))],
    // 400: Host naming another host than :authority (host is static entry 38: 4-bit prefix 15, then 23).
    ['Host differs from :authority', frame(1, 0x5, 1, Buffer.concat([getFields('/host', 'a.example.com'), Buffer.from([0x0f, 23, 13]), Buffer.from('b.example.com')]))],
    // 501: an extended CONNECT naming h2c (:method CONNECT, :protocol h2c, :scheme, :path, :authority).
    ['extended CONNECT for h2c', frame(1, 0x5, 1, Buffer.concat([
      Buffer.from([0x02, 7]), Buffer.from('CONNECT'), Buffer.from([0x00, 9]), Buffer.from(':protocol'), Buffer.from([3]), Buffer.from('h2c'),
      Buffer.from([0x86]), literal(0x04, '/'), literal(0x01, 'example.com'),
    ]))],
    // An HTTP CONNECT tunnel (forward-proxy mode off: refused by the router).
    ['CONNECT tunnel', frame(1, 0x5, 1, Buffer.concat([Buffer.from([0x02, 7]), Buffer.from('CONNECT'), literal(0x01, 'example.com:443')]))],
    // A routed request, for comparison (H2Exchange has always coped).
    ['routed request', frame(1, 0x5, 1, getFields('/routed', 'example.com'))],
  ]
  for (const [name, first] of refusals) {
    const r = await hostile(port, Buffer.concat([first, OVERLONG]))
    t.ok(r.closed, `${name}: the offending connection is closed`)
    // The gateway is still up and serving, both protocols.
    t.equal((await h2(port, { path: '/after' })).status, 200, `${name}: HTTP/2 still served`)
    t.equal((await h1(port, { path: '/after' })).status, 200, `${name}: HTTP/1.1 still served`)
  }
  const big = lines.find((l) => l.includes('"path":"/big"')) ?? ''
  // 431, or 499 when its session was gone already as the stream reached the listener (timing).
  t.match(big, /"status":(431|499),.*"code":"SP_ERR_(HEADERS_TOO_LARGE|CLIENT_ABORTED)"/, 'the refused stream still has its access line')
})

t.test('control-frame floods end the flooding connection; other clients are served', async (t) => {
  const { port } = await gateway(t)
  const ping = (i: number): Buffer => { const p = Buffer.alloc(8); p.writeUInt32BE(i); return frame(6, 0, 0, p) }
  const priority = (i: number): Buffer => { const p = Buffer.alloc(5); p[4] = 15; return frame(2, 0, 3 + 2 * (i % 1000), p) }
  const open = frame(1, 0x4, 1, getFields('/open', 'example.com')) // stream 1, its request not ended
  const floods: Array<[string, Buffer, (i: number) => Buffer]> = [
    // nghttp2: over 1000 acknowledgements queued (PING, SETTINGS) is a flood.
    ['PING', Buffer.alloc(0), ping],
    ['SETTINGS', Buffer.alloc(0), () => frame(4, 0, 0, Buffer.alloc(0))],
    // nghttp2's glitch limit.
    ['PRIORITY', Buffer.alloc(0), priority],
    ['unknown frame types', Buffer.alloc(0), () => frame(0x20, 0, 0, Buffer.alloc(0))],
    // node: maxSessionInvalidFrames (1000).
    ['empty DATA', open, () => frame(0, 0, 1, Buffer.alloc(0))],
    // CVE-2024-27316: a header block that never ends.
    ['empty CONTINUATION', frame(1, 0x0, 1, getFields('/cont', 'example.com')), () => frame(9, 0, 1, Buffer.alloc(0))],
    ['CONTINUATION of fields', frame(1, 0x0, 1, getFields('/cont', 'example.com')), (i) => frame(9, 0, 1, bigField(`x-${i}`, 100))],
  ]
  for (const [name, first, each] of floods) {
    const r = await hostile(port, Buffer.concat([first, ...Array.from({ length: 20_000 }, (_, i) => each(i))]))
    t.ok(r.closed && r.goaway, `${name}: 20,000 in one write end the connection (GOAWAY)`)
    t.equal((await h2(port, { path: '/after' })).status, 200, `${name}: others still served`)
  }
})
