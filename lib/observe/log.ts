// Structured logging (pino). One root logger; modules take a child with a
// `component` field. Short static messages, facts in fields, secrets never.
//
// Everything goes to stdout through one batching destination: lines collect
// for up to FLUSH_MS (or BATCH_BYTES) and leave in one write(2). A line per
// request written at once cost a system call per request (and a wake-up of the
// reader, the container runtime's log pipe) whenever requests came one per
// event-loop turn, which is every moderate load; a line now waits at most
// FLUSH_MS (Envoy's access logs flush once a second). What is pending is written
// at process exit (SIGTERM drain, process.exit, an uncaught exception); a
// SIGKILL loses at most FLUSH_MS of lines. (pino's async sonic-boom costs more:
// one thread-pool write per line when the disk keeps up.) Access lines are
// written to the same destination without pino's redaction (see accessSink).

import fs from 'node:fs'
import { pino, type Logger, type LevelWithSilent } from 'pino'

export type { Logger }

/** Belt and braces: these paths never leave the process, whatever a caller passes. */
const REDACT = { paths: ['*.authorization', '*.Authorization', '*.keyPem', '*.password', '*.token', '*.secret'], censor: '[redacted]' }

const BATCH_BYTES = 16 * 1024
/** The batch buffer: a batch is flushed once it holds BATCH_BYTES; room for one more line past that. */
const BATCH_ROOM = 2 * BATCH_BYTES
/** The longest a line waits for its batch. */
export const FLUSH_MS = 100
/** How long a stalled reader (full pipe) may block a write before lines are dropped. */
const STALL_LIMIT_MS = 2000
const waitCell = new Int32Array(new SharedArrayBuffer(4))

/** Where access lines go: lines as strings, or as bytes (the access log builds its lines in bytes). */
export interface LineSink {
  write(line: string): void
  /** The first `length` bytes of `bytes` (UTF-8, ending in a newline), copied before it returns. */
  writeBytes?(bytes: Buffer, length: number): void
}

/**
 * A file descriptor written in batches: one write(2) per FLUSH_MS or BATCH_BYTES.
 * Lines are copied into one buffer as they come (a string per line appended to
 * a pending string cost a cons string per line and a flattening copy per batch).
 */
class BatchedFd implements pino.DestinationStream, LineSink {
  readonly #fd: number
  readonly #batch = Buffer.allocUnsafeSlow(BATCH_ROOM)
  #used = 0
  #scheduled = false
  #broken = false

  constructor(fd: number) {
    this.#fd = fd
    process.on('exit', () => this.flush())
  }

  write(line: string): void {
    if (this.#broken) return
    // At most 3 bytes per UTF-16 unit: a line that may not fit goes after the batch.
    if (this.#used + line.length * 3 > BATCH_ROOM) {
      this.flush()
      if (line.length * 3 > BATCH_ROOM) { this.#writeAll(Buffer.from(line, 'utf8')); return }
    }
    this.#used += this.#batch.write(line, this.#used, 'utf8')
    this.#added()
  }

  writeBytes(bytes: Buffer, length: number): void {
    if (this.#broken) return
    if (this.#used + length > BATCH_ROOM) {
      this.flush()
      if (length > BATCH_ROOM) { this.#writeAll(bytes.subarray(0, length)); return }
    }
    this.#used += bytes.copy(this.#batch, this.#used, 0, length)
    this.#added()
  }

  #added(): void {
    if (this.#used >= BATCH_BYTES) this.flush()
    else if (!this.#scheduled) {
      this.#scheduled = true
      // unref: a pending batch never keeps the process alive; exit flushes it.
      setTimeout(this.#onTimer, FLUSH_MS).unref()
    }
  }

  #onTimer = (): void => {
    this.#scheduled = false
    this.flush()
  }

  flush(): void {
    if (this.#used === 0 || this.#broken) return
    const used = this.#used
    this.#used = 0
    this.#writeAll(this.#batch.subarray(0, used))
  }

  /** Synchronously: the batch buffer is written to again as soon as this returns. */
  #writeAll(data: Buffer): void {
    let offset = 0
    let stalledMs = 0
    while (offset < data.length) {
      try {
        offset += fs.writeSync(this.#fd, data, offset)
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code
        // A non-blocking pipe whose reader is behind: wait a little, as sonic-boom does.
        if ((code === 'EAGAIN' || code === 'EBUSY') && stalledMs < STALL_LIMIT_MS) {
          Atomics.wait(waitCell, 0, 0, 10)
          stalledMs += 10
          continue
        }
        if (code === 'EPIPE') this.#broken = true // nobody reads stdout any more
        return
      }
    }
  }
}

let stdout: BatchedFd | null = null
let destination: pino.DestinationStream | null = null

function defaultDestination(): pino.DestinationStream {
  stdout ??= new BatchedFd(1)
  return stdout
}

let isoSecond = -1
let isoPrefix = ''
/**
 * `YYYY-MM-DDTHH:MM:SS.` of the second `now` falls in: the ISO time's text up
 * to its milliseconds, rebuilt once a second instead of a Date and toISOString
 * per line.
 */
export function isoUpToSecond(now: number): string {
  const second = Math.floor(now / 1000)
  if (second !== isoSecond) {
    isoSecond = second
    isoPrefix = new Date(second * 1000).toISOString().slice(0, 20)
  }
  return isoPrefix
}

/** pino's isoTime (`,"time":"…Z"`), through isoUpToSecond. */
export function fastIsoTime(): string {
  const now = Date.now()
  const ms = now % 1000
  return ',"time":"' + isoUpToSecond(now) + (ms < 10 ? '00' : ms < 100 ? '0' : '') + ms + 'Z"'
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
 * Where access lines go: the root's destination, or null when the root level
 * hides info lines. Access lines bypass pino (observe/access-log.ts writes the
 * same JSON directly) and so its redaction, which walked every line (~10% of a
 * small request's CPU). That is safe because an access record holds no secret
 * by construction (no headers, no query string, no userinfo); keep it that way.
 */
export function accessSink(): LineSink | null {
  if (!root.isLevelEnabled('info')) return null
  return destination ?? defaultDestination()
}

/** Write out the lines still batched (done at process exit anyway). */
export function flushLogs(): void {
  stdout?.flush()
}
