// Batched OTLP/HTTP export of finished spans (issue 10), shaped like the
// OpenTelemetry BatchSpanProcessor (OTEL_BSP_* defaults: queue 2048, batch
// 512, delay 5 s, export timeout 30 s) but never in the request's way:
// push() is an array push or, when the queue is full, a counted drop
// (sallyport_tracing_spans_dropped_total{reason="queue_full"}). A batch goes
// out when it is full or when the delay since the first queued span passes;
// at most MAX_IN_FLIGHT requests are outstanding. A failed export (connection
// refused, timeout, non-2xx) drops its spans, counted with
// reason="export_failed" — no retries, so a dead collector costs one failed
// request per batch and never grows memory. Failed exports log one warning per
// outage (until one succeeds), a full queue one warning, then one a minute.

import http from 'node:http'
import https from 'node:https'
import { Counter } from 'prom-client'
import { registry } from './metrics.ts'
import { logger } from './log.ts'
import { RepeatThrottle } from './repeat-throttle.ts'
import { encodeJson, encodeProtobuf, type ExportScope } from './otlp-encode.ts'
import type { SpanRecord } from './tracing-span.ts'

const log = logger('tracing')

export const tracingSpansDropped = new Counter({
  name: 'sallyport_tracing_spans_dropped_total',
  help: 'Finished spans not exported: the export queue was full (queue_full) or the OTLP endpoint failed (export_failed).',
  labelNames: ['reason'] as const, registers: [registry],
})
export const tracingSpansExported = new Counter({
  name: 'sallyport_tracing_spans_exported_total',
  help: 'Spans accepted by the OTLP endpoint.', registers: [registry],
})

export type OtlpProtocol = 'http/json' | 'http/protobuf'

export interface ExporterOptions {
  readonly endpoint: URL
  readonly protocol: OtlpProtocol
  /** Spans held at most; beyond, new spans are dropped (OTEL_BSP_MAX_QUEUE_SIZE). */
  readonly maxQueue: number
  /** Spans per export request (OTEL_BSP_MAX_EXPORT_BATCH_SIZE). */
  readonly maxBatch: number
  /** Longest wait before a partial batch goes out, ms (OTEL_BSP_SCHEDULE_DELAY). */
  readonly delayMs: number
  /** One export request, ms (OTEL_EXPORTER_OTLP_TIMEOUT). */
  readonly timeoutMs: number
  readonly scope: ExportScope
}

const MAX_IN_FLIGHT = 2
const QUEUE_FULL_LOG_EVERY_MS = 60_000

export class OtlpExporter {
  readonly #options: ExporterOptions
  readonly #agent: http.Agent
  readonly #request: typeof http.request
  #queue: SpanRecord[] = []
  #timer: NodeJS.Timeout | null = null
  #immediate: NodeJS.Immediate | null = null
  #inFlight = 0
  #idle: Array<() => void> = []
  #closed = false
  #warned = false
  /** Queue-full drops: one warning, then at most one a minute while they go on. */
  readonly #queueFull = new RepeatThrottle(QUEUE_FULL_LOG_EVERY_MS)

  constructor(options: ExporterOptions) {
    this.#options = options
    const tls = options.endpoint.protocol === 'https:'
    this.#agent = tls ? new https.Agent({ keepAlive: true, maxSockets: MAX_IN_FLIGHT }) : new http.Agent({ keepAlive: true, maxSockets: MAX_IN_FLIGHT })
    this.#request = tls ? https.request : http.request
  }

  // hot path (a sampled span ended)
  push(span: SpanRecord): void {
    const queue = this.#queue
    if (queue.length >= this.#options.maxQueue || this.#closed) {
      tracingSpansDropped.inc({ reason: 'queue_full' })
      // A collector slower than the traffic, or one that holds its answers, drops spans
      // here without any export failing (yet): say so, without a line per span.
      if (!this.#closed) {
        const noted = this.#queueFull.note('queue_full')
        if (noted.log) log.warn({ endpoint: this.#options.endpoint.origin, maxQueue: this.#options.maxQueue, droppedSinceLastWarning: noted.repeats }, 'span export queue full; spans dropped')
      }
      return
    }
    queue.push(span)
    if (queue.length >= this.#options.maxBatch) {
      if (this.#immediate === null && this.#inFlight < MAX_IN_FLIGHT) this.#immediate = setImmediate(onBatchFull, this)
    } else if (this.#timer === null) {
      this.#timer = setTimeout(onDelay, this.#options.delayMs, this)
      this.#timer.unref()
    }
  }

  /** Queued spans, for tests and /config_dump. */
  get queued(): number { return this.#queue.length }

  /** Send batches while there is room in flight. */
  drain(): void {
    this.#immediate = null
    if (this.#timer !== null) { clearTimeout(this.#timer); this.#timer = null }
    while (this.#queue.length > 0 && this.#inFlight < MAX_IN_FLIGHT) {
      const batch = this.#queue.length <= this.#options.maxBatch ? this.#queue : this.#queue.slice(0, this.#options.maxBatch)
      this.#queue = batch === this.#queue ? [] : this.#queue.slice(batch.length)
      this.#send(batch)
    }
    if (this.#queue.length > 0 && this.#timer === null && this.#inFlight >= MAX_IN_FLIGHT) {
      // Both slots busy: the next completion drains; the timer is a fallback.
      this.#timer = setTimeout(onDelay, this.#options.delayMs, this)
      this.#timer.unref()
    }
  }

  #send(batch: SpanRecord[]): void {
    const o = this.#options
    let body: string | Buffer
    try {
      body = o.protocol === 'http/json' ? encodeJson(batch, o.scope) : encodeProtobuf(batch, o.scope)
    } catch (err) {
      log.error({ err }, 'encoding spans failed')
      tracingSpansDropped.inc({ reason: 'export_failed' }, batch.length)
      return
    }
    this.#inFlight++
    let settled = false
    const done = (ok: boolean, why: string | null): void => {
      if (settled) return
      settled = true
      this.#inFlight--
      if (ok) {
        tracingSpansExported.inc(batch.length)
        this.#warned = false
      } else {
        tracingSpansDropped.inc({ reason: 'export_failed' }, batch.length)
        // One warning per outage, not one per batch.
        if (!this.#warned) log.warn({ endpoint: o.endpoint.origin, reason: why, spans: batch.length }, 'span export failed; spans dropped')
        this.#warned = true
      }
      if (this.#queue.length >= o.maxBatch || (this.#closed && this.#queue.length > 0)) this.drain()
      if (this.#inFlight === 0 && this.#queue.length === 0) this.#wake()
    }
    const req = this.#request(o.endpoint, {
      method: 'POST', agent: this.#agent, timeout: o.timeoutMs,
      headers: {
        'content-type': o.protocol === 'http/json' ? 'application/json' : 'application/x-protobuf',
        'content-length': Buffer.byteLength(body),
      },
    }, (res) => {
      res.resume()
      res.on('end', () => done((res.statusCode ?? 0) >= 200 && (res.statusCode ?? 0) < 300, `status ${res.statusCode}`))
      res.on('error', (err) => done(false, err.message))
    })
    req.on('timeout', () => req.destroy(new Error('export timed out')))
    req.on('error', (err) => done(false, (err as NodeJS.ErrnoException).code ?? err.message))
    req.end(body)
  }

  #wake(): void {
    const waiters = this.#idle
    this.#idle = []
    for (const w of waiters) w()
  }

  /** Export what is queued and wait for every request (bounded by `timeoutMs`). */
  async flush(timeoutMs = this.#options.timeoutMs): Promise<void> {
    this.drain()
    if (this.#inFlight === 0 && this.#queue.length === 0) return
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeoutMs)
      timer.unref()
      this.#idle.push(() => { clearTimeout(timer); resolve() })
    })
  }

  /** Flush, then refuse new spans and close idle sockets. */
  async shutdown(timeoutMs?: number): Promise<void> {
    this.#closed = true
    await this.flush(timeoutMs)
    if (this.#timer !== null) { clearTimeout(this.#timer); this.#timer = null }
    this.#agent.destroy()
  }
}

function onBatchFull(exporter: OtlpExporter): void {
  exporter.drain()
}

function onDelay(exporter: OtlpExporter): void {
  exporter.drain()
}
