// Import this first in a test file that reads log lines: every module takes a
// child of the root logger when it loads (`logger('status-writer')`), so the
// root must be replaced before any of them is evaluated. Static imports are
// evaluated in order, so `import '../helpers/capture-logs.ts'` above the
// others is enough.

import { Writable } from 'node:stream'
import { configureLogger } from '../../lib/observe/log.ts'

export interface LogLine extends Record<string, unknown> { readonly level: number; readonly msg: string; readonly component?: string }

/** Every line logged since the last `clearLogs()`, parsed. */
export const logLines: LogLine[] = []

configureLogger({
  level: 'debug',
  destination: new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') logLines.push(JSON.parse(line) as LogLine)
      cb()
    },
  }),
})

export const WARN = 40
export const ERROR = 50

export function clearLogs(): void {
  logLines.length = 0
}

/** Lines at `level` or above whose message matches. */
export function linesWith(msg: string | RegExp, level = WARN): LogLine[] {
  return logLines.filter((l) => l.level >= level && (typeof msg === 'string' ? l.msg === msg : msg.test(l.msg)))
}
