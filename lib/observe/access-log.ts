// Access log: one pino JSON line per request on the `access` logger. The
// request path builds the record only when the log is on (zero cost when off).
//
// An access record holds no secret by construction: no header values, the path
// without its query string, the authority without userinfo, error reasons from
// a fixed list. That is why its lines skip pino's redaction (log.ts,
// accessSink); a field added here must keep it so. Numbers are finite
// by construction (durations, byte counts), so they are written as they are.

import { latin1 } from '../bytes.ts'
import { accessSink, isoUpToSecond, type LineSink } from './log.ts'

export interface AccessRecord {
  readonly method: string
  readonly authority: string
  readonly path: string
  readonly status: number
  readonly durationMs: number
  /** Until upstream response headers; null when no upstream was asked. */
  readonly upstreamMs: number | null
  readonly bytesIn: number
  readonly bytesOut: number
  /** Rule id, '' when no route matched. */
  readonly route: string
  /** Cluster id, '' when none. */
  readonly backend: string
  /** Endpoint `host:port` that answered, '' when none. */
  readonly upstream: string
  /** Retries the request took (issue 6: the attempt loop's, connect failures it retried included); 0 when none. */
  readonly retries: number
  /** Downstream protocol 'h1' | 'h2'. */
  readonly protocol: string
  readonly client: string
  readonly clientNamespace: string | null
  readonly clientServiceAccount: string | null
  /** SP_ERR_* when the request ended in an error. */
  readonly code: string | null
  readonly reason: string | null
  /** A gRPC call's grpc-status (the upstream's trailers or trailers-only head, or the gateway's own answer); null otherwise. */
  readonly grpcStatus: number | null
}

export interface AccessLog {
  write(record: AccessRecord): void
}

/**
 * Writes the line pino would write for `log.info(record, 'request')` on a child
 * with `component: 'access'` — same fields, same order — but builds it directly
 * in bytes, in a buffer it keeps: pino's generic serializer allocated ~3 KiB of
 * intermediate strings per line, the line built as one string about 1.5 KiB
 * (a cons string per `+`, a copy per JSON.stringify).
 */
class JsonAccessLog implements AccessLog {
  readonly #sink: LineSink
  readonly #head: string
  #buf = Buffer.allocUnsafeSlow(4096)

  constructor(sink: LineSink) {
    this.#sink = sink
    this.#head = ',"pid":' + process.pid + ',"component":"access","method":'
  }

  // hot path
  write(r: AccessRecord): void {
    // `user:pass@host` (absolute-form targets) never reaches the log.
    const cut = r.authority.lastIndexOf('@')
    const authority = cut === -1 ? r.authority : r.authority.slice(cut + 1)
    const now = Date.now()
    const second = isoUpToSecond(now)
    // Room for the longest this line can be: an escaped character takes at most
    // 6 bytes (\uXXXX), an unescaped one at most 3 (UTF-8); numbers at most 24.
    const strings = r.method.length + authority.length + r.path.length + r.route.length + r.backend.length + r.upstream.length +
      r.protocol.length + r.client.length + (r.clientNamespace?.length ?? 4) + (r.clientServiceAccount?.length ?? 4) +
      (r.code?.length ?? 4) + (r.reason?.length ?? 4)
    const bound = FIXED + this.#head.length + second.length + strings * 6 + 12 * 2 + 6 * 24
    if (bound > this.#buf.length) this.#buf = Buffer.allocUnsafeSlow(Math.max(bound, this.#buf.length * 2))
    const buf = this.#buf
    let at = latin1(buf, '{"level":30,"time":"', 0)
    at = latin1(buf, second, at)
    at = milliseconds(buf, now % 1000, at)
    at = latin1(buf, this.#head, at)
    at = jsonString(buf, r.method, at)
    at = latin1(buf, ',"authority":', at)
    at = jsonString(buf, authority, at)
    at = latin1(buf, ',"path":', at)
    at = jsonString(buf, r.path, at)
    at = latin1(buf, ',"status":', at)
    at = jsonNumber(buf, r.status, at)
    at = latin1(buf, ',"durationMs":', at)
    at = jsonNumber(buf, r.durationMs, at)
    at = latin1(buf, ',"upstreamMs":', at)
    at = r.upstreamMs === null ? latin1(buf, 'null', at) : jsonNumber(buf, r.upstreamMs, at)
    at = latin1(buf, ',"bytesIn":', at)
    at = jsonNumber(buf, r.bytesIn, at)
    at = latin1(buf, ',"bytesOut":', at)
    at = jsonNumber(buf, r.bytesOut, at)
    at = latin1(buf, ',"route":', at)
    at = jsonString(buf, r.route, at)
    at = latin1(buf, ',"backend":', at)
    at = jsonString(buf, r.backend, at)
    at = latin1(buf, ',"upstream":', at)
    at = jsonString(buf, r.upstream, at)
    at = latin1(buf, ',"retries":', at)
    at = jsonNumber(buf, r.retries, at)
    at = latin1(buf, ',"protocol":', at)
    at = jsonString(buf, r.protocol, at)
    at = latin1(buf, ',"client":', at)
    at = jsonString(buf, r.client, at)
    at = latin1(buf, ',"clientNamespace":', at)
    at = jsonNullable(buf, r.clientNamespace, at)
    at = latin1(buf, ',"clientServiceAccount":', at)
    at = jsonNullable(buf, r.clientServiceAccount, at)
    at = latin1(buf, ',"code":', at)
    at = jsonNullable(buf, r.code, at)
    at = latin1(buf, ',"reason":', at)
    at = jsonNullable(buf, r.reason, at)
    at = latin1(buf, ',"grpcStatus":', at)
    at = r.grpcStatus === null ? latin1(buf, 'null', at) : jsonNumber(buf, r.grpcStatus, at)
    at = latin1(buf, ',"msg":"request"}\n', at)
    const sink = this.#sink
    if (sink.writeBytes !== undefined) sink.writeBytes(buf, at)
    else sink.write(buf.toString('utf8', 0, at))
  }
}

/** The line's fixed text (field names and punctuation), in bytes: an upper bound is enough. */
const FIXED = 400

/** Three digits and the time's end: `mmmZ"`. */
function milliseconds(buf: Buffer, ms: number, at: number): number {
  buf[at] = 0x30 + Math.floor(ms / 100)
  buf[at + 1] = 0x30 + Math.floor(ms / 10) % 10
  buf[at + 2] = 0x30 + ms % 10
  buf[at + 3] = 0x5a
  buf[at + 4] = 0x22
  return at + 5
}

/**
 * A JSON string: byte by byte while nothing needs escaping (printable ASCII
 * without `"` and `\`), else JSON.stringify's escaping written as UTF-8.
 */
// hot path
function jsonString(buf: Buffer, s: string, at: number): number {
  buf[at] = 0x22
  const n = s.length
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i)
    if (c < 0x20 || c === 0x22 || c === 0x5c || c > 0x7e) return at + buf.write(JSON.stringify(s), at, 'utf8')
    buf[at + 1 + i] = c
  }
  buf[at + 1 + n] = 0x22
  return at + n + 2
}

/**
 * A number as JSON, the text `String(x)` gives, written without making that
 * string: whole numbers, and the durations the request path rounds to three
 * decimals, digit by digit; anything else through `String`. A fractional
 * duration's string outlived every minor GC in V8's number-to-string cache and
 * was promoted (`bench/alloc-profile.ts --survivors`: 70 % of what survived
 * them), filling the old generation towards the next full collection.
 * Exact: below 1e9 the doubles are far closer together than 0.001, so the
 * decimal of at most three places that equals x is the shortest that reads
 * back as x, which is what `String` writes.
 */
// hot path
function jsonNumber(buf: Buffer, x: number, at: number): number {
  if (Number.isSafeInteger(x) && x >= 0) return digits(buf, x, at)
  if (x > 0 && x < 1e9) {
    const k = Math.round(x * 1000)
    if (k / 1000 === x) {
      const whole = Math.floor(k / 1000)
      at = digits(buf, whole, at)
      const frac = k - whole * 1000
      if (frac === 0) return at
      const d1 = Math.floor(frac / 100)
      const d2 = Math.floor(frac / 10) % 10
      const d3 = frac % 10
      buf[at++] = 0x2e
      buf[at++] = 0x30 + d1
      if (d2 === 0 && d3 === 0) return at
      buf[at++] = 0x30 + d2
      if (d3 !== 0) buf[at++] = 0x30 + d3
      return at
    }
  }
  return latin1(buf, String(x), at)
}

/** A non-negative safe integer's decimal digits. */
function digits(buf: Buffer, n: number, at: number): number {
  let len = 1
  for (let m = n; m >= 10; m = Math.floor(m / 10)) len++
  for (let i = at + len - 1; i >= at; i--) {
    buf[i] = 0x30 + n % 10
    n = Math.floor(n / 10)
  }
  return at + len
}

function jsonNullable(buf: Buffer, s: string | null, at: number): number {
  return s === null ? latin1(buf, 'null', at) : jsonString(buf, s, at)
}

/**
 * The access log, or null when it is off or the log level hides info lines
 * (callers test `!== null` and skip building records). `sink` defaults to the
 * process's log destination (log.ts).
 */
export function createAccessLog(enabled: boolean, sink: LineSink | null = accessSink()): AccessLog | null {
  return enabled && sink !== null ? new JsonAccessLog(sink) : null
}
