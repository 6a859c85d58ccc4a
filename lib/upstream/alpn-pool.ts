// Cluster protocol HTTP over TLS: the upstream chooses h2 or http/1.1 by ALPN.
// Approach (simplest correct one we found): the first request of a key opens
// one TLS connection offering the cluster's ALPN list (default h2, http/1.1);
// the negotiated protocol is remembered for the key's lifetime and that very
// socket becomes either the first HTTP/2 session or the first connection of an
// undici Pool (handed over through its custom connect function). Later undici
// connections offer only http/1.1. A backend that changes its mind about ALPN
// is picked up when the pool is replaced (retain after a config change).

import type { Socket } from 'node:net'
import type { Connector, PendingConnect } from './connect.ts'
import type { Exchange } from './exchange.ts'
import { H1Pool } from './h1-pool.ts'
import { H2Pool } from './h2-pool.ts'
import { stillWaiting, type PoolSettings, type PoolStats, type UpstreamPool } from './pool.ts'

export class AlpnPool implements UpstreamPool {
  readonly #connector: Connector
  readonly #settings: PoolSettings
  readonly #offer: readonly string[]
  #chosen: UpstreamPool | null = null
  #waiting: Exchange[] = []
  /** The probe's connect, while it is in progress. */
  #probing: PendingConnect | null = null
  #closed = false

  constructor(connector: Connector, settings: PoolSettings, offer: readonly string[]) {
    this.#connector = connector
    this.#settings = settings
    this.#offer = offer
  }

  get protocol(): string {
    return this.#chosen === null ? 'alpn' : this.#chosen.protocol
  }

  get closed(): boolean {
    return this.#closed
  }

  // hot path
  dispatch(ex: Exchange): void {
    const chosen = this.#chosen
    if (chosen !== null) {
      chosen.dispatch(ex)
      return
    }
    this.#waiting.push(ex)
    if (this.#probing === null) this.#probe()
  }

  #probe(): void {
    this.#probing = this.#connector.connect(this.#offer, (err, socket) => {
      this.#probing = null
      const waiting = this.#waiting
      this.#waiting = []
      if (err !== null || socket === null) {
        // Each request decides for itself (connect fallback to another endpoint).
        for (const ex of waiting) ex.fail(err ?? new Error('no socket'))
        return
      }
      if (this.#closed) {
        socket.destroy()
        for (const ex of waiting) ex.fail(Object.assign(new Error('upstream pool closed'), { code: 'UND_ERR_CLOSED' }))
        return
      }
      const negotiated = (socket as Socket & { alpnProtocol?: string | false }).alpnProtocol
      const chosen: UpstreamPool = negotiated === 'h2'
        ? new H2Pool(this.#connector, this.#settings, socket)
        : new H1Pool(this.#connector, this.#settings, socket)
      this.#chosen = chosen
      for (const ex of waiting) if (!ex.answered) chosen.dispatch(ex)
    })
  }

  pending(): number {
    return this.#chosen !== null ? this.#chosen.pending() : stillWaiting(this.#waiting)
  }

  stats(): PoolStats {
    if (this.#chosen !== null) return this.#chosen.stats()
    return { connected: 0, pending: this.#waiting.length, running: 0 }
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    // A probe no request waits for any more is stopped, not left to finish.
    if (this.#probing !== null && stillWaiting(this.#waiting) === 0) this.#probing.cancel()
    if (this.#chosen !== null) await this.#chosen.close()
  }
}
