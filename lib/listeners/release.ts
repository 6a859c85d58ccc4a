// Releasing a streamed body chunk's memory as soon as it has been written.
//
// Every socket read allocates a new ArrayBuffer outside V8's heap. A proxied
// body allocates almost nothing on the heap itself, so no minor GC comes to
// free the dead chunks: V8 lets them pile up to its external-memory allowance
// (64 MiB) before a full collection, and a large download raised RSS by that
// much. A chunk that has been written to the client and that nothing else
// references can instead be freed at once by detaching its ArrayBuffer; malloc
// then hands the same memory to the next read, and RSS stays flat.
//
// Only when it is certain that nothing else uses the bytes:
// - the chunk is the whole of its ArrayBuffer (a socket read that was all body:
//   no header bytes or unparsed remainder share it, and no pooled Buffer);
// - it comes from an upstream body whose only consumer is the writer
//   (isUpstreamBody, one 'data' listener): no extension holds or tees it;
// - it is released in the write's callback: the bytes are in the kernel (or
//   the TLS layer's own buffer), never while a write still reads them.

/** Smaller chunks are not worth a callback (and bulk reads are 64 KiB). */
export const RELEASE_MIN_BYTES = 16 * 1024

/** The chunk may be released once written (see above; the body checks are the caller's). */
// hot path
export function isReleasable(chunk: Buffer): boolean {
  return chunk.byteLength >= RELEASE_MIN_BYTES && chunk.byteOffset === 0 && chunk.buffer.byteLength === chunk.byteLength &&
    chunk.buffer instanceof ArrayBuffer
}

/** Frees the chunk's memory now; views of it read as empty from here on. */
export function release(chunk: Buffer): void {
  try {
    (chunk.buffer as ArrayBuffer).transfer(0)
  } catch {
    // Not detachable (marked untransferable, say): the GC frees it as before.
  }
}
