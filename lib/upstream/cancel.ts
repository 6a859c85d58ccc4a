// Cancellation of one upstream request: the client went away, the route's
// request timeout fired, or an attempt's per-try timeout did.
//
// The request path used AbortController, whose signal is an EventTarget:
// creating one and adding and removing two listeners costs about 0.7 µs and a
// handful of objects (a Map, listener records, weak references), and every
// request made two. Nothing outside the process sees this signal, so the path
// uses this small class instead; AbortSignal still fits the CancelSignal shape
// (a mirror's AbortSignal.timeout, tests).

/** Told once, when the request is cancelled. */
export interface CancelListener {
  handleEvent(): void
}

/** What the upstream side reads: whether, why, and a way to be told. */
export interface CancelSignal {
  readonly aborted: boolean
  readonly reason: unknown
  addEventListener(type: 'abort', listener: CancelListener): void
  removeEventListener(type: 'abort', listener: CancelListener): void
}

/** A CancelSignal and its trigger in one object (AbortController and its signal). */
export class Cancel implements CancelSignal {
  #aborted = false
  #reason: unknown = undefined
  /** Usually one or two listeners: no Set, no Map. */
  #listeners: CancelListener[] | null = null

  get aborted(): boolean {
    return this.#aborted
  }

  get reason(): unknown {
    return this.#reason
  }

  /** Same listener twice is kept once (as EventTarget does); after abort, never called. */
  addEventListener(_type: 'abort', listener: CancelListener): void {
    if (this.#aborted) return
    const list = this.#listeners
    if (list === null) this.#listeners = [listener]
    else if (!list.includes(listener)) list.push(listener)
  }

  removeEventListener(_type: 'abort', listener: CancelListener): void {
    const list = this.#listeners
    if (list === null) return
    const i = list.indexOf(listener)
    if (i !== -1) list.splice(i, 1)
  }

  /**
   * Cancels once: `reason` is kept, then the listeners are called in the order
   * they were added; one removed by an earlier listener is not called, and one
   * that throws does not keep the others from running (the first error is
   * rethrown after them). Later calls do nothing.
   */
  abort(reason: unknown): void {
    if (this.#aborted) return
    this.#aborted = true
    this.#reason = reason
    const list = this.#listeners
    if (list === null) return
    let failed: { error: unknown } | null = null
    for (const l of list.slice()) {
      if (!list.includes(l)) continue
      try {
        l.handleEvent()
      } catch (error) {
        failed ??= { error }
      }
    }
    this.#listeners = null
    if (failed !== null) throw failed.error
  }
}
