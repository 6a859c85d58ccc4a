// The Kubernetes source: one informer (client-node's ListWatch) per watched
// resource — per namespace when scoped with --namespace — feeding a store of
// raw objects. Every change schedules a debounced snapshot.
//
// What the informers do for us (client-node cache.ts): list, then watch from the
// list's resourceVersion; on a clean end of a watch, resume from the last
// resourceVersion seen (events or BOOKMARKs); on 410 Gone (an ERROR event or an
// HTTP 410) forget it and relist, firing delete callbacks for what vanished.
// Not its reconnect delay: it doubles (1 s → 30 s) on every clean end without an
// event in between and never resets otherwise, so a proxy that closes quiet
// watches every few seconds, or an API server without bookmarks, left changes
// unseen for up to 30 s. Ours (reconnectDelay): a watch that was open a while
// or delivered anything resumes at once; one that ended at once with nothing is
// treated as a failure and backs off like one.
// What we add: the resourceVersion each list asks for, as client-go's reflector
// chooses it (#listFrom), chunked lists (limit/continue, 410 on an expired token restarts
// the list), bookmarks (kube-client.ts), exponential backoff with jitter after
// any other error (ListWatch stops on those and waits for start()), trying the
// next served version on 404 and treating "no version served" as "CRD not
// installed" (a log line, retried slowly — not fatal), and 403 as "this kind is
// empty for us" (logged, retried with backoff) so one missing RBAC rule does not
// keep the gateway from starting.
//
// Objects go through the same validateDocument + readObject as files (via
// buildSnapshot), one object at a time, cached by content: a status-only update
// (our own status writes come back as MODIFIED events) reuses the cached
// result and does not trigger a recompile. It goes to the status listener
// instead (onStatusChange): a status someone else erased is written again
// without compiling anything.
//
// With `serve --workers N` one set of informers serves the whole replica: the
// primary's source runs them without building snapshots (relay(): every change
// goes to a listener, kube-relay.ts sends it to the workers), and each worker's
// source runs none and is fed those changes instead (the `feed` option). The
// store, the snapshots built from it, the status-change notifications and
// lookup()/reference() work the same either way.

import { SerialPasses } from './serial-passes.ts'
import { performance } from 'node:perf_hooks'
import { createHash } from 'node:crypto'
import { ListWatch, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node'
import { logger } from '../observe/log.ts'
import { configReloadFailures } from '../observe/metrics.ts'
import { MAP_OF_KIND, emptySnapshot } from '../resources/snapshot.ts'
import { snapshotKeyOf } from '../resources/model.ts'
import { fieldsReadOf, statusRead } from '../resources/read-core.ts'
import type { Fields } from '../resources/read-fields.ts'
import { KubeApiError, WATCH_SILENCE_MS, errorText, isResourceVersionUnavailable, type KubeClient, type SilentWatch, type WatchOutcome } from './kube-client.ts'
import { KUBE_RESOURCES, apiVersion, resourcePath, type KubeResource } from './kube-resources.ts'
import { buildSnapshot } from './snapshot-builder.ts'
import type { ModelObject } from '../resources/model.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import type { Snapshot } from '../resources/snapshot.ts'

const log = logger('kube-source')

/** A watch that ends cleanly sooner than this, having delivered nothing, counts as a failed one (backoff). */
const SHORT_WATCH_MS = 250

/** Where a KubeSource's objects come from: its own informers (`client`), or a feed of another's changes (`feed`). */
export type KubeSourceOptions = KubeSourceSettings & ({ readonly client: KubeClient; readonly feed?: undefined } | { readonly feed: KubeFeed; readonly client?: undefined })

/**
 * What hears every change of a store, in order: an object put (added, changed,
 * or only its status changed), an object removed, and the first sync (every
 * kind listed, or found absent or forbidden).
 */
export interface KubeStoreListener {
  put(obj: KubeObject): void
  remove(obj: KubeObject): void
  synced(): void
}

/** A source of store changes for a KubeSource without informers (a --workers worker: the primary's, kube-relay.ts). */
export interface KubeFeed {
  /** From now on `listener` hears every change, the current store first (as puts). */
  subscribe(listener: KubeStoreListener): void
  close(): void
}

interface KubeSourceSettings {
  /** Namespaces to watch namespaced kinds in; empty: all namespaces. */
  readonly namespaces?: readonly string[]
  /** Label selector every watched object must match (the API server filters). */
  readonly labelSelector?: string | null
  /**
   * Debounce (issue 11, adaptive): the first change after a quiet period is
   * applied after `firstDelayMs` (default min(10, debounceMs)); a change that
   * follows another still pending waits for `debounceMs` of quiet (default
   * 50 ms), but never longer than `maxDelayMs` (default 250 ms) after the
   * first change of the burst, so a steady stream of events cannot starve
   * reloads.
   */
  readonly debounceMs?: number
  readonly firstDelayMs?: number
  readonly maxDelayMs?: number
  /** Items per list page (default 500). */
  readonly pageSize?: number
  /** Backoff after errors: first delay and cap (defaults 500 ms and 30 s), ±50 % jitter. */
  readonly backoffMs?: { readonly base: number; readonly max: number }
  /** How often a kind whose CRD is not installed is looked for again (default 5 min). */
  readonly notFoundRetryMs?: number
  /** A watch that receives nothing, not even a bookmark, for this long is given up and resumed (default WATCH_SILENCE_MS, 3 min). */
  readonly watchSilenceMs?: number
  /** Default: every kind the model reads (kube-resources.ts). */
  readonly resources?: readonly KubeResource[]
}

/** A raw object as the API server has it, with the resource it came from. */
export interface KubeObject {
  readonly resource: KubeResource
  readonly version: string
  readonly raw: KubernetesObject & Record<string, unknown>
}

type SnapshotListener = (snapshot: Snapshot) => void | Promise<void>
type StatusListener = (obj: KubeObject) => void
type InformerState = 'pending' | 'synced' | 'absent' | 'forbidden'

interface Built { readonly object: ModelObject | null; readonly problems: readonly ConfigProblem[] }

interface Entry {
  readonly key: string
  obj: KubeObject
  fingerprint: string
  built: Built | null
}

interface Informer {
  readonly resource: KubeResource
  readonly namespace: string | null
  versionIndex: number
  lw: ListWatch<KubernetesObject> | null
  state: InformerState
  failures: number
  /** Watches in a row that ended at once with nothing (reconnectDelay). */
  shortWatches: number
  timer: NodeJS.Timeout | null
  /** Entries this informer put in the store. */
  readonly keys: Set<string>
  /**
   * After a move to another version (the one it watched is no longer served):
   * the entries read at the old one that the new one has not listed yet. Those
   * still here when its first list is in are gone from the API server; null
   * otherwise.
   */
  unlisted: Set<string> | null
  /** The newest resourceVersion seen (the last list's, or a later watch event's); null before the first list. */
  lastResourceVersion: string | null
  /** The last list from lastResourceVersion was refused as unavailable: the next list is a quorum read. */
  resourceVersionUnavailable: boolean
}

export class KubeSource {
  /** null: fed (#feed), no informers. */
  readonly #client: KubeClient | null
  readonly #feed: KubeFeed | null
  /** The feed's source has synced (fed sources only). */
  #feedSynced = false
  /** relay(): hears every change (and no snapshot is built). */
  #relay: KubeStoreListener | null = null
  readonly #namespaces: readonly string[]
  /** The snapshot's watchedNamespaces: one object for the source's life, so compiles can tell it did not change. */
  readonly #watched: ReadonlySet<string> | null
  readonly #labelSelector: string | undefined
  readonly #debounceMs: number
  readonly #firstDelayMs: number
  readonly #maxDelayMs: number
  readonly #pageSize: number
  readonly #backoff: { readonly base: number; readonly max: number }
  readonly #notFoundRetryMs: number
  readonly #watchSilenceMs: number
  readonly #informers: Informer[] = []
  readonly #store = new Map<string, Entry>()
  /**
   * Issue 11: store keys by model kind, namespace and name, so the status
   * writer's lookup of each object compile reported on is not a scan of the
   * store (that was quadratic in the number of objects per status pass).
   */
  readonly #byName = new Map<string, Set<string>>()
  /** Store keys in snapshot order; null after a key came or went. */
  #sortedKeys: string[] | null = null
  #onSnapshot: SnapshotListener | null = null
  #onStatus: StatusListener | null = null
  #firstSync: (() => void) | null = null
  #synced = false
  #timer: NodeJS.Timeout | null = null
  /** When the first change of the pending burst arrived (performance.now()); null: no change pending. */
  #burstStart: number | null = null
  readonly #passes = new SerialPasses(() => this.#apply(), () => !this.#closed)
  #closed = false
  /** Reconnect delays pending (cleared on close, so no watch starts after it). */
  readonly #delays = new Set<NodeJS.Timeout>()

  constructor(options: KubeSourceOptions) {
    this.#client = options.client ?? null
    this.#feed = options.feed ?? null
    this.#namespaces = [...new Set(options.namespaces ?? [])].sort()
    this.#watched = this.#namespaces.length === 0 ? null : new Set(this.#namespaces)
    this.#labelSelector = options.labelSelector === null || options.labelSelector === '' ? undefined : options.labelSelector
    this.#debounceMs = options.debounceMs ?? 50
    this.#firstDelayMs = Math.min(options.firstDelayMs ?? 10, this.#debounceMs)
    this.#maxDelayMs = Math.max(options.maxDelayMs ?? 250, this.#debounceMs)
    this.#pageSize = options.pageSize ?? 500
    this.#backoff = options.backoffMs ?? { base: 500, max: 30_000 }
    this.#notFoundRetryMs = options.notFoundRetryMs ?? 5 * 60_000
    this.#watchSilenceMs = options.watchSilenceMs ?? WATCH_SILENCE_MS
    for (const resource of this.#feed !== null ? [] : options.resources ?? KUBE_RESOURCES) {
      const scopes: Array<string | null> = resource.namespaced && this.#namespaces.length > 0 ? [...this.#namespaces] : [null]
      for (const namespace of scopes) {
        this.#informers.push({ resource, namespace, versionIndex: 0, lw: null, state: 'pending', failures: 0, shortWatches: 0, timer: null, keys: new Set(), unlisted: null, lastResourceVersion: null, resourceVersionUnavailable: false })
      }
    }
  }

  /** Start every informer; resolves once each has listed (or found its kind absent or forbidden) and the first snapshot was handled. */
  async start(onSnapshot: SnapshotListener): Promise<void> {
    this.#onSnapshot = onSnapshot
    const first = new Promise<void>((resolve) => { this.#firstSync = resolve })
    if (this.#feed !== null) this.#feed.subscribe(this.#fedBy())
    for (const inf of this.#informers) this.#run(inf)
    await first
    await this.#schedule()
  }

  /**
   * Start every informer without building snapshots: `listener` hears every
   * change of the store (and the first sync). The primary of `serve --workers`
   * relays them to its workers (kube-relay.ts).
   */
  relay(listener: KubeStoreListener): void {
    this.#relay = listener
    for (const inf of this.#informers) this.#run(inf)
  }

  /** Called (after the first sync) for every change of an object's status alone: spec and metadata as they were. */
  onStatusChange(listener: StatusListener): void {
    this.#onStatus = listener
  }

  /** Build and hand on a snapshot now. */
  reload(): Promise<void> {
    if (!this.#synced) return Promise.resolve()
    return this.#schedule()
  }

  /** Synced at least once: every informer listed (or its kind is absent/forbidden). */
  synced(): boolean {
    return this.#synced
  }

  close(): void {
    this.#closed = true
    this.#feed?.close()
    if (this.#timer !== null) clearTimeout(this.#timer)
    for (const inf of this.#informers) {
      if (inf.timer !== null) clearTimeout(inf.timer)
      void inf.lw?.stop()
    }
    for (const timer of this.#delays) clearTimeout(timer) // their promises never settle: those informers stay stopped
    this.#delays.clear()
  }

  /**
   * The raw object behind a snapshot object (status writes compare with it). `kind` is the model kind.
   * Without an apiVersion, and several kinds share the model kind (Backends of three groups), the one
   * the snapshot serves: the first in store-key order (the others are duplicates).
   */
  lookup(modelKind: string, objApiVersion: string, namespace: string, name: string): KubeObject | null {
    let found: Entry | null = null
    for (const key of this.#byName.get(nameKey(modelKind, namespace, name)) ?? []) {
      const e = this.#store.get(key) as Entry
      if (objApiVersion !== '' && apiVersion(e.obj.resource.group, e.obj.version) !== objApiVersion) continue
      if (objApiVersion !== '') return e.obj
      if (found === null || key < found.key) found = e
    }
    return found?.obj ?? null
  }

  /**
   * The uid and resourceVersion of an object as the API server has it (an Event's
   * involvedObject: `kubectl describe` finds Events by uid), by its apiVersion and
   * kind as served; null when no such object was read.
   */
  reference(objApiVersion: string, kind: string, namespace: string, name: string): { readonly uid: string; readonly resourceVersion: string } | null {
    const slash = objApiVersion.lastIndexOf('/')
    const group = slash < 0 ? '' : objApiVersion.slice(0, slash)
    const meta = this.#store.get(`${group}|${kind}|${namespace}|${name}`)?.obj.raw.metadata
    if (meta?.uid === undefined) return null
    return { uid: meta.uid, resourceVersion: meta.resourceVersion ?? '' }
  }

  /** Every raw object, for status writers that walk them all. */
  objects(): Iterable<KubeObject> {
    return [...this.#store.values()].map((e) => e.obj)
  }

  /** The snapshot of the current store (cached per object; only changed objects are validated again). */
  snapshot(): Snapshot {
    const snap = emptySnapshot() as unknown as Record<string, unknown>
    const problems: ConfigProblem[] = []
    const maps = new Map<string, Map<string, ModelObject>>()
    this.#sortedKeys ??= [...this.#store.keys()].sort()
    for (const k of this.#sortedKeys) {
      const e = this.#store.get(k) as Entry
      e.built ??= buildOne(e.obj)
      problems.push(...e.built.problems)
      const object = e.built.object
      if (object === null) continue
      const mapName = MAP_OF_KIND[object.kind]
      let map = maps.get(mapName)
      if (map === undefined) maps.set(mapName, map = snap[mapName] as Map<string, ModelObject>)
      const key = snapshotKeyOf(object)
      const first = map.get(key)
      if (first !== undefined) {
        problems.push({ source: object.source, kind: object.kind, namespace: object.meta.namespace, name: object.meta.name, field: '',
          message: `duplicate ${object.kind} ${key}: already defined by ${first.apiVersion}; this one is ignored`, severity: 'error' })
        continue
      }
      map.set(key, object)
    }
    snap.problems = problems
    snap.watchedNamespaces = this.#watched
    snap.labelSelector = this.#labelSelector ?? null
    return snap as unknown as Snapshot
  }

  // ───────────── informers ─────────────

  /** What a feed tells a fed source. */
  #fedBy(): KubeStoreListener {
    return {
      put: (obj) => { if (!this.#closed) this.#putObject(storeKey(obj.resource, obj.raw), obj) },
      remove: (obj) => { if (!this.#closed) this.#removeKey(storeKey(obj.resource, obj.raw), obj) },
      synced: () => { this.#feedSynced = true; this.#checkFirstSync() },
    }
  }

  #run(inf: Informer): void {
    const client = this.#client
    if (this.#closed || client === null) return
    const res = inf.resource
    const version = res.versions[inf.versionIndex] as string
    const path = resourcePath(res, version, inf.namespace)
    // Pods, ConfigMaps and Secrets, watched cluster-wide, are kept (here and in
    // ListWatch's own cache) as the fields the model reads (read-core.ts
    // fieldsReadOf): a cluster has thousands of Pods of 5–10 KiB each, and
    // ConfigMaps of megabytes that sallyport never reads.
    const cut = fieldsReadOf(res.modelKind)
    const slim = cut === null ? null : (o: KubernetesObject): KubernetesObject => cut(o as unknown as Fields) as KubernetesObject
    const listFn = async (): Promise<KubernetesListObject<KubernetesObject>> => {
      const from = listFrom(inf)
      let list: KubernetesListObject<KubernetesObject>
      try {
        list = await this.#listAll(client, path, res.fieldSelector, from)
      } catch (err) {
        if (from === '' || !isResourceVersionUnavailable(err)) throw err
        // client-go's reflector: the version is gone (410) or this server's cache is behind it
        // (504 too large); list again at once from etcd, which has everything up to now.
        log.info({ resource: res.plural, group: res.group, namespace: inf.namespace ?? '*', resourceVersion: from, err: errorText(err) }, 'resourceVersion unavailable for the list; listing the latest (a quorum read)')
        inf.resourceVersionUnavailable = true
        list = await this.#listAll(client, path, res.fieldSelector, '')
      }
      inf.resourceVersionUnavailable = false
      const rv = list.metadata?.resourceVersion ?? ''
      if (rv !== '') inf.lastResourceVersion = rv
      if (slim !== null) list.items = list.items.map(slim)
      // ListWatch processes the items right after this promise settles (same
      // microtask chain); the immediate runs once they are in the store.
      setImmediate(() => this.#listed(inf))
      return list
    }
    const watcher = client.watcher({
      silenceMs: this.#watchSilenceMs, onSilent: (w) => { if (inf.lw === lw) this.#silent(inf, w) }, transform: slim,
      onResourceVersion: (rv) => { if (inf.lw === lw) inf.lastResourceVersion = rv },
    })
    const lw = new ListWatch<KubernetesObject>(path, watcher, listFn, false, this.#labelSelector, res.fieldSelector ?? undefined, {
      delayFn: () => this.#reconnectDelay(inf, watcher.lastWatch()),
    })
    inf.lw = lw
    const put = (raw: KubernetesObject): void => {
      if (inf.lw !== lw) return
      inf.failures = 0
      this.#put(inf, version, raw)
    }
    lw.on('add', put)
    lw.on('update', put)
    lw.on('delete', (raw) => { if (inf.lw === lw) this.#remove(inf, version, raw) })
    lw.on('error', (err: unknown) => { if (inf.lw === lw) this.#failed(inf, err) })
    void lw.start()
  }

  /**
   * ListWatch waits for this before it watches again after a clean end with no
   * event since the previous one (its own delay, passed in, is ignored): none
   * if the last watch was open a while or delivered anything, else the error
   * backoff.
   */
  #reconnectDelay(inf: Informer, last: WatchOutcome | null): Promise<void> {
    if (this.#closed) return new Promise<void>(() => {}) // closed: never watch again
    if (last === null || last.events > 0 || last.lastedMs >= SHORT_WATCH_MS) {
      inf.shortWatches = 0
      return Promise.resolve()
    }
    const delay = this.#backoffMs(inf.shortWatches)
    inf.shortWatches++
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => { this.#delays.delete(timer); resolve() }, delay)
      timer.unref()
      this.#delays.add(timer)
    })
  }

  /**
   * A watch given up for silence (ListWatch resumes it from the last
   * resourceVersion at once). From a server that sends bookmarks it means a
   * dead connection: a warning. From one that never sent any (an old API
   * server, a proxy that drops them) a quiet kind is simply quiet: debug only.
   */
  #silent(inf: Informer, w: SilentWatch): void {
    if (this.#closed) return
    const fields = { kind: inf.resource.kind, resource: inf.resource.plural, group: inf.resource.group, namespace: inf.namespace ?? '*', silentSeconds: Math.round(w.silentMs / 1000), events: w.events }
    if (!w.serverSendsBookmarks) {
      log.debug(fields, 'watch silent; watching again from the last resourceVersion (the server sends no bookmarks)')
      return
    }
    log.warn(fields, 'watch silent (no event, no bookmark): connection presumed dead; watching again from the last resourceVersion')
    configReloadFailures.inc({ source: 'kubernetes', reason: 'watch' })
  }

  /**
   * Every page of a list from `resourceVersion` (listFrom: '' is a quorum read).
   * "0" and '' are paged; a list not older than a given version is not: with a
   * limit (and no resourceVersionMatch) the API server reads etcd at exactly
   * that version, 410 once compacted, where without one its watch cache answers
   * (client-go's reflector turns paging off for it too).
   */
  async #listAll(client: KubeClient, path: string, fieldSelector: string | null, from: string): Promise<KubernetesListObject<KubernetesObject>> {
    const limit = from === '' || from === '0' ? String(this.#pageSize) : undefined
    for (let attempt = 0; ; attempt++) {
      const items: KubernetesObject[] = []
      let resourceVersion = ''
      let token: string | undefined
      try {
        do {
          const page = await client.request<KubernetesListObject<KubernetesObject>>('GET', path, {
            // A continued page carries the token alone: it pins the list's version.
            query: { limit, continue: token, resourceVersion: token === undefined ? from : undefined, labelSelector: this.#labelSelector, fieldSelector: fieldSelector ?? undefined },
          })
          items.push(...page.items)
          if (token === undefined) resourceVersion = page.metadata?.resourceVersion ?? ''
          token = page.metadata?._continue ?? (page.metadata as Record<string, string> | undefined)?.continue
          if (token === '') token = undefined
        } while (token !== undefined)
      } catch (err) {
        // The continue token expired between pages: start the list again (a new consistent snapshot).
        if (err instanceof KubeApiError && err.statusCode === 410 && token !== undefined && attempt < 3) continue
        throw err
      }
      return { metadata: { resourceVersion }, items }
    }
  }

  #listed(inf: Informer): void {
    const unlisted = inf.unlisted
    inf.unlisted = null
    for (const key of unlisted ?? []) {
      const raw = this.#store.get(key)?.obj.raw
      if (raw !== undefined) this.#remove(inf, inf.resource.versions[inf.versionIndex] as string, raw)
    }
    if (inf.state !== 'synced') log.info({ resource: inf.resource.plural, group: inf.resource.group, version: inf.resource.versions[inf.versionIndex], namespace: inf.namespace ?? '*', objects: inf.keys.size }, 'informer synced')
    inf.state = 'synced'
    inf.failures = 0
    this.#checkFirstSync()
    this.#changed()
  }

  #failed(inf: Informer, err: unknown): void {
    if (this.#closed) return
    const status = err instanceof KubeApiError ? err.statusCode : (err as { statusCode?: number }).statusCode ?? 0
    const fields = { resource: inf.resource.plural, group: inf.resource.group, version: inf.resource.versions[inf.versionIndex], namespace: inf.namespace ?? '*' }
    let delay: number
    if (status === 404 && inf.state === 'synced') {
      // The version it watched is no longer served: a CRD upgrade that dropped
      // it (GRPCRoute v1alpha2 in Gateway API v1.2), or the CRD uninstalled.
      // Look for a served version again, from the newest; what was read stays
      // served until that version's list says otherwise (#listed).
      log.info(fields, 'resource version no longer served; looking for a served version')
      void inf.lw?.stop()
      inf.lw = null
      inf.state = 'pending'
      inf.versionIndex = 0
      inf.unlisted = new Set(inf.keys)
      delay = this.#backoffMs(0)
    } else if (status === 404) {
      if (inf.versionIndex + 1 < inf.resource.versions.length) {
        inf.versionIndex++
        this.#run(inf)
        return
      }
      inf.state = 'absent'
      inf.versionIndex = 0
      if (inf.unlisted === null) {
        log.info({ ...fields, retryInMs: this.#notFoundRetryMs }, 'resource not served (CRD not installed?); skipping it')
        delay = this.#notFoundRetryMs
      } else {
        // It was served a moment ago: an API server that is still starting may answer 404
        // for a while, so look again with the error backoff (logged the first time only).
        delay = this.#backoffMs(inf.failures)
        ;(inf.failures === 0 ? log.info : log.debug).call(log, { ...fields, retryInMs: delay }, 'resource no longer served (CRD uninstalled?); looking for it again with backoff')
        inf.failures++
      }
    } else {
      if (status === 403) {
        // A fail-closed kind stays pending: counted as empty, its objects' protection
        // would silently be off (BackendTLSPolicy: TLS to its backends).
        const holds = inf.state === 'pending' && inf.resource.failClosed
        log.error({ ...fields, err: errorText(err) }, 'forbidden to list/watch resource; check the RBAC rules (deploy/kubernetes/rbac.yaml)' +
          (holds ? '. Nothing is served until it can be read: without it, traffic it secures would go out unsecured' : ''))
        if (inf.state === 'pending' && !holds) inf.state = 'forbidden'
      } else if (status === 401) {
        log.error({ ...fields, status, err: errorText(err) }, 'unauthorized: the API server refused our credentials (an expired or revoked token, a deleted service account, a kubeconfig without credentials); retrying with backoff')
      } else {
        // A 429 or 503 (API Priority and Fairness, a server starting or stopping): the server's Status message and the wait it asked for.
        const asked = err instanceof KubeApiError ? err.retryAfterMs : null
        log.warn({ ...fields, status, err: errorText(err), ...(asked === null ? {} : { retryAfterMs: asked }) }, 'watch failed; retrying with backoff')
      }
      configReloadFailures.inc({ source: 'kubernetes', reason: status === 403 ? 'forbidden' : 'watch' })
      delay = this.#backoffMs(inf.failures)
      // An API server shedding load (429, 503) says how long to wait: never sooner, and up
      // to a fifth later (jitter: replicas refused together do not come back together).
      const asked = err instanceof KubeApiError ? err.retryAfterMs : null
      if (asked !== null) delay = Math.max(delay, Math.round(asked * (1 + 0.2 * Math.random())))
      inf.failures++
    }
    this.#checkFirstSync()
    if (inf.timer !== null) clearTimeout(inf.timer)
    inf.timer = setTimeout(() => {
      inf.timer = null
      if (this.#closed) return
      // After a 404 the version probe starts over (a new CRD version may be served);
      // otherwise start() resumes the same informer from its last resourceVersion.
      if (inf.state === 'absent' || inf.lw === null) this.#run(inf)
      else void inf.lw.start()
    }, delay)
    inf.timer.unref()
  }

  /** Exponential backoff for the `attempt`-th try in a row (0: the first), capped, with ±50 % jitter. */
  #backoffMs(attempt: number): number {
    return Math.round(Math.min(this.#backoff.max, this.#backoff.base * 2 ** attempt) * (0.5 + Math.random()))
  }

  #checkFirstSync(): void {
    if (this.#synced) return
    if (this.#feed !== null ? !this.#feedSynced : this.#informers.some((i) => i.state === 'pending')) return
    this.#synced = true
    this.#relay?.synced()
    const resolve = this.#firstSync
    this.#firstSync = null
    resolve?.()
  }

  #put(inf: Informer, version: string, raw: KubernetesObject): void {
    const key = storeKey(inf.resource, raw)
    inf.unlisted?.delete(key)
    inf.keys.add(key)
    this.#putObject(key, { resource: inf.resource, version, raw: raw as KubernetesObject & Record<string, unknown> })
  }

  #putObject(key: string, obj: KubeObject): void {
    this.#relay?.put(obj)
    const raw = obj.raw
    const fingerprint = fingerprintOf(obj.resource.modelKind, raw)
    const old = this.#store.get(key)
    if (old !== undefined && old.fingerprint === fingerprint) {
      const before = old.obj.raw.status
      old.obj = obj // newer resourceVersion / status; the model object is unchanged
      const listener = this.#onStatus
      if (listener !== null && this.#synced && !this.#closed && JSON.stringify(before) !== JSON.stringify(obj.raw.status)) listener(obj)
      return
    }
    if (old === undefined) {
      this.#sortedKeys = null
      const byName = nameKey(obj.resource.modelKind, raw.metadata?.namespace ?? '', raw.metadata?.name ?? '')
      let keys = this.#byName.get(byName)
      if (keys === undefined) this.#byName.set(byName, keys = new Set())
      keys.add(key)
    }
    this.#store.set(key, { key, obj, fingerprint, built: null })
    this.#changed()
  }

  #remove(inf: Informer, version: string, raw: KubernetesObject): void {
    const key = storeKey(inf.resource, raw)
    inf.keys.delete(key)
    this.#removeKey(key, { resource: inf.resource, version, raw: raw as KubernetesObject & Record<string, unknown> })
  }

  #removeKey(key: string, obj: KubeObject): void {
    if (!this.#store.delete(key)) return
    this.#relay?.remove(obj)
    this.#sortedKeys = null
    const raw = obj.raw
    const byName = nameKey(obj.resource.modelKind, raw.metadata?.namespace ?? '', raw.metadata?.name ?? '')
    const keys = this.#byName.get(byName)
    keys?.delete(key)
    if (keys?.size === 0) this.#byName.delete(byName)
    this.#changed()
  }

  // ───────────── snapshots ─────────────

  #changed(): void {
    if (this.#closed || !this.#synced || this.#onSnapshot === null) return
    const now = performance.now()
    let delay: number
    if (this.#burstStart === null) {
      // Quiet until now: one edit is applied almost at once (watch event → serving, issue 11).
      this.#burstStart = now
      delay = this.#firstDelayMs
    } else {
      // More changes while one is pending: coalesce the burst, bounded by maxDelayMs.
      delay = Math.min(this.#debounceMs, this.#burstStart + this.#maxDelayMs - now)
    }
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = setTimeout(() => {
      this.#timer = null
      this.#burstStart = null
      void this.#schedule()
    }, Math.max(0, delay))
  }

  #schedule(): Promise<void> {
    return this.#passes.request()
  }

  async #apply(): Promise<void> {
    if (this.#closed || this.#onSnapshot === null) return
    const snapshot = this.snapshot()
    try {
      await this.#onSnapshot(snapshot)
    } catch (err) {
      log.error({ err }, 'applying configuration failed')
    }
  }
}


/**
 * The resourceVersion an informer lists from (client-go reflector's
 * relistResourceVersion). Its first list: "0", any version, which the API
 * server answers from its watch cache instead of a quorum read of etcd (what
 * every controller does; possibly a little stale, which is fine: the watch
 * that follows starts from the list's version and brings the rest). A relist
 * (the watch's history expired: 410): the last version seen, "not older than",
 * so the store never goes back in time, as "0" could on another API server
 * whose cache is behind. That refused as unavailable: '' (a quorum read).
 */
function listFrom(inf: Informer): string {
  if (inf.resourceVersionUnavailable) return ''
  return inf.lastResourceVersion ?? '0'
}

/** One object through the file path's validate + read (SourceRef `kube:<apiVersion>/<kind>`, doc 0). */
function buildOne(o: KubeObject): Built {
  const av = apiVersion(o.resource.group, o.version)
  // Watch events carry apiVersion/kind; list items of core kinds may not.
  const doc = { ...o.raw, apiVersion: o.raw.apiVersion ?? av, kind: o.raw.kind ?? o.resource.kind }
  const snap = buildSnapshot([{ source: { file: `kube:${av}/${o.resource.kind}`, doc: 0 }, doc }])
  let object: ModelObject | null = null
  for (const value of Object.values(snap)) {
    if (value instanceof Map && value.size > 0) object = value.values().next().value as ModelObject
  }
  return { object, problems: snap.problems }
}

function nameKey(modelKind: string, namespace: string, name: string): string {
  return `${modelKind}|${namespace}|${name}`
}

function storeKey(res: KubeResource, raw: KubernetesObject): string {
  return `${res.group}|${res.kind}|${raw.metadata?.namespace ?? ''}|${raw.metadata?.name ?? ''}`
}

/** Everything but bookkeeping and the status the model does not read: two objects with the same fingerprint read the same. */
function fingerprintOf(modelKind: string, raw: KubernetesObject): string {
  const { status: _status, metadata, ...rest } = raw as KubernetesObject & { status?: unknown }
  const { resourceVersion: _rv, managedFields: _mf, ...meta } = metadata ?? {}
  // A digest, not the text: the store holds one per object (a copy of every slice and Secret).
  return createHash('sha256').update(JSON.stringify([meta, rest, statusRead(modelKind, raw as unknown as Fields)])).digest('base64')
}
