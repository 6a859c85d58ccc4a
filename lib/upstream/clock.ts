// The two clocks of one HTTP/1.1 upstream exchange, on node timers: the
// headers clock from the moment the request is on a connection (restarted by
// upload progress), then the idle clock from the response head on (restarted by
// every body chunk, and on resume). 0 ms is no clock, as for HTTP/2 streams.
// One timer at a time; a cleared one dies young (undici's parser timer stayed in
// its timer list for up to 500 ms and was promoted under load: bench/RESULTS.md, Memory).
// Used by sallyport's own connections (h1-client.ts) and by the undici attempts
// (h1-pool.ts).

/** Told when a clock runs out; `afterHead`: the idle clock (the response had begun), else the headers clock. */
export interface ClockOwner {
  timedOut(afterHead: boolean): void
}

function fire(clock: ExchangeClock): void {
  clock.fired()
}

export class ExchangeClock {
  readonly #owner: ClockOwner
  #timer: NodeJS.Timeout | null = null
  #headersMs = 0
  #idleMs = 0
  #afterHead = false

  constructor(owner: ClockOwner) {
    this.#owner = owner
  }

  /** The request is on a connection: the headers clock runs (none for 0 ms); the idle one follows the head. */
  start(headersMs: number, idleMs: number): void {
    this.stop()
    this.#headersMs = headersMs
    this.#idleMs = idleMs
    this.#afterHead = false
    if (headersMs > 0) this.#timer = setTimeout(fire, headersMs, this)
  }

  /** The response head arrived: from here on the idle clock (whether or not a headers clock ran). */
  responded(): void {
    this.#afterHead = true
    const timer = this.#timer
    if (timer === null) {
      if (this.#idleMs > 0) this.#timer = setTimeout(fire, this.#idleMs, this)
    } else if (this.#idleMs <= 0) this.stop()
    else if (this.#headersMs === this.#idleMs) timer.refresh()
    else {
      clearTimeout(timer)
      this.#timer = setTimeout(fire, this.#idleMs, this)
    }
  }

  // hot path
  /** Progress (a body chunk either way, a resume): the running clock starts over. */
  touch(): void {
    const timer = this.#timer
    if (timer !== null) timer.refresh()
  }

  stop(): void {
    const timer = this.#timer
    if (timer !== null) {
      this.#timer = null
      clearTimeout(timer)
    }
  }

  /** The timer ran out (called by it). */
  fired(): void {
    this.#timer = null
    this.#owner.timedOut(this.#afterHead)
  }
}
