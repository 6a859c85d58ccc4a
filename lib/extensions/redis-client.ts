// A small Redis client for the global rate limit: RESP2 over node:net, one
// connection per address, commands pipelined in order, EVALSHA with a
// fallback to EVAL on NOSCRIPT. No dependency: the two commands we need do
// not justify one. Bounded: each command has a timeout, the queue a length,
// and a failed connection is retried at most once per second — meanwhile
// commands fail at once so the caller's failure mode (open/closed) applies
// without waiting.

import net from 'node:net'
import { createHash } from 'node:crypto'

type Reply = string | number | null | Reply[] | Error

interface Pending {
  resolve(v: Reply): void
  reject(err: Error): void
  timer: NodeJS.Timeout
}

const MAX_PENDING = 10_000
const RECONNECT_MS = 1000

export class RedisClient {
  readonly address: string
  readonly #host: string
  readonly #port: number
  readonly #password: string | null
  readonly #timeoutMs: number
  #socket: net.Socket | null = null
  #connected = false
  #lastFailure = 0
  #buf: Buffer = Buffer.alloc(0)
  readonly #queue: Pending[] = []
  #closed = false

  constructor(address: string, options: { password?: string | null; timeoutMs?: number } = {}) {
    this.address = address
    const i = address.lastIndexOf(':')
    this.#host = i === -1 ? address : address.slice(0, i)
    this.#port = i === -1 ? 6379 : Number(address.slice(i + 1))
    this.#password = options.password ?? null
    this.#timeoutMs = options.timeoutMs ?? 250
  }

  /** Sends one command; rejects on error reply, timeout, or a connection that is down. */
  command(args: readonly (string | number)[]): Promise<Reply> {
    if (this.#closed) return Promise.reject(new Error('redis client closed'))
    if (this.#socket === null) {
      if (Date.now() - this.#lastFailure < RECONNECT_MS) return Promise.reject(new Error(`redis ${this.address} unavailable`))
      this.#connect()
    }
    if (this.#queue.length >= MAX_PENDING) return Promise.reject(new Error('redis queue full'))
    return new Promise<Reply>((resolve, reject) => {
      const p: Pending = {
        resolve, reject,
        timer: setTimeout(() => {
          // A reply that never comes desynchronizes the pipeline: drop the connection.
          this.#fail(new Error(`redis ${this.address} timed out`))
        }, this.#timeoutMs),
      }
      this.#queue.push(p)
      ;(this.#socket as net.Socket).write(encode(args))
    })
  }

  /** EVALSHA, loading the script on NOSCRIPT. */
  async eval(script: Script, keys: readonly string[], args: readonly (string | number)[]): Promise<Reply> {
    const tail = [keys.length, ...keys, ...args]
    try {
      return await this.command(['EVALSHA', script.sha, ...tail])
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err
      return this.command(['EVAL', script.source, ...tail])
    }
  }

  close(): void {
    this.#closed = true
    this.#fail(new Error('redis client closed'))
  }

  #connect(): void {
    const socket = net.connect({ host: this.#host, port: this.#port })
    socket.setNoDelay(true)
    this.#socket = socket
    this.#buf = Buffer.alloc(0)
    socket.on('connect', () => { this.#connected = true })
    socket.on('data', (d: Buffer) => this.#onData(d))
    socket.on('error', (err) => this.#fail(err))
    socket.on('close', () => this.#fail(new Error(`redis ${this.address} connection closed`)))
    if (this.#password !== null) {
      // AUTH goes first in the pipeline; its reply is consumed like any other.
      const p: Pending = { resolve: () => {}, reject: () => {}, timer: setTimeout(() => this.#fail(new Error('redis auth timed out')), this.#timeoutMs) }
      this.#queue.push(p)
      socket.write(encode(['AUTH', this.#password]))
    }
  }

  #fail(err: Error): void {
    const socket = this.#socket
    if (socket !== null) {
      this.#socket = null
      if (!this.#connected || err.message.includes('timed out')) this.#lastFailure = Date.now()
      this.#connected = false
      socket.removeAllListeners('close')
      socket.destroy()
    }
    const pending = this.#queue.splice(0)
    for (const p of pending) { clearTimeout(p.timer); p.reject(err) }
  }

  #onData(d: Buffer): void {
    this.#buf = this.#buf.length === 0 ? d : Buffer.concat([this.#buf, d])
    for (;;) {
      const r = parse(this.#buf, 0)
      if (r === null) return
      this.#buf = this.#buf.subarray(r.end)
      const p = this.#queue.shift()
      if (p === undefined) continue
      clearTimeout(p.timer)
      if (r.value instanceof Error) p.reject(r.value)
      else p.resolve(r.value)
    }
  }
}

export class Script {
  readonly source: string
  readonly sha: string
  constructor(source: string) {
    this.source = source
    this.sha = createHash('sha1').update(source).digest('hex')
  }
}

/** One client per address, shared by every extension that names it. */
export class RedisPool {
  readonly #clients = new Map<string, RedisClient>()
  get(address: string, options: { password?: string | null; timeoutMs?: number } = {}): RedisClient {
    const key = `${address}|${options.password ?? ''}|${options.timeoutMs ?? ''}`
    let c = this.#clients.get(key)
    if (c === undefined) this.#clients.set(key, c = new RedisClient(address, options))
    return c
  }
  async close(): Promise<void> {
    for (const c of this.#clients.values()) c.close()
    this.#clients.clear()
  }
}

function encode(args: readonly (string | number)[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)]
  for (const a of args) {
    const b = Buffer.from(String(a), 'utf8')
    parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'))
  }
  return Buffer.concat(parts)
}

/** RESP2 reply at `at`, or null when incomplete. */
export function parse(buf: Buffer, at: number): { value: Reply; end: number } | null {
  if (at >= buf.length) return null
  const eol = buf.indexOf('\r\n', at)
  if (eol === -1) return null
  const type = buf[at]
  const line = buf.toString('utf8', at + 1, eol)
  const next = eol + 2
  switch (type) {
    case 43: return { value: line, end: next } // '+'
    case 45: return { value: new Error(line), end: next } // '-'
    case 58: return { value: Number(line), end: next } // ':'
    case 36: { // '$'
      const n = Number(line)
      if (n === -1) return { value: null, end: next }
      if (buf.length < next + n + 2) return null
      return { value: buf.toString('utf8', next, next + n), end: next + n + 2 }
    }
    case 42: { // '*'
      const n = Number(line)
      if (n === -1) return { value: null, end: next }
      const out: Reply[] = []
      let pos = next
      for (let i = 0; i < n; i++) {
        const r = parse(buf, pos)
        if (r === null) return null
        out.push(r.value)
        pos = r.end
      }
      return { value: out, end: pos }
    }
    default: return { value: new Error(`bad RESP type ${String(type)}`), end: next }
  }
}
