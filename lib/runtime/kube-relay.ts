// `serve --kubernetes --workers N`: one set of informers per replica, as a
// controller has. The primary lists and watches the API server (a KubeSource
// that builds no snapshots: relay()) and relays every change of its store to
// the workers over the cluster IPC channel; each worker's KubeSource runs no
// informer and is fed those changes (primaryFeed()), so everything downstream
// of the store — snapshots, the debounce, status-change notifications to the
// StatusWriter, lookup()/reference() for Events — is what it was. Writes
// (status, Events, the Lease) stay with the workers, each with its own client.
//
// The protocol, in order on each worker's channel (node's IPC keeps it):
//   worker → primary   sallyport:kube-subscribe        (its feed is listening)
//   primary → worker   sallyport:kube-changes × k      the whole store as puts, in batches
//   primary → worker   sallyport:kube-changes …        then every change as it happens
// A batch holds at most BATCH_OBJECTS objects or about BATCH_BYTES of JSON (one
// object over that goes alone): a store of thousands of Secrets and Pods is not
// one message. `synced` is true on the last batch of a send once the primary's
// informers have all synced: a worker's first snapshot waits for it, so it never
// compiles half a store. A worker that is replaced subscribes again and gets the
// whole store again. What the primary's informers remove — a deletion, a relist
// after 410 Gone that no longer has an object, a version no longer served —
// goes out as a removal, so every worker's store stays the primary's.

import type { Worker } from 'node:cluster'
import type { KubernetesObject } from '@kubernetes/client-node'
import { KubeClient } from '../config/kube-client.ts'
import { KubeSource, type KubeFeed, type KubeObject, type KubeStoreListener } from '../config/kube-source.ts'
import { KUBE_RESOURCES, type KubeResource } from '../config/kube-resources.ts'
import { logger } from '../observe/log.ts'

const log = logger('kube-relay')

export const KUBE_SUBSCRIBE = 'sallyport:kube-subscribe'
export const KUBE_CHANGES = 'sallyport:kube-changes'

/** Objects per message, at most. */
const BATCH_OBJECTS = 500
/** JSON characters per message, about (an object larger than this goes alone). */
const BATCH_BYTES = 1024 * 1024

/** One change on the wire: the resource as `group|kind`, the version it was read at, the object (a removal: its name and namespace). */
interface WireChange {
  readonly op: 'put' | 'remove'
  readonly resource: string
  readonly version: string
  readonly raw: Record<string, unknown>
}

export interface KubeSubscribeMessage { readonly type: typeof KUBE_SUBSCRIBE }
export interface KubeChangesMessage { readonly type: typeof KUBE_CHANGES; readonly changes: readonly WireChange[]; readonly synced: boolean }

interface Queued { readonly change: WireChange; readonly chars: number }

export interface KubeRelayOptions {
  /** A kubeconfig file; null: in-cluster service account. */
  readonly kubeconfig: string | null
  readonly namespaces: readonly string[]
  readonly labelSelector: string | null
}

/** The primary's side: the informers, and the workers subscribed to their changes. */
export class KubeRelay {
  readonly #client: KubeClient
  readonly #source: KubeSource
  readonly #workers = new Set<Worker>()
  #queue: Queued[] = []
  #flush: NodeJS.Immediate | null = null
  #synced = false
  /** The sync is not yet told to the workers subscribed. */
  #syncPending = false
  #closed = false

  constructor(options: KubeRelayOptions) {
    this.#client = options.kubeconfig === null ? KubeClient.inCluster() : KubeClient.fromFile(options.kubeconfig)
    this.#source = new KubeSource({ client: this.#client, namespaces: options.namespaces, labelSelector: options.labelSelector })
  }

  /** Start the informers (their changes are queued and sent on the next turn of the event loop, in batches). */
  start(): void {
    const listener: KubeStoreListener = {
      put: (obj) => this.#enqueue(putOf(obj)),
      remove: (obj) => this.#enqueue(removalOf(obj)),
      synced: () => { this.#synced = true; this.#syncPending = true; this.#schedule() },
    }
    log.info({ server: this.#client.server() }, 'kubernetes mode: the primary lists and watches the API server for its workers')
    this.#source.relay(listener)
  }

  /** `worker` asked for the store: the whole of it now, then every change. */
  subscribe(worker: Worker): void {
    if (this.#closed) return
    this.#flushNow() // the others first get what is pending: the store already has it
    this.#workers.add(worker)
    const changes: Queued[] = []
    for (const obj of this.#source.objects()) changes.push(queued(putOf(obj)))
    this.#send(worker, changes, this.#synced)
    log.debug({ worker: worker.id, objects: changes.length, synced: this.#synced }, 'worker subscribed to the store')
  }

  /** `worker` is gone. */
  unsubscribe(worker: Worker): void {
    this.#workers.delete(worker)
  }

  close(): void {
    this.#closed = true
    if (this.#flush !== null) clearImmediate(this.#flush)
    this.#flush = null
    this.#workers.clear()
    this.#source.close()
    this.#client.close()
  }

  #enqueue(change: WireChange): void {
    if (this.#closed) return
    this.#queue.push(queued(change))
    this.#schedule()
  }

  #schedule(): void {
    if (this.#flush !== null || this.#closed) return
    this.#flush = setImmediate(() => { this.#flush = null; this.#flushNow() })
  }

  #flushNow(): void {
    if (this.#flush !== null) clearImmediate(this.#flush)
    this.#flush = null
    if (this.#queue.length === 0 && !this.#syncPending) return
    const queue = this.#queue
    this.#queue = []
    this.#syncPending = false
    for (const worker of this.#workers) this.#send(worker, queue, this.#synced)
  }

  /** `changes` to `worker` in batches; `synced` on the last (an empty one when there are none). */
  #send(worker: Worker, changes: readonly Queued[], synced: boolean): void {
    let start = 0
    do {
      let end = start
      let chars = 0
      while (end < changes.length && end - start < BATCH_OBJECTS && (end === start || chars + (changes[end] as Queued).chars <= BATCH_BYTES)) {
        chars += (changes[end] as Queued).chars
        end++
      }
      const last = end >= changes.length
      const message: KubeChangesMessage = { type: KUBE_CHANGES, changes: changes.slice(start, end).map((q) => q.change), synced: last && synced }
      try {
        worker.send(message)
      } catch (err) {
        // Gone (its exit handler replaces it; the replacement subscribes afresh).
        log.debug({ worker: worker.id, err }, 'worker unreachable; no more changes to it')
        this.#workers.delete(worker)
        return
      }
      start = end
    } while (start < changes.length)
  }
}

function queued(change: WireChange): Queued {
  return { change, chars: change.op === 'put' ? JSON.stringify(change.raw).length : 0 }
}

function putOf(obj: KubeObject): WireChange {
  return { op: 'put', resource: resourceId(obj.resource), version: obj.version, raw: obj.raw }
}

function removalOf(obj: KubeObject): WireChange {
  const meta = obj.raw.metadata
  return { op: 'remove', resource: resourceId(obj.resource), version: obj.version, raw: { metadata: { name: meta?.name, ...(meta?.namespace === undefined ? {} : { namespace: meta.namespace }) } } }
}

function resourceId(res: KubeResource): string {
  return `${res.group}|${res.kind}`
}

const RESOURCE_BY_ID: ReadonlyMap<string, KubeResource> = new Map(KUBE_RESOURCES.map((r) => [resourceId(r), r]))

/**
 * A worker's side: the feed of its KubeSource, the primary's changes. It asks
 * for them once it listens (messages sent before would be lost).
 */
export function primaryFeed(): KubeFeed {
  let onMessage: ((msg: unknown) => void) | null = null
  let warned = false
  return {
    subscribe: (listener) => {
      onMessage = (msg) => {
        if (typeof msg !== 'object' || msg === null || (msg as { type?: unknown }).type !== KUBE_CHANGES) return
        const { changes, synced } = msg as { changes?: unknown; synced?: unknown }
        for (const c of Array.isArray(changes) ? changes as unknown[] : []) {
          const obj = parseChange(c)
          if (obj === null) {
            // It crossed a process boundary: checked, and a malformed one said once.
            if (!warned) log.warn({ change: JSON.stringify(c).slice(0, 200) }, 'malformed object change from the primary; ignored')
            warned = true
            continue
          }
          if ((c as WireChange).op === 'put') listener.put(obj)
          else listener.remove(obj)
        }
        if (synced === true) listener.synced()
      }
      process.on('message', onMessage)
      if (process.connected) process.send?.({ type: KUBE_SUBSCRIBE } satisfies KubeSubscribeMessage)
    },
    close: () => {
      if (onMessage !== null) process.off('message', onMessage)
      onMessage = null
    },
  }
}

/** A change as the primary sent it, checked; null: not one. */
function parseChange(c: unknown): KubeObject | null {
  if (typeof c !== 'object' || c === null) return null
  const { op, resource, version, raw } = c as Record<string, unknown>
  if ((op !== 'put' && op !== 'remove') || typeof resource !== 'string' || typeof version !== 'string') return null
  const res = RESOURCE_BY_ID.get(resource)
  if (res === undefined || !res.versions.includes(version)) return null
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return null
  const meta = (raw as { metadata?: unknown }).metadata
  if (typeof meta !== 'object' || meta === null || typeof (meta as { name?: unknown }).name !== 'string') return null
  return { resource: res, version, raw: raw as KubernetesObject & Record<string, unknown> }
}
