// Response body chunks from an upstream are freed as soon as they are written
// to an HTTP/1.1 client (lib/listeners/release.ts). What a user sees: every
// byte arrives intact whatever the client's pace and transport, and a long
// download does not pile dead chunks up outside V8's heap until a collection.

import t, { type Test } from 'tap'
import { createHash } from 'node:crypto'
import http from 'node:http'
import https from 'node:https'
import net from 'node:net'
import { buildTable, cluster, freePort, serverTls } from '../helpers/table-builder.ts'
import { createCa, serverCert } from '../helpers/pki.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { echoH1, startPlane } from './fixtures.ts'

configureLogger({ level: 'silent' })

const CHUNK = 64 * 1024

/** Deterministic, position-dependent bytes: a chunk freed too early arrives as a gap and breaks the hash. */
function pattern(i: number): Buffer {
  const b = Buffer.allocUnsafe(CHUNK)
  for (let j = 0; j < CHUNK; j += 4) b.writeUInt32LE((i * 2654435761 + j) >>> 0, j)
  return b
}

/** An upstream streaming `size` pattern bytes with backpressure; `hash` is what it sent. */
async function patternUpstream(t: Test, size: number): Promise<{ port: number, sent: () => string }> {
  let digest = ''
  const up = await echoH1(t, 'pattern', (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(size) })
    const hash = createHash('sha256')
    let i = 0
    const pump = (): void => {
      while (i * CHUNK < size) {
        const b = pattern(i++)
        hash.update(b)
        if (!res.write(b)) { res.once('drain', pump); return }
      }
      digest = hash.digest('hex')
      res.end()
    }
    pump()
  })
  return { port: up.port, sent: () => digest }
}

interface Received { readonly status: number, readonly bytes: number, readonly sha256: string }

/** Reads a response, hashing it; `stall` pauses reading now and then so the gateway's writes queue. */
function receive(res: http.IncomingMessage, stall: boolean): Promise<Received> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256')
    let bytes = 0
    let n = 0
    res.on('data', (c: Buffer) => {
      hash.update(c)
      bytes += c.length
      if (stall && ++n % 16 === 0) {
        res.pause()
        setTimeout(() => res.resume(), 5)
      }
    })
    res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes, sha256: hash.digest('hex') }))
    res.on('error', reject)
  })
}

t.test('downloads arrive intact with a fast client, a client that stalls, and over TLS', async (t) => {
  const SIZE = 16 * 1024 * 1024
  const up = await patternUpstream(t, SIZE)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  for (const stall of [false, true]) {
    const got = await new Promise<Received>((resolve, reject) => {
      http.get({ host: '127.0.0.1', port, path: '/down', agent: false, headers: { host: 'example.com' } }, (res) => { receive(res, stall).then(resolve, reject) }).on('error', reject)
    })
    t.same(got, { status: 200, bytes: SIZE, sha256: up.sent() }, stall ? 'a client that stalls gets every byte' : 'a fast client gets every byte')
  }

  const ca = createCa()
  const tlsPort = await freePort()
  const conf = serverTls([{ hostname: 'a.example.com', ...serverCert(ca, ['a.example.com']) }])
  await startPlane(t, buildTable({ [tlsPort]: { protocol: 'HTTPS', tls: conf, routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const overTls = await new Promise<Received>((resolve, reject) => {
    https.get({ host: '127.0.0.1', port: tlsPort, path: '/down', agent: false, ca: ca.certPem, servername: 'a.example.com', headers: { host: 'a.example.com' } },
      (res) => { receive(res, true).then(resolve, reject) }).on('error', reject)
  })
  t.same(overTls, { status: 200, bytes: SIZE, sha256: up.sent() }, 'over TLS, stalling, every byte arrives')
})

t.test('a long download does not pile dead body chunks up outside the heap', async (t) => {
  const SIZE = 256 * 1024 * 1024
  const chunk = Buffer.alloc(CHUNK, 0x61) // reused: the upstream itself allocates nothing per chunk
  const up = await echoH1(t, 'big', (_req, res) => {
    res.writeHead(200, { 'content-length': String(SIZE) })
    let sent = 0
    const pump = (): void => {
      while (sent < SIZE) {
        sent += CHUNK
        if (!res.write(chunk)) { res.once('drain', pump); return }
      }
      res.end()
    }
    pump()
  })
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  // The client reads into one reused buffer (net's onread), so what this
  // process allocates outside the heap meanwhile is the gateway's.
  const start = process.memoryUsage().arrayBuffers
  let peak = 0
  const received = await new Promise<number>((resolve, reject) => {
    let n = 0
    const socket = net.connect({
      host: '127.0.0.1', port,
      onread: {
        buffer: Buffer.alloc(CHUNK),
        callback: (bytes: number) => {
          n += bytes
          peak = Math.max(peak, process.memoryUsage().arrayBuffers - start)
          return true
        },
      },
    }, () => { socket.write('GET /down HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n') })
    socket.on('end', () => resolve(n))
    socket.on('error', reject)
  })
  t.ok(received > SIZE && received < SIZE + 4096, `the whole body arrived (${received} bytes with the response head)`)
  // Without releasing, V8 let up to 64 MiB of dead chunks wait for a full collection.
  t.ok(peak < 8 * 1024 * 1024, `memory outside the heap rose by at most ${(peak / 1048576).toFixed(1)} MiB while 256 MiB passed`)
})
