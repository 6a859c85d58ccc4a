// Moves the bytes of one direction of an L4 connection (TCP/TLS listeners,
// CONNECT tunnels): everything `src` reads is written to `dst`, backpressure
// included, and `src`'s end ends `dst` (half-close travels through).
//
// Two modes:
// - Stream mode (every connection starts here): 'data' events, `write`, and
//   pause until 'drain' when `dst` is full — what `pipe` does.
// - Reused-buffer mode, for bulk transfers between two plain TCP sockets: once
//   a direction has moved BULK_BYTES, its source reads into one 64 KiB buffer
//   the connection keeps (Node's `onread` mechanism) instead of a freshly
//   allocated Buffer per read and a trip through the Readable machinery. A
//   read is written straight out; when the write does not complete at once
//   (`dst` full), the source pauses until it has, because the pending write
//   still points into the buffer. bench/tcp.ts: this takes the proxied/direct
//   throughput ratio from about 0.55 to about 0.75 (the stream mode's cost
//   was allocation and GC, not syscalls: a 1 MiB read buffer is no faster
//   than 64 KiB).
//   Short or idle connections never switch, so they hold no buffer; a
//   switched direction holds 64 KiB until the connection closes, then the
//   buffer goes back to a small free list.
//
// The switch is socket-read.ts's useReadBuffer; when this Node cannot do it,
// every direction stays in stream mode. test/upstream/relay.test.ts checks
// the switch happens on the pinned Node.

import type { Duplex } from 'node:stream'
import type net from 'node:net'
import { isPlainSocket, reusedReadsAvailable, useReadBuffer } from './socket-read.ts'

/** Bytes a direction moves in stream mode before it switches. */
export const BULK_BYTES = 1024 * 1024
const BUFFER_BYTES = 64 * 1024
const FREE_LIST_MAX = 32

const freeBuffers: Buffer[] = []

function takeBuffer(): Buffer {
  return freeBuffers.pop() ?? Buffer.allocUnsafe(BUFFER_BYTES)
}

export interface RelayDirection {
  /** True once the direction reads into a reused buffer. */
  readonly reusedBuffer: boolean
}

/**
 * Starts moving `src` → `dst`. The caller owns errors and closing; this only
 * moves bytes, applies backpressure and ends `dst` when `src` ends.
 */
export function relay(src: Duplex, dst: Duplex): RelayDirection {
  const state = { reusedBuffer: false }
  const eligible = reusedReadsAvailable && isPlainSocket(src) && isPlainSocket(dst)
  let moved = 0
  const resume = (): void => { src.resume() }
  const onData = (chunk: Buffer): void => {
    if (!dst.write(chunk)) {
      src.pause()
      dst.once('drain', resume)
      return
    }
    if (!eligible) return
    moved += chunk.length
    if (moved >= BULK_BYTES && src.readableLength === 0 && !src.destroyed && !dst.destroyed && useReusedBuffer(src as net.Socket, dst as net.Socket)) {
      // From the next read on, data goes to the onread callback, not to 'data'.
      src.removeListener('data', onData)
      state.reusedBuffer = true
    }
  }
  src.on('data', onData)
  // A source that ended before the relay began (a CONNECT client's FIN read
  // with its request head, during the dial) has nothing left to give: its end
  // travels at once.
  if (src.readableEnded) dst.end()
  else src.once('end', () => { dst.end() })
  // A source paused before (a peeked ClientHello, say) flows again.
  src.resume()
  return state
}

/** Switches `src` to reading into a reused buffer written to `dst`; false (nothing changed) when it cannot. */
function useReusedBuffer(src: net.Socket, dst: net.Socket): boolean {
  const buf = takeBuffer()
  let waiting = false
  const onWritten = (err?: Error | null): void => {
    if (!waiting) return
    waiting = false
    if (err == null) src.resume()
  }
  const onRead = (n: number, b: Buffer): boolean => {
    dst.write(b.subarray(0, n), onWritten)
    // Written through already: the buffer is free for the next read.
    if (dst.writableLength === 0) return true
    waiting = true
    return false
  }
  if (!useReadBuffer(src, buf, onRead)) {
    if (freeBuffers.length < FREE_LIST_MAX) freeBuffers.push(buf)
    return false
  }
  // Free once neither side can touch it: no more reads after src closes, and a
  // write still pending on dst is cancelled by the time dst has closed.
  let open = 2
  const release = (): void => { if (--open === 0 && freeBuffers.length < FREE_LIST_MAX) freeBuffers.push(buf) }
  src.once('close', release)
  dst.once('close', release)
  return true
}
