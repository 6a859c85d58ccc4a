// A request body that can be sent again (issue 6: retries replay the body).
// The client's body streams to the first attempt with backpressure while a
// copy of it is kept, up to a bound (DEFAULT_REPLAY_BYTES, 64 KiB). Each
// attempt gets its own stream: the kept bytes first, then whatever the client
// still sends. A body past the bound keeps streaming to the attempt it is
// feeding, but can no longer be replayed: `replayable` turns false and the
// request is not retried (DESIGN.md: a body is buffered only with a bound).

import { PassThrough, type Readable } from 'node:stream'
import { ownedStreams, retained } from '../upstream/release.ts'

export const DEFAULT_REPLAY_BYTES = 64 * 1024

export class ReplayBody {
  readonly #source: Readable
  readonly #limit: number
  #chunks: Buffer[] | null = []
  #size = 0
  #ended = false
  #failed: Error | null = null
  #current: PassThrough | null = null
  /** The source's chunks are nobody else's (upstream/release.ts): so are the attempts' streams, but for what is kept here. */
  readonly #owned: boolean

  constructor(source: Readable, limit = DEFAULT_REPLAY_BYTES) {
    this.#source = source
    this.#limit = limit
    this.#owned = ownedStreams.has(source)
    source.on('data', (chunk: Buffer) => this.#onData(chunk))
    source.on('end', () => { this.#ended = true; this.#current?.end() })
    source.on('error', (err: Error) => { this.#failed = err; this.#current?.destroy(err) })
    source.pause()
  }

  /** Whether a new attempt can get the whole body. */
  get replayable(): boolean {
    return this.#chunks !== null && this.#failed === null
  }

  /** A fresh stream for the next attempt: kept bytes, then the rest as it arrives. Call only while replayable. */
  next(): Readable {
    const previous = this.#current
    const out = new PassThrough()
    // The client's failure is this stream's too (the source's 'error' handler
    // destroys it with the error); the attempt's consumer sees it while it
    // reads, and once it has let go (a cancelled upstream exchange) nobody
    // needs to: never an unhandled 'error' event.
    out.on('error', noop)
    this.#current = out
    if (this.#owned) ownedStreams.add(out)
    if (previous !== null) {
      previous.removeAllListeners('drain')
      if (!previous.destroyed) previous.destroy()
    }
    for (const chunk of this.#chunks ?? []) out.write(chunk)
    if (this.#ended) out.end()
    else {
      out.on('drain', () => this.#source.resume())
      // A stream that is cut before it was read to the end must not hold the client.
      out.on('close', () => { if (this.#current === out) this.#source.resume() })
      this.#source.resume()
    }
    return out
  }

  /** Drop the copy (the request is answered). */
  release(): void {
    this.#chunks = null
  }

  #onData(chunk: Buffer): void {
    const chunks = this.#chunks
    if (chunks !== null) {
      this.#size += chunk.length
      if (this.#size > this.#limit) this.#chunks = null
      else {
        chunks.push(chunk)
        retained.add(chunk) // a retry sends it again: never released once written
      }
    }
    const out = this.#current
    if (out === null || out.destroyed) return
    if (!out.write(chunk)) this.#source.pause()
  }
}

function noop(): void {}
