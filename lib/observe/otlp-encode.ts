// OTLP trace export bodies (issue 10): ExportTraceServiceRequest as OTLP/JSON
// and as protobuf, written from opentelemetry-proto
// (opentelemetry/proto/trace/v1/trace.proto, common/v1/common.proto,
// collector/trace/v1/trace_service.proto) and the OTLP specification's JSON
// rules: trace and span ids as hex (not base64), enums as integers, 64-bit
// integers as decimal strings. One resource and one scope per request.
//
// A hand-written encoder rather than @opentelemetry/otlp-transformer: that one
// takes the SDK's ReadableSpan objects (resource, scope, hrtime tuples, links,
// events), which we do not build (see lib/observe/tracing.ts for why).

import type { AttributeValue, SpanRecord } from './tracing-span.ts'

export interface ExportScope {
  /** Resource attributes (service.name, …), flat [k, v, …]. */
  readonly resource: readonly AttributeValue[]
  readonly scopeName: string
  readonly scopeVersion: string
}

/** OTLP Span.flags: trace flags in bits 0-7, bit 8 "is_remote known", bit 9 "parent is remote". */
function spanFlags(span: SpanRecord): number {
  return 0x01 | 0x100 | (span.parentRemote ? 0x200 : 0)
}

/** Epoch ms (fractional) → nanoseconds as a decimal string (beyond 2^53: BigInt). */
export function unixNano(ms: number): bigint {
  const whole = Math.floor(ms)
  return BigInt(whole) * 1_000_000n + BigInt(Math.round((ms - whole) * 1_000_000))
}

// ── JSON ──

interface JsonKeyValue { key: string; value: { stringValue: string } | { intValue: string } | { doubleValue: number } | { boolValue: boolean } }

function jsonAttributes(flat: readonly AttributeValue[]): JsonKeyValue[] {
  const out: JsonKeyValue[] = []
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const v = flat[i + 1]
    const value = typeof v === 'string' ? { stringValue: v }
      : typeof v === 'boolean' ? { boolValue: v }
        : Number.isInteger(v) ? { intValue: String(v) } : { doubleValue: v }
    out.push({ key: flat[i] as string, value })
  }
  return out
}

export function encodeJson(spans: readonly SpanRecord[], scope: ExportScope): string {
  return JSON.stringify({
    resourceSpans: [{
      resource: { attributes: jsonAttributes(scope.resource) },
      scopeSpans: [{
        scope: { name: scope.scopeName, version: scope.scopeVersion },
        spans: spans.map((s) => ({
          traceId: s.traceId,
          spanId: s.spanId,
          ...(s.parentSpanId === '' ? {} : { parentSpanId: s.parentSpanId }),
          ...(s.traceState === '' ? {} : { traceState: s.traceState }),
          flags: spanFlags(s),
          name: s.name,
          kind: s.kind,
          startTimeUnixNano: unixNano(s.startMs).toString(),
          endTimeUnixNano: unixNano(s.endMs).toString(),
          attributes: jsonAttributes(s.attributes),
          status: s.statusMessage === '' ? { code: s.status } : { code: s.status, message: s.statusMessage },
        })),
      }],
    }],
  })
}

// ── protobuf ──

/** Append-only protobuf writer; nested messages are written into their own writer and copied in as bytes. */
class Writer {
  buf: Buffer
  pos = 0
  constructor(size = 256) { this.buf = Buffer.allocUnsafe(size) }

  #ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n))
    this.buf.copy(next, 0, 0, this.pos)
    this.buf = next
  }

  varint(v: number): void {
    this.#ensure(10)
    while (v > 0x7f) {
      this.buf[this.pos++] = (v & 0x7f) | 0x80
      v = Math.floor(v / 128)
    }
    this.buf[this.pos++] = v
  }

  tag(field: number, wire: number): void { this.varint(field * 8 + wire) }

  bytes(field: number, data: Uint8Array): void {
    this.tag(field, 2)
    this.varint(data.length)
    this.#ensure(data.length)
    this.buf.set(data, this.pos)
    this.pos += data.length
  }

  string(field: number, s: string): void {
    const len = Buffer.byteLength(s)
    this.tag(field, 2)
    this.varint(len)
    this.#ensure(len)
    this.pos += this.buf.write(s, this.pos, 'utf8')
  }

  hex(field: number, hex: string): void {
    this.bytes(field, Buffer.from(hex, 'hex'))
  }

  fixed32(field: number, v: number): void {
    this.tag(field, 5)
    this.#ensure(4)
    this.buf.writeUInt32LE(v >>> 0, this.pos)
    this.pos += 4
  }

  fixed64(field: number, v: bigint): void {
    this.tag(field, 1)
    this.#ensure(8)
    this.buf.writeBigUInt64LE(v, this.pos)
    this.pos += 8
  }

  double(field: number, v: number): void {
    this.tag(field, 1)
    this.#ensure(8)
    this.buf.writeDoubleLE(v, this.pos)
    this.pos += 8
  }

  /** int64 varint (two's complement for negatives, 10 bytes). */
  int64(field: number, v: number): void {
    this.tag(field, 0)
    if (v >= 0) return this.varint(v)
    let n = BigInt.asUintN(64, BigInt(v))
    this.#ensure(10)
    while (n > 0x7fn) {
      this.buf[this.pos++] = Number(n & 0x7fn) | 0x80
      n >>= 7n
    }
    this.buf[this.pos++] = Number(n)
  }

  finish(): Buffer { return this.buf.subarray(0, this.pos) }
}

// AnyValue: string_value 1, bool_value 2, int_value 3, double_value 4. KeyValue: key 1, value 2.
function writeAttributes(w: Writer, field: number, flat: readonly AttributeValue[]): void {
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const v = flat[i + 1]
    const any = new Writer(64)
    if (typeof v === 'string') any.string(1, v)
    else if (typeof v === 'boolean') { any.tag(2, 0); any.varint(v ? 1 : 0) }
    else if (Number.isInteger(v)) any.int64(3, v)
    else any.double(4, v)
    const kv = new Writer(64)
    kv.string(1, flat[i] as string)
    kv.bytes(2, any.finish())
    w.bytes(field, kv.finish())
  }
}

// Span: trace_id 1, span_id 2, trace_state 3, parent_span_id 4, name 5, kind 6,
// start 7, end 8, attributes 9, status 15, flags 16. Status: message 2, code 3.
function encodeSpan(s: SpanRecord): Buffer {
  const w = new Writer(512)
  w.hex(1, s.traceId)
  w.hex(2, s.spanId)
  if (s.traceState !== '') w.string(3, s.traceState)
  if (s.parentSpanId !== '') w.hex(4, s.parentSpanId)
  w.string(5, s.name)
  w.tag(6, 0)
  w.varint(s.kind)
  w.fixed64(7, unixNano(s.startMs))
  w.fixed64(8, unixNano(s.endMs))
  writeAttributes(w, 9, s.attributes)
  const status = new Writer(32)
  if (s.statusMessage !== '') status.string(2, s.statusMessage)
  if (s.status !== 0) { status.tag(3, 0); status.varint(s.status) }
  w.bytes(15, status.finish())
  w.fixed32(16, spanFlags(s))
  return w.finish()
}

/** ExportTraceServiceRequest { resource_spans 1: ResourceSpans { resource 1, scope_spans 2: ScopeSpans { scope 1, spans 2 } } }. */
export function encodeProtobuf(spans: readonly SpanRecord[], scope: ExportScope): Buffer {
  const resource = new Writer()
  writeAttributes(resource, 1, scope.resource)
  const scopeMsg = new Writer(64)
  scopeMsg.string(1, scope.scopeName)
  scopeMsg.string(2, scope.scopeVersion)
  const scopeSpans = new Writer(spans.length * 400 + 64)
  scopeSpans.bytes(1, scopeMsg.finish())
  for (let i = 0; i < spans.length; i++) scopeSpans.bytes(2, encodeSpan(spans[i]))
  const resourceSpans = new Writer(scopeSpans.pos + 512)
  resourceSpans.bytes(1, resource.finish())
  resourceSpans.bytes(2, scopeSpans.finish())
  const request = new Writer(resourceSpans.pos + 16)
  request.bytes(1, resourceSpans.finish())
  return request.finish()
}
