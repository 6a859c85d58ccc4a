// How long a request waits in a pool's queue for a connection (HTTP/1.1) or a
// stream (HTTP/2): at most the pool's connect timeout, then it fails with a
// 503 (SP_ERR_OVERLOADED, detail queue_timeout) and was never sent. HAProxy's
// `timeout queue` works the same way and defaults to `timeout connect`; Envoy
// bounds the wait with its route timeout (15 s), which sallyport has none of by
// default. Without a bound, a client holding every connection of a backend
// (stalled uploads, responses it never reads) left everyone else waiting,
// unanswered, for as long as it liked.
//
// One interval per pool, running only while something waits: it counts ticks
// and calls the pool's sweep. A request notes the tick it was queued at, so
// queueing reads no clock and arms no timer of its own. A request waits at
// least the timeout and at most one period (a quarter of it, 10 ms to 1 s) more.

import { ErrorCode, SallyportError } from '../errors.ts'

/** SallyportError.detail of a request that waited its pool's whole queue timeout (and the overload metric's limit label). */
export const QUEUE_TIMEOUT = 'queue_timeout'

const MIN_PERIOD_MS = 10
const MAX_PERIOD_MS = 1000

export class QueueTimeout {
  /** Periods so far; a queued request notes this (Exchange.queuedAt). */
  tick = 0
  readonly timeoutMs: number
  readonly #periodMs: number
  readonly #ticks: number
  readonly #sweep: () => void
  #timer: NodeJS.Timeout | null = null

  /** `sweep`: fails the requests that expired() and calls stop() when nothing waits any more. */
  constructor(timeoutMs: number, sweep: () => void) {
    this.timeoutMs = timeoutMs
    this.#periodMs = Math.min(MAX_PERIOD_MS, Math.max(MIN_PERIOD_MS, Math.ceil(timeoutMs / 4)))
    this.#ticks = Math.ceil(timeoutMs / this.#periodMs)
    this.#sweep = sweep
  }

  // hot path (when requests queue)
  /** A request starts waiting: the tick it notes; the interval runs. */
  queued(): number {
    if (this.#timer === null) this.#timer = setInterval(this.#onTick, this.#periodMs).unref()
    return this.tick
  }

  /** A request queued at tick `since` has waited at least the timeout. */
  expired(since: number): boolean {
    return this.tick - since > this.#ticks
  }

  /** Nothing waits: the interval stops (queued() starts it again). */
  stop(): void {
    if (this.#timer === null) return
    clearInterval(this.#timer)
    this.#timer = null
  }

  /** The error of a request that waited too long; `where`: the endpoint. */
  error(where: string): SallyportError {
    return new SallyportError(ErrorCode.OVERLOADED, `no connection to ${where} free within ${this.timeoutMs} ms (the connect timeout)`, { detail: QUEUE_TIMEOUT })
  }

  #onTick = (): void => {
    this.tick++
    this.#sweep()
  }
}
