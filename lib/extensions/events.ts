// Events for denials and transform failures (egress proposal, Observability:
// "Denials and transform failures MUST emit Events"). The data path emits into
// an EventSink; the runtime wires a Kubernetes recorder when it has one, and
// in file mode a log line is the Event. Aggregated like the kubelet's event
// correlator: the first of a kind goes out at once, repeats within the window
// are counted and reported once when the window closes.

import { logger } from '../observe/log.ts'
import { eventsEmitted } from '../observe/extension-metrics.ts'

export interface ExtensionEvent {
  readonly type: 'Normal' | 'Warning'
  /** CamelCase, bounded set: ExtensionDenied, RateLimited, ExtensionFailed, TransformFailed. */
  readonly reason: string
  /** The object the Event is about (the EgressExtension or Backend declaring the extension). */
  readonly object: { readonly kind: string; readonly namespace: string; readonly name: string }
  /** Never a credential or body content. */
  readonly message: string
  /** Occurrences this Event stands for (aggregated repeats). */
  readonly count: number
}

export interface EventSink {
  emit(event: ExtensionEvent): void
}

const eventLog = logger('events')

/** File mode: every Event is one log line. */
export const logEventSink: EventSink = {
  emit(e: ExtensionEvent): void {
    eventLog.warn({ reason: e.reason, object: `${e.object.kind} ${e.object.namespace}/${e.object.name}`, count: e.count, message: e.message }, 'event')
  },
}

interface Pending { first: ExtensionEvent; repeats: number }

/** Rate-limits and aggregates Events by (reason, object, message) within `windowMs`. */
export class AggregatingEventSink implements EventSink {
  #target: EventSink
  readonly #windowMs: number
  readonly #open = new Map<string, Pending>()
  #timer: NodeJS.Timeout | null = null

  constructor(target: EventSink, windowMs = 60_000) {
    this.#target = target
    this.#windowMs = windowMs
  }

  /** Replace where Events go (the runtime's Kubernetes recorder). */
  setTarget(target: EventSink): void { this.#target = target }

  emit(event: ExtensionEvent): void {
    const key = `${event.reason}|${event.object.kind}|${event.object.namespace}|${event.object.name}|${event.message}`
    const open = this.#open.get(key)
    if (open !== undefined) { open.repeats += event.count; return }
    this.#open.set(key, { first: event, repeats: 0 })
    this.#send(event)
    if (this.#timer === null) {
      this.#timer = setTimeout(() => this.flush(), this.#windowMs)
      this.#timer.unref()
    }
  }

  /** Close the window: one aggregated Event per key that repeated. */
  flush(): void {
    if (this.#timer !== null) { clearTimeout(this.#timer); this.#timer = null }
    const open = [...this.#open.values()]
    this.#open.clear()
    for (const p of open) if (p.repeats > 0) this.#send({ ...p.first, count: p.repeats, message: `${p.first.message} (repeated ${p.repeats} times)` })
  }

  #send(event: ExtensionEvent): void {
    eventsEmitted.inc({ reason: event.reason })
    try { this.#target.emit(event) } catch { /* an Event must never fail a request */ }
  }
}
