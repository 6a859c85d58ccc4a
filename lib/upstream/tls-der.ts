// A minimal DER reader (X.690) for the few structures revocation checking
// needs: certificates (issuer, serial, extensions), CRLs (RFC 5280 §5) and
// OCSP responses (RFC 6960 §4.2). Node's X509Certificate covers chains and
// signatures but exposes neither CRLs, OCSP nor arbitrary extensions, and we
// need the exact signed bytes (tbsCertList, tbsResponseData) to verify them.
// Read-only, bounds-checked; a malformed input throws DerError.

export class DerError extends Error {
  readonly code = 'SP_TLS_DER'
}

/** One TLV: `start` is the header's first byte, `body` the content range, `end` one past the last byte. */
export interface Tlv {
  readonly buf: Buffer
  /** Tag class: 0 universal, 1 application, 2 context, 3 private. */
  readonly cls: number
  readonly constructed: boolean
  /** Tag number (low-tag-number form only; enough for X.509). */
  readonly tag: number
  readonly start: number
  readonly body: number
  readonly end: number
}

export const Tag = {
  BOOLEAN: 1, INTEGER: 2, BIT_STRING: 3, OCTET_STRING: 4, NULL: 5, OID: 6, ENUMERATED: 10,
  SEQUENCE: 16, SET: 17, UTC_TIME: 23, GENERALIZED_TIME: 24,
} as const

export function readTlv(buf: Buffer, offset = 0, limit = buf.length): Tlv {
  if (offset + 2 > limit) throw new DerError('truncated DER header')
  const first = buf[offset]
  const tag = first & 0x1f
  if (tag === 0x1f) throw new DerError('high tag numbers are not supported')
  let len = buf[offset + 1]
  let body = offset + 2
  if (len & 0x80) {
    const n = len & 0x7f
    if (n === 0 || n > 4 || body + n > limit) throw new DerError('bad DER length')
    len = 0
    for (let i = 0; i < n; i++) len = len * 256 + buf[body + i]
    body += n
  }
  const end = body + len
  if (end > limit) throw new DerError('DER value runs past its container')
  return { buf, cls: first >> 6, constructed: (first & 0x20) !== 0, tag, start: offset, body, end }
}

export function children(tlv: Tlv): Tlv[] {
  const out: Tlv[] = []
  let at = tlv.body
  while (at < tlv.end) {
    const child = readTlv(tlv.buf, at, tlv.end)
    out.push(child)
    at = child.end
  }
  return out
}

/** Children of a SEQUENCE, checking the tag. */
export function sequence(tlv: Tlv, what: string): Tlv[] {
  if (tlv.cls !== 0 || tlv.tag !== Tag.SEQUENCE) throw new DerError(`${what}: expected a SEQUENCE`)
  return children(tlv)
}

export function raw(tlv: Tlv): Buffer {
  return tlv.buf.subarray(tlv.start, tlv.end)
}

export function content(tlv: Tlv): Buffer {
  return tlv.buf.subarray(tlv.body, tlv.end)
}

export function isContext(tlv: Tlv | undefined, n: number): tlv is Tlv {
  return tlv !== undefined && tlv.cls === 2 && tlv.tag === n
}

export function oid(tlv: Tlv): string {
  if (tlv.tag !== Tag.OID) throw new DerError('expected an OBJECT IDENTIFIER')
  const b = content(tlv)
  if (b.length === 0) throw new DerError('empty OBJECT IDENTIFIER')
  const parts: number[] = []
  let value = 0
  for (let i = 0; i < b.length; i++) {
    value = value * 128 + (b[i] & 0x7f)
    if ((b[i] & 0x80) === 0) {
      if (parts.length === 0) parts.push(value < 80 ? Math.floor(value / 40) : 2, value < 80 ? value % 40 : value - 80)
      else parts.push(value)
      value = 0
    }
  }
  return parts.join('.')
}

/** An INTEGER as upper-case hex without leading zero bytes (how serials are compared). */
export function integerHex(tlv: Tlv): string {
  if (tlv.tag !== Tag.INTEGER) throw new DerError('expected an INTEGER')
  let b = content(tlv)
  while (b.length > 1 && b[0] === 0) b = b.subarray(1)
  return b.toString('hex').toUpperCase()
}

export function smallInt(tlv: Tlv): number {
  const b = content(tlv)
  let v = 0
  for (let i = 0; i < b.length && i < 6; i++) v = v * 256 + b[i]
  return v
}

/** UTCTime or GeneralizedTime (RFC 5280 §4.1.2.5: always UTC, "Z"). Milliseconds since epoch. */
export function time(tlv: Tlv): number {
  const s = content(tlv).toString('latin1')
  let m: RegExpExecArray | null
  if (tlv.tag === Tag.UTC_TIME && (m = /^(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})?Z$/.exec(s)) !== null) {
    const yy = Number(m[1])
    return Date.UTC(yy >= 50 ? 1900 + yy : 2000 + yy, Number(m[2]) - 1, Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6] ?? 0))
  }
  if (tlv.tag === Tag.GENERALIZED_TIME && (m = /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(?:\.\d+)?Z$/.exec(s)) !== null) {
    return Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6]))
  }
  throw new DerError('bad time value')
}

export function isTime(tlv: Tlv | undefined): tlv is Tlv {
  return tlv !== undefined && tlv.cls === 0 && (tlv.tag === Tag.UTC_TIME || tlv.tag === Tag.GENERALIZED_TIME)
}

/** BIT STRING content without the unused-bits byte. */
export function bitString(tlv: Tlv): Buffer {
  if (tlv.tag !== Tag.BIT_STRING) throw new DerError('expected a BIT STRING')
  return content(tlv).subarray(1)
}

/** PEM blocks of one label (e.g. 'X509 CRL') → DER buffers. */
export function pemBlocks(text: string, label: string): Buffer[] {
  const out: Buffer[] = []
  const re = new RegExp(`-----BEGIN ${label}-----([\\s\\S]*?)-----END ${label}-----`, 'g')
  let m: RegExpExecArray | null
  while ((m = re.exec(text)) !== null) out.push(Buffer.from(m[1].replace(/\s+/g, ''), 'base64'))
  return out
}
