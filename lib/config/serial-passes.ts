// One pass at a time, and never a lost request: a request that arrives while a
// pass runs asks for exactly one more pass after it (however many arrive), and
// every caller gets the promise of the run that will cover it. The file source,
// the Kubernetes source and the status writer all reload or write this way.

export class SerialPasses {
  readonly #pass: () => Promise<void>
  readonly #more: () => boolean
  #running: Promise<void> | null = null
  #again = false

  /** `more`: whether a requested extra pass should still run (false once the owner is closed). */
  constructor(pass: () => Promise<void>, more: () => boolean = () => true) {
    this.#pass = pass
    this.#more = more
  }

  request(): Promise<void> {
    if (this.#running !== null) {
      this.#again = true
      return this.#running
    }
    this.#running = (async () => {
      try {
        do {
          this.#again = false
          await this.#pass()
        } while (this.#again && this.#more())
      } finally {
        this.#running = null
      }
    })()
    return this.#running
  }
}
