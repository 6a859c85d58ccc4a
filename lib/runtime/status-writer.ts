// Writes compile's Status back to the API server — on the leader only.
//
// For every object read from the API server (not file-defined, not shadowed by
// a file) whose kind has a status subresource:
//   GatewayClass  status.conditions
//   Gateway       status.conditions, status.listeners[] (attachedRoutes, supportedKinds, conditions)
//   *Route        status.parents[]   (RouteParentStatus, ours by controllerName)
//   Backend       status.parents[]   (GEP-4488 BackendParentStatus: controller in `name`);
//                 Envoy Gateway's Backend: status.conditions
//   policies      status.ancestors[] (PolicyAncestorStatus: BackendTLSPolicy,
//                 BackendTrafficPolicy, EgressExtension)
// Entries other controllers own in parents/ancestors are preserved untouched.
// Conditions carry observedGeneration; lastTransitionTime is kept while a
// condition's status stays the same (metav1.Condition semantics).
//
// The desired status is compared with what the object has (the informer's copy,
// or what we last wrote when the informer has not seen our write yet): equal
// means no request. Writes replace the status subresource (PUT .../status) with
// the resourceVersion we based them on; a 409 re-reads the object and tries
// again, so a concurrent writer (another controller's entry) is never lost.
//
// Each reload hands over the status of every object, but few change: an object
// whose compiled status (compared field by field) and resourceVersion are what
// they were when the writer last found it up to date (or wrote it) is skipped
// without rebuilding its desired status — that cost ~1 ms per object and, at
// 5,000 routes, held the event loop for seconds after each reload (issue 11).
// A write by anyone moves the resourceVersion, so it is seen.

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
const CONCURRENCY = 4

export interface StatusWriterOptions {
  readonly client: KubeClient
  readonly source: Pick<KubeSource, 'lookup'> & Partial<Pick<KubeSource, 'objects'>>
  readonly controllerName: string
  /** Writes happen only while this says true. */
  readonly isLeader: () => boolean
  readonly now?: () => Date
}

type Json = Record<string, unknown>

interface Written { readonly basedOn: string; readonly rv: string; readonly status: Json }

export class StatusWriter {
  readonly #client: KubeClient
  readonly #source: Pick<KubeSource, 'lookup'> & Partial<Pick<KubeSource, 'objects'>>
  readonly #controller: string
  readonly #isLeader: () => boolean
  readonly #now: () => Date
  #latest: { status: Status; snapshot: Snapshot } | null = null
  readonly #passes = new SerialPasses(() => this.#pass())
  #retry: NodeJS.Timeout | null = null
  readonly #written = new Map<string, Written>()
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
  }

  /** A new compile result: write what changed (if leader). */
  update(status: Status, snapshot: Snapshot): void {
    this.#latest = { status, snapshot }
    void this.sync()
  }

  /** Write the latest status now if leader (call on becoming leader). Resolves when the pass is done. */
  sync(): Promise<void> {
    return this.#passes.request()
  }

  close(): void {
    if (this.#retry !== null) clearTimeout(this.#retry)
    this.#latest = null
  }

  async #pass(): Promise<void> {
    const latest = this.#latest
    if (latest === null || !this.#isLeader()) return
    const fromFiles = fileDefined(latest.snapshot)
    const work: Array<{ status: ObjectStatus; obj: KubeObject }> = []
    for (const s of latest.status.objects.values()) {
      if (fromFiles.size > 0 && fromFiles.has(`${s.kind}/${s.namespace}/${s.name}`)) continue
      const obj = this.#source.lookup(s.kind, s.apiVersion, s.namespace, s.name)
      if (obj === null || !obj.resource.status) continue
      work.push({ status: s, obj })
    }
    // Gateway API: a controller removes its entries when the object is no longer
    // its concern (a route detached from our Gateways, a policy whose targets
    // went away). Objects compile did not report on that still carry our
    // entries get them removed.
    const reported = new Set(work.map((w) => w.obj))
    const stale: KubeObject[] = []
    for (const obj of this.#source.objects?.() ?? []) {
      if (!obj.resource.status || reported.has(obj) || !this.#hasOurEntries(obj.raw.status)) continue
      const meta = obj.raw.metadata
      if (fromFiles.has(`${obj.resource.modelKind}/${meta?.namespace ?? ''}/${meta?.name ?? ''}`)) continue
      stale.push(obj)
    }
    for (const obj of stale) {
      const meta = obj.raw.metadata
      work.push({ obj, status: { kind: obj.resource.modelKind, apiVersion: apiVersion(obj.resource.group, obj.version), namespace: meta?.namespace ?? '', name: meta?.name ?? '', generation: meta?.generation ?? 0, conditions: [], parents: [], listeners: [] } })
    }
    const verified = this.#verified
    const keep = new Map<string, { readonly rv: string; readonly status: ObjectStatus }>()
    this.#verified = keep // entries of objects gone from this pass are dropped
    let failed = 0
    let index = 0
    const worker = async (): Promise<void> => {
      while (index < work.length && this.#isLeader()) {
        const item = work[index++] as { status: ObjectStatus; obj: KubeObject }
        const key = keyOf(item.obj, item.status)
        const rv = String(item.obj.raw.metadata?.resourceVersion ?? '')
        const seen = verified.get(key)
        if (seen !== undefined && seen.rv === rv && sameData(seen.status, item.status)) {
          keep.set(key, seen)
          continue
        }
        try {
          keep.set(key, { rv: await this.#write(item.status, item.obj), status: item.status })
        } catch (err) {
          failed++
          kubeStatusWrites.inc({ kind: item.status.kind, result: 'failed' })
          log.warn({ kind: item.status.kind, namespace: item.status.namespace, name: item.status.name, err: errorText(err) }, 'status write failed')
        }
      }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, worker))
    if (failed > 0 && this.#retry === null) {
      // The API server may be away; the next compile or this retry tries again.
      this.#retry = setTimeout(() => { this.#retry = null; void this.sync() }, 5000)
      this.#retry.unref()
    }
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
      try {
        const body = { apiVersion: apiVersion(obj.resource.group, obj.version), kind: obj.resource.kind, metadata: { name: status.name, ...(obj.resource.namespaced ? { namespace: status.namespace } : {}), resourceVersion: written?.basedOn === rv ? written.rv : rv }, status: desired }
        const result = await this.#client.request<Json>('PUT', path, { body })
        this.writes++
        kubeStatusWrites.inc({ kind: status.kind, result: 'written' })
        const newRv = String((result?.metadata as Json | undefined)?.resourceVersion ?? '')
        this.#written.set(key, { basedOn: rv, rv: newRv, status: desired })
        log.debug({ kind: status.kind, namespace: status.namespace, name: status.name }, 'status written')
        return newRv
      } catch (err) {
        if (!(err instanceof KubeApiError)) throw err
        if (err.statusCode === 404) return '' // deleted meanwhile
        if (err.statusCode !== 409 || attempt >= MAX_ATTEMPTS) throw err
        // Conflict: someone (another controller, an edit) wrote since; read fresh and redo.
        this.#written.delete(key)
        raw = await this.#client.request<Json>('GET', objectPath(obj.resource, obj.version, status.namespace, status.name))
      }
    }
  }

  #desired(s: ObjectStatus, obj: KubeObject, raw: Json, current: Json, generation: number): Json {
    const kind = s.kind
    const cond = (list: readonly Condition[], existing: unknown): Json[] => this.#conditions(list, existing, generation)
    const curConditions = current.conditions
    if (kind === 'GatewayClass') return { ...current, conditions: cond(s.conditions, curConditions) }
    if (kind === 'Gateway') {
      const curListeners = Array.isArray(current.listeners) ? current.listeners as Json[] : []
      return {
        ...current,
        conditions: cond(s.conditions, curConditions),
        listeners: s.listeners.map((l) => ({
          name: l.name,
          supportedKinds: l.supportedKinds.map((k) => ({ group: k.group, kind: k.kind })),
          attachedRoutes: l.attachedRoutes,
          conditions: cond(l.conditions, curListeners.find((c) => c.name === l.name)?.conditions),
        })),
      }
    }
    const parents = s.parents.length > 0 || s.conditions.length === 0 ? s.parents : this.#fallbackParents(s, raw)
    if (ROUTE_KINDS.has(kind)) {
      const cur = Array.isArray(current.parents) ? current.parents as Json[] : []
      const others = cur.filter((p) => p.controllerName !== this.#controller)
      const ours = parents.map((p) => ({
        parentRef: parentRef(p.parentRef), controllerName: this.#controller,
        conditions: cond(p.conditions, cur.find((c) => c.controllerName === this.#controller && sameRef(c.parentRef, p.parentRef))?.conditions),
      }))
      return { ...current, parents: [...others, ...ours] }
    }
    if (kind === 'Backend' && obj.resource.group === 'gateway.envoyproxy.io') {
      return { ...current, conditions: cond(s.conditions, curConditions) }
    }
    if (kind === 'Backend') {
      // GEP-4488 BackendParentStatus names the controller in `name`.
      const cur = Array.isArray(current.parents) ? current.parents as Json[] : []
      const others = cur.filter((p) => p.name !== this.#controller)
      const ours = parents.map((p) => ({
        name: this.#controller, parentRef: parentRef(p.parentRef),
        conditions: cond(p.conditions, cur.find((c) => c.name === this.#controller && sameRef(c.parentRef, p.parentRef))?.conditions),
      }))
      return { ...current, parents: [...others, ...ours] }
    }
    if (POLICY_KINDS.has(kind)) {
      const cur = Array.isArray(current.ancestors) ? current.ancestors as Json[] : []
      const others = cur.filter((p) => p.controllerName !== this.#controller)
      const ours = parents.map((p) => ({
        ancestorRef: parentRef(p.parentRef), controllerName: this.#controller,
        conditions: cond(p.conditions, cur.find((c) => c.controllerName === this.#controller && sameRef(c.ancestorRef, p.parentRef))?.conditions),
      }))
      return { ...current, ancestors: [...others, ...ours] }
    }
    return { ...current, conditions: cond(s.conditions, curConditions) }
  }

  #hasOurEntries(status: unknown): boolean {
    if (typeof status !== 'object' || status === null) return false
    const s = status as Json
    const lists = [s.parents, s.ancestors].filter(Array.isArray) as Json[][]
    return lists.some((l) => l.some((e) => e.controllerName === this.#controller || e.name === this.#controller))
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
        type: c.type, status: c.status, reason: c.reason, message: c.message,
        // Invalid objects compile with generation 0; the object's own is the one observed.
        observedGeneration: c.observedGeneration > 0 ? c.observedGeneration : generation,
        lastTransitionTime: before !== undefined && before.status === c.status && typeof before.lastTransitionTime === 'string' ? before.lastTransitionTime : now,
      }
    })
  }
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

function sameRef(a: unknown, b: ParentStatus['parentRef']): boolean {
  if (typeof a !== 'object' || a === null) return false
  const r = a as Json
  return (r.name ?? '') === b.name && (r.kind ?? 'Gateway') === b.kind && (r.namespace ?? '') === b.namespace &&
    (r.sectionName ?? null) === b.sectionName && (r.port ?? null) === b.port
}

/** JSON with sorted keys: the API server does not keep our key order. */
export function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`
  if (typeof v === 'object' && v !== null) {
    return `{${Object.keys(v).sort().filter((k) => (v as Json)[k] !== undefined).map((k) => `${JSON.stringify(k)}:${canonical((v as Json)[k])}`).join(',')}}`
  }
  return JSON.stringify(v)
}
