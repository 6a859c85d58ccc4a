// A tiny OTLP/HTTP trace receiver for tests (issue 10): node:http on
// 127.0.0.1, POST /v1/traces, decodes OTLP/JSON and OTLP protobuf
// (ExportTraceServiceRequest, field numbers from opentelemetry-proto) with a
// generic wire-format reader written here — independent of the encoder in
// lib/observe/otlp-encode.ts — and collects the spans.

import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'

export type AttrValue = string | number | boolean

export interface ReceivedSpan {
  readonly traceId: string
  readonly spanId: string
  /** '' for a root. */
  readonly parentSpanId: string
  readonly traceState: string
  readonly flags: number
  readonly name: string
  readonly kind: number
  readonly startNs: bigint
  readonly endNs: bigint
  readonly attributes: Record<string, AttrValue>
  readonly status: { readonly code: number; readonly message: string }
  readonly resource: Record<string, AttrValue>
  readonly scope: string
  /** 'json' | 'protobuf': how it arrived. */
  readonly encoding: string
}

export interface OtlpReceiver {
  readonly url: string
  readonly spans: ReceivedSpan[]
  readonly requests: number
  /** Wait until `ok(spans)` (bounded). */
  waitFor(ok: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number, what?: string): Promise<ReceivedSpan[]>
}

// ── protobuf wire format ──

type Field = { wire: 0; value: bigint } | { wire: 1; value: Buffer } | { wire: 2; value: Buffer } | { wire: 5; value: Buffer }

function readVarint(buf: Buffer, at: { pos: number }): bigint {
  let result = 0n
  let shift = 0n
  for (;;) {
    if (at.pos >= buf.length) throw new Error('truncated varint')
    const b = buf[at.pos++]
    result |= BigInt(b & 0x7f) << shift
    if ((b & 0x80) === 0) return result
    shift += 7n
    if (shift > 63n) throw new Error('varint too long')
  }
}

/** Fields by number, in order. */
function fields(buf: Buffer): Map<number, Field[]> {
  const out = new Map<number, Field[]>()
  const at = { pos: 0 }
  while (at.pos < buf.length) {
    const key = Number(readVarint(buf, at))
    const field = key >>> 3
    const wire = key & 7
    let f: Field
    if (wire === 0) f = { wire: 0, value: readVarint(buf, at) }
    else if (wire === 1) { f = { wire: 1, value: buf.subarray(at.pos, at.pos + 8) }; at.pos += 8 }
    else if (wire === 5) { f = { wire: 5, value: buf.subarray(at.pos, at.pos + 4) }; at.pos += 4 }
    else if (wire === 2) {
      const len = Number(readVarint(buf, at))
      f = { wire: 2, value: buf.subarray(at.pos, at.pos + len) }
      at.pos += len
    } else throw new Error(`unsupported wire type ${wire}`)
    if (at.pos > buf.length) throw new Error('truncated field')
    const list = out.get(field)
    if (list === undefined) out.set(field, [f])
    else list.push(f)
  }
  return out
}

const bytesOf = (m: Map<number, Field[]>, n: number): Buffer[] => (m.get(n) ?? []).map((f) => f.value as Buffer)
const str = (m: Map<number, Field[]>, n: number): string => bytesOf(m, n)[0]?.toString('utf8') ?? ''
const hex = (m: Map<number, Field[]>, n: number): string => bytesOf(m, n)[0]?.toString('hex') ?? ''
const varint = (m: Map<number, Field[]>, n: number): bigint => { const f = m.get(n)?.[0]; return f?.wire === 0 ? f.value : 0n }

function anyValue(buf: Buffer): AttrValue {
  const m = fields(buf)
  if (m.has(1)) return str(m, 1)
  if (m.has(2)) return varint(m, 2) === 1n
  if (m.has(3)) return Number(BigInt.asIntN(64, varint(m, 3)))
  if (m.has(4)) return (m.get(4)?.[0].value as Buffer).readDoubleLE(0)
  throw new Error('unsupported AnyValue')
}

function pbAttributes(list: Buffer[]): Record<string, AttrValue> {
  const out: Record<string, AttrValue> = {}
  for (const kv of list) {
    const m = fields(kv)
    out[str(m, 1)] = anyValue(bytesOf(m, 2)[0] ?? Buffer.alloc(0))
  }
  return out
}

export function decodeProtobuf(body: Buffer): ReceivedSpan[] {
  const spans: ReceivedSpan[] = []
  for (const rs of bytesOf(fields(body), 1)) {
    const rsm = fields(rs)
    const resource = pbAttributes(bytesOf(fields(bytesOf(rsm, 1)[0] ?? Buffer.alloc(0)), 1))
    for (const ss of bytesOf(rsm, 2)) {
      const ssm = fields(ss)
      const scope = str(fields(bytesOf(ssm, 1)[0] ?? Buffer.alloc(0)), 1)
      for (const sp of bytesOf(ssm, 2)) {
        const m = fields(sp)
        const status = fields(bytesOf(m, 15)[0] ?? Buffer.alloc(0))
        spans.push({
          traceId: hex(m, 1), spanId: hex(m, 2), traceState: str(m, 3), parentSpanId: hex(m, 4), name: str(m, 5),
          kind: Number(varint(m, 6)),
          startNs: (m.get(7)?.[0].value as Buffer).readBigUInt64LE(0), endNs: (m.get(8)?.[0].value as Buffer).readBigUInt64LE(0),
          attributes: pbAttributes(bytesOf(m, 9)),
          status: { code: Number(varint(status, 3)), message: str(status, 2) },
          flags: m.has(16) ? (m.get(16)?.[0].value as Buffer).readUInt32LE(0) : 0,
          resource, scope, encoding: 'protobuf',
        })
      }
    }
  }
  return spans
}

// ── JSON ──

interface JsonKv { key: string; value: Record<string, unknown> }

function jsonAttributes(list: JsonKv[] | undefined): Record<string, AttrValue> {
  const out: Record<string, AttrValue> = {}
  for (const kv of list ?? []) {
    const v = kv.value
    if ('stringValue' in v) out[kv.key] = v.stringValue as string
    else if ('intValue' in v) out[kv.key] = Number(v.intValue)
    else if ('boolValue' in v) out[kv.key] = v.boolValue as boolean
    else if ('doubleValue' in v) out[kv.key] = v.doubleValue as number
    else throw new Error(`unsupported AnyValue ${JSON.stringify(v)}`)
  }
  return out
}

export function decodeJson(text: string): ReceivedSpan[] {
  interface J {
    resourceSpans: Array<{ resource?: { attributes?: JsonKv[] }; scopeSpans: Array<{ scope?: { name?: string }; spans: Array<Record<string, unknown>> }> }>
  }
  const doc = JSON.parse(text) as J
  const spans: ReceivedSpan[] = []
  for (const rs of doc.resourceSpans) {
    const resource = jsonAttributes(rs.resource?.attributes)
    for (const ss of rs.scopeSpans) {
      for (const s of ss.spans) {
        const status = (s.status ?? {}) as { code?: number; message?: string }
        for (const id of ['traceId', 'spanId', 'parentSpanId']) {
          if (s[id] !== undefined && !/^[0-9a-f]*$/.test(s[id] as string)) throw new Error(`${id} is not hex: ${String(s[id])}`)
        }
        spans.push({
          traceId: s.traceId as string, spanId: s.spanId as string, parentSpanId: (s.parentSpanId as string | undefined) ?? '',
          traceState: (s.traceState as string | undefined) ?? '', flags: (s.flags as number | undefined) ?? 0,
          name: s.name as string, kind: s.kind as number,
          startNs: BigInt(s.startTimeUnixNano as string), endNs: BigInt(s.endTimeUnixNano as string),
          attributes: jsonAttributes(s.attributes as JsonKv[] | undefined),
          status: { code: status.code ?? 0, message: status.message ?? '' },
          resource, scope: ss.scope?.name ?? '', encoding: 'json',
        })
      }
    }
  }
  return spans
}

export async function startOtlpReceiver(t: Test): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = []
  let requests = 0
  const errors: string[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      requests++
      const body = Buffer.concat(chunks)
      try {
        if (req.method !== 'POST' || req.url !== '/v1/traces') throw new Error(`unexpected ${req.method} ${req.url}`)
        const type = req.headers['content-type'] ?? ''
        if (type.startsWith('application/json')) spans.push(...decodeJson(body.toString('utf8')))
        else if (type.startsWith('application/x-protobuf')) spans.push(...decodeProtobuf(body))
        else throw new Error(`unexpected content-type ${type}`)
        res.writeHead(200, { 'content-type': type }).end(type.startsWith('application/json') ? '{}' : '')
      } catch (err) {
        errors.push((err as Error).message)
        res.writeHead(400).end()
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`
  return {
    url, spans,
    get requests() { return requests },
    waitFor: async (ok, timeoutMs = 15000, what = 'spans') => {
      const deadline = Date.now() + timeoutMs
      while (Date.now() < deadline) {
        if (errors.length > 0) throw new Error(`receiver could not decode: ${errors.join('; ')}`)
        if (ok(spans)) return spans
        await new Promise((r) => setTimeout(r, 50))
      }
      throw new Error(`${what} not received in ${timeoutMs} ms; got ${spans.length} spans: ${JSON.stringify(spans.map((s) => [s.name, s.kind, s.traceId, s.parentSpanId]))}`)
    },
  }
}
