// Joins a client connection and an upstream connection byte for byte.
//
// - Backpressure: `relay` both ways (relay.ts) — a slow reader pauses the
//   other side's socket; nothing is buffered beyond the streams'
//   highWaterMarks (or the relay's one read buffer, for bulk transfers).
// - Half-close: both sockets allow half-open, and `relay` ends the destination
//   when the source ends, so a FIN travels through: a client that shuts its
//   write side still receives the upstream's answer, and the other way round.
// - Idle timeout: no byte either way for `idleMs`. Every byte in either
//   direction passes through the client socket (read from it, or written to
//   it), so one socket timer watches both without per-chunk work.
// - Errors: the first error on either side (a reset) resets the other, never
//   ends it with a FIN: a client would take a transfer the upstream cut for a
//   whole one (and the upstream a cut upload). A TLS socket (Terminate, TLS
//   origination) cannot be reset under its TLS: it is closed instead. So does
//   the gateway's own cut (a listener's grace period ran out).
// Byte counts come from the client socket's own counters (wire bytes).

import type { Socket } from 'node:net'
import { relay } from './relay.ts'
import { resetSocket } from './reset-socket.ts'

export type SpliceEnd = 'ok' | 'idle_timeout' | 'client_reset' | 'upstream_reset' | 'shutdown'

export interface SpliceResult {
  readonly end: SpliceEnd
  /** Bytes read from the client. */
  readonly bytesIn: number
  /** Bytes written to the client. */
  readonly bytesOut: number
}

export class Splice {
  readonly #client: Socket
  readonly #upstream: Socket
  readonly #done: (result: SpliceResult) => void
  #end: SpliceEnd | null = null
  #open = 2
  #finished = false

  constructor(client: Socket, upstream: Socket, idleMs: number, done: (result: SpliceResult) => void) {
    this.#client = client
    this.#upstream = upstream
    this.#done = done
    client.allowHalfOpen = true
    upstream.allowHalfOpen = true
    client.on('error', this.#onClientError)
    upstream.on('error', this.#onUpstreamError)
    // A closed client can receive nothing more: the upstream goes too. A closed
    // upstream has already ended the client's write side through the pipe.
    client.once('close', () => { upstream.destroy(); this.#onClose() })
    upstream.once('close', this.#onClose)
    if (idleMs > 0) {
      client.setTimeout(idleMs)
      client.on('timeout', this.#onIdle)
    }
    relay(client, upstream)
    relay(upstream, client)
  }

  /**
   * Ends the connection now (listener shutdown past its grace): both sides are
   * reset, as for a reset passed on (a FIN would tell the client the upstream
   * had finished sending, and the upstream that the client had), and the
   * result is given at once, not at the sockets' 'close' a turn later: a
   * draining process may exit before then, and the connection went unlogged.
   */
  abort(end: SpliceEnd): void {
    this.#end ??= end
    resetSocket(this.#client)
    resetSocket(this.#upstream)
    this.#settle()
  }

  #onClientError = (): void => {
    this.#end ??= 'client_reset'
    resetSocket(this.#upstream)
    this.#client.destroy()
  }

  #onUpstreamError = (): void => {
    this.#end ??= 'upstream_reset'
    resetSocket(this.#client)
    this.#upstream.destroy()
  }

  #onIdle = (): void => {
    this.#end ??= 'idle_timeout'
    this.#client.destroy()
    this.#upstream.destroy()
  }

  #onClose = (): void => {
    if (--this.#open > 0) return
    this.#settle()
  }

  #settle(): void {
    if (this.#finished) return
    this.#finished = true
    this.#client.setTimeout(0)
    this.#done({ end: this.#end ?? 'ok', bytesIn: this.#client.bytesRead, bytesOut: this.#client.bytesWritten })
  }
}
