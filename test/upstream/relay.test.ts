// relay(): one direction of an L4 connection between real loopback sockets.
// The reused-buffer mode must be engaged on the pinned Node, and must never
// hand the consumer a byte that a later read overwrote — so the transfers here
// are checksummed with a consumer slow enough that writes queue up.

import t, { type Test } from 'tap'
import { createHash } from 'node:crypto'
import net from 'node:net'
import { BULK_BYTES, relay } from '../../lib/upstream/relay.ts'
import { pattern } from '../helpers/pattern.ts'
import { readAll, type ReadResult } from '../helpers/slow-reader.ts'

interface Pair {
  /** The end a test writes to or reads from. */
  readonly outside: net.Socket
  /** The end the relay reads from or writes to. */
  readonly inside: net.Socket
}

/** Two connected plain sockets; `inside` is the accepted one. */
async function pair(t: Test): Promise<Pair> {
  const server = net.createServer({ allowHalfOpen: true })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as net.AddressInfo).port
  const accepted = new Promise<net.Socket>((r) => server.once('connection', r))
  const outside = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true })
  const inside = await accepted
  server.close()
  t.teardown(() => { outside.destroy(); inside.destroy() })
  return { outside, inside }
}

async function send(s: net.Socket, total: number, chunk: number, hash: ReturnType<typeof createHash>): Promise<void> {
  for (let i = 0; i * chunk < total; i++) {
    const b = pattern(i, chunk)
    hash.update(b)
    if (!s.write(b)) await new Promise((r) => s.once('drain', r))
  }
  s.end()
}

/** Reads everything, pausing now and then so the relay's writes back up. */
const slowRead = (s: net.Socket): Promise<ReadResult> => readAll(s, { every: 16, pauseMs: 2 })

t.test('a bulk transfer switches to the reused buffer and stays byte-exact behind a slow reader', async (t) => {
  const a = await pair(t) // client side: the test writes to a.outside, the relay reads a.inside
  const b = await pair(t) // upstream side: the relay writes b.inside, the test reads b.outside
  const direction = relay(a.inside, b.inside)
  const total = 24 * 1024 * 1024
  const sent = createHash('sha256')
  const [got] = await Promise.all([slowRead(b.outside), send(a.outside, total, 100_000, sent)])
  t.ok(direction.reusedBuffer, 'past BULK_BYTES the direction reads into a reused buffer')
  t.equal(got.bytes, Math.ceil(total / 100_000) * 100_000, 'every byte arrived')
  t.equal(got.hash, sent.digest('hex'), 'checksum matches')
  t.equal(a.inside.bytesRead, got.bytes, 'bytesRead still counts reads into the reused buffer')
})

t.test('both directions at once, from the connecting side too (half-close after the switch)', async (t) => {
  const a = await pair(t)
  const b = await pair(t)
  // Relay between an accepted socket and a connected one, both ways.
  const up = relay(a.inside, b.outside)
  const down = relay(b.outside, a.inside)
  const total = 8 * BULK_BYTES
  const upHash = createHash('sha256')
  const downHash = createHash('sha256')
  const [gotUp, gotDown] = await Promise.all([
    slowRead(b.inside), slowRead(a.outside),
    send(a.outside, total, 65_536, upHash), send(b.inside, total, 50_000, downHash),
  ])
  t.ok(up.reusedBuffer && down.reusedBuffer, 'both directions switched')
  t.equal(gotUp.hash, upHash.digest('hex'), 'upload byte-exact')
  t.equal(gotDown.hash, downHash.digest('hex'), 'download byte-exact')
})

t.test('a short exchange never switches (no buffer held for small or idle connections)', async (t) => {
  const a = await pair(t)
  const b = await pair(t)
  const direction = relay(a.inside, b.inside)
  const got = slowRead(b.outside)
  a.outside.end('hello')
  const r = await got
  t.equal(r.bytes, 5)
  t.notOk(direction.reusedBuffer)
})

t.test('reads into the reused buffer still count as activity for the socket idle timer', async (t) => {
  const a = await pair(t)
  const b = await pair(t)
  const direction = relay(a.inside, b.inside)
  b.outside.resume()
  const filler = pattern(0, 65_536)
  for (let sent = 0; sent <= BULK_BYTES; sent += filler.length) {
    if (!a.outside.write(filler)) await new Promise((r) => a.outside.once('drain', r))
  }
  // The switch happens on a read once BULK_BYTES have moved; wait for it rather than for a time.
  for (let i = 0; i < 200 && !direction.reusedBuffer; i++) await new Promise((r) => setTimeout(r, 10))
  t.ok(direction.reusedBuffer, 'switched')
  // Ticks come ten times as often as the idle timeout, so a test process
  // stalled on a loaded machine does not fire the timer between two ticks.
  let timedOut = false
  const fired = new Promise<void>((r) => a.inside.once('timeout', r))
  a.inside.setTimeout(1000, () => { timedOut = true })
  for (let i = 0; i < 15; i++) {
    a.outside.write('tick')
    await new Promise((r) => setTimeout(r, 100))
  }
  t.notOk(timedOut, 'traffic every 100 ms keeps a 1 s idle timer from firing over 1.5 s')
  await Promise.race([fired, new Promise((r) => setTimeout(r, 5000))])
  t.ok(timedOut, 'silence fires it')
})

t.test('a paused source (a peeked ClientHello, say) flows once relayed', async (t) => {
  const a = await pair(t)
  const b = await pair(t)
  a.inside.pause()
  relay(a.inside, b.inside)
  const got = slowRead(b.outside)
  a.outside.end('after pause')
  t.equal((await got).bytes, 11)
})

t.test('a source that cannot switch (no handle to read into) keeps relaying in stream mode', async (t) => {
  const b = await pair(t)
  // Not connected: a net.Socket without a handle. Its 'data' is emitted by hand here.
  const src = new net.Socket({ allowHalfOpen: true })
  t.teardown(() => src.destroy())
  const direction = relay(src, b.inside)
  const got = slowRead(b.outside)
  const sent = createHash('sha256')
  for (let i = 0; i < 40; i++) {
    const chunk = pattern(i, 65_536)
    sent.update(chunk)
    src.emit('data', chunk)
  }
  src.emit('end')
  const r = await got
  t.notOk(direction.reusedBuffer, 'no switch without a handle')
  t.equal(r.bytes, 40 * 65_536, 'nothing lost past BULK_BYTES')
  t.equal(r.hash, sent.digest('hex'))
})
