// "Log a failure once, then the same failure at most every N": for failures
// that repeat as fast as their cause is retried (a Lease request every 2 s, a
// Redis decision per request). Per key (an error's code or status), so two
// errors that alternate do not make every occurrence a new one; the keys kept
// are bounded (the oldest noted is forgotten first).

/** Whether to log an occurrence now; `repeats`: the occurrences not logged since the key's last line, null the first time. */
export interface Noted { readonly log: boolean; readonly repeats: number | null }

export class RepeatThrottle {
  readonly #everyMs: number
  readonly #maxKeys: number
  readonly #seen = new Map<string, { at: number; unlogged: number }>()

  constructor(everyMs: number, maxKeys = 16) {
    this.#everyMs = everyMs
    this.#maxKeys = maxKeys
  }

  note(key: string, now = performance.now()): Noted {
    const seen = this.#seen.get(key)
    if (seen !== undefined && now - seen.at < this.#everyMs) {
      seen.unlogged++
      return { log: false, repeats: seen.unlogged }
    }
    this.#seen.delete(key)
    this.#seen.set(key, { at: now, unlogged: 0 })
    if (this.#seen.size > this.#maxKeys) this.#seen.delete(this.#seen.keys().next().value as string)
    return { log: true, repeats: seen === undefined ? null : seen.unlogged }
  }

  /** Forget every key (the failures ended): the next one logs at once. */
  clear(): void {
    this.#seen.clear()
  }
}
