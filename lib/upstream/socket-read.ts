// Reads of a TCP or TLS socket into memory the process reuses (Node's `onread`
// mechanism), instead of what a Readable socket costs per read: a fresh
// ArrayBuffer (64 KiB allocated, then shrunk), a Buffer over it, a 'data'
// event and a nextTick to read more. On a small proxied request that is two
// reads (client and upstream), and the ArrayBuffers are a third of what each
// minor GC sweeps.
//
// Two ways to use it:
// - `readShared`: every read lands in one buffer shared by all such sockets.
//   That is safe because a read is handed to its callback before the next
//   read of any socket, so the callback must not keep the chunk (or a view of
//   it) past its return: `own()` copies what is kept. The HTTP/1.1 client
//   connections and the HTTP/1.1 fast path read this way.
// - `useReadBuffer`: the caller's own buffer (relay.ts, whose pending writes
//   point into it).
// Once a socket reads this way it does for good (the handle keeps the
// listener); `backToStream` makes later reads plain 'data' again (copied), for
// a socket handed to code that reads it as a stream (node's HTTP/1.1 server
// after an upgrade).
//
// Node offers `onread` only to sockets it creates through `new net.Socket` /
// `net.connect` (and `tls.connect`); other sockets (accepted ones, and ones
// made before we know what will read them) get the same through the socket's
// own symbol-keyed onread slots and `useUserBuffer` on its handle (a TLS
// socket's handle decrypts into it). When this Node does not have
// them, every socket stays a plain stream. test/upstream/socket-read.test.ts
// checks they are found on the pinned Node.

import net from 'node:net'
import tls from 'node:tls'
import type { Duplex } from 'node:stream'

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

/** Whether this Node lets sockets read into a reused buffer. */
export const reusedReadsAvailable = slots !== null

/** Called with the bytes read; false stops reading until the socket is resumed. */
export type ReadCallback = (n: number, buf: Buffer) => boolean

interface UserBufferHandle {
  useUserBuffer(buf: Uint8Array): void
}

function handleOf(s: net.Socket): UserBufferHandle | null {
  const h = (s as unknown as { _handle?: Partial<UserBufferHandle> | null })._handle
  return h !== null && h !== undefined && typeof h.useUserBuffer === 'function' ? h as UserBufferHandle : null
}

/** A plain (not TLS) TCP socket. */
export function isPlainSocket(s: Duplex): s is net.Socket {
  return s instanceof net.Socket && !(s instanceof tls.TLSSocket)
}

function slotsOf(s: net.Socket): Record<symbol, unknown> {
  return s as unknown as Record<symbol, unknown>
}

/** True when `s` already reads into a reused buffer. */
export function readsReused(s: Duplex): boolean {
  return slots !== null && s instanceof net.Socket && slotsOf(s)[slots.buffer] != null
}

/**
 * From its next read on, `socket` reads into `buf` and hands each read to
 * `callback` instead of emitting 'data'. A TLS socket hands over what it
 * decrypted, a record at a time. False (nothing
 * changed) when it cannot: not a TCP or TLS socket, no onread slots, bytes
 * still buffered in the stream, or already switched. 'end', 'close', pause()
 * and resume() behave as before; bytesRead counts as before.
 */
export function useReadBuffer(socket: Duplex, buf: Buffer, callback: ReadCallback): boolean {
  if (slots === null || !(socket instanceof net.Socket) || socket.destroyed || socket.readableLength !== 0) return false
  const own = slotsOf(socket)
  if (own[slots.buffer] != null) return false
  const handle = handleOf(socket)
  if (handle === null) return false
  own[slots.buffer] = buf
  own[slots.callback] = callback
  handle.useUserBuffer(buf)
  return true
}

const SHARED_BYTES = 64 * 1024
const shared = Buffer.allocUnsafeSlow(SHARED_BYTES)
const sharedMemory = shared.buffer

/**
 * `socket` reads into the buffer all such sockets share; `onChunk` gets each
 * read as a view of it and must not keep that view (see own()). It returns
 * nothing: to stop reading, pause the socket. False when the socket stays a
 * stream (see useReadBuffer).
 */
export function readShared(socket: Duplex, onChunk: (chunk: Buffer) => void): boolean {
  return useReadBuffer(socket, shared, (n, buf) => {
    onChunk(buf.subarray(0, n))
    return true
  })
}

/** True when `b` is a view of the shared read buffer (valid only until the next read). */
export function isShared(b: Buffer): boolean {
  return b.buffer === sharedMemory
}

/** `b`, copied when it is a view of the shared read buffer: what a callback keeps. */
export function own(b: Buffer): Buffer {
  return b.buffer === sharedMemory ? Buffer.from(b) : b
}

/**
 * A socket that reads into a reused buffer emits plain 'data' again (each read
 * copied into the stream, with its backpressure), for code that reads it as a
 * stream. Nothing to do for a socket that never switched.
 */
export function backToStream(socket: Duplex): void {
  if (!readsReused(socket) || slots === null) return
  slotsOf(socket as net.Socket)[slots.callback] = (n: number, buf: Buffer): boolean => socket.push(Buffer.from(buf.subarray(0, n)))
}
