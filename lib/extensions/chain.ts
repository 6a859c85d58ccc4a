// The extension runtime: turns the compiled chains of a RouteTable into
// runnable ones (hooks per phase, bounds decided) before the table is swapped
// in, and keeps extension state across reloads keyed by CompiledExtension.key
// (token buckets, cached OAuth2 tokens, loaded plugins). The request path then
// only does an identity WeakMap lookup per request.

import type { CompiledExtension, ExtensionChain, RouteTable } from '../compile/table.ts'
import { DEFAULT_MAX_BODY_BYTES, ExtensionType } from '../extension-types.ts'
import { logger } from '../observe/log.ts'
import type { ExtensionHooks } from './plugin-api.ts'
import { AggregatingEventSink, logEventSink, type EventSink } from './events.ts'
import { createBuiltin, type Services } from './builtins.ts'
import { RedisPool } from './redis-client.ts'

const log = logger('extensions')

/** One extension instance: its compiled spec and hooks, shared by every chain that uses it. */
export class Instance {
  readonly spec: CompiledExtension
  readonly hooks: ExtensionHooks
  readonly maxBodyBytes: number
  /**
   * Its request hook only decides (allow, deny, reply headers) and never
   * changes the request: when a failover runs another backend's chain, an
   * instance that already decided for this request is not charged again.
   */
  readonly decisionOnly: boolean
  /** Resolves when the hooks are usable (plugins load asynchronously). */
  readonly ready: Promise<void>
  readonly #events: EventSink
  readonly #object: { kind: string; namespace: string; name: string }

  constructor(spec: CompiledExtension, hooks: ExtensionHooks, ready: Promise<void>, events: EventSink) {
    this.spec = spec
    this.hooks = hooks
    this.ready = ready
    const m = spec.config.maxBodyBytes
    this.maxBodyBytes = typeof m === 'number' && m > 0 ? m : DEFAULT_MAX_BODY_BYTES
    this.decisionOnly = spec.type === ExtensionType.RATE_LIMIT || spec.type === ExtensionType.AUTHORIZATION || spec.type === ExtensionType.AI_USAGE
    this.#events = events
    const [kind, ref] = spec.source.split(' ') as [string, string]
    const [namespace, name] = ref.split('/') as [string, string]
    this.#object = { kind, namespace, name }
  }

  event(reason: string, message: string): void {
    this.#events.emit({ type: 'Warning', reason, object: this.#object, message, count: 1 })
  }
}

/** How much of a body the extensions that read it buffer: the smallest of their maxBodyBytes. */
export function bodyBound(readers: readonly Instance[]): number {
  let bound = DEFAULT_MAX_BODY_BYTES * 64
  for (const i of readers) if (i.maxBodyBytes < bound) bound = i.maxBodyBytes
  return bound
}

/** A body over the bound passes through unprocessed only when every extension that reads it is failOpen. */
export function allFailOpen(readers: readonly Instance[]): boolean {
  for (const i of readers) if (!i.spec.failOpen) return false
  return true
}

/** A chain ready to run: instances per phase, in order, and the body bounds. */
export class RunnableChain {
  readonly id: string
  readonly requestHeaders: readonly Instance[]
  readonly requestBody: readonly Instance[]
  readonly responseHeaders: readonly Instance[]
  readonly responseBody: readonly Instance[]
  readonly responseStream: readonly Instance[]
  readonly requestBodyBound: number
  readonly requestBodyFailOpen: boolean
  readonly responseBodyBound: number
  readonly responseBodyFailOpen: boolean
  /** Some hook runs after the upstream answered. */
  readonly wantsResponse: boolean
  readonly readsResponseBody: boolean

  constructor(id: string, instances: readonly Instance[]) {
    this.id = id
    const has = (i: Instance, phase: CompiledExtension['phases'][number]): boolean => i.spec.phases.includes(phase)
    this.requestHeaders = instances.filter(i => has(i, 'request-headers') && i.hooks.requestHeaders !== undefined)
    this.requestBody = instances.filter(i => has(i, 'request-body') && i.hooks.requestBody !== undefined)
    this.responseHeaders = instances.filter(i => has(i, 'response-headers') && i.hooks.responseHeaders !== undefined)
    this.responseBody = instances.filter(i => has(i, 'response-body') && i.hooks.responseBody !== undefined)
    this.responseStream = instances.filter(i => has(i, 'response-body') && i.hooks.responseStream !== undefined)
    this.requestBodyBound = bodyBound(this.requestBody)
    this.requestBodyFailOpen = allFailOpen(this.requestBody)
    this.responseBodyBound = bodyBound(this.responseBody)
    this.responseBodyFailOpen = allFailOpen(this.responseBody)
    this.wantsResponse = this.responseHeaders.length + this.responseBody.length + this.responseStream.length > 0
    this.readsResponseBody = this.responseBody.length + this.responseStream.length > 0
  }
}

export interface ExtensionRuntimeOptions {
  /** Where Events go (aggregated); default: a log line each (file mode). */
  readonly events?: EventSink
  /** Aggregation window of repeated Events; default 60 s. */
  readonly eventWindowMs?: number
}

export class ExtensionRuntime {
  readonly events: AggregatingEventSink
  readonly redis = new RedisPool()
  readonly #instances = new Map<string, Instance>()
  readonly #chains = new WeakMap<ExtensionChain, RunnableChain>()
  readonly #services: Services

  constructor(options: ExtensionRuntimeOptions = {}) {
    this.events = new AggregatingEventSink(options.events ?? logEventSink, options.eventWindowMs)
    this.#services = { redis: this.redis, events: this.events }
  }

  /**
   * Before a swap: instantiate what the table's chains need (awaiting plugin
   * loads), build the runnable chains, and close instances no chain uses.
   */
  async prepare(table: RouteTable): Promise<void> {
    const chains = table.extensionChains ?? []
    const used = new Set<string>()
    for (const c of chains) for (const e of c.extensions) used.add(e.key)
    const instances = [...used].map(key => this.#instance(chains.flatMap(c => c.extensions).find(e => e.key === key) as CompiledExtension))
    await Promise.all(instances.map(i => i.ready.catch(() => {})))
    for (const c of chains) if (!this.#chains.has(c)) this.#chains.set(c, this.#build(c))
    for (const [key, inst] of this.#instances) {
      if (used.has(key)) continue
      this.#instances.delete(key)
      // In-flight requests of the old table may still hold it: close after a grace.
      const t = setTimeout(() => { void Promise.resolve(inst.hooks.close?.()).catch(() => {}) }, 30_000)
      t.unref()
    }
  }

  // hot path
  /** The runnable form of a compiled chain (built now if prepare did not see this table). */
  runnable(chain: ExtensionChain): RunnableChain {
    let r = this.#chains.get(chain)
    if (r === undefined) this.#chains.set(chain, r = this.#build(chain))
    return r
  }

  async close(): Promise<void> {
    this.events.flush()
    for (const inst of this.#instances.values()) await Promise.resolve(inst.hooks.close?.()).catch(() => {})
    this.#instances.clear()
    await this.redis.close()
  }

  #build(chain: ExtensionChain): RunnableChain {
    return new RunnableChain(chain.id, chain.extensions.map(e => this.#instance(e)))
  }

  #instance(spec: CompiledExtension): Instance {
    let inst = this.#instances.get(spec.key)
    if (inst !== undefined) return inst
    const { hooks, ready } = createBuiltin(spec, this.#services)
    inst = new Instance(spec, hooks, ready, this.events)
    ready.catch((err: unknown) => log.warn({ extension: spec.name, source: spec.source, error: err instanceof Error ? err.message : String(err) }, 'extension failed to load'))
    this.#instances.set(spec.key, inst)
    return inst
  }
}

let fallback: ExtensionRuntime | null = null

/** The process-wide runtime for data planes built without one (tests, embedding). */
export function defaultExtensionRuntime(): ExtensionRuntime {
  fallback ??= new ExtensionRuntime()
  return fallback
}
