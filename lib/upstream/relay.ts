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
// Node offers `onread` only to sockets it creates through `new net.Socket` /
// `net.connect`; accepted sockets get the same through the socket's own
// (symbol-keyed) onread slots and `useUserBuffer` on its handle. When this
// Node does not have them, every direction stays in stream mode.
// test/upstream/relay.test.ts checks the switch happens on the pinned Node.

import net from 'node:net'
import tls from 'node:tls'
import type { Duplex } from 'node:stream'

/** Bytes a direction moves in stream mode before it switches. */
export const BULK_BYTES = 1024 * 1024
const BUFFER_BYTES = 64 * 1024
const FREE_LIST_MAX = 32

interface OnreadSlots {
  readonly buffer: symbol
  readonly callback: symbol
}

/** The socket's onread slots, found by description on a probe socket; null when absent. */
const slots: OnreadSlots | null = (() => {
  const probe = new net.Socket()
  const syms = Object.getOwnPropertySymbols(probe)
  const buffer = syms.find((s) => s.description === 'kBuffer')
  const callback = syms.find((s) => s.description === 'kBufferCb')
  probe.destroy()
  return buffer !== undefined && callback !== undefined ? { buffer, callback } : null
})()

interface UserBufferHandle {
  useUserBuffer(buf: Uint8Array): void
}

const freeBuffers: Buffer[] = []

function takeBuffer(): Buffer {
  return freeBuffers.pop() ?? Buffer.allocUnsafe(BUFFER_BYTES)
}

function handleOf(s: net.Socket): UserBufferHandle | null {
  const h = (s as unknown as { _handle?: Partial<UserBufferHandle> | null })._handle
  return h !== null && h !== undefined && typeof h.useUserBuffer === 'function' ? h as UserBufferHandle : null
}

/** A plain (not TLS) TCP socket: reused-buffer mode needs its raw handle. */
function isPlainSocket(s: Duplex): s is net.Socket {
  return s instanceof net.Socket && !(s instanceof tls.TLSSocket)
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
  const eligible = slots !== null && isPlainSocket(src) && isPlainSocket(dst)
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
  src.once('end', () => { dst.end() })
  // A source paused before (a peeked ClientHello, say) flows again.
  src.resume()
  return state
}

/** Switches `src` to reading into a reused buffer written to `dst`; false (nothing changed) when it cannot. */
function useReusedBuffer(src: net.Socket, dst: net.Socket): boolean {
  const handle = handleOf(src)
  if (handle === null || slots === null) return false
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
  const own = src as unknown as Record<symbol, unknown>
  own[slots.buffer] = buf
  own[slots.callback] = onRead
  handle.useUserBuffer(buf)
  // Free once neither side can touch it: no more reads after src closes, and a
  // write still pending on dst is cancelled by the time dst has closed.
  let open = 2
  const release = (): void => { if (--open === 0 && freeBuffers.length < FREE_LIST_MAX) freeBuffers.push(buf) }
  src.once('close', release)
  dst.once('close', release)
  return true
}
