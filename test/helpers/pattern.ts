// Test payloads whose bytes depend on where they are: chunk i of a stream has
// its own contents, so a chunk shifted, repeated, lost or overwritten by a
// later read shows up in a hash of what arrived.

/** `size` bytes (a multiple of 4) for chunk `i`, in a fresh, unpooled buffer. */
export function pattern(i: number, size: number): Buffer {
  const b = Buffer.allocUnsafe(size)
  for (let j = 0; j < size; j += 4) b.writeUInt32LE((i * 2654435761 + j) >>> 0, j)
  return b
}
