// Kubernetes Events for things an operator should see on the object itself:
// denials and transform failures from the data path (the egress proposal), and
// config-level problems (an invalid object dropped, insecureSkipVerify on).
//
// Every replica records its own Events (not leader-gated: a denial happens on
// the replica that served the request). Like client-go's EventCorrelator:
// - aggregation: the same (object, type, reason, message) within 10 minutes
//   bumps `count` and `lastTimestamp` of one Event instead of creating another;
//   bumps are sent as merge patches at most every `flushMs`;
// - rate limit: a token bucket per involved object (burst 25, one token per
//   5 minutes by default), so a hot denial loop cannot flood the API server;
//   what the bucket refuses is counted and dropped.
// File mode has no API server: LogEventRecorder writes the same facts to the log.

import os from 'node:os'
import { randomBytes } from 'node:crypto'
import { logger } from '../observe/log.ts'
import { KubeApiError, errorText, type KubeClient } from '../config/kube-client.ts'

const log = logger('events')

export interface InvolvedObject {
  readonly apiVersion: string
  readonly kind: string
  /** '' for cluster-scoped objects (their Events go to the fallback namespace). */
  readonly namespace: string
  readonly name: string
  readonly uid?: string
  readonly resourceVersion?: string
}

export type EventType = 'Normal' | 'Warning'

/** What the data path and the side loop call; never throws, never blocks. */
export interface EventRecorder {
  record(involved: InvolvedObject, type: EventType, reason: string, message: string): void
  close(): Promise<void>
}

export class LogEventRecorder implements EventRecorder {
  record(involved: InvolvedObject, type: EventType, reason: string, message: string): void {
    const fields = { kind: involved.kind, namespace: involved.namespace, name: involved.name, reason, message }
    if (type === 'Warning') log.warn(fields, 'event')
    else log.info(fields, 'event')
  }

  async close(): Promise<void> {}
}

export interface KubeEventRecorderOptions {
  readonly client: KubeClient
  /** reportingComponent / source.component. */
  readonly component?: string
  /** reportingInstance / source.host (POD_NAME). */
  readonly instance?: string
  /** Namespace of Events about cluster-scoped objects (POD_NAMESPACE). */
  readonly fallbackNamespace?: string
  readonly burst?: number
  readonly refillEveryMs?: number
  readonly aggregateWindowMs?: number
  readonly flushMs?: number
  readonly maxTracked?: number
}

interface Tracked {
  readonly namespace: string
  name: string | null
  count: number
  sentCount: number
  firstTimestamp: string
  lastTimestamp: string
  readonly firstAt: number
  readonly body: Record<string, unknown>
  /** The create in flight; patches wait for it. */
  creating: Promise<void> | null
}

interface Bucket { tokens: number; at: number }

export class KubeEventRecorder implements EventRecorder {
  readonly #client: KubeClient
  readonly #component: string
  readonly #instance: string
  readonly #fallbackNs: string
  readonly #burst: number
  readonly #refillMs: number
  readonly #windowMs: number
  readonly #maxTracked: number
  readonly #tracked = new Map<string, Tracked>()
  readonly #buckets = new Map<string, Bucket>()
  readonly #flushTimer: NodeJS.Timeout
  #inflight = new Set<Promise<void>>()
  /** Events refused by the rate limit (tests, debugging). */
  dropped = 0

  constructor(options: KubeEventRecorderOptions) {
    this.#client = options.client
    this.#component = options.component ?? 'sallyport'
    this.#instance = options.instance ?? os.hostname()
    this.#fallbackNs = options.fallbackNamespace ?? 'default'
    this.#burst = options.burst ?? 25
    this.#refillMs = options.refillEveryMs ?? 5 * 60_000
    this.#windowMs = options.aggregateWindowMs ?? 10 * 60_000
    this.#maxTracked = options.maxTracked ?? 4096
    this.#flushTimer = setInterval(() => this.flush(), options.flushMs ?? 5_000)
    this.#flushTimer.unref()
  }

  record(involved: InvolvedObject, type: EventType, reason: string, message: string): void {
    const namespace = involved.namespace === '' ? this.#fallbackNs : involved.namespace
    const objectKey = `${namespace}/${involved.apiVersion}/${involved.kind}/${involved.name}`
    // A deleted object recreated under its name is another object (client-go's aggregation key has the uid too).
    const key = `${objectKey}|${involved.uid ?? ''}|${type}|${reason}|${message}`
    const now = Date.now()
    const stamp = new Date(now).toISOString().replace(/\.\d+Z$/, 'Z')
    const seen = this.#tracked.get(key)
    if (seen !== undefined && now - seen.firstAt < this.#windowMs) {
      seen.count++
      seen.lastTimestamp = stamp
      return // sent by the next flush
    }
    if (!this.#take(objectKey, now)) {
      this.dropped++
      log.debug({ kind: involved.kind, namespace, name: involved.name, reason }, 'event dropped by the rate limit')
      return
    }
    const body: Record<string, unknown> = {
      apiVersion: 'v1', kind: 'Event',
      involvedObject: {
        apiVersion: involved.apiVersion, kind: involved.kind, name: involved.name,
        ...(involved.namespace === '' ? {} : { namespace: involved.namespace }),
        ...(involved.uid === undefined ? {} : { uid: involved.uid }),
        ...(involved.resourceVersion === undefined ? {} : { resourceVersion: involved.resourceVersion }),
      },
      type, reason, message: message.slice(0, 1024),
      source: { component: this.#component, host: this.#instance },
      reportingComponent: this.#component, reportingInstance: this.#instance,
    }
    const tracked: Tracked = { namespace, name: null, count: 1, sentCount: 0, firstTimestamp: stamp, lastTimestamp: stamp, firstAt: now, body, creating: null }
    this.#tracked.delete(key)
    this.#tracked.set(key, tracked)
    if (this.#tracked.size > this.#maxTracked) this.#tracked.delete(this.#tracked.keys().next().value as string)
    tracked.creating = this.#track(this.#create(tracked)).finally(() => { tracked.creating = null })
  }

  /** Send pending count bumps now (after the creates in flight). */
  async flush(): Promise<void> {
    await Promise.all([...this.#inflight])
    const sends: Promise<void>[] = []
    for (const t of this.#tracked.values()) {
      if (t.count === t.sentCount || t.creating !== null) continue
      sends.push(this.#track(t.name === null ? this.#create(t) : this.#bump(t)))
    }
    await Promise.all(sends)
  }

  async close(): Promise<void> {
    clearInterval(this.#flushTimer)
    await Promise.all([...this.#inflight])
    await this.flush()
  }

  #take(objectKey: string, now: number): boolean {
    let b = this.#buckets.get(objectKey)
    if (b === undefined) {
      b = { tokens: this.#burst, at: now }
      this.#buckets.set(objectKey, b)
      if (this.#buckets.size > this.#maxTracked) this.#buckets.delete(this.#buckets.keys().next().value as string)
    }
    const refill = Math.floor((now - b.at) / this.#refillMs)
    if (refill > 0) { b.tokens = Math.min(this.#burst, b.tokens + refill); b.at += refill * this.#refillMs }
    if (b.tokens <= 0) return false
    b.tokens--
    return true
  }

  #track(p: Promise<void>): Promise<void> {
    this.#inflight.add(p)
    return p.finally(() => this.#inflight.delete(p))
  }

  async #create(t: Tracked): Promise<void> {
    const involvedName = String((t.body.involvedObject as Record<string, unknown>).name)
    const name = `${involvedName}.${Date.now().toString(16)}${randomBytes(2).toString('hex')}`
    const count = t.count
    try {
      await this.#client.request('POST', `/api/v1/namespaces/${encodeURIComponent(t.namespace)}/events`, {
        body: { ...t.body, metadata: { name, namespace: t.namespace }, count, firstTimestamp: t.firstTimestamp, lastTimestamp: t.lastTimestamp },
      })
      t.name = name
      t.sentCount = count
    } catch (err) {
      log.warn({ namespace: t.namespace, reason: t.body.reason, err: errorText(err) }, 'could not create event')
      t.sentCount = count // not retried: Events are best effort
    }
  }

  async #bump(t: Tracked): Promise<void> {
    const count = t.count
    try {
      await this.#client.request('PATCH', `/api/v1/namespaces/${encodeURIComponent(t.namespace)}/events/${encodeURIComponent(t.name as string)}`, {
        body: { count, lastTimestamp: t.lastTimestamp }, contentType: 'application/merge-patch+json',
      })
      t.sentCount = count
    } catch (err) {
      // Events expire (kube-apiserver --event-ttl, 1 h): start a new one.
      if (err instanceof KubeApiError && err.statusCode === 404) { t.name = null; await this.#create(t); return }
      log.warn({ namespace: t.namespace, reason: t.body.reason, err: errorText(err) }, 'could not update event')
      t.sentCount = count
    }
  }
}
