// HTTP/1.1 without node:http for the common request: a complete head with no
// body, no upgrade and nothing unusual, on a connection we own. It reads the
// head itself, hands the router an Exchange and writes the response head and
// body on the socket. node:http's per-request machinery (IncomingMessage and
// ServerResponse streams, the empty request body's end/dump/destroy ticks,
// header objects built twice) was about a third of a small request's CPU.
//
// Anything else goes to node's HTTP/1.1 server, which has the full parser and
// its error answers: the connection is handed over, with the bytes not yet
// consumed, between two requests (never with a response in flight), and stays
// there. So a request this parser is not sure about is never answered by it:
// a body (Content-Length other than 0, Transfer-Encoding), Upgrade, Expect,
// CONNECT, absolute-form or asterisk targets, HTTP/1.0, a head split over
// reads (node then applies headersTimeout), duplicate or invalid fields,
// obs-fold, a Connection option other than keep-alive/close, too many fields.
// Request smuggling needs two parsers to disagree on where a request ends;
// here a request accepted fast has no body and ends at its blank line, which
// both parsers agree on, and every doubt goes to node.

import type { Socket } from 'node:net'
import { METHODS, STATUS_CODES, type IncomingHttpHeaders } from 'node:http'
import type { Duplex, Readable } from 'node:stream'
import { peerSpiffeId } from '../extensions/client.ts'
import { NOOP_OBSERVER, wasCut, type Exchange, type ExchangeObserver } from '../router/exchange.ts'
import type { OutgoingHeaders } from '../upstream/types.ts'
import { isReleasable, releasableResponseChunk, WrittenChunks } from '../upstream/release.ts'
import { ResponseBody, type BodySink } from '../upstream/exchange.ts'
import { CONTENT_LENGTH, INVALID_VALUE, TOKEN, knownName, nameTable } from '../upstream/h1-parser.ts'
import { head as HEAD } from '../upstream/head-buffer.ts'
import { backToStream, own, readShared } from '../upstream/socket-read.ts'
import { acceptsTrailers, clientIp, closedBeforeEnd, connectionSni } from './exchange-h1.ts'
import type { ConnectionSni } from '../router/misdirected.ts'

/** What a fast connection needs from its port listener. */
export interface FastH1Host {
  readonly port: number
  readonly scheme: 'http' | 'https'
  readonly maxHeaderSize: number
  readonly maxHeaders: number
  readonly keepAliveTimeoutMs: number
  /** The listener is draining: answer with Connection: close, close idle connections. */
  closing(): boolean
  /** Route the exchange (the listener reads its table). */
  handle(ex: FastH1Exchange): void
  /** node's HTTP/1.1 server takes the connection; `rest` is what was read and not consumed. */
  fallback(socket: Socket, rest: Buffer | null): void
  /** The connection is over (closed or handed over). */
  release(conn: FastH1Connection): void
}

/** A parsed request head; null from parseHead means: node's server decides. */
export interface FastHead {
  readonly method: string
  readonly target: string
  readonly headers: IncomingHttpHeaders
  readonly close: boolean
}

const CRLFCRLF = Buffer.from('\r\n\r\n', 'latin1')
/** The methods node's parser knows (others get its 400); CONNECT and PRI are never plain. */
const PLAIN_METHODS = new Set(METHODS.filter((m) => m !== 'CONNECT' && m !== 'PRI'))
const ORIGIN_FORM = /^\/[\x21-\x7e]*$/
/** Field names requests commonly carry (knownName: matched in place, not sliced and lower-cased). */
const REQUEST_NAMES = nameTable([
  'te', 'host', 'range', 'accept', 'cookie', 'expect', 'origin', 'pragma', 'referer', 'upgrade',
  'keep-alive', 'connection', 'user-agent', 'tracestate', 'traceparent', 'x-request-id', 'content-type',
  'authorization', 'cache-control', 'if-none-match', 'content-length', 'http2-settings', 'accept-encoding',
  'accept-language', 'x-forwarded-for', 'if-modified-since', 'x-forwarded-proto', 'transfer-encoding',
])
/** Body chunks up to this size go out in one write with the response head (#writeOut). */
const JOIN_BYTES = 8192

// hot path
/**
 * Parses `head` (the request line and fields, without the blank line) when it
 * is the plain kind this path serves; null for anything node should decide.
 */
export function parseHead(head: string, maxHeaders: number): FastHead | null {
  let eol = head.indexOf('\r\n')
  const line = eol === -1 ? head : head.slice(0, eol)
  const sp1 = line.indexOf(' ')
  const sp2 = sp1 === -1 ? -1 : line.indexOf(' ', sp1 + 1)
  if (sp2 === -1 || line.slice(sp2 + 1) !== 'HTTP/1.1') return null
  const method = line.slice(0, sp1)
  const target = line.slice(sp1 + 1, sp2)
  if (!PLAIN_METHODS.has(method) || !ORIGIN_FORM.test(target)) return null
  const headers: IncomingHttpHeaders = {}
  let count = 0
  let close = false
  let host = false
  let pos = eol === -1 ? head.length : eol + 2
  while (pos < head.length) {
    eol = head.indexOf('\r\n', pos)
    const end = eol === -1 ? head.length : eol
    const colon = head.indexOf(':', pos)
    if (colon <= pos || colon >= end) return null
    let key = knownName(REQUEST_NAMES, head, pos, colon)
    if (key === null) {
      const name = head.slice(pos, colon)
      if (!TOKEN.test(name)) return null
      key = name.toLowerCase()
    }
    let vs = colon + 1
    let ve = end
    while (vs < ve && (head.charCodeAt(vs) === 32 || head.charCodeAt(vs) === 9)) vs++
    while (ve > vs && (head.charCodeAt(ve - 1) === 32 || head.charCodeAt(ve - 1) === 9)) ve--
    const value = head.slice(vs, ve)
    if (INVALID_VALUE.test(value)) return null
    if (++count > maxHeaders || key === '__proto__' || headers[key] !== undefined) return null
    switch (key) {
      case 'transfer-encoding': case 'upgrade': case 'expect': case 'http2-settings':
        return null
      case 'content-length':
        if (value !== '0') return null
        break
      case 'host':
        host = true
        break
      case 'connection':
        for (const option of value.toLowerCase().split(',')) {
          const o = option.trim()
          if (o === 'close') close = true
          else if (o !== 'keep-alive') return null
        }
        break
    }
    headers[key] = value
    pos = end + 2
  }
  // RFC 9112 §3.2: a request without Host is answered 400 (node does).
  if (!host) return null
  return { method, target, headers, close }
}

/** One client connection while its requests are the plain kind; see the file comment. */
export class FastH1Connection {
  /** The server name its TLS connection was made for (GEP-3567), read once; null: none, or not TLS. */
  readonly sni: ConnectionSni | null
  readonly #socket: Socket
  readonly #host: FastH1Host
  /** Bytes read and not yet consumed. */
  #buf: Buffer | null = null
  #current: FastH1Exchange | null = null
  #ended = false

  /** Set up on `socket`; nothing is read until start(). */
  constructor(socket: Socket, host: FastH1Host) {
    this.#socket = socket
    this.#host = host
    this.sni = host.scheme === 'https' ? connectionSni(socket) : null
    // The socket (TCP or TLS) reads into the shared read buffer (socket-read.ts):
    // what a read leaves unconsumed is copied out of it (#onRead, #fallback).
    if (!readShared(socket, this.#onRead)) socket.on('data', this.#onData)
    // keepAliveTimeout, armed once: the socket's own activity (every read and
    // write) restarts it, so it runs out keepAliveTimeout after the last
    // response was written; while a request is in flight it is ignored
    // (#onTimeout), rather than cleared and made again for every request.
    socket.setTimeout(host.keepAliveTimeoutMs)
    socket.on('timeout', this.#onTimeout)
    socket.once('close', this.#onClose)
  }

  /**
   * Serves from `first` (bytes already read off the socket) on. Kept apart from
   * the constructor: reading may hand the connection to node's server at once
   * (host.release), which must come after the host has taken it on.
   */
  start(first: Buffer | null): void {
    if (first !== null && first.length > 0) this.#onData(first)
    else this.#idle()
  }

  /** The listener is draining. */
  get closing(): boolean { return this.#host.closing() }
  get keepAliveTimeoutMs(): number { return this.#host.keepAliveTimeoutMs }

  /** Drain: an idle connection closes now, a busy one after its response (Connection: close). */
  closeIfIdle(): void {
    if (this.#current === null && !this.#ended) this.#socket.destroy()
  }

  #onRead = (chunk: Buffer): void => {
    this.#onData(chunk)
    if (this.#buf !== null) this.#buf = own(this.#buf)
  }

  #onData = (chunk: Buffer): void => {
    if (this.#ended) return // closing after Connection: close; nothing more is served
    const buf = this.#buf
    this.#buf = buf === null ? chunk : Buffer.concat([buf, chunk])
    if (this.#current !== null) {
      // Pipelined behind a response in flight: keep it, but not without bound.
      if (this.#buf.length > this.#host.maxHeaderSize) this.#socket.pause()
      return
    }
    this.#next()
  }

  // hot path
  /** No exchange in flight: serve the next complete head, or wait, or hand over. */
  #next(): void {
    const buf = this.#buf
    if (buf === null) { this.#idle(); return }
    const end = buf.indexOf(CRLFCRLF)
    if (end === -1 || end + 4 > this.#host.maxHeaderSize) { this.#fallback(); return }
    const head = parseHead(buf.toString('latin1', 0, end), this.#host.maxHeaders)
    if (head === null) { this.#fallback(); return }
    this.#buf = end + 4 === buf.length ? null : buf.subarray(end + 4)
    const ex = new FastH1Exchange(this, this.#socket, head, this.#host.port, this.#host.scheme)
    this.#current = ex
    this.#host.handle(ex)
  }

  /** Waiting for the next request (the keep-alive timer runs from the last write). */
  #idle(): void {
    if (this.#host.closing()) { this.#end(); return }
    if (this.#socket.isPaused()) this.#socket.resume()
  }

  /** No read or write for keepAliveTimeout: an idle connection closes, as with node's server. */
  #onTimeout = (): void => {
    if (this.#current === null) this.#socket.destroy()
  }

  #onClose = (): void => {
    const ex = this.#current
    this.#current = null
    this.#ended = true
    if (ex !== null) ex.gone()
    this.#host.release(this)
  }

  /** The response of `ex` is written: next request, or close. */
  done(ex: FastH1Exchange, keepAlive: boolean): void {
    if (this.#current !== ex) return
    this.#current = null
    if (!keepAlive) { this.#end(); return }
    this.#next()
  }

  #end(): void {
    this.#ended = true
    this.#socket.end()
  }

  #fallback(): void {
    const socket = this.#socket
    socket.removeListener('data', this.#onData)
    socket.removeListener('timeout', this.#onTimeout)
    socket.removeListener('close', this.#onClose)
    socket.setTimeout(0)
    this.#ended = true
    const rest = this.#buf === null ? null : own(this.#buf)
    this.#buf = null
    // After an upgrade, node's server hands the socket on as a stream.
    backToStream(socket)
    this.#host.release(this)
    this.#host.fallback(socket, rest)
  }
}

// The fixed parts of a response head, made once (a head is built in bytes, HEAD).

/** `Date: <node's own Date value>\r\n`, recomputed once a second. */
let dateSecond = -1
let dateLine = ''
function dateField(): string {
  const now = Date.now()
  const s = Math.floor(now / 1000)
  if (s !== dateSecond) {
    dateSecond = s
    dateLine = 'Date: ' + new Date(now).toUTCString() + '\r\n'
  }
  return dateLine
}

const statusLines = new Map<number, string>()
function statusLine(status: number): string {
  let line = statusLines.get(status)
  if (line === undefined) {
    line = 'HTTP/1.1 ' + status + ' ' + (STATUS_CODES[status] ?? 'unknown') + '\r\n'
    statusLines.set(status, line) // at most 900 (100-999)
  }
  return line
}

/** `Connection: keep-alive` and, unless the upstream sent one (timeoutS -1), `Keep-Alive: timeout=N`. */
const keepAliveLines = new Map<number, string>()
function keepAliveFields(timeoutS: number): string {
  let lines = keepAliveLines.get(timeoutS)
  if (lines === undefined) {
    lines = 'Connection: keep-alive\r\n' + (timeoutS < 0 ? '' : 'Keep-Alive: timeout=' + timeoutS + '\r\n')
    if (keepAliveLines.size < 64) keepAliveLines.set(timeoutS, lines)
  }
  return lines
}

/** The head in HEAD and a text body (UTF-8) after it, in one buffer. */
function withText(text: string): Buffer {
  const out = HEAD.take(Buffer.byteLength(text))
  out.write(text, HEAD.length, 'utf8')
  return out
}

/** One plain request on a FastH1Connection: the Exchange the router answers through. */
export class FastH1Exchange implements Exchange, BodySink {
  readonly protocol = 'h1' as const
  readonly scheme: 'http' | 'https'
  readonly method: string
  readonly target: string
  readonly authority: string
  readonly headers: IncomingHttpHeaders
  readonly body = null
  readonly upgrade = null
  readonly clientAddress: string
  readonly port: number
  readonly sni: ConnectionSni | null
  readonly #conn: FastH1Connection
  readonly #socket: Socket
  readonly #clientClose: boolean
  #observer: ExchangeObserver = NOOP_OBSERVER
  #sent = false
  /** onEnd was called. */
  #over = false
  #keepAlive = true
  #bytesOut = 0
  /** Body bytes the head declared (Content-Length); -1: chunked or none. */
  #declared = -1
  #chunked = false
  /** HEAD, 204, 304: the head says what a body would be, none is sent. */
  #bodiless = false
  /** Not yet written: the head, sent with the first chunk (one write, as node does). */
  #head: Buffer | null = null
  #out: Readable | null = null
  /** #out when it is an upstream body written through onBodyData/onBodyEnd/onBodyError (ResponseBody.attachSink). */
  #sunk: ResponseBody | null = null
  #trailers: (() => OutgoingHeaders | null) | null = null
  #draining = false
  /** Body chunks released once written (release.ts); made at the first one. */
  #written: WrittenChunks | null = null

  constructor(conn: FastH1Connection, socket: Socket, head: FastHead, port: number, scheme: 'http' | 'https') {
    this.#conn = conn
    this.#socket = socket
    this.scheme = scheme
    this.method = head.method
    this.target = head.target
    this.headers = head.headers
    this.authority = head.headers.host ?? ''
    this.#clientClose = head.close
    this.clientAddress = clientIp(socket.remoteAddress)
    this.port = port
    this.sni = conn.sni
  }

  observe(observer: ExchangeObserver): void {
    this.#observer = observer
  }

  headersSent(): boolean { return this.#sent }

  /** The connection closed: the client went away, or we reset it. */
  gone(): void {
    if (this.#over) return
    this.#over = true
    this.#observer.onEnd(false, wasCut(this.#socket))
    const out = this.#out
    if (out !== null && !out.destroyed) out.destroy()
  }

  // hot path
  respond(status: number, headers: OutgoingHeaders, body: Readable | string | null, trailers: (() => OutgoingHeaders | null) | null = null): boolean {
    if (this.#sent || this.#over) {
      if (body !== null && typeof body !== 'string') body.destroy()
      return true
    }
    this.#sent = true
    if (typeof body === 'string') headers['content-length'] = String(Buffer.byteLength(body))
    const withTrailers = trailers !== null && body !== null && typeof body !== 'string' && acceptsTrailers(this.headers.te)
    if (withTrailers) delete headers['content-length']
    if (!this.#buildHead(status, headers, body === null ? 'none' : typeof body === 'string' ? 'known' : 'stream')) {
      // A field node would refuse to write (invalid name or characters): nothing
      // sent, the caller answers instead, as with H1Exchange.
      this.#unsend()
      return false
    }
    if (body === null) { this.#finish(HEAD.take(), ''); return true }
    if (typeof body === 'string') {
      if (this.#bodiless) { this.#finish(HEAD.take(), ''); return true }
      this.#bytesOut += Buffer.byteLength(body)
      this.#finish(withText(body), '')
      return true
    }
    this.#head = HEAD.take()
    // Held for a body chunk that comes in this turn, or this round of I/O (an HTTP/2
    // upstream's DATA): one write for both. A head whose body is not here by then (an SSE
    // stream's, a long poll's) goes on its own, as it came.
    queueMicrotask(this.#headPending)
    this.#out = body
    this.#trailers = withTrailers ? trailers : null
    // Straight from an upstream pool: its chunks come here without the stream
    // machinery in between (exchange.ts BodySink).
    if (body instanceof ResponseBody && body.attachSink(this)) { this.#sunk = body; return true }
    // Listeners made here, not per exchange: most bodies take the sink above.
    body.on('data', (chunk: Buffer) => this.#onOutData(chunk))
    body.once('end', () => this.onBodyEnd())
    body.once('error', (err: Error) => this.onBodyError(err))
    body.once('close', () => this.#onOutClose())
    return true
  }

  /** Back to no response begun: nothing of one went out, so another may be given (respond). */
  #unsend(): void {
    this.#sent = false
    this.#head = null
    this.#out = null
    this.#sunk = null
    this.#trailers = null
    this.#chunked = false
    this.#declared = -1
    this.#bodiless = false
  }

  informational(status: number, headers: OutgoingHeaders): void {
    if (this.#sent || this.#over || status < 102 || status > 199) return
    // The fast path serves HTTP/1.1 clients only, one request at a time: nothing else is being written.
    HEAD.start(statusLine(status))
    for (const name in headers) {
      const v = headers[name]
      if (v === undefined) continue
      if (!TOKEN.test(name)) return
      for (const one of typeof v === 'string' ? [v] : v) {
        if (INVALID_VALUE.test(one)) return
        HEAD.field(name, one)
      }
    }
    HEAD.put('\r\n')
    this.#socket.write(HEAD.take())
  }

  /**
   * Status line and fields as node's ServerResponse writes them, built in HEAD
   * (take() it); false if a field is not writable. `body`: none (Content-Length: 0 unless the fields
   * say otherwise), known (the fields carry its length) or a stream (its
   * length if the fields carry one, else chunked).
   */
  #buildHead(status: number, headers: OutgoingHeaders, body: 'none' | 'known' | 'stream'): boolean {
    if (!Number.isInteger(status) || status < 100 || status > 999) return false
    HEAD.start(statusLine(status))
    let date = false
    let connection = false
    let keepAliveField = false
    let length = -1
    for (const name in headers) {
      const v = headers[name]
      if (v === undefined) continue
      if (!TOKEN.test(name)) return false
      const lower = name.toLowerCase()
      if (lower === 'transfer-encoding') continue // hop-by-hop: the framing is ours
      if (Array.isArray(v)) {
        for (const one of v) {
          if (INVALID_VALUE.test(one)) return false
          HEAD.field(name, one)
        }
        continue
      }
      const value = String(v)
      if (INVALID_VALUE.test(value)) return false
      HEAD.field(name, value)
      if (lower === 'date') date = true
      else if (lower === 'content-length') length = CONTENT_LENGTH.test(value) ? Number(value) : Number.NaN
      else if (lower === 'keep-alive') keepAliveField = true
      else if (lower === 'connection') {
        connection = true
        if (/(^|,)\s*close\s*(,|$)/i.test(value)) this.#keepAlive = false
      }
    }
    if (!date) HEAD.put(dateField())
    if (this.#clientClose || this.#conn.closing) this.#keepAlive = false
    if (!connection) {
      if (this.#keepAlive) HEAD.put(keepAliveFields(keepAliveField ? -1 : Math.floor(this.#conn.keepAliveTimeoutMs / 1000)))
      else HEAD.put('Connection: close\r\n')
    }
    this.#bodiless = this.method === 'HEAD' || status === 204 || status === 304 || (status >= 100 && status < 200)
    if (!this.#bodiless) {
      if (length >= 0 && Number.isSafeInteger(length)) this.#declared = length
      else if (body === 'stream') {
        this.#chunked = true
        HEAD.put('Transfer-Encoding: chunked\r\n')
      } else if (length === -1) HEAD.put('Content-Length: 0\r\n')
      else return false // a Content-Length that is not a length
    }
    HEAD.put('\r\n')
    return true
  }

  // hot path
  onBodyData(chunk: Buffer): boolean {
    if (this.#writeOut(chunk, isReleasable(chunk)) || this.#over) return true
    if (!this.#draining) {
      this.#draining = true
      this.#socket.once('drain', () => this.#onDrain())
    }
    return false
  }

  #onOutData(chunk: Buffer): void {
    if (this.#writeOut(chunk, releasableResponseChunk(this.#out, chunk)) || this.#draining || this.#over) return
    this.#draining = true
    this.#out?.pause()
    this.#socket.once('drain', () => this.#onDrain())
  }

  #headPending = (): void => {
    if (this.#head !== null && !this.#over) setImmediate(this.#flushHead)
  }

  /** The head, if no body chunk took it along (respond). */
  #flushHead = (): void => {
    const head = this.#head
    if (head === null || this.#over) return
    this.#head = null
    this.#socket.write(head)
  }

  /** Writes a body chunk (the head first, if not yet sent); false when the socket wants a drain first. */
  // hot path
  #writeOut(chunk: Buffer, releasable: boolean): boolean {
    if (this.#over) return true
    if (this.#bodiless || chunk.length === 0) return true
    this.#bytesOut += chunk.length
    if (this.#declared >= 0 && this.#bytesOut > this.#declared) { this.reset(); return true }
    const socket = this.#socket
    const head = this.#head
    this.#head = null
    if (head !== null && !this.#chunked && !releasable && chunk.length <= JOIN_BYTES) {
      // A small response's head and (first) body chunk as one buffer: one
      // plain write instead of cork, a string and a writev.
      const out = Buffer.allocUnsafe(head.length + chunk.length)
      head.copy(out, 0)
      chunk.copy(out, head.length)
      return socket.write(out)
    }
    if (head !== null || this.#chunked) socket.cork()
    if (head !== null) socket.write(head)
    if (this.#chunked) socket.write(chunk.length.toString(16) + '\r\n', 'latin1')
    let ok = releasable ? socket.write(chunk, (this.#written ??= new WrittenChunks()).add(chunk)) : socket.write(chunk)
    if (this.#chunked) ok = socket.write('\r\n', 'latin1')
    if (head !== null || this.#chunked) socket.uncork()
    return ok
  }

  #onDrain(): void {
    this.#draining = false
    const out = this.#out
    if (out === null || out.destroyed || this.#over) return
    if (this.#sunk !== null) this.#sunk.resumeSink()
    else out.resume()
  }

  onBodyEnd(): void {
    if (this.#over) return
    if (this.#declared >= 0 && this.#bytesOut !== this.#declared) { this.reset(); return }
    const head = this.#head
    this.#head = null
    let tail = ''
    if (this.#chunked) {
      tail += '0\r\n'
      const trailers = this.#trailers === null ? null : this.#trailers()
      if (trailers !== null) {
        for (const name in trailers) {
          const v = trailers[name]
          for (const one of Array.isArray(v) ? v : [v]) {
            if (!TOKEN.test(name) || INVALID_VALUE.test(one)) continue
            tail += name + ': ' + one + '\r\n'
          }
        }
      }
      tail += '\r\n'
    }
    this.#finish(head, tail)
  }

  onBodyError(err: Error): void {
    if (this.#over) return
    if (this.#head !== null) {
      // Nothing of the response went out (its head waited for the body): the
      // caller may answer instead (a 502 rather than an empty reply).
      this.#unsend()
      this.#observer.onBodyError(err)
      if (!this.#sent) this.#socket.destroy()
      return
    }
    this.#socket.destroy()
    this.#observer.onBodyError(err)
  }

  #onOutClose(): void {
    const err = closedBeforeEnd(this.#out)
    if (err !== null) this.onBodyError(err) // the same failure as a body error
  }

  /**
   * The last bytes of the response (the head if not yet sent, with a text body
   * in it; the chunked tail); once written, the exchange is over and the
   * connection moves on.
   */
  #finish(head: Buffer | null, tail: string): void {
    const socket = this.#socket
    const done = (err?: Error | null): void => this.#onFinished(err)
    if (head === null) {
      // Nothing left to write and nothing queued: done once this turn ends,
      // as node's ServerResponse does, rather than an empty write(2) per response.
      if (tail === '' && socket.writableLength === 0 && !socket.destroyed) process.nextTick(done, null)
      else socket.write(tail, 'latin1', done)
      return
    }
    if (tail === '') { socket.write(head, done); return }
    socket.cork()
    socket.write(head)
    socket.write(tail, 'latin1', done)
    socket.uncork()
  }

  /** The last write of the response completed. */
  #onFinished(err?: Error | null): void {
    if (this.#over) return
    if (err !== null && err !== undefined) { this.#socket.destroy(); return }
    this.#over = true
    this.#observer.onEnd(true)
    this.#conn.done(this, this.#keepAlive)
  }

  respondGrpc(grpcStatus: number, message: string): void {
    this.respond(200, { 'content-type': 'application/grpc', 'grpc-status': String(grpcStatus), 'grpc-message': encodeURIComponent(message) }, null)
  }

  tunnel(_status: number, _headers: OutgoingHeaders, stream: Duplex): null {
    stream.destroy()
    this.reset()
    return null
  }

  reset(): void {
    this.#socket.destroy()
  }

  /** No request body on this path. */
  bytesIn(): number { return 0 }
  bytesOut(): number { return this.#bytesOut }
  spiffeId(): string | null { return this.scheme === 'https' ? peerSpiffeId(this.#socket) : null }
}
