// Writes compile's Status back to the API server — on the leader only.
//
// For every object read from the API server (not file-defined, not shadowed by
// a file) whose kind has a status subresource:
//   GatewayClass  status.conditions (compile reports ours only)
//   Gateway       status.conditions, status.listeners[] (attachedRoutes, supportedKinds, conditions),
//                 status.addresses (--publish-service's; removed when there are none or no flag);
//                 Gateways we serve only, never those of another controller's class
//   *Route        status.parents[]   (RouteParentStatus)
//   Backend       status.parents[]   (GEP-4488 BackendParentStatus: controller in `name`);
//                 Envoy Gateway's Backend: status.conditions, when used through a
//                 Gateway we serve (or invalid)
//   policies      status.ancestors[] (PolicyAncestorStatus: BackendTLSPolicy,
//                 BackendTrafficPolicy, EgressExtension)
// A parents/ancestors entry is ours when it carries our controllerName AND names
// a Gateway we serve (Status.servedGateways), or one we served that is gone
// since, until no object carries our entries for it. Two deployments serving
// different GatewayClasses share the
// controllerName sallyport.io/gateway-controller, so the controllerName alone
// would have each erase the other's entries. Every other entry is kept as it
// is, where it is: entry order is part of what is compared, and two writers
// that each moved the other's entries would undo each other forever.
// Conditions carry observedGeneration; lastTransitionTime is kept while a
// condition's status stays the same (metav1.Condition semantics).
//
// The desired status is compared with what the object has (the informer's copy,
// or what we last wrote when the informer has not seen our write yet): equal
// means no request. Writes replace the status subresource (PUT .../status) with
// the resourceVersion we based them on; a 409 re-reads the object and tries
// again, so a concurrent writer (another controller's entry) is never lost.
//
// A status someone else changed (the informer sees a status-only update:
// statusChanged) is checked again without a compile; our own writes coming back
// are recognised by their resourceVersion. An object whose status we keep
// writing back, unchanged on our side, because another writer keeps changing it
// (two deployments that see a shared Envoy Backend differently, another
// controller) is written at most REPAIRS_BEFORE_HOLD times, then left alone for
// REPAIR_HOLD_MS, so a disagreement costs a write a minute, not a write loop.
//
// Each reload hands over the status of every object, but few change: an object
// whose compiled status (compared field by field) and resourceVersion are what
// they were when the writer last found it up to date (or wrote it) is skipped
// without rebuilding its desired status — that cost ~1 ms per object and, at
// 5,000 routes, held the event loop for seconds after each reload (issue 11).
// A write by anyone moves the resourceVersion, so it is seen.
//
// A write that fails (403: the ClusterRole lacks `httproutes/status`; 422: a
// CRD's status schema refuses the body; 5xx: a failing server or admission
// webhook) backs off per object, as client-go's workqueue rate limiter does
// per item: the object is tried again after FAILURE_BACKOFF.base, doubling to
// FAILURE_BACKOFF.max, and not at every compile in between; a success, or a
// different compiled status for it, starts it afresh. Each object's failure is
// logged once per change of error (at most FAILURE_LINES_PER_PASS of them per
// pass), and each pass that failed writes one summary line. A whole pass
// retried every 5 s with a line per object cost 40 PUTs and 40 log lines a
// second at 200 routes, forever. A 429 is not the object's fault: it holds
// the whole pass for the server's Retry-After instead.

import { SerialPasses } from '../config/serial-passes.ts'
import { logger } from '../observe/log.ts'
import { kubeStatusWrites } from '../observe/metrics.ts'
import { KubeApiError, errorText, type KubeClient } from '../config/kube-client.ts'
import { isKubeSourced } from '../config/kube-combined-source.ts'
import { apiVersion, objectPath } from '../config/kube-resources.ts'
import type { KubeObject, KubeSource } from '../config/kube-source.ts'
import type { Condition, ObjectStatus, ParentStatus, Status } from '../compile/status.ts'
import type { Snapshot } from '../resources/snapshot.ts'

const log = logger('status-writer')

const ROUTE_KINDS = new Set(['HTTPRoute', 'GRPCRoute', 'TCPRoute', 'TLSRoute'])
const POLICY_KINDS = new Set(['BackendTLSPolicy', 'BackendTrafficPolicy', 'EgressExtension'])
const MAX_ATTEMPTS = 5
/**
 * The most entries the CRDs' schemas take: Gateway API's RouteStatus.parents
 * (32) and PolicyStatus.ancestors (16; BackendTLSPolicy, Envoy Gateway's
 * policies). A longer list is refused whole (422). The spec: when the list is
 * full, add no further entries.
 */
const MAX_ROUTE_PARENTS = 32
const MAX_POLICY_ANCESTORS = 16
/** GatewayStatus.addresses: maxItems 16 (a Service with more external IPs would have the whole write refused). */
const MAX_GATEWAY_ADDRESSES = 16
const CONCURRENCY = 4
/** Per-object backoff after a failed write: the first delay, doubling up to the cap (client-go's workqueue, 5 ms → 1000 s, scaled to status writes). */
const FAILURE_BACKOFF = { base: 5000, max: 5 * 60_000 }
/** Per-object failure lines one pass writes at most; the rest wait for a later pass (the summary line counts them all). */
const FAILURE_LINES_PER_PASS = 10
/** After a 429 without Retry-After (client-go's default wait for one). */
const THROTTLED_RETRY_MS = 1000
const GATEWAY_GROUP = 'gateway.networking.k8s.io'
/** Writes of the same compiled status over someone else's change before we hold off... */
const REPAIRS_BEFORE_HOLD = 3
/** ...for this long (and count again from zero after it). */
const REPAIR_HOLD_MS = 60_000

export interface StatusWriterOptions {
  readonly client: KubeClient
  readonly source: Pick<KubeSource, 'lookup'> & Partial<Pick<KubeSource, 'objects'>>
  readonly controllerName: string
  /** Writes happen only while this says true. */
  readonly isLeader: () => boolean
  readonly now?: () => Date
  /** Per-object backoff after a failed write (default 5 s doubling to 5 min). */
  readonly backoffMs?: { readonly base: number; readonly max: number }
}

type Json = Record<string, unknown>

/** Our last write: the resourceVersion it was based on and the one it produced, what it wrote, and for which compiled status. */
interface Written { readonly basedOn: string; readonly rv: string; readonly status: Json; readonly compiled: ObjectStatus }

/** Writes that put our unchanged status back over someone else's change. */
interface Repairs { count: number; at: number; warned: boolean }

/** An object whose last write failed. */
interface Failing {
  /** The compiled status that failed to be written: another one is tried at once. */
  readonly compiled: ObjectStatus
  /** Failures in a row. */
  attempts: number
  /** performance.now() before which it is not tried again. */
  until: number
  /** The error last logged for it (`status reason`), or null: not logged yet. */
  logged: string | null
}

export class StatusWriter {
  readonly #client: KubeClient
  readonly #source: Pick<KubeSource, 'lookup'> & Partial<Pick<KubeSource, 'objects'>>
  readonly #controller: string
  readonly #isLeader: () => boolean
  readonly #now: () => Date
  #latest: { status: Status; snapshot: Snapshot } | null = null
  readonly #passes = new SerialPasses(() => this.#pass())
  #retry: NodeJS.Timeout | null = null
  /** Until when (performance.now()) the API server asked us to hold writes back (a 429's Retry-After). */
  #heldUntil = 0
  #wake: { timer: NodeJS.Timeout; at: number } | null = null
  readonly #written = new Map<string, Written>()
  readonly #repairs = new Map<string, Repairs>()
  readonly #failing = new Map<string, Failing>()
  readonly #backoff: { readonly base: number; readonly max: number }
  /** Gateways (`namespace/name`) the latest compile served. */
  #served: ReadonlySet<string> = new Set()
  /**
   * Gateways we served that are gone since (deleted, or their class is another
   * controller's): our entries for them are ours to remove, until none is left
   * (#forgetCleanedUp).
   */
  readonly #retired = new Set<string>()
  /** Keys of the objects the latest pass took up: status changes of other objects are not ours to look at. */
  #known = new Set<string>()
  /** key → the resourceVersion and compiled status last found up to date. */
  #verified = new Map<string, { readonly rv: string; readonly status: ObjectStatus }>()
  /** Status PUTs sent (tests and the log). */
  writes = 0

  constructor(options: StatusWriterOptions) {
    this.#client = options.client
    this.#source = options.source
    this.#controller = options.controllerName
    this.#isLeader = options.isLeader
    this.#now = options.now ?? (() => new Date())
    this.#backoff = options.backoffMs ?? FAILURE_BACKOFF
  }

  /** A new compile result: write what changed (if leader). */
  update(status: Status, snapshot: Snapshot): void {
    for (const key of this.#served) if (!status.servedGateways.has(key)) this.#retired.add(key)
    this.#served = status.servedGateways
    for (const key of this.#retired) {
      const g = snapshot.gateways.get(key)
      const cls = g === undefined ? undefined : snapshot.gatewayClasses.get(g.gatewayClassName)
      // Still there under a class that may be another sallyport's (or one we cannot see): not ours to clean up.
      if (this.#served.has(key) || (g !== undefined && (cls === undefined || cls.controllerName === this.#controller))) this.#retired.delete(key)
    }
    // A follower writes nothing, so its passes never get this far: the leader's cleanup, seen by its informer, is what lets it forget.
    this.#forgetCleanedUp(this.#source.objects?.() ?? [])
    this.#latest = { status, snapshot }
    void this.sync()
  }

  /**
   * The informer saw a status-only change of an object: check its status again
   * (someone may have erased our entries), unless the change is our own write
   * coming back or the object is none of ours (another controller's status
   * churn must not cost us a pass per event).
   */
  statusChanged(obj: KubeObject): void {
    if (this.#latest === null || !this.#isLeader()) return
    const meta = obj.raw.metadata
    const key = `${obj.resource.group}/${obj.resource.kind}/${meta?.namespace ?? ''}/${meta?.name ?? ''}`
    if (this.#written.get(key)?.rv === String(meta?.resourceVersion ?? '')) return
    if (!this.#known.has(key) && !this.#hasOurEntries(obj.raw.status, meta?.namespace ?? '')) return
    void this.sync()
  }

  /** Write the latest status now if leader (call on becoming leader). Resolves when the pass is done. */
  /** Objects the writer keeps a record of (its last writes, repair counts, verified statuses): bounded by those it reports on. */
  tracked(): number {
    return new Set([...this.#written.keys(), ...this.#repairs.keys(), ...this.#verified.keys(), ...this.#failing.keys()]).size
  }

  /** Forget every object's backoff (on becoming leader: what failed in an earlier term, an API server outage say, is tried at once). */
  resetBackoff(): void {
    this.#failing.clear()
  }

  sync(): Promise<void> {
    return this.#passes.request()
  }

  close(): void {
    if (this.#retry !== null) clearTimeout(this.#retry)
    if (this.#wake !== null) clearTimeout(this.#wake.timer)
    this.#latest = null
  }

  async #pass(): Promise<void> {
    const latest = this.#latest
    if (latest === null || !this.#isLeader()) return
    const held = this.#heldUntil - performance.now()
    if (held > 0) return this.#retryIn(held) // passes asked for meanwhile (compiles) wait too
    const fromFiles = fileDefined(latest.snapshot)
    const work: Array<{ status: ObjectStatus; obj: KubeObject }> = []
    for (const s of latest.status.objects.values()) {
      if (fromFiles.size > 0 && fromFiles.has(`${s.kind}/${s.namespace}/${s.name}`)) continue
      // Compile also reports why it does not serve the Gateways of the class we were
      // pointed at when that class is another controller's (log, /config_dump); their
      // status is that controller's to write, and ours would flap with it.
      if (s.kind === 'Gateway' && !this.#served.has(`${s.namespace}/${s.name}`)) continue
      const obj = this.#source.lookup(s.kind, s.apiVersion, s.namespace, s.name)
      if (obj === null || !obj.resource.status) continue
      if (s.kind === 'Backend' && obj.resource.group === 'gateway.envoyproxy.io' && !this.#ownsConditions(s)) continue
      work.push({ status: s, obj })
    }
    // Gateway API: a controller removes its entries when the object is no longer
    // its concern (a route detached from our Gateways, a policy whose targets
    // went away). Objects compile did not report on that still carry our
    // entries get them removed.
    const reported = new Set(work.map((w) => w.obj))
    const stale: KubeObject[] = []
    for (const obj of this.#source.objects?.() ?? []) {
      if (!obj.resource.status || reported.has(obj) || !this.#hasOurEntries(obj.raw.status, obj.raw.metadata?.namespace ?? '')) continue
      const meta = obj.raw.metadata
      if (fromFiles.has(`${obj.resource.modelKind}/${meta?.namespace ?? ''}/${meta?.name ?? ''}`)) continue
      stale.push(obj)
    }
    for (const obj of stale) {
      const meta = obj.raw.metadata
      work.push({ obj, status: { kind: obj.resource.modelKind, apiVersion: apiVersion(obj.resource.group, obj.version), namespace: meta?.namespace ?? '', name: meta?.name ?? '', generation: meta?.generation ?? 0, conditions: [], parents: [], listeners: [] } })
    }
    this.#known = new Set(work.map((w) => keyOf(w.obj, w.status)))
    const verified = this.#verified
    const keep = new Map<string, { readonly rv: string; readonly status: ObjectStatus }>()
    this.#verified = keep // entries of objects gone from this pass are dropped
    let failed = 0
    let recovered = 0
    let lines = 0
    let first: string | null = null
    const started = performance.now()
    /** Objects that failed in this pass, with their delay: it counts from the pass's end, so those that failed together are due together (one pass, one summary line), each a full delay after its failure however long the pass took. */
    const backingOff: Array<{ readonly f: Failing; readonly delay: number }> = []
    let index = 0
    // An API server that sheds load (429, API Priority and Fairness) ends the pass:
    // the rest waits for the retry, as long as it asked (Retry-After), rather than
    // being refused one by one.
    let throttled: number | null = null
    const worker = async (): Promise<void> => {
      while (index < work.length && throttled === null && this.#isLeader()) {
        const item = work[index++] as { status: ObjectStatus; obj: KubeObject }
        const key = keyOf(item.obj, item.status)
        const rv = String(item.obj.raw.metadata?.resourceVersion ?? '')
        const seen = verified.get(key)
        if (seen !== undefined && seen.rv === rv && sameData(seen.status, item.status)) {
          keep.set(key, seen)
          continue
        }
        const failing = this.#failing.get(key)
        if (failing !== undefined && !sameData(failing.compiled, item.status)) this.#failing.delete(key) // our view changed: try it now
        else if (failing !== undefined && started < failing.until) continue // backing off
        try {
          keep.set(key, { rv: await this.#write(item.status, item.obj), status: item.status })
          if (this.#failing.delete(key)) recovered++
        } catch (err) {
          kubeStatusWrites.inc({ kind: item.status.kind, result: 'failed' })
          if (err instanceof KubeApiError && err.statusCode === 429) {
            // The server is shedding load, not refusing this object: the whole pass waits.
            throttled = err.retryAfterMs ?? THROTTLED_RETRY_MS
            log.warn({ kind: item.status.kind, namespace: item.status.namespace, name: item.status.name, retryInMs: throttled }, 'status writes throttled by the API server (429); holding them back')
            continue
          }
          failed++
          first ??= `${item.status.kind} ${item.status.namespace === '' ? '' : `${item.status.namespace}/`}${item.status.name}: ${errorText(err)}`
          const noted = this.#failed(key, item.status, err, lines < FAILURE_LINES_PER_PASS)
          backingOff.push(noted)
          if (noted.logged) lines++
        }
      }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, worker))
    this.#forgetCleanedUp(this.#source.objects?.() ?? work.map((w) => w.obj))
    // What we remember per object (our last write, repair counts) goes with the
    // object: deleted, or no longer one we report on. Kept, it grew with every
    // object a long-lived cluster ever had.
    const known = this.#known
    for (const key of this.#written.keys()) if (!known.has(key)) this.#written.delete(key)
    for (const key of this.#repairs.keys()) if (!known.has(key)) this.#repairs.delete(key)
    const ended = performance.now()
    for (const { f, delay } of backingOff) f.until = ended + delay
    let next = Number.POSITIVE_INFINITY
    for (const [key, f] of this.#failing) {
      if (!known.has(key)) this.#failing.delete(key)
      else if (f.until < next) next = f.until
    }
    if (failed > 0) {
      log.warn({ failing: this.#failing.size, failed, first, retryInSeconds: Math.max(0, Math.round((next - performance.now()) / 1000)) }, 'status writes failing')
    } else if (recovered > 0) {
      log.info({ recovered, failing: this.#failing.size }, 'status writes succeed again')
    }
    if (throttled !== null) {
      this.#heldUntil = performance.now() + throttled
      this.#retryIn(throttled)
    }
    if (next !== Number.POSITIVE_INFINITY) this.#wakeAt(next) // the first object due again; compiles in between skip those backing off
  }

  /**
   * Note a failed write: the object's next delay (base, doubling to max; the
   * pass sets when it is due), and the failure logged if its error is not the
   * one already logged for it and `mayLog`.
   */
  #failed(key: string, status: ObjectStatus, err: unknown, mayLog: boolean): { readonly f: Failing; readonly delay: number; readonly logged: boolean } {
    let f = this.#failing.get(key)
    if (f === undefined) this.#failing.set(key, f = { compiled: status, attempts: 0, until: Number.POSITIVE_INFINITY, logged: null })
    f.attempts++
    const delay = Math.min(this.#backoff.max, this.#backoff.base * 2 ** Math.min(f.attempts - 1, 30))
    const what = err instanceof KubeApiError ? `${err.statusCode} ${err.reason}` : errorText(err)
    if (what === f.logged || !mayLog) {
      log.debug({ kind: status.kind, namespace: status.namespace, name: status.name, err: errorText(err), attempts: f.attempts }, 'status write failed again')
      return { f, delay, logged: false }
    }
    f.logged = what
    log.warn({ kind: status.kind, namespace: status.namespace, name: status.name, err: errorText(err), retryInSeconds: Math.round(delay / 1000) }, 'status write failed')
    return { f, delay, logged: true }
  }

  #retryIn(ms: number): void {
    if (this.#retry !== null) return // one due already (if before a hold ends, its pass waits on)
    this.#retry = setTimeout(() => { this.#retry = null; void this.sync() }, ms)
    this.#retry.unref()
  }

  /** Brings the object's status up to date; resolves to the resourceVersion it then has ('' if unknown). */
  async #write(status: ObjectStatus, obj: KubeObject): Promise<string> {
    const path = `${objectPath(obj.resource, obj.version, status.namespace, status.name)}/status`
    const key = keyOf(obj, status)
    let raw = obj.raw as Json
    for (let attempt = 1; ; attempt++) {
      const meta = (raw.metadata ?? {}) as Json
      const rv = String(meta.resourceVersion ?? '')
      // The informer may not have seen our last write yet: compare with it then.
      const written = this.#written.get(key)
      const current = written !== undefined && written.basedOn === rv ? written.status : ((raw.status ?? {}) as Json)
      const generation = typeof meta.generation === 'number' ? meta.generation : 0
      const desired = this.#desired(status, obj, raw, current, generation)
      // Up to date. The informer's copy may still be the one our last write was based on: then what we wrote is current.
      if (canonical(desired) === canonical(current)) return written !== undefined && written.basedOn === rv ? written.rv : rv
      if (attempt === 1 && this.#holdRepair(key, status, written)) return ''
      try {
        const body = { apiVersion: apiVersion(obj.resource.group, obj.version), kind: obj.resource.kind, metadata: { name: status.name, ...(obj.resource.namespaced ? { namespace: status.namespace } : {}), resourceVersion: written?.basedOn === rv ? written.rv : rv }, status: desired }
        const result = await this.#client.request<Json>('PUT', path, { body })
        this.writes++
        kubeStatusWrites.inc({ kind: status.kind, result: 'written' })
        const newRv = String((result?.metadata as Json | undefined)?.resourceVersion ?? '')
        this.#written.set(key, { basedOn: rv, rv: newRv, status: desired, compiled: status })
        log.debug({ kind: status.kind, namespace: status.namespace, name: status.name }, 'status written')
        return newRv
      } catch (err) {
        if (!(err instanceof KubeApiError)) throw err
        if (err.statusCode === 404) return '' // deleted meanwhile
        if (err.statusCode !== 409 || attempt >= MAX_ATTEMPTS) throw err
        // Conflict: someone (another controller, an edit) wrote since; read fresh and redo.
        this.#written.delete(key)
        try {
          raw = await this.#client.request<Json>('GET', objectPath(obj.resource, obj.version, status.namespace, status.name))
        } catch (readErr) {
          if (readErr instanceof KubeApiError && readErr.statusCode === 404) return '' // deleted since the conflict
          throw readErr
        }
      }
    }
  }

  /**
   * Whether to leave an object alone instead of writing: true once we wrote the
   * same compiled status back over someone else's change REPAIRS_BEFORE_HOLD
   * times within REPAIR_HOLD_MS (the pass after the hold writes again).
   */
  #holdRepair(key: string, status: ObjectStatus, written: Written | undefined): boolean {
    if (written === undefined || !sameData(written.compiled, status)) {
      this.#repairs.delete(key) // our view changed (or first write): not a repair
      return false
    }
    const now = performance.now()
    const r = this.#repairs.get(key)
    if (r === undefined || now - r.at >= REPAIR_HOLD_MS) {
      this.#repairs.set(key, { count: 1, at: now, warned: false })
      return false
    }
    if (r.count < REPAIRS_BEFORE_HOLD) {
      r.count++
      r.at = now
      return false
    }
    if (!r.warned) {
      r.warned = true
      log.warn({ kind: status.kind, namespace: status.namespace, name: status.name, holdSeconds: REPAIR_HOLD_MS / 1000 },
        'another writer keeps changing this status back; leaving it alone for a while (two deployments serving the same objects differently?)')
    }
    this.#wakeAt(r.at + REPAIR_HOLD_MS)
    return true
  }

  /** A pass at `at` (performance.now() time), unless one is due earlier. */
  #wakeAt(at: number): void {
    if (this.#wake !== null && this.#wake.at <= at) return
    if (this.#wake !== null) clearTimeout(this.#wake.timer)
    const timer = setTimeout(() => { this.#wake = null; void this.sync() }, Math.max(0, at - performance.now()) + 10)
    timer.unref()
    this.#wake = { timer, at }
  }

  /** Whether a parent/ancestor ref names a Gateway whose entries are ours (one we serve, or served and is gone). */
  #claims(ref: unknown, namespace: string): boolean {
    const key = gatewayOf(ref, namespace)
    return key !== null && (this.#served.has(key) || this.#retired.has(key))
  }

  /**
   * Retired Gateways leave once their cleanup is done: no object carries an
   * entry of ours naming them any more (as we last wrote it, where the
   * informer has not seen our write yet). Kept for ever, the set grew with
   * every Gateway a long-lived cluster ever retired, and a Gateway of that
   * name made later that is not ours (another deployment's, under a class or
   * labels we do not see) had that deployment's entries taken for ours. One
   * walk over the objects, and only while some Gateway is retired.
   */
  #forgetCleanedUp(objects: Iterable<KubeObject>): void {
    if (this.#retired.size === 0) return
    const named = new Set<string>()
    for (const obj of objects) {
      if (!obj.resource.status) continue
      const meta = obj.raw.metadata
      const namespace = meta?.namespace ?? ''
      const written = this.#written.get(`${obj.resource.group}/${obj.resource.kind}/${namespace}/${meta?.name ?? ''}`)
      const status = (written !== undefined && written.basedOn === String(meta?.resourceVersion ?? '') ? written.status : obj.raw.status) as unknown
      if (typeof status !== 'object' || status === null) continue
      const s = status as Json
      for (const e of [s.parents, s.ancestors].filter(Array.isArray).flat() as Json[]) {
        if (e.controllerName !== this.#controller && e.name !== this.#controller) continue
        const key = gatewayOf(e.parentRef ?? e.ancestorRef, namespace)
        if (key !== null && this.#retired.has(key)) named.add(key)
      }
    }
    for (const key of this.#retired) if (!named.has(key)) this.#retired.delete(key)
  }

  #desired(s: ObjectStatus, obj: KubeObject, raw: Json, current: Json, generation: number): Json {
    const kind = s.kind
    const cond = (list: readonly Condition[], existing: unknown): Json[] => this.#conditions(list, existing, generation)
    const curConditions = current.conditions
    if (kind === 'GatewayClass') return { ...current, conditions: cond(s.conditions, curConditions) }
    if (kind === 'Gateway') {
      const curListeners = Array.isArray(current.listeners) ? current.listeners as Json[] : []
      const out: Json = {
        ...current,
        conditions: cond(s.conditions, curConditions),
        listeners: s.listeners.map((l) => ({
          name: l.name,
          supportedKinds: l.supportedKinds.map((k) => ({ group: k.group, kind: k.kind })),
          attachedRoutes: l.attachedRoutes,
          conditions: cond(l.conditions, curListeners.find((c) => c.name === l.name)?.conditions),
        })),
      }
      // status.addresses is the controller's, and we are this Gateway's: the
      // --publish-service Service's addresses, or no field when there are none
      // (no flag, no Service, none yet). Left alone, what an earlier run wrote
      // would go on naming an address nothing binds any more.
      const addresses = s.addresses ?? []
      if (addresses.length > MAX_GATEWAY_ADDRESSES) {
        log.warn({ kind: s.kind, namespace: s.namespace, name: s.name, max: MAX_GATEWAY_ADDRESSES, left: addresses.slice(MAX_GATEWAY_ADDRESSES).map((a) => a.value) },
          'status list full (the CRD takes no more entries): these addresses are not listed')
      }
      if (addresses.length > 0) out.addresses = addresses.slice(0, MAX_GATEWAY_ADDRESSES).map((a) => ({ type: a.type, value: a.value }))
      else delete out.addresses
      return out
    }
    const ns = s.namespace
    const parents = (s.parents.length > 0 || s.conditions.length === 0 ? s.parents : this.#fallbackParents(s, raw))
      .filter((p) => this.#claims(p.parentRef, ns))
    if (ROUTE_KINDS.has(kind)) {
      const isOurs = (e: Json): boolean => e.controllerName === this.#controller && this.#claims(e.parentRef, ns)
      return { ...current, parents: this.#capped(s, mergeEntries(current.parents, isOurs, 'parentRef', ns, parents.map((p) => ({ parentRef: parentRef(p.parentRef), controllerName: this.#controller, conditions: p.conditions })), cond, MAX_ROUTE_PARENTS)) }
    }
    if (kind === 'Backend' && obj.resource.group === 'gateway.envoyproxy.io') {
      return { ...current, conditions: cond(s.conditions, curConditions) }
    }
    if (kind === 'Backend') {
      // GEP-4488 BackendParentStatus names the controller in `name`.
      const isOurs = (e: Json): boolean => e.name === this.#controller && this.#claims(e.parentRef, ns)
      return { ...current, parents: mergeEntries(current.parents, isOurs, 'parentRef', ns, parents.map((p) => ({ name: this.#controller, parentRef: parentRef(p.parentRef), conditions: p.conditions })), cond, Number.POSITIVE_INFINITY).entries }
    }
    if (POLICY_KINDS.has(kind)) {
      const isOurs = (e: Json): boolean => e.controllerName === this.#controller && this.#claims(e.ancestorRef, ns)
      return { ...current, ancestors: this.#capped(s, mergeEntries(current.ancestors, isOurs, 'ancestorRef', ns, parents.map((p) => ({ ancestorRef: parentRef(p.parentRef), controllerName: this.#controller, conditions: p.conditions })), cond, MAX_POLICY_ANCESTORS)) }
    }
    return { ...current, conditions: cond(s.conditions, curConditions) }
  }

  /** The merged entries; the ones a full list left out are logged (once per compiled status: a written one is not built again). */
  #capped(s: ObjectStatus, merged: { readonly entries: Json[]; readonly left: readonly Json[] }): Json[] {
    if (merged.left.length > 0) {
      const refs = merged.left.map((e) => gatewayOf(e.parentRef ?? e.ancestorRef, s.namespace))
      log.warn({ kind: s.kind, namespace: s.namespace, name: s.name, max: merged.entries.length, left: refs },
        'status list full (the CRD takes no more entries): these Gateways are not listed')
    }
    return merged.entries
  }

  /** Whether an Envoy Gateway Backend's conditions (one list, no per-Gateway entries) are ours to write. */
  #ownsConditions(s: ObjectStatus): boolean {
    // Used through a Gateway we serve; or dropped as invalid (compile reports it with no apiVersion), where nobody else may say so.
    return s.apiVersion === '' || s.parents.some((p) => this.#claims(p.parentRef, s.namespace))
  }

  #hasOurEntries(status: unknown, namespace: string): boolean {
    if (typeof status !== 'object' || status === null) return false
    const s = status as Json
    const entries = [s.parents, s.ancestors].filter(Array.isArray).flat() as Json[]
    return entries.some((e) => (e.controllerName === this.#controller || e.name === this.#controller) && this.#claims(e.parentRef ?? e.ancestorRef, namespace))
  }

  /** An object dropped as invalid has object-level conditions only: report them on each parent/target it names. */
  #fallbackParents(s: ObjectStatus, raw: Json): ParentStatus[] {
    const spec = (raw.spec ?? {}) as Json
    const refs = (Array.isArray(spec.parentRefs) ? spec.parentRefs : Array.isArray(spec.targetRefs) ? spec.targetRefs : spec.targetRef !== undefined ? [spec.targetRef] : []) as Json[]
    const isPolicy = POLICY_KINDS.has(s.kind)
    return refs.filter((r) => typeof r?.name === 'string').map((r) => ({
      parentRef: {
        group: typeof r.group === 'string' ? r.group : 'gateway.networking.k8s.io',
        kind: typeof r.kind === 'string' ? r.kind : 'Gateway',
        namespace: typeof r.namespace === 'string' && !isPolicy ? r.namespace : s.namespace,
        name: r.name as string,
        sectionName: typeof r.sectionName === 'string' ? r.sectionName : null,
        port: typeof r.port === 'number' ? r.port : null,
      },
      controllerName: this.#controller,
      conditions: s.conditions,
    }))
  }

  #conditions(list: readonly Condition[], existing: unknown, generation: number): Json[] {
    const prior = Array.isArray(existing) ? existing as Json[] : []
    const now = this.#now().toISOString().replace(/\.\d+Z$/, 'Z')
    return list.map((c) => {
      const before = prior.find((p) => p.type === c.type)
      return {
        type: c.type, status: c.status, reason: c.reason, message: fitMessage(c.message),
        // Invalid objects compile with generation 0; the object's own is the one observed.
        observedGeneration: c.observedGeneration > 0 ? c.observedGeneration : generation,
        lastTransitionTime: before !== undefined && before.status === c.status && typeof before.lastTransitionTime === 'string' ? before.lastTransitionTime : now,
      }
    })
  }
}

/** metav1.Condition's `message` schema (every CRD whose status we write): at most 32768 characters. */
const CONDITION_MESSAGE_MAX = 32768
const TRUNCATED = ' ... (truncated)'

/**
 * A condition message the API server accepts: one that is longer (a
 * ResolvedRefs naming hundreds of missing Backends) is cut, and says so. Sent
 * whole, the write was refused (422) and none of the object's status, its
 * Accepted condition included, was ever written. UTF-16 units are never fewer
 * than characters, so the cut text fits; a surrogate pair is not split.
 */
export function fitMessage(message: string): string {
  if (message.length <= CONDITION_MESSAGE_MAX) return message
  let end = CONDITION_MESSAGE_MAX - TRUNCATED.length
  const last = message.charCodeAt(end - 1)
  if (last >= 0xd800 && last <= 0xdbff) end-- // a high surrogate whose pair would be cut off
  return message.slice(0, end) + TRUNCATED
}

/** Deep equality of JSON-like data (compiled statuses): no strings built, stops at the first difference. */
function sameData(a: unknown, b: unknown): boolean {
  if (a === b) return true
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!sameData(a[i], b[i])) return false
    return true
  }
  if (Array.isArray(b)) return false
  const x = a as Record<string, unknown>
  const y = b as Record<string, unknown>
  let n = 0
  for (const k in x) {
    if (!(k in y) || !sameData(x[k], y[k])) return false
    n++
  }
  for (const _ in y) n--
  return n === 0
}

/** `namespace/name` of the Gateway a parent/ancestor ref names (its namespace defaulting to the object's), or null when it names something else. */
function gatewayOf(ref: unknown, namespace: string): string | null {
  if (typeof ref !== 'object' || ref === null) return null
  const r = ref as Json
  if ((r.group ?? GATEWAY_GROUP) !== GATEWAY_GROUP || (r.kind ?? 'Gateway') !== 'Gateway' || typeof r.name !== 'string') return null
  return `${typeof r.namespace === 'string' && r.namespace !== '' ? r.namespace : namespace}/${r.name}`
}

function keyOf(obj: KubeObject, status: ObjectStatus): string {
  return `${obj.resource.group}/${obj.resource.kind}/${status.namespace}/${status.name}`
}

/** kind/namespace/name of every object in the snapshot that came from a file (shadowing wins over the API server). */
function fileDefined(snapshot: Snapshot): Set<string> {
  const out = new Set<string>()
  for (const [name, value] of Object.entries(snapshot)) {
    if (name === 'problems' || !(value instanceof Map)) continue
    for (const o of (value as Map<string, { kind: string; meta: { namespace: string; name: string }; source: { file: string } }>).values()) {
      if (!isKubeSourced(o.source)) out.add(`${o.kind}/${o.meta.namespace}/${o.meta.name}`)
    }
  }
  return out
}

function parentRef(ref: ParentStatus['parentRef']): Json {
  const out: Json = { group: ref.group, kind: ref.kind, name: ref.name }
  if (ref.namespace !== '') out.namespace = ref.namespace
  if (ref.sectionName !== null) out.sectionName = ref.sectionName
  if (ref.port !== null) out.port = ref.port
  return out
}

/** A parentRef/ancestorRef as one string, defaults filled in (the namespace: the object's). */
function refKey(ref: unknown, namespace: string): string {
  const r = (typeof ref === 'object' && ref !== null ? ref : {}) as Json
  return JSON.stringify([r.group ?? GATEWAY_GROUP, r.kind ?? 'Gateway', typeof r.namespace === 'string' && r.namespace !== '' ? r.namespace : namespace, r.name ?? '', r.sectionName ?? null, r.port ?? null])
}

/**
 * The entries of `list` with ours brought up to date: an entry of ours is
 * replaced in place by the wanted one for the same ref (its conditions keep
 * their lastTransitionTime), or dropped when none is wanted; wanted entries
 * not there yet are appended, in order, while the list has fewer than `max`
 * (`left`: those that did not fit). Every other entry stays as it is, where it is.
 */
function mergeEntries(list: unknown, isOurs: (e: Json) => boolean, refField: 'parentRef' | 'ancestorRef', namespace: string,
  wanted: ReadonlyArray<Json & { conditions: readonly Condition[] }>, cond: (list: readonly Condition[], existing: unknown) => Json[],
  max: number): { entries: Json[]; left: Json[] } {
  const cur = Array.isArray(list) ? list as Json[] : []
  const pending = new Map(wanted.map((w) => [refKey(w[refField], namespace), w]))
  const build = (w: Json & { conditions: readonly Condition[] }, existing: Json | undefined): Json => ({ ...w, conditions: cond(w.conditions, existing?.conditions) })
  const out: Json[] = []
  for (const e of cur) {
    if (!isOurs(e)) { out.push(e); continue }
    const k = refKey(e[refField], namespace)
    const w = pending.get(k)
    if (w === undefined) continue
    pending.delete(k)
    out.push(build(w, e))
  }
  const left: Json[] = []
  for (const w of pending.values()) {
    if (out.length < max) out.push(build(w, undefined))
    else left.push(w)
  }
  return { entries: out, left }
}

/** JSON with sorted keys: the API server does not keep our key order. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`
  if (typeof v === 'object' && v !== null) {
    return `{${Object.keys(v).sort().filter((k) => (v as Json)[k] !== undefined).map((k) => `${JSON.stringify(k)}:${canonical((v as Json)[k])}`).join(',')}}`
  }
  return JSON.stringify(v)
}
