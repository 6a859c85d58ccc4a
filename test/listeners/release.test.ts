// Body chunks are freed as soon as they are written (lib/upstream/release.ts):
// response chunks from an upstream to an HTTP/1.1 client, request chunks from
// an HTTP/1.1 client to an HTTP/1.1 upstream. What a user sees: every byte
// arrives intact whatever the client's pace, the transport, retries and
// mirrors, and a long transfer does not pile dead chunks up outside V8's heap
// until a collection.

import t, { type Test } from 'tap'
import { createHash } from 'node:crypto'
import http from 'node:http'
import https from 'node:https'
import net from 'node:net'
import type { RetrySpec } from '../../lib/compile/table.ts'
import { buildTable, cluster, freePort, serverTls } from '../helpers/table-builder.ts'
import { pattern } from '../helpers/pattern.ts'
import { createCa, serverCert } from '../helpers/pki.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { echoH1, startPlane } from './fixtures.ts'
import { readAll } from '../helpers/slow-reader.ts'

configureLogger({ level: 'silent' })

const CHUNK = 64 * 1024

/** An upstream streaming `size` pattern bytes with backpressure; `hash` is what it sent. */
async function patternUpstream(t: Test, size: number): Promise<{ port: number, sent: () => string }> {
  let digest = ''
  const up = await echoH1(t, 'pattern', (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(size) })
    const hash = createHash('sha256')
    let i = 0
    const pump = (): void => {
      while (i * CHUNK < size) {
        const b = pattern(i++, CHUNK)
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
async function receive(res: http.IncomingMessage, stall: boolean): Promise<Received> {
  const got = await readAll(res, stall ? { every: 16, pauseMs: 5 } : null)
  return { status: res.statusCode ?? 0, bytes: got.bytes, sha256: got.hash }
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
  const download = async (request: string): Promise<{ received: number, peak: number }> => {
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
      }, () => { socket.write(request) })
      socket.on('end', () => resolve(n))
      socket.on('error', reject)
    })
    return { received, peak }
  }
  // A plain GET is answered by listeners/h1-fast.ts; a request with a body by node's server (exchange-h1.ts).
  const cases: Array<[string, string]> = [
    ['plain GET', 'GET /down HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\n\r\n'],
    ['request with a body', 'POST /down HTTP/1.1\r\nhost: example.com\r\nconnection: close\r\ncontent-length: 1\r\n\r\nx'],
  ]
  for (const [what, request] of cases) {
    const { received, peak } = await download(request)
    t.ok(received > SIZE && received < SIZE + 4096, `${what}: the whole body arrived (${received} bytes with the response head)`)
    // Without releasing, V8 let up to 64 MiB of dead chunks wait for a full collection.
    t.ok(peak < 8 * 1024 * 1024, `${what}: memory outside the heap rose by at most ${(peak / 1048576).toFixed(1)} MiB while 256 MiB passed`)
  }
})

/** An upstream that hashes each request body; `fail` answers 503 (after reading the body) to the first n. */
async function hashingUpstream(t: Test, fail = 0): Promise<{ port: number, seen: Received[] }> {
  const seen: Received[] = []
  let n = 0
  const up = await echoH1(t, 'hash', (req, res) => {
    const hash = createHash('sha256')
    let bytes = 0
    req.on('data', (c: Buffer) => {
      hash.update(c)
      bytes += c.length
      // This process's own copies go too, so that what the test measures is the gateway's.
      if (c.byteLength >= 16384 && c.byteOffset === 0 && c.byteLength === c.buffer.byteLength) (c.buffer as ArrayBuffer).transfer(0)
    })
    req.on('end', () => {
      const status = ++n <= fail ? 503 : 200
      seen.push({ status, bytes, sha256: hash.digest('hex') })
      res.writeHead(status, { 'content-type': 'text/plain' }).end(String(bytes))
    })
  })
  return { port: up.port, seen }
}

/** POSTs `size` pattern bytes (`chunks` of CHUNK at a time, content-length set); resolves with the status and what was sent. */
function upload(port: number, size: number): Promise<{ status: number, sha256: string }> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256')
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/up', agent: false, headers: { host: 'example.com', 'content-length': String(size) } }, (res) => {
      res.resume()
      res.on('end', () => resolve({ status: res.statusCode ?? 0, sha256: hash.digest('hex') }))
    })
    req.on('error', reject)
    let i = 0
    const pump = (): void => {
      while (i * CHUNK < size) {
        const b = pattern(i++, CHUNK).subarray(0, Math.min(CHUNK, size - (i - 1) * CHUNK))
        hash.update(b)
        if (!req.write(b)) { req.once('drain', pump); return }
      }
      req.end()
    }
    pump()
  })
}

const retryOn503: RetrySpec = {
  attempts: 2, codes: [], backoffMs: null,
  policy: { numRetries: 2, perTryTimeout: null, backoffBase: 1, backoffMax: 5, triggers: ['retriable-status-codes'], httpStatusCodes: [503] },
}

t.test('uploads arrive intact: as they are, through the retry replay buffer, retried, and mirrored', async (t) => {
  const SIZE = 16 * 1024 * 1024
  const plain = await hashingUpstream(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', plain.port)]))
  const sent = await upload(port, SIZE)
  t.same(plain.seen.at(-1), { status: 200, bytes: SIZE, sha256: sent.sha256 }, 'forwarded as it is')

  // With a retry policy the body goes through the replay buffer; past its bound it streams on.
  const replayed = await hashingUpstream(t)
  const retryPort = await freePort()
  await startPlane(t, buildTable({ [retryPort]: { routes: [{ name: 'r', rules: [{ retry: retryOn503, backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', replayed.port)]))
  const big = await upload(retryPort, SIZE)
  t.same(replayed.seen.at(-1), { status: 200, bytes: SIZE, sha256: big.sha256 }, 'through the replay buffer')

  // A body within the replay bound is sent again whole: its kept chunks were never freed.
  const flaky = await hashingUpstream(t, 1)
  const flakyPort = await freePort()
  await startPlane(t, buildTable({ [flakyPort]: { routes: [{ name: 'r', rules: [{ retry: retryOn503, backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', flaky.port)]))
  const small = await upload(flakyPort, 48 * 1024)
  t.equal(small.status, 200, 'the retry answered')
  t.same(flaky.seen, [{ status: 503, bytes: 48 * 1024, sha256: small.sha256 }, { status: 200, bytes: 48 * 1024, sha256: small.sha256 }], 'the retry carried the same bytes')

  // A mirrored body (within the mirror bound, 64 KiB) reaches both, intact.
  const main = await hashingUpstream(t)
  const mirror = await hashingUpstream(t)
  const mirrorPort = await freePort()
  await startPlane(t, buildTable({ [mirrorPort]: { routes: [{ name: 'r', rules: [{ mirrors: [{ cluster: 'm', percent: 100 }], backends: [{ cluster: 'c' }] }] }] } },
    [cluster('c', main.port), cluster('m', mirror.port)]))
  const teed = await upload(mirrorPort, 48 * 1024)
  t.same(main.seen.at(-1), { status: 200, bytes: 48 * 1024, sha256: teed.sha256 }, 'the main upstream got it whole')
  for (let i = 0; i < 100 && mirror.seen.length === 0; i++) await new Promise((r) => setTimeout(r, 20))
  t.same(mirror.seen.at(-1), { status: 200, bytes: 48 * 1024, sha256: teed.sha256 }, 'so did the mirror')
})

t.test('a long upload does not pile dead body chunks up outside the heap', async (t) => {
  const SIZE = 256 * 1024 * 1024
  const up = await hashingUpstream(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry: retryOn503, backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const chunk = Buffer.alloc(CHUNK, 0x62) // the client writes one buffer over and over
  const start = process.memoryUsage().arrayBuffers
  let peak = 0
  const status = await new Promise<number>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/up', agent: false, headers: { host: 'example.com', 'content-length': String(SIZE) } }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    })
    req.on('error', reject)
    let sent = 0
    const pump = (): void => {
      while (sent < SIZE) {
        sent += CHUNK
        peak = Math.max(peak, process.memoryUsage().arrayBuffers - start)
        if (!req.write(chunk)) { req.once('drain', pump); return }
      }
      req.end()
    }
    pump()
  })
  t.equal(status, 200)
  t.equal(up.seen.at(-1)?.bytes, SIZE, 'the whole body arrived')
  // Released chunks keep it near zero on a quiet machine; on a busy one more
  // chunks are in flight at once (a few MiB, once 11 MiB in a loaded suite).
  // Without releasing, it rises to 35-53 MiB (V8's external allowance).
  t.ok(peak < 20 * 1024 * 1024, `memory outside the heap rose by at most ${(peak / 1048576).toFixed(1)} MiB while 256 MiB went up`)
})
