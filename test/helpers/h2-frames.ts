// Raw HTTP/2 frames for tests that must put on the wire what node's own client
// never sends (a RST_STREAM without END_STREAM first, a DATA frame longer than
// its content-length, frames in one write).

/** A frame: 9-byte header (length, type, flags, stream id) and the payload. */
export function frame(type: number, flags: number, stream: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9)
  head.writeUIntBE(payload.length, 0, 3)
  head[3] = type
  head[4] = flags
  head.writeUInt32BE(stream, 5)
  return Buffer.concat([head, payload])
}

/** HPACK: a literal field without indexing whose name is static-table entry `index` (< 15), value `value` (< 128 bytes). */
export function literal(index: number, value: string): Buffer {
  return Buffer.concat([Buffer.from([index, value.length]), Buffer.from(value)])
}

/** HPACK header block of a POST over http for `path` and `authority`; `contentLength`: a content-length field (static entry 28). */
export function postFields(path: string, authority: string, contentLength: number | null = null): Buffer {
  const parts = [Buffer.from([0x83, 0x86]), literal(0x04, path), literal(0x01, authority)]
  if (contentLength !== null) {
    const value = String(contentLength)
    parts.push(Buffer.from([0x0f, 0x0d, value.length]), Buffer.from(value))
  }
  return Buffer.concat(parts)
}

/** RST_STREAM on `stream` with `code`. */
export function rstStream(stream: number, code: number): Buffer {
  const payload = Buffer.alloc(4)
  payload.writeUInt32BE(code)
  return frame(3, 0, stream, payload)
}

/** The client connection preface and an empty SETTINGS frame. */
export const PREFACE: Buffer = Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), frame(4, 0, 0, Buffer.alloc(0))])
