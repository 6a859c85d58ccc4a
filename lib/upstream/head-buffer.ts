// HTTP/1.1 heads built straight into bytes. A head built as a string costs a
// cons string per `+=` (a dozen or more per head) and a flat copy when it is
// written; per small proxied request that was about a fifth of everything
// allocated (bench/alloc-profile.ts). Here every head is written into one
// scratch buffer the whole process shares, then copied out once, into a buffer
// that can also hold the bytes to send with it (a small body).
//
// One head at a time: build and take() in the same synchronous turn. Every
// string put here must be checked already (TOKEN / INVALID_VALUE, h1-parser.ts):
// it is written as latin1, one byte per character.

import { latin1 } from '../bytes.ts'

export class HeadBuffer {
  #buf = Buffer.allocUnsafeSlow(16 * 1024)
  #at = 0

  /** Starts a new head (whatever was built and not taken is dropped). */
  start(first: string): void {
    this.#at = 0
    this.put(first)
  }

  // hot path
  put(s: string): void {
    const end = this.#at + s.length
    if (end > this.#buf.length) this.#grow(end)
    this.#at = latin1(this.#buf, s, this.#at)
  }

  /** `name: value\r\n` */
  // hot path
  field(name: string, value: string): void {
    const end = this.#at + name.length + value.length + 4
    if (end > this.#buf.length) this.#grow(end)
    const buf = this.#buf
    let at = latin1(buf, name, this.#at)
    buf[at++] = 0x3a
    buf[at++] = 0x20
    at = latin1(buf, value, at)
    buf[at++] = 0x0d
    buf[at++] = 0x0a
    this.#at = at
  }

  get length(): number { return this.#at }

  /** The head in a buffer of its own, with `room` bytes free after it (from `length` on). */
  // hot path
  take(room = 0): Buffer {
    const out = Buffer.allocUnsafe(this.#at + room)
    this.#buf.copy(out, 0, 0, this.#at)
    return out
  }

  #grow(need: number): void {
    const next = Buffer.allocUnsafeSlow(Math.max(need, this.#buf.length * 2))
    this.#buf.copy(next, 0, 0, this.#at)
    this.#buf = next
  }
}

/** The process's one head under construction (see the top of this file). */
export const head = new HeadBuffer()
