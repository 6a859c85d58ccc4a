// Structured logging (pino). One root logger; modules take a child with a
// `component` field. Short static messages, facts in fields, secrets never.

import { pino, type Logger, type LevelWithSilent } from 'pino'

export type { Logger }

let root: Logger = pino({
  level: process.env.SALLYPORT_LOG_LEVEL ?? 'info',
  base: { pid: process.pid },
  timestamp: pino.stdTimeFunctions.isoTime,
  // Belt and braces: these paths never leave the process, whatever a caller passes.
  redact: { paths: ['*.authorization', '*.Authorization', '*.keyPem', '*.password', '*.token', '*.secret'], censor: '[redacted]' },
})

/** Replace the root logger (CLI flags --log-level; tests pass a silent or captured logger). */
export function configureLogger(options: { level?: LevelWithSilent; destination?: NodeJS.WritableStream }): Logger {
  const dest = options.destination
  root = pino({
    level: options.level ?? root.level,
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: ['*.authorization', '*.Authorization', '*.keyPem', '*.password', '*.token', '*.secret'], censor: '[redacted]' },
  }, dest === undefined ? undefined : (dest as pino.DestinationStream))
  return root
}

export function logger(component: string): Logger {
  return root.child({ component })
}

export function rootLogger(): Logger {
  return root
}
