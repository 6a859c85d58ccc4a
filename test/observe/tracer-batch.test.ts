// The batch span processor's knobs as OpenTelemetry reads them: a batch is at
// most the queue's size (OTEL_BSP_MAX_EXPORT_BATCH_SIZE is clamped to
// OTEL_BSP_MAX_QUEUE_SIZE, as the SDKs' BatchSpanProcessor does). A queue set
// below the default batch of 512 (OTEL_BSP_MAX_QUEUE_SIZE=100 alone) never
// filled a batch: its spans waited for the schedule delay while every span
// past the queue's size was dropped as queue_full.
import t from 'tap'
import { Tracer } from '../../lib/observe/tracing.ts'
import { tracingSpansDropped } from '../../lib/observe/otlp-exporter.ts'
import { SpanKind, SpanRecord, nowMs } from '../../lib/observe/tracing-span.ts'
import { newSpanId, newTraceId } from '../../lib/observe/trace-context.ts'
import { startOtlpReceiver } from '../helpers/otlp-receiver.ts'

async function dropped(): Promise<number> {
  const m = await tracingSpansDropped.get()
  return m.values.filter((v) => v.labels.reason === 'queue_full').reduce((n, v) => n + v.value, 0)
}

function span(): SpanRecord {
  const s = new SpanRecord(newTraceId(), newSpanId(), '', false, '', SpanKind.SERVER, 'GET', nowMs())
  s.endMs = nowMs()
  return s
}

t.test('a queue smaller than the default batch sends a batch when it is full, not after the schedule delay', async (t) => {
  const receiver = await startOtlpReceiver(t)
  // Only the queue is set (the batch keeps its default, 512); the delay is far beyond the test.
  const tracer = new Tracer({ endpoint: new URL(receiver.url), protocol: 'http/protobuf', sampling: 1, maxQueue: 4, delayMs: 3_600_000 })
  t.teardown(() => tracer.shutdown(1000))
  const before = await dropped()
  for (let i = 0; i < 4; i++) tracer.finished(span())
  await receiver.waitFor((s) => s.length === 4, 5000, 'the full queue sent as one batch')
  for (let i = 0; i < 4; i++) tracer.finished(span())
  await receiver.waitFor((s) => s.length === 8, 5000, 'the next full queue sent too')
  t.equal(await dropped() - before, 0, 'no span dropped at the queue')
})
