// The two ends of a tunnel, and what joins them: a forward-proxy CONNECT
// (connect-tunnel.ts), a WebSocket or other HTTP/1.1 Upgrade, an RFC 8441
// extended CONNECT. An end is a TCP (or TLS) socket or an HTTP/2 stream, on
// the client's side or the upstream's.
//
// RFC 9113 §8.5 (and RFC 8441, which carries it to extended CONNECT) maps a
// TCP FIN to END_STREAM and a TCP reset to RST_STREAM:
// - A FIN (END_STREAM) from one end is a half-close: it is passed on as a FIN
//   (END_STREAM) and the other direction keeps flowing; the tunnel is over once
//   both directions have ended. Sockets must allow half-open for that, or node
//   ends our write side the moment the peer's FIN is read.
// - A reset (a socket's error, an HTTP/2 stream reset or cut) is passed on as a
//   reset, never as an orderly end: the other side would take a cut transfer
//   for a whole one.

import { constants, type ClientHttp2Stream, type ServerHttp2Stream } from 'node:http2'
import { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { relay } from '../upstream/relay.ts'
import { resetSocket } from '../upstream/reset-socket.ts'

type H2Stream = ServerHttp2Stream | ClientHttp2Stream

/** One end of a tunnel: its bytes, and how a reset is given to it and noticed from it. */
export interface TunnelEnd {
  readonly stream: Duplex
  /** Aborts this end: a TCP RST; RST_STREAM on HTTP/2. */
  reset(): void
  /** Calls `fn` when the peer resets this end without an 'error' (an HTTP/2 RST_STREAM CANCEL). */
  onReset(fn: () => void): void
  /** Closed after both directions ended in order: nothing was cut. */
  closedCleanly(): boolean
}

/**
 * RST_STREAM `code` on an HTTP/2 stream. node's close() ends the writable side
 * first, and that sends an END_STREAM ahead of the RST_STREAM: the peer would
 * read a complete transfer. With _final a no-op the end stays local and only
 * the reset goes out.
 */
export function resetStream(stream: H2Stream, code: number): void {
  if (stream.destroyed) return
  stream._final = finalWithoutEndStream
  stream.close(code)
}

function finalWithoutEndStream(callback: (err?: Error | null) => void): void { callback() }

/** A TCP or TLS socket as a tunnel end. */
export function socketEnd(socket: Socket): TunnelEnd {
  return {
    stream: socket,
    reset: () => { resetSocket(socket) },
    // A reset reaches the socket as its 'error' (ECONNRESET).
    onReset: noop,
    closedCleanly: () => socket.errored === null && socket.readableEnded && socket.writableFinished,
  }
}

/** An HTTP/2 stream as a tunnel end; it is reset with CONNECT_ERROR (RFC 9113 §8.5: the tunnel's other side broke). */
export function h2StreamEnd(stream: H2Stream): TunnelEnd {
  return {
    stream,
    reset: () => { resetStream(stream, constants.NGHTTP2_CONNECT_ERROR) },
    // A stream reset while we may still send ('aborted', before node's 'end' and
    // 'close' for it): node emits no 'error' for CANCEL or NO_ERROR, and an 'end'
    // that reads as the peer's END_STREAM.
    onReset: (fn) => { stream.once('aborted', fn) },
    // Not writableFinished: node may close a stream before it says its END_STREAM is
    // out. A stream closed with its session reads NO_ERROR, but its readable side never ended.
    closedCleanly: () => stream.rstCode === constants.NGHTTP2_NO_ERROR && stream.readableEnded && stream.writableEnded,
  }
}

/** A tunnel's upstream end as the pools hand it over: a socket (HTTP/1.1 Upgrade) or an HTTP/2 stream (RFC 8441). */
export function upstreamEnd(stream: Duplex): TunnelEnd {
  if (stream instanceof Socket) return socketEnd(stream)
  if (isH2Stream(stream)) return h2StreamEnd(stream)
  return {
    stream,
    reset: () => { stream.destroy() },
    onReset: noop,
    closedCleanly: () => stream.errored === null && stream.readableEnded && stream.writableFinished,
  }
}

/** node:http2 exports no stream class to test against: its streams are the Duplexes with an rstCode and a session. */
function isH2Stream(stream: Duplex): stream is H2Stream {
  return 'rstCode' in stream && 'session' in stream && typeof (stream as Partial<H2Stream>).close === 'function'
}

/** The streams of tunnels: their FIN means a half-close. */
const spliced = new WeakSet<object>()

/** `stream` carries a tunnel from now on (splice() marks its ends; a forward-proxy CONNECT its client's). */
export function markTunnel(stream: object): void { spliced.add(stream) }

/**
 * Closes a connection the gateway cuts itself (a listener's grace period ran
 * out). A tunnel's socket is reset: its FIN would tell the client the far side
 * had ended in order (a TLS socket, which node cannot reset, is destroyed).
 * Any other connection is destroyed: what it carried has framing of its own,
 * and the bytes already sent still reach the client.
 */
export function cutConnection(socket: Socket): void {
  if (spliced.has(socket)) resetSocket(socket)
  else socket.destroy()
}

/**
 * Joins `client` and `upstream`: bytes both ways with backpressure (relay.ts),
 * a FIN passed on as a FIN, a reset as a reset. Each side closes by itself once
 * both directions are done; one that closes cut (destroyed, its session gone)
 * resets the other.
 */
export function splice(client: TunnelEnd, upstream: TunnelEnd, onCut: (side: 'client' | 'upstream') => void = noop): void {
  for (const end of [client, upstream]) {
    if (end.stream instanceof Socket) end.stream.allowHalfOpen = true
    markTunnel(end.stream)
  }
  // The side whose reset (or cut close) ended the tunnel, told once: the other's follows from ours.
  let told = false
  const cut = (side: 'client' | 'upstream'): void => { if (!told) { told = true; onCut(side) } }
  join(client, upstream, () => { cut('client') })
  join(upstream, client, () => { cut('upstream') })
  relay(client.stream, upstream.stream)
  relay(upstream.stream, client.stream)
}

/** What `from` going wrong does to `to`. */
function join(from: TunnelEnd, to: TunnelEnd, cut: () => void): void {
  from.stream.on('error', () => {
    cut()
    to.reset()
    from.stream.destroy()
  })
  from.onReset(() => { cut(); to.reset() })
  from.stream.once('close', () => { if (!from.closedCleanly()) { cut(); to.reset() } })
}

function noop(): void {}
