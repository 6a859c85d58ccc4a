// Releasing a streamed body chunk's memory as soon as it has been written.
//
// Every socket read allocates a new ArrayBuffer outside V8's heap. A proxied
// body allocates almost nothing on the heap itself, so no minor GC comes to
// free the dead chunks: V8 lets them pile up to its external-memory allowance
// (64 MiB) before a full collection, and a large transfer raised RSS by that
// much. A chunk that has been written and that nothing else references can
// instead be freed at once by detaching its ArrayBuffer; malloc then hands the
// same memory to the next read, and RSS stays flat.
//
// Only when it is certain that nothing else uses the bytes:
// - the chunk is the whole of its ArrayBuffer (a socket read that was all body,
//   or the copy node's HTTP parser makes of a request body chunk): no header
//   bytes or unparsed remainder share it, and no pooled Buffer;
// - it comes from a stream whose chunks nothing else keeps:
//   - responses: an upstream body whose only consumer is the client writer
//     (exchange.ts isUpstreamBody, one 'data' listener: releasableResponseChunk,
//     WrittenChunks; the HTTP/1.1 exchanges in lib/listeners);
//   - requests: a client's HTTP/1.1 body given to the HTTP/1.1 pool as it is,
//     or through the retry replay buffer, which marks the chunks it keeps
//     (ownedStreams, retained); a body a mirror tees or an extension reads is
//     another stream and is not marked;
// - it is released in its write's callback: the bytes are in the kernel (or
//   the TLS layer's own buffer), never while a write still reads them.

import type { Duplex, Readable } from 'node:stream'
import { isUpstreamBody } from './exchange.ts'

/** Smaller chunks are not worth a callback (and bulk reads are 64 KiB). */
export const RELEASE_MIN_BYTES = 16 * 1024

/** The chunk may be released once written (see above; where it comes from is the caller's check). */
// hot path
export function isReleasable(chunk: Uint8Array): boolean {
  return chunk.byteLength >= RELEASE_MIN_BYTES && chunk.byteOffset === 0 && chunk.buffer.byteLength === chunk.byteLength &&
    chunk.buffer instanceof ArrayBuffer
}

/** Frees the chunk's memory now; views of it read as empty from here on. */
export function release(chunk: Uint8Array): void {
  try {
    (chunk.buffer as ArrayBuffer).transfer(0)
  } catch {
    // Not detachable (marked untransferable, say): the GC frees it as before.
  }
}

/**
 * A client writer may free `chunk` of the response body `body` once written: it
 * is releasable and comes straight from an upstream pool, and the writer is
 * the body's only consumer (a second 'data' listener may still hold it).
 */
// hot path
export function releasableResponseChunk(body: Readable | null, chunk: Uint8Array): boolean {
  return body !== null && isReleasable(chunk) && isUpstreamBody(body) && body.listenerCount('data') === 1
}

/** Chunks being written, each released when its write completes (write callbacks come in write order). */
export class WrittenChunks {
  readonly #pending: Uint8Array[] = []

  /** Queues `chunk`; the returned write callback releases it. */
  add(chunk: Uint8Array): (err?: Error | null) => void {
    this.#pending.push(chunk)
    return this.#written
  }

  readonly #written = (err?: Error | null): void => {
    const chunk = this.#pending.shift()
    if (chunk !== undefined && (err === null || err === undefined)) release(chunk)
  }
}

/** Request body streams whose chunks nothing but their consumer keeps. */
export const ownedStreams = new WeakSet<Readable>()
/** Chunks of an owned stream that someone keeps after all (the retry replay buffer). */
export const retained = new WeakSet<Uint8Array>()
/** Chunks on their way to an upstream socket that may be released once written. */
const releasable = new WeakSet<Uint8Array>()

/** Owned streams whose chunks are being marked (a redispatch to another endpoint marks once). */
const marking = new WeakSet<Readable>()

/**
 * When `body` is an owned stream, marks its releasable chunks as they are
 * emitted to its consumer. The listener goes first and does not start the flow
 * (prependListener is not Readable's `on`): the consumer's own 'data'
 * listener does, and sees each chunk after it was marked.
 */
export function markReleasableChunks(body: Readable): void {
  if (!ownedStreams.has(body) || marking.has(body)) return
  marking.add(body)
  body.prependListener('data', markChunk)
}

function markChunk(chunk: unknown): void {
  if (chunk instanceof Uint8Array && isReleasable(chunk) && !retained.has(chunk)) releasable.add(chunk)
}

type Write = (chunk: unknown, encoding?: unknown, cb?: unknown) => boolean

/** Makes `socket` release the marked chunks written to it, once each write is done. */
export function releaseWrittenChunks(socket: Duplex): void {
  const write = socket.write as Write
  const wrapped: Write = function (this: Duplex, chunk, encoding, cb) {
    if (!(chunk instanceof Uint8Array) || !releasable.has(chunk)) return write.call(this, chunk, encoding, cb)
    releasable.delete(chunk)
    const done = typeof encoding === 'function' ? encoding : cb
    return write.call(this, chunk, typeof encoding === 'string' ? encoding : undefined, (err?: Error | null) => {
      if (err === null || err === undefined) release(chunk)
      if (typeof done === 'function') (done as (err?: Error | null) => void)(err)
    })
  }
  socket.write = wrapped as Duplex['write']
}
