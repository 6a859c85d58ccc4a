// socket-read.ts: plain TCP sockets reading into one shared buffer, on real
// loopback sockets. What its users rely on: the switch happens on the pinned
// Node, a read is the caller's until the next read of any socket (own() keeps
// it), the socket still pauses, resumes, ends and counts bytes as a stream,
// and backToStream turns later reads back into 'data' with backpressure.

import t, { type Test } from 'tap'
import { createHash } from 'node:crypto'
import net from 'node:net'
import tls from 'node:tls'
import { backToStream, isShared, own, readShared, readsReused, reusedReadsAvailable } from '../../lib/upstream/socket-read.ts'
import { pattern } from '../helpers/pattern.ts'
import { createCa, serverCert } from '../helpers/pki.ts'

interface Pair {
  /** The end the test writes to. */
  readonly outside: net.Socket
  /** The accepted end, which reads into the shared buffer. */
  readonly inside: net.Socket
}

async function pair(t: Test): Promise<Pair> {
  const server = net.createServer()
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as net.AddressInfo).port
  const accepted = new Promise<net.Socket>((r) => server.once('connection', r))
  const outside = net.connect({ port, host: '127.0.0.1' })
  const inside = await accepted
  await new Promise<void>((r) => { if (outside.readyState === 'open') r(); else outside.once('connect', () => r()) })
  server.close()
  t.teardown(() => { outside.destroy(); inside.destroy() })
  return { outside, inside }
}

const tick = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

/** Resolves with the next chunk `reads` delivers. */
function nextChunk(reads: Buffer[], count: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no read ${count}`)), 5000)
    const poll = (): void => { if (reads.length >= count) { clearTimeout(timer); resolve() } else setTimeout(poll, 2) }
    poll()
  })
}

t.test('the pinned Node lets sockets read into a reused buffer', async (t) => {
  t.ok(reusedReadsAvailable, 'onread slots found')
  const { inside } = await pair(t)
  t.ok(readShared(inside, () => {}), 'an accepted plain socket switches')
  t.ok(readsReused(inside))
  t.notOk(readShared(inside, () => {}), 'a second switch is refused (the handle keeps one reader)')
})

t.test('two sockets share one buffer: a read is valid until the next read, own() keeps it', async (t) => {
  const a = await pair(t)
  const b = await pair(t)
  const rawA: Buffer[] = []
  const keptA: Buffer[] = []
  const keptB: Buffer[] = []
  t.ok(readShared(a.inside, (c) => { rawA.push(c); keptA.push(own(c)) }))
  t.ok(readShared(b.inside, (c) => { keptB.push(own(c)) }))
  a.outside.write('from a, first')
  await nextChunk(keptA, 1)
  t.ok(isShared(rawA[0]), 'the callback gets a view of the shared buffer')
  t.notOk(isShared(keptA[0]), 'own() copies it out')
  t.equal(own(keptA[0]), keptA[0], 'own() of a buffer that is not shared is that buffer')
  b.outside.write('BBBBBBBBBBBBB')
  await nextChunk(keptB, 1)
  t.equal(rawA[0].toString(), 'BBBBBBBBBBBBB', 'the next read of another socket overwrote the view')
  t.equal(keptA[0].toString(), 'from a, first', 'the copy is intact')
  t.equal(keptB[0].toString(), 'BBBBBBBBBBBBB')
})

t.test('pause stops reads, resume brings them back; end and bytesRead as on a stream', async (t) => {
  const { outside, inside } = await pair(t)
  const got: Buffer[] = []
  readShared(inside, (c) => {
    got.push(own(c))
    inside.pause() // from inside the callback, as the HTTP/1.1 client does under backpressure
  })
  const ended = new Promise<void>((r) => inside.once('end', () => r()))
  outside.write('one')
  await nextChunk(got, 1)
  outside.write('two')
  await tick(80)
  t.equal(got.length, 1, 'no read while paused')
  inside.resume()
  await nextChunk(got, 2)
  t.equal(Buffer.concat(got).toString(), 'onetwo')
  inside.resume()
  outside.end()
  await ended
  t.pass("'end' is emitted at EOF")
  t.equal(inside.bytesRead, 6, 'bytesRead counts reads into the shared buffer')
})

t.test('a socket with bytes already buffered stays a stream', async (t) => {
  const { outside, inside } = await pair(t)
  inside.pause()
  outside.write('waiting')
  await new Promise<void>((resolve) => {
    const poll = (): void => { inside.read(0); if (inside.readableLength > 0) resolve(); else setTimeout(poll, 5) }
    poll()
  })
  t.notOk(readShared(inside, () => {}), 'buffered bytes would be read out of order: refused')
  t.equal(String(inside.read()), 'waiting', 'nothing was lost')
})

t.test('backToStream: later reads are plain data events, byte-exact behind a slow reader', async (t) => {
  const { outside, inside } = await pair(t)
  const first: Buffer[] = []
  readShared(inside, (c) => { first.push(own(c)) })
  outside.write('switched')
  await nextChunk(first, 1)
  backToStream(inside)
  const total = 8 * 1024 * 1024
  const sent = createHash('sha256')
  const seen = createHash('sha256')
  let bytes = 0
  let n = 0
  const done = new Promise<void>((resolve, reject) => {
    inside.on('data', (c: Buffer) => {
      if (isShared(c)) reject(new Error('a data event carried the shared buffer'))
      seen.update(c)
      bytes += c.length
      // Slow now and then: the socket's buffer fills, reads stop and start again.
      if (++n % 8 === 0) { inside.pause(); setTimeout(() => inside.resume(), 3) }
      if (bytes === total) resolve()
    })
    inside.on('error', reject)
  })
  // Meanwhile another socket reads into the shared buffer, overwriting it.
  const other = await pair(t)
  const noise: Buffer[] = []
  readShared(other.inside, (c) => { noise.push(own(c)) })
  for (let i = 0; i * 65536 < total; i++) {
    const chunk = pattern(i, 65536)
    sent.update(chunk)
    if (i % 16 === 0) other.outside.write(pattern(i + 1000, 4096))
    if (!outside.write(chunk)) await new Promise((r) => outside.once('drain', r))
  }
  await done
  t.equal(bytes, total, 'every byte arrived')
  t.equal(seen.digest('hex'), sent.digest('hex'), 'in order, none overwritten')
  t.ok(noise.length > 0, 'the other socket read meanwhile')
})

t.test('a TLS socket reads decrypted records into the shared buffer, byte-exact with another socket reading', async (t) => {
  const ca = createCa()
  const leaf = serverCert(ca, ['localhost'])
  const total = 8 * 1024 * 1024
  const sent = createHash('sha256')
  const server = tls.createServer({ cert: leaf.certPem, key: leaf.keyPem }, (s) => {
    s.on('error', () => {})
    let i = 0
    const more = (): void => {
      while (i * 65536 < total) {
        const chunk = pattern(i++, 65536)
        sent.update(chunk)
        if (!s.write(chunk)) { s.once('drain', more); return }
      }
      s.end()
    }
    more()
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => server.close())
  const port = (server.address() as net.AddressInfo).port
  const client = tls.connect({ port, host: '127.0.0.1', servername: 'localhost', ca: ca.certPem })
  client.on('error', () => {})
  t.teardown(() => client.destroy())
  await new Promise<void>((r) => client.once('secureConnect', () => r()))
  const other = await pair(t)
  const noise: Buffer[] = []
  readShared(other.inside, (c) => { noise.push(own(c)) })
  const seen = createHash('sha256')
  let bytes = 0
  let reads = 0
  let shared = true
  t.ok(readShared(client, (c) => {
    shared &&= isShared(c)
    seen.update(c)
    bytes += c.length
    // Other reads land in the shared buffer between these; the client pauses now and then.
    if (++reads % 16 === 0) { other.outside.write(pattern(reads, 4096)); client.pause(); setTimeout(() => client.resume(), 2) }
  }), 'a TLS socket switches')
  await new Promise<void>((resolve) => client.once('end', () => resolve()))
  t.ok(shared, 'every record came in the shared buffer')
  t.equal(bytes, total, 'every byte arrived')
  t.equal(seen.digest('hex'), sent.digest('hex'), 'in order, none lost')
  t.ok(noise.length > 0, 'the other socket read meanwhile')
})
