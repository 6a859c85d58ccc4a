// Trace context on the wire (issue 10): W3C Trace Context (`traceparent`,
// `tracestate`, https://www.w3.org/TR/trace-context/) and, on the way in only,
// Zipkin B3 (`b3` single header, `x-b3-*` multi headers,
// https://github.com/openzipkin/b3-propagation). Parsing is strict: a
// malformed traceparent is ignored as a whole (W3C §4.3: the receiver starts a
// new trace), a malformed tracestate is dropped (§3.3.1.1), while the
// traceparent beside it is kept.
//
// Ids come from a pooled random buffer refilled 4 KiB at a time: one
// randomFillSync per ~170 spans instead of one randomBytes call per id.

import { randomFillSync } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'

/** The context a request arrived with. */
export interface ParentContext {
  /** 32 lowercase hex characters, not all zeros. */
  readonly traceId: string
  /** 16 lowercase hex; '' when the header carried only a sampling decision (B3 `b3: 0`). */
  readonly spanId: string
  /** true / false: the caller decided; null: B3 deferred the decision (ours to take). */
  readonly sampled: boolean | null
  /** Validated tracestate to pass on ('' when none or invalid). */
  readonly traceState: string
  /** Where it came from: 'w3c' | 'b3' | 'b3multi'. */
  readonly format: 'w3c' | 'b3' | 'b3multi'
}

const POOL = Buffer.allocUnsafe(4096)
let poolAt = POOL.length

function take(bytes: number): string {
  if (poolAt + bytes > POOL.length) {
    randomFillSync(POOL)
    poolAt = 0
  }
  const id = POOL.toString('hex', poolAt, poolAt + bytes)
  poolAt += bytes
  return id
}

const ZERO_TRACE = '00000000000000000000000000000000'
const ZERO_SPAN = '0000000000000000'

/** A new random 16-byte trace id (hex). */
export function newTraceId(): string {
  const id = take(16)
  return id === ZERO_TRACE ? newTraceId() : id
}

/** A new random 8-byte span id (hex). */
export function newSpanId(): string {
  const id = take(8)
  return id === ZERO_SPAN ? newSpanId() : id
}

/** `00-{traceId}-{spanId}-{01|00}` (W3C version 00: the only one we emit). */
export function formatTraceparent(traceId: string, spanId: string, sampled: boolean): string {
  return '00-' + traceId + '-' + spanId + (sampled ? '-01' : '-00')
}

function isLowerHex(s: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const c = s.charCodeAt(i)
    if (!((c >= 48 && c <= 57) || (c >= 97 && c <= 102))) return false
  }
  return true
}

function isZero(s: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (s.charCodeAt(i) !== 48) return false
  return true
}

function single(v: string | string[] | undefined): string | undefined {
  // Several traceparent headers make the context ambiguous: W3C says treat it as invalid.
  return Array.isArray(v) ? (v.length === 1 ? v[0] : undefined) : v
}

/**
 * W3C traceparent `version-traceid-parentid-flags`. Version ff is invalid;
 * version 00 is exactly 55 characters; a later version may append fields
 * after a '-' (§4.3, "future versions"), which we ignore.
 */
export function parseTraceparent(value: string): { traceId: string; spanId: string; sampled: boolean } | null {
  if (value.length < 55) return null
  if (value.charCodeAt(2) !== 45 || value.charCodeAt(35) !== 45 || value.charCodeAt(52) !== 45) return null
  if (!isLowerHex(value, 0, 2) || value.startsWith('ff')) return null
  const v00 = value.charCodeAt(0) === 48 && value.charCodeAt(1) === 48
  if (v00 ? value.length !== 55 : value.length > 55 && value.charCodeAt(55) !== 45) return null
  if (!isLowerHex(value, 3, 35) || isZero(value, 3, 35)) return null
  if (!isLowerHex(value, 36, 52) || isZero(value, 36, 52)) return null
  if (!isLowerHex(value, 53, 55)) return null
  return { traceId: value.slice(3, 35), spanId: value.slice(36, 52), sampled: (parseInt(value.slice(53, 55), 16) & 1) === 1 }
}

// W3C tracestate list members: key = simple-key / tenant@system; value = 0-256 printable
// characters without ',' and '=', not ending in a space. At most 32 members.
const MEMBER = /^(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/

/** The tracestate to keep: the members joined by ',' — or '' when absent or invalid. */
export function validTraceState(value: string | string[] | undefined): string {
  if (value === undefined) return ''
  const text = Array.isArray(value) ? value.join(',') : value
  if (text.length === 0 || text.length > 8192) return ''
  const members: string[] = []
  const seen = new Set<string>()
  for (const raw of text.split(',')) {
    const m = raw.trim()
    if (m.length === 0) continue // empty members are allowed and dropped
    if (!MEMBER.test(m)) return ''
    const key = m.slice(0, m.indexOf('='))
    if (seen.has(key)) return '' // duplicate keys make the whole header invalid
    seen.add(key)
    members.push(m)
  }
  if (members.length > 32) return ''
  return members.join(',')
}

/** B3 trace ids are 64 or 128 bits: a 64-bit id is left-padded to W3C's 128. */
function b3TraceId(id: string): string | null {
  if ((id.length !== 16 && id.length !== 32) || !isLowerHex(id, 0, id.length) || isZero(id, 0, id.length)) return null
  return id.length === 16 ? ZERO_SPAN + id : id
}

function b3SpanId(id: string): string | null {
  return id.length === 16 && isLowerHex(id, 0, 16) && !isZero(id, 0, 16) ? id : null
}

/** B3 single: `{traceid}-{spanid}[-{1|0|d}[-{parentspanid}]]`, or a lone `1|0|d`. */
export function parseB3Single(value: string): ParentContext | null {
  if (value.length === 1) {
    // A decision without ids: only "do not sample" is useful (a root we must not record).
    return value === '0' ? { traceId: '', spanId: '', sampled: false, traceState: '', format: 'b3' } : null
  }
  const parts = value.split('-')
  if (parts.length < 2 || parts.length > 4) return null
  const traceId = b3TraceId(parts[0])
  const spanId = b3SpanId(parts[1])
  if (traceId === null || spanId === null) return null
  let sampled: boolean | null = null
  if (parts.length >= 3) {
    const s = parts[2]
    if (s === '1' || s === 'd') sampled = true
    else if (s === '0') sampled = false
    else return null
  }
  if (parts.length === 4 && b3SpanId(parts[3]) === null) return null
  return { traceId, spanId, sampled, traceState: '', format: 'b3' }
}

/** B3 multi: X-B3-TraceId + X-B3-SpanId, X-B3-Sampled (1/0/true/false), X-B3-Flags 1 (debug = sampled). */
export function parseB3Multi(headers: IncomingHttpHeaders): ParentContext | null {
  const t = single(headers['x-b3-traceid'])
  const s = single(headers['x-b3-spanid'])
  const flag = single(headers['x-b3-sampled'])
  let sampled: boolean | null = null
  if (single(headers['x-b3-flags']) === '1' || flag === '1' || flag === 'true') sampled = true
  else if (flag === '0' || flag === 'false') sampled = false
  if (t === undefined || s === undefined) {
    return sampled === false ? { traceId: '', spanId: '', sampled: false, traceState: '', format: 'b3multi' } : null
  }
  const traceId = b3TraceId(t.toLowerCase())
  const spanId = b3SpanId(s.toLowerCase())
  if (traceId === null || spanId === null) return null
  return { traceId, spanId, sampled, traceState: '', format: 'b3multi' }
}

// hot path (tracing on)
/**
 * The parent context of a request: a valid traceparent (with its
 * tracestate) wins, then B3 single, then B3 multi; null when none is usable
 * (the request starts a new trace).
 */
export function extractContext(headers: IncomingHttpHeaders): ParentContext | null {
  const tp = single(headers.traceparent)
  if (tp !== undefined) {
    const p = parseTraceparent(tp.trim())
    if (p !== null) return { traceId: p.traceId, spanId: p.spanId, sampled: p.sampled, traceState: validTraceState(headers.tracestate), format: 'w3c' }
  }
  const b3 = single(headers.b3)
  if (b3 !== undefined) {
    const p = parseB3Single(b3.trim().toLowerCase())
    if (p !== null) return p
  }
  if (headers['x-b3-traceid'] !== undefined || headers['x-b3-sampled'] !== undefined || headers['x-b3-flags'] !== undefined) return parseB3Multi(headers)
  return null
}
