// F4: which Secrets, ConfigMaps, Services, EndpointSlices and
// ClusterTrustBundles a compile read, so that the runtime can skip a reload
// whose only changes are objects of those kinds that nothing read. Kubernetes
// mode watches them cluster-wide, and unrelated ones (Helm release Secrets,
// endpoint churn from any rollout) change all the time.
//
// Recorded, not derived from the specs: compile() gets the snapshot with those
// maps wrapped, and every get() or has() notes its key, found or not (a
// reference to a missing Secret is a reference: creating it reloads). Anything
// that reads a whole map (size, iteration) marks the kind as all referenced.
// EndpointSlices are read by their Service (kubernetes.io/service-name), which
// compile always looks up first: a slice is referenced when its Service is.

import type { ModelObject } from '../resources/model.ts'
import type { Snapshot } from '../resources/snapshot.ts'

/** The maps compile reads by key only; a change to an entry nothing read changes no table. */
const TRACKED = ['secrets', 'configMaps', 'services', 'clusterTrustBundles'] as const
type Tracked = (typeof TRACKED)[number]
/** Changes confined to these (and to unreferenced entries) skip the compile. */
const SKIPPABLE = new Set<string>([...TRACKED, 'endpointSlices'])

const RAW = Symbol('raw')

/** The keys of the tracked kinds that compiles read. */
export class References {
  readonly #keys = new Map<Tracked, Set<string>>(TRACKED.map((k) => [k, new Set<string>()]))
  readonly #all = new Set<Tracked>()

  /** The snapshot to compile: the same, with the tracked maps recording into this. */
  track(snapshot: Snapshot): Snapshot {
    const out: Record<string, unknown> = { ...snapshot }
    for (const kind of TRACKED) out[kind] = new RecordingMap(untracked(snapshot[kind]) as ReadonlyMap<string, unknown>, this.#keys.get(kind) as Set<string>, () => this.#all.add(kind))
    return out as unknown as Snapshot
  }

  /** Adds what an earlier compile read (the next compile reused its gateway plan and routes, so it did not read them again). */
  merge(earlier: References): void {
    for (const kind of TRACKED) for (const key of earlier.#keys.get(kind) as Set<string>) (this.#keys.get(kind) as Set<string>).add(key)
    for (const kind of earlier.#all) this.#all.add(kind)
  }

  referenced(kind: Tracked, key: string): boolean {
    return this.#all.has(kind) || (this.#keys.get(kind) as Set<string>).has(key)
  }

  /** Whether an EndpointSlice (keyed by the slice) is read: through its Service. */
  #sliceReferenced(slice: ModelObject | undefined): boolean {
    if (slice === undefined || slice.kind !== 'EndpointSlice') return slice !== undefined
    return slice.serviceName !== null && this.referenced('services', `${slice.meta.namespace}/${slice.serviceName}`)
  }

  /**
   * Whether `next` differs from `previous`, the snapshot compiled last, only
   * in objects of the skippable kinds that compile did not read: then the
   * table and status compiled from `previous` are those `next` would give.
   * False when nothing changed at all (a reload asked for compiles as before).
   */
  onlyUnreferenced(previous: Snapshot, next: Snapshot): boolean {
    let changed = false
    for (const name of Object.keys(next) as Array<keyof Snapshot>) {
      if (name === 'problems') continue
      const a = previous[name] as ReadonlyMap<string, ModelObject> | undefined
      const b = next[name] as ReadonlyMap<string, ModelObject>
      if (a === b) continue
      if (a === undefined) return false
      if (!SKIPPABLE.has(name)) {
        if (!sameEntries(a, b)) return false
        continue
      }
      const seen = (key: string, object: ModelObject | undefined): boolean =>
        name === 'endpointSlices' ? this.#sliceReferenced(object) : this.referenced(name as Tracked, key)
      for (const [key, object] of b) {
        const before = a.get(key)
        if (before === object) continue
        if (seen(key, object) || seen(key, before)) return false
        changed = true
      }
      for (const [key, before] of a) {
        if (b.has(key)) continue
        if (seen(key, before)) return false
        changed = true
      }
    }
    return changed && sameProblems(previous.problems, next.problems)
  }
}

/**
 * Whether `next` differs from `previous` in its Pods only (a cluster's churn:
 * a Pod created, bound, given an IP, ready, gone): the new table differs in
 * its client identities (and the endpoints of Backends selecting Pods) only.
 */
export function onlyPodsChanged(previous: Snapshot, next: Snapshot): boolean {
  if (previous.pods === next.pods || sameEntries(previous.pods, next.pods)) return false
  for (const name of Object.keys(next) as Array<keyof Snapshot>) {
    if (name === 'problems' || name === 'pods' || name === 'watchedNamespaces' || name === 'labelSelector') continue
    const a = previous[name] as ReadonlyMap<string, unknown> | undefined
    const b = next[name] as ReadonlyMap<string, unknown>
    if (a !== b && (a === undefined || !sameEntries(untracked(a), untracked(b)))) return false
  }
  return sameProblems(previous.problems, next.problems)
}

/** The map a tracked one wraps (compile-cache.ts compares these by identity). */
export function untracked<M extends ReadonlyMap<string, unknown>>(map: M): M {
  return map instanceof RecordingMap ? map[RAW] as unknown as M : map
}

class RecordingMap<V> implements ReadonlyMap<string, V> {
  readonly [RAW]: ReadonlyMap<string, V>
  readonly #keys: Set<string>
  readonly #all: () => void

  constructor(raw: ReadonlyMap<string, V>, keys: Set<string>, all: () => void) {
    this[RAW] = raw
    this.#keys = keys
    this.#all = all
  }

  get(key: string): V | undefined {
    this.#keys.add(key)
    return this[RAW].get(key)
  }

  has(key: string): boolean {
    this.#keys.add(key)
    return this[RAW].has(key)
  }

  get size(): number {
    this.#all()
    return this[RAW].size
  }

  forEach(callback: (value: V, key: string, map: ReadonlyMap<string, V>) => void, thisArg?: unknown): void {
    this.#all()
    this[RAW].forEach((v, k) => callback.call(thisArg, v, k, this))
  }

  entries(): MapIterator<[string, V]> {
    this.#all()
    return this[RAW].entries()
  }

  keys(): MapIterator<string> {
    this.#all()
    return this[RAW].keys()
  }

  values(): MapIterator<V> {
    this.#all()
    return this[RAW].values()
  }

  [Symbol.iterator](): MapIterator<[string, V]> {
    return this.entries()
  }
}

function sameEntries(a: ReadonlyMap<string, unknown>, b: ReadonlyMap<string, unknown>): boolean {
  if (a.size !== b.size) return false
  for (const [k, v] of b) if (a.get(k) !== v) return false
  return true
}

function sameProblems(a: Snapshot['problems'], b: Snapshot['problems']): boolean {
  return a === b || JSON.stringify(a) === JSON.stringify(b)
}
