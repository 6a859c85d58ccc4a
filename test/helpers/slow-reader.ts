// Reads a stream to its end, hashing what arrives, and (when asked) pausing
// now and then so the writer on the other side backs up: the shape under which
// a buffer reused or released too early shows up as a wrong hash.

import { createHash } from 'node:crypto'
import type { Readable } from 'node:stream'

export interface ReadResult {
  readonly bytes: number
  /** sha256 of everything read, hex. */
  readonly hash: string
}

/** Pauses for `pauseMs` after every `every` chunks; null reads at full speed. */
export interface Stall {
  readonly every: number
  readonly pauseMs: number
}

export function readAll(stream: Readable, stall: Stall | null = { every: 16, pauseMs: 2 }): Promise<ReadResult> {
  const hash = createHash('sha256')
  let bytes = 0
  let n = 0
  return new Promise((resolve, reject) => {
    stream.on('data', (c: Buffer) => {
      hash.update(c)
      bytes += c.length
      if (stall !== null && ++n % stall.every === 0) { stream.pause(); setTimeout(() => stream.resume(), stall.pauseMs) }
    })
    stream.on('end', () => resolve({ bytes, hash: hash.digest('hex') }))
    stream.on('error', reject)
  })
}
