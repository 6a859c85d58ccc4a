// Access log: one pino JSON line per request on the `access` logger. The
// request path builds the record only when the log is on (zero cost when off).
//
// An access record holds no secret by construction: no header values, the path
// without its query string, the authority without userinfo, error reasons from
// a fixed list. That is why its lines skip pino's redaction (log.ts,
// accessSink); a field added here must keep it so. Numbers are finite
// by construction (durations, byte counts), so they are written as they are.

import { accessSink, fastIsoTime } from './log.ts'

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
  /** Downstream protocol 'h1' | 'h2'. */
  readonly protocol: string
  readonly client: string
  readonly clientNamespace: string | null
  readonly clientServiceAccount: string | null
  /** SP_ERR_* when the request ended in an error. */
  readonly code: string | null
  readonly reason: string | null
}

export interface AccessLog {
  write(record: AccessRecord): void
}

/**
 * Writes the line pino would write for `log.info(record, 'request')` on a child
 * with `component: 'access'` — same fields, same order — but builds it directly:
 * pino's generic serializer allocated ~3 KiB of intermediate strings per line.
 */
class JsonAccessLog implements AccessLog {
  readonly #sink: { write(line: string): void }
  readonly #head: string
  constructor(sink: { write(line: string): void }) {
    this.#sink = sink
    this.#head = ',"pid":' + process.pid + ',"component":"access","method":'
  }

  // hot path
  write(r: AccessRecord): void {
    // `user:pass@host` (absolute-form targets) never reaches the log.
    const at = r.authority.lastIndexOf('@')
    const authority = at === -1 ? r.authority : r.authority.slice(at + 1)
    this.#sink.write('{"level":30' + fastIsoTime() + this.#head + JSON.stringify(r.method) +
      ',"authority":' + JSON.stringify(authority) + ',"path":' + JSON.stringify(r.path) +
      ',"status":' + r.status + ',"durationMs":' + r.durationMs + ',"upstreamMs":' + r.upstreamMs +
      ',"bytesIn":' + r.bytesIn + ',"bytesOut":' + r.bytesOut +
      ',"route":' + JSON.stringify(r.route) + ',"backend":' + JSON.stringify(r.backend) + ',"upstream":' + JSON.stringify(r.upstream) +
      ',"protocol":' + JSON.stringify(r.protocol) + ',"client":' + JSON.stringify(r.client) +
      ',"clientNamespace":' + nullable(r.clientNamespace) + ',"clientServiceAccount":' + nullable(r.clientServiceAccount) +
      ',"code":' + nullable(r.code) + ',"reason":' + nullable(r.reason) + ',"msg":"request"}\n')
  }
}

function nullable(s: string | null): string {
  return s === null ? 'null' : JSON.stringify(s)
}

/**
 * The access log, or null when it is off or the log level hides info lines
 * (callers test `!== null` and skip building records). `sink` defaults to the
 * process's log destination (log.ts).
 */
export function createAccessLog(enabled: boolean, sink: { write(line: string): void } | null = accessSink()): AccessLog | null {
  return enabled && sink !== null ? new JsonAccessLog(sink) : null
}
