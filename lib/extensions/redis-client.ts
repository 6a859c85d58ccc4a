// A small Redis client for the global rate limit: RESP2 over node:net, or
// node:tls for rediss:// (the system trust store, NODE_EXTRA_CA_CERTS adding
// CAs as for any node process, or only the CAs of global.tls; the server's
// name verified; TLS 1.2 at least; a client certificate when global.tls names
// one), one connection per address, credentials and TLS identity, commands
// pipelined in order,
// EVALSHA with a fallback to EVAL on NOSCRIPT. With a password, AUTH (or
// `AUTH username password`, a Redis 6 ACL user) goes first on each
// connection; a refused AUTH fails the connection and every command queued
// behind it with an error that says so. No dependency: the few commands we
// need do not justify one. Bounded: each command has a timeout, the queue a
// length, and a failed connection is retried at most once per second —
// meanwhile commands fail at once, with the error that failed it, so the
// caller's failure mode (open/closed) applies without waiting. The password
// is never part of an error message.

import net from 'node:net'
import tls from 'node:tls'
import { createHash, createHmac, randomBytes } from 'node:crypto'
import { formatRedisAddress, type RedisAddress } from '../redis-address.ts'

type Reply = string | number | null | Reply[] | Error

/** What went wrong with a command, stable for callers and logs. */
export const RedisErrorCode = {
  /** Redis answered AUTH with an error (WRONGPASS, or ERR when it has no password set). */
  AUTH_REFUSED: 'auth_refused',
  /** Redis wants AUTH and none was sent (no global.secretRef). */
  NOAUTH: 'noauth',
  /** No connection (refused, reset, closed), or retried too recently after one failed. */
  UNAVAILABLE: 'unavailable',
  /** The TLS handshake failed: a certificate not trusted or not for the name, or Redis refused ours (an alert). */
  TLS: 'tls',
  TIMEOUT: 'timeout',
  QUEUE_FULL: 'queue_full',
  CLOSED: 'closed',
  /** Any other error reply (NOSCRIPT, a script error...): the message is Redis's. */
  REPLY: 'reply',
} as const
export type RedisErrorCode = typeof RedisErrorCode[keyof typeof RedisErrorCode]

export class RedisError extends Error {
  readonly code: RedisErrorCode
  constructor(code: RedisErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'RedisError'
    this.code = code
  }
}

export interface RedisClientOptions {
  /** With a password: AUTH first, `AUTH username password` when a username is given too. */
  readonly username?: string | null
  readonly password?: string | null
  readonly timeoutMs?: number
  /** rediss:// only: trust these CAs (PEM) instead of the system's. */
  readonly ca?: string
  /** rediss:// only: the client certificate (PEM, leaf first) and its key, for a Redis with `tls-auth-clients yes`. */
  readonly cert?: string
  readonly key?: string
  /** rediss:// only: the SNI and the name the certificate must carry; default the host (no SNI for an address). */
  readonly servername?: string
}

interface Pending {
  resolve(v: Reply): void
  reject(err: Error): void
  timer: NodeJS.Timeout
  /** The AUTH sent on connecting: an error reply fails the connection. */
  readonly auth: boolean
}

const MAX_PENDING = 10_000
const RECONNECT_MS = 1000
const NOOP = (): void => {}

export class RedisClient {
  /** `host:port`, `rediss://host:port` for TLS: how messages name it (never with credentials). */
  readonly address: string
  readonly #target: RedisAddress
  readonly #username: string | null
  readonly #password: string | null
  readonly #timeoutMs: number
  /** rediss://: ca, cert, key, servername, as tls.connect takes them (built once). */
  readonly #tls: tls.ConnectionOptions
  #socket: net.Socket | null = null
  #connected = false
  #lastFailure = 0
  /** The error that failed the last connection: commands refused during the backoff carry it. */
  #lastError: RedisError | null = null
  #buf: Buffer = Buffer.alloc(0)
  readonly #queue: Pending[] = []
  #closed = false

  constructor(target: RedisAddress, options: RedisClientOptions = {}) {
    this.#target = target
    this.address = formatRedisAddress(target)
    this.#password = options.password ?? null
    this.#username = this.#password === null ? null : options.username ?? null
    this.#timeoutMs = options.timeoutMs ?? 250
    const { host } = target
    const servername = options.servername ?? (net.isIP(host) === 0 ? host : null)
    this.#tls = {
      minVersion: 'TLSv1.2',
      // SNI names a host, never an address (RFC 6066 §3); the certificate is
      // checked against the servername if there is one, else the address.
      ...(servername === null ? {} : { servername }),
      ...(options.ca === undefined ? {} : { ca: options.ca }),
      ...(options.cert === undefined || options.key === undefined ? {} : { cert: options.cert, key: options.key }),
    }
  }

  /** Sends one command; rejects (RedisError) on error reply, timeout, or a connection that is down. */
  command(args: readonly (string | number)[]): Promise<Reply> {
    if (this.#closed) return Promise.reject(new RedisError(RedisErrorCode.CLOSED, 'redis client closed'))
    if (this.#socket === null) {
      if (Date.now() - this.#lastFailure < RECONNECT_MS) {
        const last = this.#lastError
        return Promise.reject(last === null
          ? new RedisError(RedisErrorCode.UNAVAILABLE, `redis ${this.address} unavailable`)
          : new RedisError(last.code, last.message))
      }
      this.#connect()
    }
    if (this.#queue.length >= MAX_PENDING) return Promise.reject(new RedisError(RedisErrorCode.QUEUE_FULL, `redis ${this.address} queue full`))
    return new Promise<Reply>((resolve, reject) => {
      const p: Pending = {
        resolve, reject, auth: false,
        timer: setTimeout(() => {
          // A reply that never comes desynchronizes the pipeline: drop the connection.
          this.#fail(new RedisError(RedisErrorCode.TIMEOUT, `redis ${this.address} timed out`))
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
      if (!(err instanceof RedisError) || err.code !== RedisErrorCode.REPLY || !err.message.startsWith('NOSCRIPT')) throw err
      return this.command(['EVAL', script.source, ...tail])
    }
  }

  close(): void {
    this.#closed = true
    this.#fail(new RedisError(RedisErrorCode.CLOSED, 'redis client closed'))
  }

  #connect(): void {
    const { host, port } = this.#target
    const socket = this.#target.tls ? tls.connect({ host, port, ...this.#tls }) : net.connect({ host, port })
    socket.setNoDelay(true)
    this.#socket = socket
    this.#buf = Buffer.alloc(0)
    socket.on(this.#target.tls ? 'secureConnect' : 'connect', () => { this.#connected = true })
    socket.on('data', (d: Buffer) => this.#onData(socket, d))
    socket.on('error', (err: NodeJS.ErrnoException) => {
      // TLS 1.3: the client's handshake is done before the server has checked
      // the client certificate, so a Redis with tls-auth-clients refusing ours
      // (or none) answers with an alert after secureConnect. That connection
      // failed as one refused does: tried again at most once a second, not a
      // handshake per command.
      const alert = err.code?.startsWith('ERR_SSL_') === true
      if (alert) this.#connected = false
      // A TLS failure, not a network one: an alert either way, or, before the
      // handshake is done, an error no system call raised (certificate
      // verification: UNABLE_TO_VERIFY_LEAF_SIGNATURE, ERR_TLS_CERT_ALTNAME_INVALID...).
      const tlsFailed = this.#target.tls && (alert || (!this.#connected && err.syscall === undefined))
      this.#fail(new RedisError(tlsFailed ? RedisErrorCode.TLS : RedisErrorCode.UNAVAILABLE, `redis ${this.address}: ${err.message}`, { cause: err }))
    })
    socket.on('close', () => this.#fail(new RedisError(RedisErrorCode.UNAVAILABLE, `redis ${this.address} connection closed`)))
    if (this.#password !== null) {
      // AUTH goes first in the pipeline; an error reply fails the connection (#onData).
      const p: Pending = {
        resolve: NOOP, reject: NOOP, auth: true,
        timer: setTimeout(() => this.#fail(new RedisError(RedisErrorCode.TIMEOUT, `redis ${this.address} AUTH timed out`)), this.#timeoutMs),
      }
      this.#queue.push(p)
      socket.write(encode(this.#username === null ? ['AUTH', this.#password] : ['AUTH', this.#username, this.#password]))
    }
  }

  #fail(err: RedisError): void {
    const socket = this.#socket
    if (socket !== null) {
      this.#socket = null
      // Not connected, timed out or refused: wait before the next attempt (a refused AUTH is not retried per request).
      if (!this.#connected || err.code === RedisErrorCode.TIMEOUT || err.code === RedisErrorCode.AUTH_REFUSED) {
        this.#lastFailure = Date.now()
        this.#lastError = err
      }
      this.#connected = false
      socket.removeAllListeners('close')
      socket.destroy()
    }
    const pending = this.#queue.splice(0)
    for (const p of pending) { clearTimeout(p.timer); p.reject(err) }
  }

  /** A reply that is an error, as callers see it; the password is never in it. */
  #replyError(reply: Error, auth: boolean): RedisError {
    let text = reply.message
    if (this.#password !== null && this.#password !== '') text = text.split(this.#password).join('[redacted]')
    if (auth) return new RedisError(RedisErrorCode.AUTH_REFUSED, `redis ${this.address} refused AUTH${this.#username === null ? '' : ` as user ${this.#username}`}: ${text}`)
    if (text.startsWith('NOAUTH')) return new RedisError(RedisErrorCode.NOAUTH, `redis ${this.address} requires AUTH and no password is configured: ${text}`)
    return new RedisError(RedisErrorCode.REPLY, text)
  }

  #onData(socket: net.Socket, d: Buffer): void {
    if (socket !== this.#socket) return
    this.#buf = this.#buf.length === 0 ? d : Buffer.concat([this.#buf, d])
    for (;;) {
      const r = parse(this.#buf, 0)
      if (r === null) return
      this.#buf = this.#buf.subarray(r.end)
      const p = this.#queue.shift()
      if (p === undefined) continue
      clearTimeout(p.timer)
      if (r.value instanceof Error) {
        const err = this.#replyError(r.value, p.auth)
        // Refused: the commands behind it would each get NOAUTH; they fail with the reason instead.
        if (p.auth) return this.#fail(err)
        p.reject(err)
      } else {
        p.resolve(r.value)
      }
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

/**
 * One client per address, TLS identity (CAs, client certificate and key, server
 * name), credentials and timeout, shared by every extension that names the
 * same, and closed when the last of them releases it: a rotated password, CA
 * or client certificate, or a changed address, leaves no connection behind
 * (one that stayed would keep the old credentials' session open). The map key
 * holds no password and no key material: the credentials and the TLS identity
 * count by an HMAC under a key random per pool.
 */
export class RedisPool {
  readonly #clients = new Map<string, { readonly client: RedisClient; users: number }>()
  readonly #keys = new Map<RedisClient, string>()
  readonly #salt = randomBytes(32)

  /** The client for these, shared; each get() is paired with a release() when its user is done. */
  get(target: RedisAddress, options: RedisClientOptions = {}): RedisClient {
    const credentials = options.password === undefined || options.password === null
      ? '-'
      : createHmac('sha256', this.#salt).update(JSON.stringify([options.username ?? null, options.password])).digest('base64url')
    const identity = options.ca === undefined && options.cert === undefined && options.key === undefined && options.servername === undefined
      ? '-'
      : createHmac('sha256', this.#salt).update(JSON.stringify([options.ca ?? null, options.cert ?? null, options.key ?? null, options.servername ?? null])).digest('base64url')
    const key = `${formatRedisAddress(target)}|${credentials}|${options.timeoutMs ?? ''}|${identity}`
    let entry = this.#clients.get(key)
    if (entry === undefined) {
      entry = { client: new RedisClient(target, options), users: 0 }
      this.#clients.set(key, entry)
      this.#keys.set(entry.client, key)
    }
    entry.users++
    return entry.client
  }

  /** One user less; the last one closes the client. */
  release(client: RedisClient): void {
    const key = this.#keys.get(client)
    const entry = key === undefined ? undefined : this.#clients.get(key)
    if (key === undefined || entry === undefined || --entry.users > 0) return
    this.#clients.delete(key)
    this.#keys.delete(client)
    client.close()
  }

  /** Clients open now (tests). */
  get size(): number { return this.#clients.size }

  async close(): Promise<void> {
    for (const { client } of this.#clients.values()) client.close()
    this.#clients.clear()
    this.#keys.clear()
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
