// Structured logging (pino). One root logger; modules take a child with a
// `component` field. Short static messages, facts in fields, secrets never.
//
// Everything goes to stdout through one asynchronous destination (sonic-boom,
// flushed synchronously at process exit by pino): a line costs a buffer append,
// not a write(2) per line. The access log is its own pino instance on the same
// destination, without redaction (see accessLogger).

import { pino, type Logger, type LevelWithSilent } from 'pino'

export type { Logger }

/** Belt and braces: these paths never leave the process, whatever a caller passes. */
const REDACT = { paths: ['*.authorization', '*.Authorization', '*.keyPem', '*.password', '*.token', '*.secret'], censor: '[redacted]' }

let stdout: pino.DestinationStream | null = null
let destination: pino.DestinationStream | null = null

function defaultDestination(): pino.DestinationStream {
  stdout ??= pino.destination({ dest: 1, sync: false })
  return stdout
}

let isoSecond = -1
let isoPrefix = ''
/**
 * pino's isoTime without a Date and toISOString per line: the `YYYY-MM-DDTHH:MM:SS.`
 * prefix is rebuilt once a second, milliseconds appended. Same text as isoTime.
 */
export function fastIsoTime(): string {
  const now = Date.now()
  const second = Math.floor(now / 1000)
  if (second !== isoSecond) {
    isoSecond = second
    isoPrefix = new Date(second * 1000).toISOString().slice(0, 20)
  }
  const ms = now - second * 1000
  return ',"time":"' + isoPrefix + (ms < 10 ? '00' : ms < 100 ? '0' : '') + ms + 'Z"'
}

function build(level: string, dest: pino.DestinationStream): Logger {
  return pino({ level, base: { pid: process.pid }, timestamp: fastIsoTime, redact: REDACT }, dest)
}

let root: Logger = build(process.env.SALLYPORT_LOG_LEVEL ?? 'info', defaultDestination())

/** Replace the root logger (CLI flags --log-level; tests pass a silent or captured logger). */
export function configureLogger(options: { level?: LevelWithSilent; destination?: NodeJS.WritableStream }): Logger {
  const dest = options.destination
  destination = dest === undefined ? null : (dest as pino.DestinationStream)
  root = build(options.level ?? root.level, destination ?? defaultDestination())
  return root
}

export function logger(component: string): Logger {
  return root.child({ component })
}

export function rootLogger(): Logger {
  return root
}

/**
 * The access log's logger: the root's level and destination, `component: access`,
 * and NO redaction — redaction walked every access line (~10% of a small
 * request's CPU). That is safe because an access record holds no secret by
 * construction (observe/access-log.ts: no headers, no query string, no userinfo);
 * keep it that way rather than adding redaction back.
 */
export function accessLogger(): Logger {
  return pino({ level: root.level, base: { pid: process.pid, component: 'access' }, timestamp: fastIsoTime }, destination ?? defaultDestination())
}

/** Write out what the asynchronous destination still holds (before an exit that skips pino's own hook). */
export function flushLogs(): void {
  const s = stdout as (pino.DestinationStream & { flushSync?: () => void }) | null
  try { s?.flushSync?.() } catch { /* nothing written yet, or stdout gone */ }
}
