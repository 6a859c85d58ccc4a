// HTTP/1.1 exchanges: an ordinary request (IncomingMessage/ServerResponse), and
// an Upgrade request whose raw socket we own after the handshake (WebSocket).

import { peerSpiffeId } from '../extensions/client.ts'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { pipeline, type Duplex, type Readable } from 'node:stream'
import { NOOP_OBSERVER, wasCut, type Exchange, type ExchangeObserver } from '../router/exchange.ts'
import type { ConnectionSni } from '../router/misdirected.ts'
import type { OutgoingHeaders } from '../upstream/types.ts'
import type { ErrorCode } from '../errors.ts'
import { isReleasable, ownedStreams, releasableResponseChunk, WrittenChunks } from '../upstream/release.ts'
import { ResponseBody, type BodySink } from '../upstream/exchange.ts'
import { chunkedOnly } from '../upstream/h1-parser.ts'
import { socketEnd, splice, upstreamEnd } from './tunnel-ends.ts'
import { STATUS_CODES } from 'node:http'

/** IPv4-mapped IPv6 (`::ffff:10.0.0.1`) → IPv4, so table.clients (Pod IPs) match. */
export function clientIp(address: string | undefined): string {
  if (address === undefined) return ''
  return address.startsWith('::ffff:') && address.indexOf('.') !== -1 ? address.slice(7) : address
}

/** A request head the gateway answers itself, and closes the connection after. */
export interface Refusal {
  readonly status: 400 | 501
  /** The response body: what was wrong, one line. */
  readonly body: string
}

function refusal(status: 400 | 501, reason: string): Refusal {
  return { status, body: `${status === 400 ? 'bad request' : 'not implemented'}: ${reason}\n` }
}

const TWO_HOSTS = refusal(400, 'more than one Host field')
const NO_HOST = refusal(400, 'no Host field')
const HTTP10_CODING = refusal(400, 'Transfer-Encoding in an HTTP/1.0 request')
const OTHER_CODING = refusal(501, 'a transfer coding other than chunked')

/**
 * What node's HTTP/1.1 parser lets through and RFC 9112 has a server refuse:
 * more than one Host line (§3.2: node keeps the first and drops the rest, so
 * the gateway and whatever sits in front of it could route one request by two
 * hosts), Transfer-Encoding in an HTTP/1.0 request (§6.1: faulty framing,
 * where node reads the chunks), and a transfer coding other than chunked
 * (§6.1: 501; node decodes only the chunking, so a `gzip, chunked` body would
 * reach the upstream still gzip-coded and no longer saying so), and an
 * HTTP/1.1 request without Host (§3.2). node's own Host check
 * (requireHostHeader, off) answered an empty chunked 400 the listener never
 * saw, so the request had no access line, and it skipped upgrades, which were
 * routed by no host. CONNECT names its host in its target and is not held to
 * it, as node never held it. Null: the head is fine. The fast path
 * (h1-fast.ts) sends every such head here: it takes no repeated field, no
 * Transfer-Encoding, no HTTP/1.0 and no head without Host.
 */
export function refusedHead(req: IncomingMessage): Refusal | null {
  const te = req.headers['transfer-encoding']
  if (te !== undefined) {
    if (req.httpVersionMinor === 0) return HTTP10_CODING
    if (!chunkedOnly(te)) return OTHER_CODING
  }
  const raw = req.rawHeaders
  let hosts = 0
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]
    if (name.length === 4 && name.toLowerCase() === 'host' && ++hosts > 1) return TWO_HOSTS
  }
  if (hosts === 0 && req.httpVersionMinor === 1 && req.method !== 'CONNECT') return NO_HOST
  return null
}

/** RFC 9113 §8.3.1: an HTTP/2 request whose Host names another host than its :authority. */
export const HOST_DIFFERS = refusal(400, 'Host differs from :authority')

/** An HTTP/2 extended CONNECT for h2c (RFC 8441 :protocol): never tunnelled (router/headers.ts namesH2c). */
export const H2C_TUNNEL = refusal(501, 'h2c is not tunnelled')

/**
 * A whole response as raw bytes, for a socket no ServerResponse writes to (one
 * node handed over, or one its parser gave up on), the connection closing after it.
 */
export function closingResponse(status: number, body: string): string {
  const headers: OutgoingHeaders = { connection: 'close', 'content-length': String(Buffer.byteLength(body)) }
  if (body !== '') headers['content-type'] = 'text/plain; charset=utf-8'
  return head(status, headers) + body
}

/** RFC 9112 §6.3: a request has a body iff it carries Content-Length (> 0) or Transfer-Encoding. */
export function hasBody(req: IncomingMessage): boolean {
  const h = req.headers
  if (h['transfer-encoding'] !== undefined) return true
  const cl = h['content-length']
  return cl !== undefined && cl !== '0'
}

const kInFlight = Symbol('sallyport.h1InFlight')
type InFlightSocket = Socket & { [kInFlight]?: H1Exchange | undefined }

/** The exchange node's HTTP/1.1 server began last on `socket` and has not closed, if any. */
export function inFlightExchange(socket: Duplex): H1Exchange | undefined {
  return (socket as InFlightSocket)[kInFlight]
}

const kSni = Symbol('sallyport.sni')
type SniSocket = Socket & { [kSni]?: ConnectionSni }

/** Remembers the server name a TLS connection was made for (the HTTPS listener, at the handshake). */
export function setConnectionSni(socket: Socket, sni: ConnectionSni): void {
  (socket as SniSocket)[kSni] = sni
}

/** The server name `socket`'s TLS connection was made for; null: none (no SNI, or not TLS). */
export function connectionSni(socket: Socket): ConnectionSni | null {
  return (socket as SniSocket)[kSni] ?? null
}

/** Counts the body bytes pushed into `req` (what a 'data' listener would count, without taking the stream into flowing mode). */
function countPushed(req: IncomingMessage, ex: H1Exchange): void {
  const push = req.push
  req.push = function (chunk: unknown, encoding?: BufferEncoding): boolean {
    if (chunk !== null && chunk !== undefined) ex.received((chunk as { length: number }).length)
    return push.call(this, chunk, encoding)
  }
}

export class H1Exchange implements Exchange, BodySink {
  readonly protocol = 'h1' as const
  readonly scheme: 'http' | 'https'
  readonly method: string
  readonly target: string
  readonly authority: string
  readonly headers: IncomingMessage['headers']
  readonly body: Readable | null
  readonly upgrade = null
  readonly clientAddress: string
  readonly port: number
  readonly sni: ConnectionSni | null
  readonly #req: IncomingMessage
  readonly #res: ServerResponse
  readonly #socket: Socket
  /** Request body bytes node's parser has handed over so far. */
  #bytesIn = 0
  #bytesOut = 0
  #out: Readable | null = null
  #trailers: (() => OutgoingHeaders | null) | null = null
  #closed = false
  /** The response body is paused until the client socket drains. */
  #draining = false
  /** #out when it is an upstream body written through onBodyData/onBodyEnd/onBodyError (ResponseBody.attachSink). */
  #sunk: ResponseBody | null = null
  /** Body chunks released once written (release.ts); made at the first one. */
  #written: WrittenChunks | null = null
  #observer: ExchangeObserver = NOOP_OBSERVER

  constructor(req: IncomingMessage, res: ServerResponse, port: number, scheme: 'http' | 'https') {
    this.#res = res
    this.scheme = scheme
    this.method = req.method ?? 'GET'
    this.target = req.url ?? '/'
    this.headers = req.headers
    this.authority = req.headers.host ?? ''
    this.body = hasBody(req) ? req : null
    // Node's parser gives each body chunk its own copy, which nothing else keeps (upstream/release.ts).
    if (this.body !== null) ownedStreams.add(req)
    this.clientAddress = clientIp(req.socket.remoteAddress)
    this.port = port
    this.sni = scheme === 'https' ? connectionSni(req.socket) : null
    this.#socket = req.socket
    // Counted as node's parser pushes them: the socket's own count cannot tell this
    // request's body from its head, or from a request pipelined behind it, when
    // they come in one read (a small POST's head and body always do).
    if (this.body !== null) countPushed(req, this)
    this.#req = req
    ;(req.socket as InFlightSocket)[kInFlight] = this
  }

  observe(observer: ExchangeObserver): void {
    this.#observer = observer
    this.#res.once('close', this.#onClose)
  }

  /**
   * node's parser failed on this connection with this exchange the last it began
   * (it reads nothing more there). In this request's own body (a bad chunk): the
   * request fails as the client's, a 400 and the connection closed, or, once the
   * response has started, the connection cut. After it (a malformed request
   * pipelined behind a whole one): the response goes out whole, then the
   * refusal, and the connection closes. A connection that ended mid-request
   * (`eof`) is a client gone away: closed, nothing refused. False: nothing in
   * flight; refuse now.
   */
  clientError(refusal: string, code: ErrorCode, eof: boolean): boolean {
    const res = this.#res
    if (this.#closed || res.writableFinished) return false
    if (this.#req.complete) {
      res.once('finish', () => { if (this.#socket.writable) this.#socket.end(refusal) })
      return true
    }
    if (eof) {
      this.#socket.destroy()
      return true
    }
    if (!res.headersSent) res.shouldKeepAlive = false
    this.#observer.onRequestError(code, 'malformed request body')
    return true
  }

  #onClose = (): void => {
    const completed = this.#res.writableFinished
    this.#closed = true
    const socket = this.#socket as InFlightSocket
    if (socket[kInFlight] === this) socket[kInFlight] = undefined
    this.#observer.onEnd(completed, !completed && wasCut(this.#socket))
    // The client went away mid-body: stop reading upstream (the router's abort usually got there first).
    const out = this.#out
    if (!completed && out !== null && !out.destroyed) out.destroy()
  }

  headersSent(): boolean { return this.#res.headersSent }

  informational(status: number, headers: OutgoingHeaders): void {
    const res = this.#res
    // RFC 9110 §15.2: never to an HTTP/1.0 client.
    if (this.#closed || res.headersSent || this.#req.httpVersionMajor !== 1 || this.#req.httpVersionMinor === 0) return
    if (status < 102 || status > 199) return
    try {
      res.writeInformation(status, headers)
    } catch {
      // A field node will not write: an interim response is advice, dropped.
    }
  }

  // hot path
  respond(status: number, headers: OutgoingHeaders, body: Readable | string | null, trailers: (() => OutgoingHeaders | null) | null = null): boolean {
    const res = this.#res
    if (typeof body === 'string') headers['content-length'] = String(Buffer.byteLength(body))
    // Trailers travel only in a chunked body (RFC 9112 §7.1.2), and only to a client
    // that said it takes them (TE: trailers, RFC 9110 §10.1.4): drop the length so node chunks.
    const withTrailers = trailers !== null && body !== null && typeof body !== 'string' && acceptsTrailers(this.headers.te)
    if (withTrailers) delete headers['content-length']
    // An answer before the whole request body (the gateway's refusal, an upstream's early
    // answer) closes the connection after it, as nginx (400, 413) and Envoy do: kept alive,
    // the client owes the rest of a body nobody reads (node discards it) before its next
    // request, and one that stopped sending it waits while its next request is taken for body.
    if (this.body !== null && !this.#req.complete) res.shouldKeepAlive = false
    try {
      // The reason phrase named: a first writeHead that threw left its own on `res` (a 502 went out as "502 OK").
      res.writeHead(status, STATUS_CODES[status] ?? 'unknown', headers)
    } catch {
      // A field node refuses to write (invalid characters): the caller answers instead.
      if (!res.headersSent) return false
      if (body !== null && typeof body !== 'string') body.destroy()
      res.destroy()
      return true
    }
    if (body === null) { res.end(); return true }
    if (typeof body === 'string') { this.#bytesOut += Buffer.byteLength(body); res.end(body); return true }
    this.#out = body
    this.#trailers = withTrailers ? trailers : null
    // node sends the head with the first body write: a body not here by the end of this
    // round of I/O (an SSE stream's, a long poll's) must not hold the head back.
    queueMicrotask(this.#headPending)
    // Straight from an upstream pool: its chunks come here without the stream
    // machinery in between (upstream/exchange.ts BodySink).
    if (body instanceof ResponseBody && body.attachSink(this)) { this.#sunk = body; return true }
    // Copied by hand rather than with stream.pipeline (an AbortController and an
    // AbortError with a stack trace per call, ~7% of a small request's CPU) or
    // pipe() (six listeners and their closures on both streams): one 'data'
    // listener writes and counts, 'drain' is listened for only when the socket is
    // full. The body failing resets the connection (no fake success); the client
    // going away destroys the body (#onClose), which cancels upstream.
    body.on('data', this.#onOutData)
    body.once('end', this.onBodyEnd)
    body.once('error', this.onBodyError)
    body.once('close', this.#onOutClose)
    return true
  }

  #headPending = (): void => {
    if (this.#bytesOut === 0 && !this.#closed) setImmediate(this.#flushHead)
  }

  #flushHead = (): void => {
    const res = this.#res
    if (this.#bytesOut === 0 && !this.#closed && !res.destroyed && !res.writableEnded) res.flushHeaders()
  }

  #onOutData = (chunk: Buffer): void => {
    this.#bytesOut += chunk.length
    if (releasableResponseChunk(this.#out, chunk)) {
      if (this.#res.write(chunk, (this.#written ??= new WrittenChunks()).add(chunk)) || this.#draining) return
    } else if (this.#res.write(chunk) || this.#draining) return
    // Backpressure: the body stops flowing (its buffer fills, the upstream pauses) until the socket drains.
    this.#draining = true
    this.#out?.pause()
    this.#res.once('drain', this.#onDrain)
  }

  // hot path
  onBodyData(chunk: Buffer): boolean {
    const res = this.#res
    if (res.destroyed) return true // the client left: the exchange is being cancelled
    this.#bytesOut += chunk.length
    // The writer is the body's only consumer: a large chunk is freed once written (release.ts).
    const ok = isReleasable(chunk) ? res.write(chunk, (this.#written ??= new WrittenChunks()).add(chunk)) : res.write(chunk)
    if (ok) return true
    if (!this.#draining) {
      this.#draining = true
      res.once('drain', this.#onDrain)
    }
    return false
  }

  #onDrain = (): void => {
    this.#draining = false
    const out = this.#out
    if (out === null || out.destroyed) return
    if (this.#sunk !== null) this.#sunk.resumeSink()
    else out.resume()
  }

  onBodyEnd = (): void => {
    const res = this.#res
    const trailers = this.#trailers === null ? null : this.#trailers()
    if (trailers !== null) res.addTrailers(trailers as Record<string, string>)
    res.end()
  }

  onBodyError = (err: Error): void => {
    if (this.#closed) return // we destroyed it because the client left: not an upstream failure
    this.#res.destroy()
    this.#observer.onBodyError(err)
  }

  /** Destroyed without an error and before its end (pipeline's premature close): no fake success either. */
  #onOutClose = (): void => {
    const err = closedBeforeEnd(this.#out)
    if (err !== null) this.onBodyError(err) // the same failure as a body error
  }

  respondGrpc(grpcStatus: number, message: string): void {
    this.#res.writeHead(200, { 'content-type': 'application/grpc', 'grpc-status': String(grpcStatus), 'grpc-message': encodeURIComponent(message) })
    this.#res.end()
  }

  tunnel(_status: number, _headers: OutgoingHeaders, stream: Duplex): null {
    // Ordinary requests never ask for a tunnel; refuse rather than half-splice.
    stream.destroy()
    this.reset()
    return null
  }

  reset(): void {
    this.#res.destroy()
  }

  bytesIn(): number { return this.#bytesIn }
  /** countPushed: `n` more body bytes arrived. */
  received(n: number): void { this.#bytesIn += n }
  /** Issue 7: SPIFFE ID of a verified client certificate (HTTPS with frontend validation). */
  spiffeId(): string | null { return this.scheme === 'https' ? peerSpiffeId(this.#socket) : null }
  bytesOut(): number { return this.#bytesOut }
}

/**
 * An HTTP/1.1 Upgrade (WebSocket): node hands us the raw socket. A 101 from the
 * upstream splices the two sockets; any other answer is written as a plain
 * HTTP/1.1 response on the raw socket and the connection is closed.
 */
export class UpgradeExchange implements Exchange {
  readonly protocol = 'h1' as const
  readonly scheme: 'http' | 'https'
  readonly method: string
  readonly target: string
  readonly authority: string
  readonly headers: IncomingMessage['headers']
  readonly body = null
  readonly upgrade: string
  readonly clientAddress: string
  readonly port: number
  readonly sni: ConnectionSni | null
  readonly #socket: Socket
  readonly #head: Buffer
  readonly #spiffeId: string | null
  #sent = false
  #tunnelled = false
  #finished = false
  /** A refused upgrade's response body bytes. */
  #bytesOut = 0
  /** Once tunnelled: the socket's counts that were not the tunnel's (the request head, the 101). */
  #readBefore = 0
  #writtenBefore = 0
  /** Which side's reset ended the tunnel, if one did. */
  #cutBy: 'client' | 'upstream' | null = null
  #observer: ExchangeObserver = NOOP_OBSERVER

  constructor(req: IncomingMessage, socket: Socket, head: Buffer, port: number, scheme: 'http' | 'https') {
    this.scheme = scheme
    this.method = req.method ?? 'GET'
    this.target = req.url ?? '/'
    this.headers = req.headers
    this.authority = req.headers.host ?? ''
    this.upgrade = (req.headers.upgrade ?? '').toLowerCase()
    this.clientAddress = clientIp(req.socket.remoteAddress)
    this.port = port
    this.sni = scheme === 'https' ? connectionSni(socket) : null
    this.#socket = socket
    this.#head = head
    this.#spiffeId = scheme === 'https' ? peerSpiffeId(socket) : null
    socket.on('error', noop)
  }
  /** The client certificate's SPIFFE ID (HTTPS), as on any HTTP/1.1 request; read at the start, while the socket has it. */
  spiffeId(): string | null { return this.#spiffeId }


  observe(observer: ExchangeObserver): void {
    this.#observer = observer
    this.#socket.once('close', this.#onClose)
  }

  #onClose = (): void => {
    // A tunnel the client reset did not complete (it went away); one the upstream reset did, on our side.
    // One the gateway cut (a grace period ran out) did not: its close comes before splice's says which side.
    const cut = wasCut(this.#socket)
    const completed = this.#finished || (this.#tunnelled && this.#cutBy !== 'client' && !cut)
    this.#observer.onEnd(completed, !completed && cut)
  }

  headersSent(): boolean { return this.#sent }

  /** A tunnel request's answer is the 101 or a refusal; interim responses are not passed on. */
  informational(): void {}

  respond(status: number, headers: OutgoingHeaders, body: Readable | string | null): boolean {
    const socket = this.#socket
    this.#sent = true
    headers.connection = 'close'
    if (typeof body === 'string') headers['content-length'] = String(Buffer.byteLength(body))
    socket.write(head(status, headers))
    if (body === null || typeof body === 'string') {
      if (typeof body === 'string') this.#bytesOut += Buffer.byteLength(body)
      this.#finished = true
      if (body === null) socket.end()
      else socket.end(body)
      return true
    }
    body.on('data', (chunk: Buffer) => { this.#bytesOut += chunk.length })
    pipeline(body, socket, (err) => {
      if (err == null) this.#finished = true
      else { socket.destroy(); this.#observer.onBodyError(err) }
    })
    return true
  }

  respondGrpc(grpcStatus: number, message: string): void {
    this.respond(200, { 'content-type': 'application/grpc', 'grpc-status': String(grpcStatus), 'grpc-message': encodeURIComponent(message) }, null)
  }

  tunnel(_status: number, headers: OutgoingHeaders, stream: Duplex): number {
    const socket = this.#socket
    this.#sent = true
    this.#tunnelled = true
    headers.connection = 'Upgrade'
    headers.upgrade = this.upgrade
    // An HTTP/2 upstream's 200 (RFC 8441) is a switch of protocols to this client.
    socket.write(head(101, headers))
    // Counted from the socket's own counters rather than 'data' events: between two
    // TCP sockets the relay moves bulk transfers without them (upstream/relay.ts).
    // What the client sent along with the request head, and while the upstream was
    // asked (still buffered), is the tunnel's too.
    this.#readBefore = socket.bytesRead - socket.readableLength - this.#head.length
    this.#writtenBefore = socket.bytesWritten
    if (this.#head.length > 0) stream.write(this.#head)
    // Half-close passed on both ways, a reset as a reset (tunnel-ends.ts).
    splice(socketEnd(socket), upstreamEnd(stream), (side) => {
      this.#cutBy = side
      // A tunnel the upstream reset ends in an error of its (its access line says so).
      if (side === 'upstream') this.#observer.onBodyError(new Error('the upstream reset the tunnel'))
    })
    return 101
  }

  reset(): void { this.#socket.destroy() }

  /** A tunnel's bytes from the client; 0 for a refused upgrade (it has no body). */
  bytesIn(): number { return this.#tunnelled ? this.#socket.bytesRead - this.#readBefore : 0 }
  bytesOut(): number { return this.#tunnelled ? this.#socket.bytesWritten - this.#writtenBefore : this.#bytesOut }
}

function noop(): void {}

/**
 * A response body that closed without an error before its end (pipeline's
 * premature close): the error the client writer reports, so a cut body never
 * passes for a whole one. null when it ended, failed with its own error, or
 * there is none.
 */
export function closedBeforeEnd(out: Readable | null): Error | null {
  if (out === null || out.readableEnded || out.errored !== null) return null
  return new Error('response body closed before its end')
}

/** TE is a list of transfer codings; `trailers` among them means the client takes trailer fields. */
export function acceptsTrailers(te: string | string[] | undefined): boolean {
  return te !== undefined && String(te).toLowerCase().includes('trailers')
}

function head(status: number, headers: OutgoingHeaders): string {
  let text = 'HTTP/1.1 ' + status + ' ' + (STATUS_CODES[status] ?? 'Unknown') + '\r\n'
  for (const name in headers) {
    const v = headers[name]
    if (Array.isArray(v)) for (const one of v) text += name + ': ' + one + '\r\n'
    else text += name + ': ' + v + '\r\n'
  }
  return text + '\r\n'
}
