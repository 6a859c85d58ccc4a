// Byte-stream throughput pieces shared by bench/tcp.ts and bench/connect.ts:
// an upstream that sinks uploads (answering the byte count on the client's FIN)
// and sources downloads ("down <bytes>\n"), and the two rate measurements over
// any way of opening a socket (direct, through a TCP listener, through a
// CONNECT tunnel), each bounded by a byte count and a time limit.

import net from 'node:net'
import { performance } from 'node:perf_hooks'

export const CHUNK = Buffer.alloc(256 * 1024, 0x5a)

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)] as number
}

export function listen(server: net.Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port)))
}

/** Upload sink: counts, answers the byte count on FIN. Download source: on "down <bytes>\n", sends that many, then ends. */
export function upstream(): net.Server {
  return net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {})
    let mode: 'unknown' | 'up' | 'down' = 'unknown'
    let count = 0
    s.on('data', (c: Buffer) => {
      if (mode === 'unknown') {
        const text = c.subarray(0, 32).toString('latin1')
        if (text.startsWith('down ')) {
          mode = 'down'
          void send(s, Number(text.slice(5, text.indexOf('\n'))))
          return
        }
        mode = 'up'
      }
      count += c.length
    })
    s.on('end', () => { if (mode !== 'down') s.end(String(count)) })
  })
}

async function send(s: net.Socket, bytes: number): Promise<void> {
  let left = bytes
  while (left > 0 && !s.destroyed) {
    const n = Math.min(left, CHUNK.length)
    left -= n
    if (!s.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) await new Promise((r) => s.once('drain', r))
  }
  s.end()
}

/** MiB/s of one upload of `sizeMiB` (bytes confirmed by the upstream), cut off after `limitMs`. */
export async function uploadRate(open: () => Promise<net.Socket>, sizeMiB: number, limitMs: number): Promise<number> {
  const s = await open()
  const total = sizeMiB * 1024 * 1024
  const start = performance.now()
  let answer = ''
  const done = new Promise<void>((resolve) => {
    s.on('data', (c: Buffer) => { answer += c.toString() })
    s.on('end', () => resolve())
    s.on('close', () => resolve())
  })
  let sent = 0
  const deadline = start + limitMs
  while (sent < total && performance.now() < deadline) {
    sent += CHUNK.length
    if (!s.write(CHUNK)) await new Promise((r) => s.once('drain', r))
  }
  s.end()
  await done
  s.destroy()
  const confirmed = Number(answer)
  if (!(confirmed > 0)) throw new Error(`upload: upstream confirmed ${answer}`)
  return confirmed / 1024 / 1024 / ((performance.now() - start) / 1000)
}

/** MiB/s of one download of `sizeMiB`, cut off after `limitMs` (the rate then counts what arrived). */
export async function downloadRate(open: () => Promise<net.Socket>, sizeMiB: number, limitMs: number): Promise<number> {
  const s = await open()
  const total = sizeMiB * 1024 * 1024
  const start = performance.now()
  let got = 0
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => { s.destroy(); resolve() }, limitMs)
    s.on('data', (c: Buffer) => { got += c.length })
    s.on('end', () => { clearTimeout(timer); resolve() })
    s.on('close', () => { clearTimeout(timer); resolve() })
    s.write(`down ${total}\n`)
  })
  s.destroy()
  if (got === 0) throw new Error('download: nothing received')
  return got / 1024 / 1024 / ((performance.now() - start) / 1000)
}
