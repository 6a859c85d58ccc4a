// HTTP/1.1 `Upgrade: h2c` (RFC 7540 §3.2). node:http2 cannot adopt an upgraded
// request as stream 1 (nghttp2_session_upgrade2 is not exposed), so after the
// 101 we splice a HEADERS frame for stream 1 — the original request, HPACK
// literals without indexing so neither side's dynamic table is touched — into
// the inbound bytes right after the client's preface and first SETTINGS frame.
// The server session then sees an ordinary client stream 1, which is exactly
// the state RFC 7540 puts the upgraded request in. Requests with a body are
// not upgraded (served as HTTP/1.1, which the RFC allows).

import type { IncomingMessage } from 'node:http'
import type { Socket } from 'node:net'
import { Duplex } from 'node:stream'
import { hasBody } from './exchange-h1.ts'

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1')
const MAX_FRAME = 16384 // SETTINGS_MAX_FRAME_SIZE initial value
const SETTINGS = 0x4 // frame type
const ACK = 0x1 // SETTINGS flag
const LITERAL_NEW_NAME = Buffer.from([0x00]) // RFC 7541 §6.2.2, index 0: the name follows as a string
const SKIP = new Set(['connection', 'upgrade', 'http2-settings', 'host', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te'])

/**
 * HTTP2-Settings (RFC 7540 §3.2.1): a SETTINGS payload (6 bytes a setting) in
 * base64url without padding, so 8 characters a setting. Two fields reach us
 * joined by `, ` (node's HTTP/1.1 parser), which fails it too: a server must
 * not upgrade on either.
 */
const SETTINGS_VALUE = /^(?:[A-Za-z0-9_-]{8})*$/

/** shouldUpgradeCallback: upgrade only body-less requests with one well-formed HTTP2-Settings whose headers fit one frame. */
export function canUpgradeH2c(req: IncomingMessage): boolean {
  const settings = req.headers['http2-settings']
  if (typeof settings !== 'string' || !SETTINGS_VALUE.test(settings) || hasBody(req)) return false
  let size = 0
  const raw = req.rawHeaders
  for (let i = 0; i < raw.length; i++) size += raw[i].length + 2
  return size < MAX_FRAME - 1024
}

/** Answers 101 and returns the duplex to give the HTTP/2 server as the connection. */
export function upgradeH2c(req: IncomingMessage, socket: Socket, head: Buffer): Duplex {
  socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n')
  return new UpgradedSocket(socket, head, headersFrame(req))
}

function headersFrame(req: IncomingMessage): Buffer {
  const parts: Buffer[] = []
  const add = (name: string, value: string): void => {
    parts.push(LITERAL_NEW_NAME, literal(name), literal(value))
  }
  add(':method', req.method ?? 'GET')
  add(':scheme', 'http')
  add(':authority', req.headers.host ?? '')
  add(':path', req.url ?? '/')
  const h = req.headers
  for (const name in h) {
    const v = h[name]
    if (v === undefined || SKIP.has(name)) continue
    if (Array.isArray(v)) for (const one of v) add(name, one)
    else add(name, v)
  }
  const block = Buffer.concat(parts)
  const frame = Buffer.alloc(9)
  frame.writeUIntBE(block.length, 0, 3)
  frame[3] = 0x1 // HEADERS
  frame[4] = 0x1 | 0x4 // END_STREAM | END_HEADERS
  frame.writeUInt32BE(1, 5) // stream 1
  return Buffer.concat([frame, block])
}

/** One HPACK string for "literal header field without indexing — new name" (RFC 7541 §6.2.2), no Huffman. */
function literal(text: string): Buffer {
  const bytes = Buffer.from(text, 'latin1')
  const len = integer(bytes.length)
  return Buffer.concat([len, bytes])
}

function integer(n: number): Buffer {
  // 7-bit prefix, H = 0 (RFC 7541 §5.1)
  if (n < 127) return Buffer.from([n])
  const out = [127]
  n -= 127
  while (n >= 128) { out.push((n & 0x7f) | 0x80); n >>>= 7 }
  out.push(n)
  return Buffer.from(out)
}

/** The client socket after the 101, with stream 1's HEADERS spliced in after the preface + SETTINGS. */
class UpgradedSocket extends Duplex {
  readonly #socket: Socket
  readonly #frame: Buffer
  #pending: Buffer | null = Buffer.alloc(0)

  constructor(socket: Socket, head: Buffer, frame: Buffer) {
    super()
    this.#socket = socket
    this.#frame = frame
    socket.on('data', (chunk: Buffer) => this.#onData(chunk))
    socket.on('end', () => this.push(null))
    socket.on('close', () => this.destroy())
    socket.on('error', (err: Error) => this.destroy(err))
    if (head.length > 0) this.#onData(head)
    socket.resume()
  }

  get remoteAddress(): string | undefined { return this.#socket.remoteAddress }
  get remotePort(): number | undefined { return this.#socket.remotePort }

  #onData(chunk: Buffer): void {
    if (this.#pending === null) {
      if (!this.push(chunk)) this.#socket.pause()
      return
    }
    const buf = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk])
    const n = Math.min(buf.length, PREFACE.length)
    if (buf.compare(PREFACE, 0, n, 0, n) !== 0) { this.destroy(new Error('h2c upgrade: bad client preface')); return }
    // The preface is followed by the client's SETTINGS frame (RFC 9113 §3.4).
    if (buf.length < PREFACE.length + 9) { this.#pending = buf; return }
    const length = buf.readUIntBE(PREFACE.length, 3)
    this.#pending = null
    // Anything else first (another type, an ACK, a frame over the initial SETTINGS_MAX_FRAME_SIZE)
    // goes to the session as it came, which refuses it with a connection error, as on a
    // prior-knowledge connection: waiting for such a frame whole buffered up to 16 MiB a
    // connection, copied again at every read.
    if (buf[PREFACE.length + 3] !== SETTINGS || (buf[PREFACE.length + 4] & ACK) !== 0 || length > MAX_FRAME) {
      if (!this.push(buf)) this.#socket.pause()
      return
    }
    const end = PREFACE.length + 9 + length
    if (buf.length < end) { this.#pending = buf; return }
    this.push(buf.subarray(0, end))
    this.push(this.#frame)
    if (buf.length > end && !this.push(buf.subarray(end))) this.#socket.pause()
  }

  override _read(): void { this.#socket.resume() }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.#socket.write(chunk, cb)
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.#socket.end()
    cb()
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.#socket.destroy()
    cb(err)
  }
}
