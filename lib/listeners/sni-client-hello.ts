// The server name of a TLS ClientHello, read WITHOUT terminating TLS (TLSRoute
// passthrough routes by it). We parse the record and handshake headers
// ourselves rather than hand the bytes to OpenSSL: the stream must reach the
// upstream untouched, byte for byte.
//
// RFC 8446 §5.1 / RFC 5246 §6.2.1: handshake messages may be fragmented across
// records (and records across TCP segments), so the ClientHello is reassembled
// from the bodies of consecutive handshake records; no other content type may
// interleave. RFC 6066 §3: server_name (extension 0) carries a list of names,
// of which only host_name (type 0) exists; the name is ASCII, without a
// trailing dot. The parser is a pure function over the bytes seen so far:
// callers buffer (bounded by MAX_CLIENT_HELLO_BYTES) and call again on more.

import { withoutTrailingDot } from '../hostname-index.ts'

/** Buffered bytes at most: records of one ClientHello, headers included (≈16 KiB, one maximal record). */
export const MAX_CLIENT_HELLO_BYTES = 16 * 1024

const CONTENT_HANDSHAKE = 22
const HANDSHAKE_CLIENT_HELLO = 1
const EXT_SERVER_NAME = 0
const NAME_TYPE_HOST = 0
/** RFC 8446 §5.1: a plaintext record body is at most 2^14 bytes. */
const MAX_RECORD_BODY = 16_384

export type ClientHelloResult =
  | { readonly kind: 'more' }
  | { readonly kind: 'hello'; readonly sni: string | null }
  | { readonly kind: 'invalid'; readonly reason: string }

const MORE: ClientHelloResult = { kind: 'more' }

function invalid(reason: string): ClientHelloResult {
  return { kind: 'invalid', reason }
}

/**
 * Parse the ClientHello at the start of `buf`: 'more' when it is incomplete
 * (and within the bound), 'hello' with the lowercased SNI (null: none sent),
 * 'invalid' for anything else — the caller closes the connection.
 */
export function parseClientHello(buf: Buffer): ClientHelloResult {
  // Reassemble the handshake bytes from consecutive records.
  const parts: Buffer[] = []
  let have = 0
  let need = -1 // handshake message length incl. its 4-byte header, once known
  let off = 0
  while (need < 0 || have < need) {
    if (buf.length - off < 5) return off + 5 > MAX_CLIENT_HELLO_BYTES ? invalid('too_large') : MORE
    if (buf[off] !== CONTENT_HANDSHAKE) return invalid(off === 0 ? 'not_tls' : 'interleaved_record')
    if (buf[off + 1] !== 3) return invalid('bad_record_version')
    const len = buf.readUInt16BE(off + 3)
    if (len === 0 || len > MAX_RECORD_BODY) return invalid('bad_record_length')
    const end = off + 5 + len
    // The hello (with its record headers) must fit the bound: never buffer more.
    if (end > MAX_CLIENT_HELLO_BYTES) return invalid('too_large')
    if (buf.length < end) return MORE
    parts.push(buf.subarray(off + 5, end))
    have += len
    off = end
    if (need < 0 && have >= 4) {
      const head = parts.length === 1 ? parts[0] : Buffer.concat(parts)
      if (head[0] !== HANDSHAKE_CLIENT_HELLO) return invalid('not_client_hello')
      need = 4 + head.readUIntBE(1, 3)
      if (need > MAX_CLIENT_HELLO_BYTES) return invalid('too_large')
    }
  }
  const hs = parts.length === 1 ? parts[0] : Buffer.concat(parts)
  return parseHello(hs.subarray(4, need))
}

/** ClientHello body (RFC 8446 §4.1.2; the same layout since SSL 3.0). */
function parseHello(b: Buffer): ClientHelloResult {
  let p = 2 + 32 // legacy_version, random
  if (b.length < p + 1) return invalid('truncated_hello')
  const sessionLen = b[p]
  if (sessionLen > 32) return invalid('bad_session_id')
  p += 1 + sessionLen
  if (b.length < p + 2) return invalid('truncated_hello')
  const suitesLen = b.readUInt16BE(p)
  if (suitesLen < 2 || suitesLen % 2 !== 0) return invalid('bad_cipher_suites')
  p += 2 + suitesLen
  if (b.length < p + 1) return invalid('truncated_hello')
  const compLen = b[p]
  if (compLen < 1) return invalid('bad_compression')
  p += 1 + compLen
  if (b.length < p) return invalid('truncated_hello')
  if (b.length === p) return { kind: 'hello', sni: null } // no extensions at all (TLS 1.0 era clients)
  if (b.length < p + 2) return invalid('truncated_extensions')
  const extEnd = p + 2 + b.readUInt16BE(p)
  if (extEnd !== b.length) return invalid('bad_extensions_length')
  p += 2
  let sni: string | null = null
  let seen = false
  while (p < extEnd) {
    if (extEnd - p < 4) return invalid('truncated_extension')
    const type = b.readUInt16BE(p)
    const len = b.readUInt16BE(p + 2)
    p += 4
    if (p + len > extEnd) return invalid('truncated_extension')
    if (type === EXT_SERVER_NAME) {
      // RFC 8446 §4.2: no extension type twice.
      if (seen) return invalid('duplicate_server_name')
      seen = true
      const r = parseServerName(b.subarray(p, p + len))
      if (typeof r !== 'string' && r !== null) return r
      sni = r
    }
    p += len
  }
  return { kind: 'hello', sni }
}

function parseServerName(ext: Buffer): string | null | ClientHelloResult {
  if (ext.length === 0) return null // allowed in a ServerHello only, but harmless: no name
  if (ext.length < 2 || ext.readUInt16BE(0) !== ext.length - 2) return invalid('bad_server_name')
  let p = 2
  let name: string | null = null
  while (p < ext.length) {
    if (ext.length - p < 3) return invalid('bad_server_name')
    const type = ext[p]
    const len = ext.readUInt16BE(p + 1)
    p += 3
    if (p + len > ext.length) return invalid('bad_server_name')
    if (type === NAME_TYPE_HOST) {
      if (name !== null) return invalid('bad_server_name') // RFC 6066: one name per type
      const host = hostName(ext.subarray(p, p + len))
      if (host === null) return invalid('bad_server_name')
      name = host
    }
    p += len
  }
  return name
}

/**
 * An RFC 6066 HostName: 1..255 bytes of LDH labels (underscores tolerated),
 * lowercased. RFC 6066 forbids a trailing dot, yet clients send a fully
 * qualified name as written: one is dropped, as terminated TLS and Host do.
 */
function hostName(raw: Buffer): string | null {
  if (raw.length === 0 || raw.length > 255) return null
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i]
    const ok = (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2e || c === 0x5f
    if (!ok) return null
  }
  const written = raw.toString('latin1').toLowerCase()
  const name = withoutTrailingDot(written)
  if (name.length === 0 || name.startsWith('.') || name.endsWith('.') || name.includes('..')) return null
  return name
}
