// HTTP/1.1 response parser for sallyport's own upstream client (h1-client.ts):
// incremental (bytes arrive in any split), strict where leniency lets a
// response be read two ways (RFC 9112 §6.3, §11.2: Content-Length with
// Transfer-Encoding, differing Content-Lengths, obs-fold, bare CR or LF in
// the head, a chunk size that is not hex; a transfer coding other than chunked,
// which the client would get undecoded), bounded (the head and each chunk
// line), and allocation-light: the head is decoded once, body bytes are
// handed on as views of the socket's buffers, never copied.

import { maxHeaderSize } from 'node:http'

export type RawHeaders = Record<string, string | string[]>

/** What a response says to its connection's reader. */
export interface H1ResponseHandler {
  /** An interim head (1xx other than 101), any number before the final one. */
  onInterim(status: number, headers: RawHeaders): void
  /** The final head. `keepAlive`: the connection may carry another request after this response. */
  onHead(status: number, headers: RawHeaders, keepAlive: boolean): void
  /** A piece of the body: a view of the input buffer, valid to keep (nothing reuses it). */
  onBody(chunk: Buffer): void
  /** The response is complete; trailers of a chunked body, or null. */
  onEnd(trailers: RawHeaders | null): void
}

/** Why a response could not be read; `code` is stable (normalize-error.ts: an upstream protocol error). */
export class H1ParseError extends Error {
  readonly code: string
  constructor(code: string, message: string) {
    super(message)
    this.code = code
  }
}

/** Why a response whose Transfer-Encoding is not `chunked` alone is refused. */
export const OTHER_CODING = 'a transfer coding other than chunked'

/**
 * A response's Transfer-Encoding is `chunked` and nothing else. Any other
 * coding (gzip, identity, chunked twice) would reach the client as content it
 * cannot know is coded: the framing toward the client is the gateway's own.
 */
export function chunkedOnly(te: string | readonly string[]): boolean {
  return typeof te === 'string' && te.trim().toLowerCase() === 'chunked'
}

// States (numbers, not an enum: erasable syntax only).
const HEAD = 0
const BODY = 1
const UNTIL = 2
const CHUNK_SIZE_LINE = 3
const CHUNK_DATA = 4
const CHUNK_CRLF = 5
const TRAILERS = 6
const DONE = 7

const CR = 13
const LF = 10
/** The end of a head (a Buffer: indexOf with a string needle would encode it on every call). */
const BLANK_LINE = Buffer.from('\r\n\r\n', 'latin1')
/** Chunk-size line (size, extensions): generous, bounded. */
const MAX_CHUNK_LINE = 4096
/** RFC 9110 §5.1 token: field names, methods (HTTP/1.1 both ways: this parser, h1-client.ts, listeners/h1-fast.ts). */
export const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** A character RFC 9110 §5.5 does not allow in a field value (as node checks them: HTAB, SP..~ and obs-text are fine). */
export const INVALID_VALUE = /[^\t\x20-\x7e\x80-\xff]/
/**
 * A field given by user code or JSON (an extension's headers) that can be
 * written as it is: a token name and a string or number value without CR, LF,
 * NUL or other characters INVALID_VALUE refuses.
 */
export function writableField(name: string, value: unknown): boolean {
  return TOKEN.test(name) && (typeof value === 'string' || typeof value === 'number') && !INVALID_VALUE.test(String(value))
}
/** A Content-Length value we take: decimal digits only, and few enough to stay an exact (safe) integer. */
export const CONTENT_LENGTH = /^\d{1,15}$/
const STATUS_LINE = /^HTTP\/1\.([01]) (\d{3})(?: [^\r\n]*)?$/
const CHUNK_SIZE = /^([0-9A-Fa-f]{1,13})[ \t]*(?:;[^\r\n]*)?$/

/**
 * One connection's response reader. Call expect(method) before each request's
 * response, then execute() with every read and finish() at the end of the
 * stream. After an error the parser stays failed.
 */
export class H1ResponseParser {
  readonly #handler: H1ResponseHandler
  #state = DONE
  #head = false
  /** Bytes of an incomplete head or line carried over from earlier reads. */
  #pending: Buffer | null = null
  #remaining = 0
  /** CHUNK_CRLF: the CR was seen. */
  #sawCr = false
  #trailers: RawHeaders | null = null
  #trailerBytes = 0
  #trailerFields = 0
  #failed: H1ParseError | null = null

  constructor(handler: H1ResponseHandler) {
    this.#handler = handler
  }

  /** Between responses (or before the first): no bytes may arrive now. */
  get idle(): boolean {
    return this.#state === DONE
  }

  /** The next response answers a request with this method (HEAD: no body). */
  expect(method: string): void {
    this.#state = HEAD
    this.#head = method === 'HEAD'
    this.#pending = null
    this.#trailers = null
    this.#trailerBytes = 0
    this.#trailerFields = 0
    this.#sawCr = false
  }

  // hot path
  /** Reads `data`; null, or the error that makes the connection unusable. */
  execute(data: Buffer): H1ParseError | null {
    if (this.#failed !== null) return this.#failed
    let at = 0
    const end = data.length
    while (at < end) {
      switch (this.#state) {
        case HEAD: {
          const next = this.#readHead(data, at)
          if (next < 0) return this.#failed
          at = next
          break
        }
        case BODY:
          at = this.#counted(data, at, end)
          if (this.#remaining === 0) this.#complete(null)
          break
        case UNTIL:
          this.#handler.onBody(at === 0 ? data : data.subarray(at))
          at = end
          break
        case CHUNK_SIZE_LINE: {
          const line = this.#line(data, at, MAX_CHUNK_LINE, 'chunk size line')
          if (line === null) return this.#failed
          at = line.next
          if (line.text === null) break
          const m = CHUNK_SIZE.exec(line.text)
          if (m === null) return this.#fail('SP_H1_BAD_CHUNK', 'invalid chunk size line')
          const size = parseInt(m[1], 16)
          if (size === 0) { this.#state = TRAILERS; break }
          this.#remaining = size
          this.#state = CHUNK_DATA
          break
        }
        case CHUNK_DATA:
          at = this.#counted(data, at, end)
          if (this.#remaining === 0) this.#state = CHUNK_CRLF
          break
        case CHUNK_CRLF: {
          // Exactly CRLF after the chunk data, byte by byte (it may be split across reads).
          const c = data[at++]
          if (!this.#sawCr) {
            if (c === CR) { this.#sawCr = true; break }
            return c === LF ? this.#fail('SP_H1_BARE_LF', 'chunk data ends without CRLF') : this.#fail('SP_H1_BAD_CHUNK', 'chunk data longer than its size')
          }
          if (c !== LF) return this.#fail('SP_H1_BARE_CR', 'bare CR after chunk data')
          this.#sawCr = false
          this.#state = CHUNK_SIZE_LINE
          break
        }
        case TRAILERS: {
          const line = this.#line(data, at, maxHeaderSize, 'trailer section')
          if (line === null) return this.#failed
          at = line.next
          if (line.text === null) break
          if (line.text === '') { this.#complete(this.#trailers); break }
          this.#trailerBytes += line.text.length + 2
          if (this.#trailerBytes > maxHeaderSize) return this.#fail('SP_H1_TOO_LONG', 'trailer section too long')
          if (++this.#trailerFields > MAX_FIELDS) return this.#fail('SP_H1_TOO_MANY_FIELDS', `trailer section of more than ${MAX_FIELDS} fields`)
          if (!this.#field(line.text, (this.#trailers ??= {}))) return this.#failed
          break
        }
        case DONE:
          return this.#fail('SP_H1_UNEXPECTED_DATA', 'upstream sent bytes that answer no request')
      }
    }
    return null
  }

  /** The upstream closed the connection: ends a body read until close; anything else unfinished is an error. */
  finish(): H1ParseError | null {
    if (this.#failed !== null) return this.#failed
    if (this.#state === UNTIL) { this.#complete(null); return null }
    if (this.#state === DONE) return null
    return this.#fail('SP_H1_INCOMPLETE', this.#state === HEAD ? 'upstream closed the connection before the response head' : 'upstream closed the connection before the end of the response body')
  }

  // hot path
  /** Hands on the next body bytes a length or chunk size still counts (the input itself when all of it is); the index after them. */
  #counted(data: Buffer, at: number, end: number): number {
    const n = Math.min(this.#remaining, end - at)
    this.#remaining -= n
    this.#handler.onBody(at === 0 && n === end ? data : data.subarray(at, at + n))
    return at + n
  }

  #fail(code: string, message: string): H1ParseError {
    this.#failed = new H1ParseError(code, message)
    return this.#failed
  }

  #complete(trailers: RawHeaders | null): void {
    this.#state = DONE
    this.#handler.onEnd(trailers)
  }

  /**
   * The next CRLF-terminated line from `at` (pending bytes first). text null:
   * the line is incomplete (kept for the next read); null: an error.
   */
  #line(data: Buffer, at: number, max: number, what: string): { text: string | null, next: number } | null {
    const lf = data.indexOf(LF, at)
    if (lf === -1) {
      const pending = this.#pending
      const rest = data.subarray(at)
      if ((pending === null ? 0 : pending.length) + rest.length > max + 1) { this.#fail('SP_H1_TOO_LONG', `${what} too long`); return null }
      this.#pending = pending === null ? Buffer.from(rest) : Buffer.concat([pending, rest])
      return { text: null, next: data.length }
    }
    let bytes = data.subarray(at, lf + 1)
    const pending = this.#pending
    if (pending !== null) {
      bytes = Buffer.concat([pending, bytes])
      this.#pending = null
    }
    if (bytes.length > max + 2) { this.#fail('SP_H1_TOO_LONG', `${what} too long`); return null }
    if (bytes.length < 2 || bytes[bytes.length - 2] !== CR) { this.#fail('SP_H1_BARE_LF', `${what} ends without CRLF`); return null }
    const text = bytes.toString('latin1', 0, bytes.length - 2)
    if (text.includes('\r')) { this.#fail('SP_H1_BARE_CR', `bare CR in ${what}`); return null }
    return { text, next: lf + 1 }
  }

  // hot path
  /** Reads a head from `at`; the index after it, or -1 on error (an incomplete head is kept and consumes the input). */
  #readHead(data: Buffer, at: number): number {
    let buf = data
    let start = at
    const pending = this.#pending
    if (pending !== null) {
      buf = Buffer.concat([pending, data.subarray(at)])
      start = 0
      this.#pending = null
    }
    const stop = buf.indexOf(BLANK_LINE, start)
    if (stop === -1) {
      // Up to three bytes of the blank line may be here already: the bound is the head's.
      if (buf.length - start > maxHeaderSize + 3) return this.#failHead('SP_H1_TOO_LONG', 'response head too long')
      // A head that can never end (bare LF line ends, no status line: HTTP/0.9) fails
      // now, not after the idle bound or the upstream's close. Only the new bytes are looked at.
      const problem = unendingHead(buf, start, pending === null ? start : pending.length)
      if (problem !== null) return this.#failHead(problem === BARE_LF ? 'SP_H1_BARE_LF' : 'SP_H1_BAD_STATUS', problem)
      this.#pending = Buffer.from(buf.subarray(start))
      return data.length
    }
    if (stop - start > maxHeaderSize) return this.#failHead('SP_H1_TOO_LONG', 'response head too long')
    const text = buf.toString('latin1', start, stop)
    // Where the rest of `data` starts: the head ended `consumed` bytes into buf.
    const next = pending === null ? stop + 4 : at + (stop + 4 - pending.length)
    // Lines found in place: no array of line strings per head.
    let eol = text.indexOf('\r\n')
    const m = STATUS_LINE.exec(eol === -1 ? text : text.slice(0, eol))
    if (m === null) return this.#failHead('SP_H1_BAD_STATUS', 'invalid status line')
    const status = Number(m[2])
    // RFC 9110 §15: 100..599. 600..999 are three digits, but no status a client can be given.
    if (status < 100 || status > 599) return this.#failHead('SP_H1_BAD_STATUS', 'invalid status code')
    const http10 = m[1] === '0'
    // A plain object (fast properties: a fifth of the memory of a null-prototype one); #fieldAt keeps its prototype out of reach.
    const headers: RawHeaders = {}
    let fields = 0
    while (eol !== -1) {
      const start = eol + 2
      eol = text.indexOf('\r\n', start)
      if (++fields > MAX_FIELDS) return this.#failHead('SP_H1_TOO_MANY_FIELDS', `response head of more than ${MAX_FIELDS} fields`)
      if (!this.#fieldAt(text, start, eol === -1 ? text.length : eol, headers)) return -1
    }
    if (status < 200) {
      // 100 Continue, 103 Early Hints: interim, the final head follows. 101 needs an upgrade this reader does not do.
      if (status === 101) return this.#failHead('SP_H1_UNEXPECTED_UPGRADE', 'upstream switched protocols without an upgrade request')
      this.#handler.onInterim(status, headers)
      return next
    }
    const connection = headers.connection
    const tokens = connection === undefined ? '' : (Array.isArray(connection) ? connection.join(',') : connection).toLowerCase()
    let keepAlive = http10 ? /(?:^|,)\s*keep-alive\s*(?:,|$)/.test(tokens) : !/(?:^|,)\s*close\s*(?:,|$)/.test(tokens)
    const te = headers['transfer-encoding']
    const cl = headers['content-length']
    let length = -1
    let chunked = false
    if (te !== undefined) {
      if (cl !== undefined) return this.#failHead('SP_H1_BAD_FRAMING', 'response has both Transfer-Encoding and Content-Length')
      if (http10) return this.#failHead('SP_H1_BAD_FRAMING', 'Transfer-Encoding in an HTTP/1.0 response')
      if (!chunkedOnly(te)) return this.#failHead('SP_H1_BAD_FRAMING', OTHER_CODING)
      chunked = true
    } else if (cl !== undefined) {
      const values = (Array.isArray(cl) ? cl.join(',') : cl).split(',')
      for (const v of values) {
        const t = v.trim()
        if (!CONTENT_LENGTH.test(t)) return this.#failHead('SP_H1_BAD_FRAMING', 'invalid Content-Length')
        const n = Number(t)
        if (length !== -1 && n !== length) return this.#failHead('SP_H1_BAD_FRAMING', 'differing Content-Length values')
        length = n
      }
      // Identical values taken as one (RFC 9110 §8.6), and passed on as one.
      if (values.length > 1) headers['content-length'] = String(length)
    }
    const bodiless = this.#head || status === 204 || status === 304
    if (bodiless) this.#state = DONE
    else if (chunked) this.#state = CHUNK_SIZE_LINE
    else if (length === -1) {
      this.#state = UNTIL
      keepAlive = false // the end of the connection ends the body
    } else if (length === 0) this.#state = DONE
    else {
      this.#remaining = length
      this.#state = BODY
    }
    this.#handler.onHead(status, headers, keepAlive)
    if (this.#state === DONE) this.#handler.onEnd(null)
    return next
  }

  #failHead(code: string, message: string): number {
    this.#fail(code, message)
    return -1
  }

  /** Adds one `name: value` line to `into`; false (and failed) if it is not a valid field. */
  #field(line: string, into: RawHeaders): boolean {
    return this.#fieldAt(line, 0, line.length, into)
  }

  /** The field line text[start, end): added to `into`, or false (and failed). */
  // hot path
  #fieldAt(text: string, start: number, end: number, into: RawHeaders): boolean {
    const colon = text.indexOf(':', start)
    if (colon <= start || colon >= end) {
      const c = start < end ? text.charCodeAt(start) : 0
      this.#fail('SP_H1_BAD_FIELD', c === 32 || c === 9 ? 'obsolete line folding in a field' : 'invalid field line')
      return false
    }
    let key = knownName(RESPONSE_NAMES, text, start, colon)
    if (key === null) {
      const name = text.slice(start, colon)
      if (!TOKEN.test(name)) { this.#fail('SP_H1_BAD_FIELD', 'invalid field name'); return false }
      key = name.toLowerCase()
      if (key === '__proto__') return true // no field has that name; as a key it would be the prototype
    }
    const value = trimOws(text, colon + 1, end)
    if (INVALID_VALUE.test(value)) { this.#fail('SP_H1_BAD_FIELD', 'invalid character in a field value'); return false }
    const had = Object.hasOwn(into, key) ? into[key] : undefined // `constructor` is a name, not Object's
    if (had === undefined) into[key] = value
    else if (Array.isArray(had)) had.push(value)
    else into[key] = [had, value]
    return true
  }
}

/**
 * Fields a response head (or trailer section) may have: what an HTTP/2
 * upstream may send (node's client maxHeaderListPairs, 128). The size bound
 * alone let 16 KiB of `a: b` lines (some 3,000 fields) through to the client.
 */
const MAX_FIELDS = 128

const STATUS_START = Buffer.from('HTTP/1.', 'latin1')
const BARE_LF = 'bare LF in the response head'
const NO_STATUS_LINE = 'no status line'

/**
 * Why the incomplete head buf[start..] can never become a response, or null:
 * it does not begin as a status line does, or a line in it ends in LF alone
 * (RFC 9112 §2.2: a recipient may take that, a proxy had better not: the
 * CRLFCRLF that ends the head never comes). Bytes before `fresh` were looked
 * at by an earlier call.
 */
function unendingHead(buf: Buffer, start: number, fresh: number): string | null {
  if (fresh - start < STATUS_START.length) {
    const n = Math.min(buf.length - start, STATUS_START.length)
    if (buf.compare(STATUS_START, 0, n, start, start + n) !== 0) return NO_STATUS_LINE
  }
  for (let lf = buf.indexOf(LF, fresh); lf !== -1; lf = buf.indexOf(LF, lf + 1)) {
    if (lf === start || buf[lf - 1] !== CR) return BARE_LF
  }
  return null
}

/**
 * Field names a kind of head commonly carries, lower case, by length: a name
 * read from a head is matched against them in place (ASCII case-insensitively),
 * and a match is this one string, so no slice, token check, lower-casing or key
 * lookup by content per field. An nginx response head of nine fields parsed in
 * 1.7 µs instead of 2.4 (the key lookup by content alone showed in a profile of
 * the gateway).
 */
export type NameTable = ReadonlyArray<readonly string[]>

export function nameTable(names: readonly string[]): NameTable {
  const byLength: string[][] = []
  for (const n of names) (byLength[n.length] ??= []).push(n)
  for (let i = 0; i < byLength.length; i++) byLength[i] ??= []
  return byLength
}

/** The name in `table` that text[start, end) spells, ignoring ASCII case; null when none. */
// hot path
export function knownName(table: NameTable, text: string, start: number, end: number): string | null {
  const length = end - start
  if (length >= table.length) return null
  const candidates = table[length]
  for (let k = 0; k < candidates.length; k++) {
    const name = candidates[k]
    let i = 0
    for (; i < length; i++) {
      const want = name.charCodeAt(i)
      const c = text.charCodeAt(start + i)
      // Letters in either case; anything else ('-') exactly.
      if (c !== want && (want < 0x61 || want > 0x7a || c !== want - 0x20)) break
    }
    if (i === length) return name
  }
  return null
}

const RESPONSE_NAMES = nameTable([
  'age', 'via', 'date', 'etag', 'link', 'vary', 'server', 'expires', 'pragma', 'trailer', 'upgrade',
  'alt-svc', 'location', 'keep-alive', 'set-cookie', 'connection', 'retry-after', 'content-type',
  'accept-ranges', 'cache-control', 'last-modified', 'content-length', 'content-encoding',
  'content-language', 'x-frame-options', 'www-authenticate', 'transfer-encoding',
  'x-content-type-options', 'strict-transport-security', 'access-control-allow-origin',
])

/** `line`[from, to) without leading and trailing SP / HTAB (RFC 9110 §5.6.3 OWS; String.trim takes more). */
function trimOws(line: string, from: number, to: number): string {
  let a = from
  let b = to
  while (a < b && (line.charCodeAt(a) === 32 || line.charCodeAt(a) === 9)) a++
  while (b > a && (line.charCodeAt(b - 1) === 32 || line.charCodeAt(b - 1) === 9)) b--
  return line.slice(a, b)
}
