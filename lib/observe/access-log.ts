// Access log: one pino JSON line per request on the `access` logger. The
// request path builds the record only when the log is on (zero cost when off).

import { logger, type Logger } from './log.ts'

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
    this.#log.info(record, 'request')
  }
}

/** The access log, or null when it is off (callers test `!== null` and skip building records). */
export function createAccessLog(enabled: boolean, log: Logger = logger('access')): AccessLog | null {
  return enabled ? new PinoAccessLog(log) : null
}
