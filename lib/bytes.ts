// Writing text into bytes without a string per piece: HTTP/1.1 heads
// (upstream/head-buffer.ts) and access lines (observe/access-log.ts) are built
// straight into buffers.

/**
 * Writes `s` (one byte per character: the caller knows every code is below
 * 256) into `buf` at `at`, which has room; returns where it ended. Short strings
 * (most field names and values) byte by byte: below 24 characters the loop
 * costs less than a call into Buffer's native write.
 */
// hot path
export function latin1(buf: Buffer, s: string, at: number): number {
  const n = s.length
  if (n >= 24) return at + buf.write(s, at, 'latin1')
  for (let i = 0; i < n; i++) buf[at + i] = s.charCodeAt(i)
  return at + n
}
