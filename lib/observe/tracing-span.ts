// One recorded span, as plain data the OTLP encoders read (issue 10). One
// class, every field set in the constructor (one object shape); attributes are
// a flat [key, value, key, value, …] array so adding one is a push, not a Map
// insert. Times are epoch milliseconds with sub-millisecond precision
// (performance.timeOrigin + performance.now()), turned into nanoseconds only
// when encoded, off the request path.

import { performance } from 'node:perf_hooks'

/** OTLP Span.SpanKind. */
export const SpanKind = { INTERNAL: 1, SERVER: 2, CLIENT: 3 } as const
export type SpanKind = typeof SpanKind[keyof typeof SpanKind]

/** OTLP Status.StatusCode. */
export const SpanStatus = { UNSET: 0, OK: 1, ERROR: 2 } as const
export type SpanStatus = typeof SpanStatus[keyof typeof SpanStatus]

export type AttributeValue = string | number | boolean

const ORIGIN = performance.timeOrigin

/** Now, in epoch milliseconds (fractional). */
export function nowMs(): number {
  return ORIGIN + performance.now()
}

/** A performance.now() reading as epoch milliseconds. */
export function epochMs(perfNow: number): number {
  return ORIGIN + perfNow
}

export class SpanRecord {
  readonly traceId: string
  readonly spanId: string
  /** '' for a root span. */
  readonly parentSpanId: string
  /** The parent came from another process (OTLP Span.flags bit 9). */
  readonly parentRemote: boolean
  readonly traceState: string
  readonly kind: SpanKind
  name: string
  readonly startMs: number
  endMs = 0
  /** Flat key/value pairs: [k0, v0, k1, v1, …]; integers are encoded as intValue. */
  readonly attributes: AttributeValue[] = []
  status: SpanStatus = SpanStatus.UNSET
  statusMessage = ''

  constructor(traceId: string, spanId: string, parentSpanId: string, parentRemote: boolean, traceState: string, kind: SpanKind, name: string, startMs: number) {
    this.traceId = traceId
    this.spanId = spanId
    this.parentSpanId = parentSpanId
    this.parentRemote = parentRemote
    this.traceState = traceState
    this.kind = kind
    this.name = name
    this.startMs = startMs
  }

  set(key: string, value: AttributeValue): void {
    this.attributes.push(key, value)
  }

  error(type: string, message = ''): void {
    this.status = SpanStatus.ERROR
    this.statusMessage = message
    this.attributes.push('error.type', type)
  }
}
