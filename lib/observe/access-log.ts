// Access log: one pino JSON line per request on the `access` logger. The
// request path builds the record only when the log is on (zero cost when off).
//
// An access record holds no secret by construction: no header values, the path
// without its query string, the authority without userinfo, error reasons from
// a fixed list. That is why its logger runs without redaction (log.ts,
// accessLogger); a field added here must keep it so.

import { accessLogger, type Logger } from './log.ts'

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

class PinoAccessLog implements AccessLog {
  readonly #log: Logger
  constructor(log: Logger) { this.#log = log }
  write(record: AccessRecord): void {
    // `user:pass@host` (absolute-form targets) never reaches the log.
    const at = record.authority.lastIndexOf('@')
    this.#log.info(at === -1 ? record : { ...record, authority: record.authority.slice(at + 1) }, 'request')
  }
}

/** The access log, or null when it is off (callers test `!== null` and skip building records). */
export function createAccessLog(enabled: boolean, log: Logger = accessLogger()): AccessLog | null {
  return enabled ? new PinoAccessLog(log) : null
}
