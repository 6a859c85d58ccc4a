// The runtime wires the side loop to the hot path:
//   source → Snapshot → compile() → data plane apply (swap + bind) → upstreams.retain → status
// Build completely, swap, then retire the old (STYLE.md §4). If compile throws,
// the old table keeps serving; if a port cannot be bound, the rest of the table
// serves and readiness stays false until the port binds (retried with backoff).

import { performance } from 'node:perf_hooks'
import { compile } from '../compile/compile.ts'
import { CompileCache } from '../compile/compile-cache.ts'
import { References, onlyPodsChanged } from '../compile/references.ts'
import { keepLastValidTls } from './last-valid-tls.ts'
import { dumpTable } from '../compile/print.ts'
import { FileSource } from '../config/file-source.ts'
import type { ConfigSource } from '../config/kube-combined-source.ts'
import { createDataPlane } from '../listeners/data-plane.ts'
import { logger } from '../observe/log.ts'
import {
  compileDuration, configInvalidObjects, configReloadFailures, configReloads, tableBuiltAt, tableVersion,
} from '../observe/metrics.ts'
import { createUpstreams } from '../upstream/registry.ts'
import type { DnsSettings } from '../upstream/resolve.ts'
import type { GuardOptions } from '../upstream/destination-guard.ts'
import type { Http1Client } from '../upstream/pool.ts'
import { dropsObject, formatProblem } from '../resources/problem.ts'
import { RemovedSeries } from '../observe/series-retention.ts'
import { StatusLog } from './status-log.ts'
import { listenersOnPort, withBindFailures, type BindFailure } from './bind-status.ts'
import type { RouteTable } from '../compile/table.ts'
import type { Status } from '../compile/status.ts'
import type { DataPlane } from '../listeners/data-plane.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import type { Upstreams } from '../upstream/types.ts'
import { ensureLookupIndexes } from '../compile/lookup-index.ts'
import { deepFreeze } from '../compile/freeze.ts'

const log = logger('runtime')

/** The controllerName a GatewayClass must name for sallyport to take it. */
export const CONTROLLER_NAME = 'sallyport.io/gateway-controller'

export interface RuntimeOptions {
  /** Files and directories of manifests. */
  readonly configPaths: readonly string[]
  /** GatewayClass served (default `sallyport`). */
  readonly gatewayClass: string
  /** Address listeners bind (default 0.0.0.0). */
  readonly bind: string
  readonly accessLog: boolean
  /** File watch debounce (default 200 ms). */
  readonly debounceMs?: number
  /** Watch the files (default true). */
  readonly watch?: boolean
  /** Log status and problems at info/warn (false: debug — the other workers of a cluster). */
  readonly reportStatus?: boolean
  /** Called whenever readiness may have changed. */
  readonly onReadyChange?: (ready: boolean) => void
  /** Backend DNS (issue 5): --dns-server, --dns-min-ttl, --dns-max-ttl, --dns-stale-ttl. */
  readonly dns?: DnsSettings
  /** Destination guard (issue 5): --allow-destination-cidr, --cluster-cidr. */
  readonly guard?: GuardOptions
  /** `--http1-client`: HTTP/1.1 client for ordinary upstream requests; default sallyport's own. */
  readonly http1Client?: Http1Client
  /** Another source instead of the files of `configPaths` (Kubernetes mode: kube-source, or files + kube). */
  readonly source?: ConfigSource
  /** `source` label of the config metrics (default `file`). */
  readonly sourceLabel?: string
  /**
   * `--removed-series-seconds`: how long metric series naming a Gateway,
   * listener, route, backend, port or extension stay after a reload removed it
   * (lib/observe/series-retention.ts). Default 300 s.
   */
  readonly removedSeriesMs?: number
  /** `--max-connections`: open client connections per listening port (default 10 000). */
  readonly maxConnections?: number
  /** `--publish-service NAMESPACE/NAME`: the Service whose addresses the served Gateways get in status.addresses (compile/addresses.ts). */
  readonly publishService?: string | null
  /**
   * After each applied table, and again whenever the set of its ports that
   * could not be bound changes (a bind retry succeeded): the status — compile's,
   * with listeners on unbound ports Programmed=False — and the snapshot it came
   * from (status writer, Events).
   */
  readonly onApplied?: (applied: { readonly status: Status; readonly snapshot: Snapshot; readonly table: RouteTable }) => void
}

/** Default of --removed-series-seconds. */
const DEFAULT_REMOVED_SERIES_MS = 300_000
/** Delay between the swap and the table's secondary work (freeze, lookup index, names of its metric series, status). */
const SETTLE_MS = 10
const BIND_RETRY_MS = [500, 1000, 2000, 5000, 10000]

export class Runtime {
  readonly #options: RuntimeOptions
  readonly #source: ConfigSource
  readonly #sourceLabel: string
  readonly #upstreams: Upstreams
  readonly #dataPlane: DataPlane
  readonly #statusLog: StatusLog
  /** The names the tables served gave metric labels: series of removed ones go after a grace. */
  readonly #removedSeries: RemovedSeries
  #version = 0
  /** Issue 11: each compile reuses what the previous one built for unchanged routes. */
  readonly #compileCache = new CompileCache()
  /**
   * F4: the snapshot the serving table was compiled from (or one that differs
   * from it only in objects nothing read), and the Secrets, ConfigMaps,
   * Services and ClusterTrustBundles its compiles read.
   */
  #compiled: { snapshot: Snapshot; references: References } | null = null
  #table: RouteTable | null = null
  /** What is shown and written: compile's status with the bind failures over it. */
  #status: Status | null = null
  /** The compile result of the table that serves, whose status #status overlays. */
  #published: { readonly status: Status; readonly snapshot: Snapshot; readonly table: RouteTable } | null = null
  /** The failed ports (failedKey) #status was built with. */
  #publishedFailed = ''
  #problems: readonly ConfigProblem[] = []
  #failedPorts: readonly BindFailure[] = []
  #draining = false
  #lastReady = false
  #retryTimer: NodeJS.Timeout | null = null
  #retryCount = 0
  /** Applies are serialized: a bind retry never interleaves with a reload. */
  #applying: Promise<void> = Promise.resolve()

  constructor(options: RuntimeOptions) {
    this.#options = options
    this.#source = options.source ?? new FileSource(options.configPaths, { debounceMs: options.debounceMs ?? 200, watch: options.watch ?? true })
    this.#sourceLabel = options.sourceLabel ?? 'file'
    this.#upstreams = createUpstreams({ dns: options.dns, guard: options.guard, http1Client: options.http1Client })
    this.#dataPlane = createDataPlane({ bind: options.bind, upstreams: this.#upstreams, accessLog: options.accessLog, maxConnections: options.maxConnections })
    this.#statusLog = new StatusLog(options.reportStatus ?? true)
    this.#removedSeries = new RemovedSeries(options.removedSeriesMs ?? DEFAULT_REMOVED_SERIES_MS)
  }

  /** Load the configuration, compile, bind. Resolves after the first apply (bound or not). */
  async start(): Promise<void> {
    await this.#source.start((snapshot) => this.#enqueue(() => this.#load(snapshot)))
  }

  /** Re-read the configuration now (SIGHUP). */
  reload(): Promise<void> {
    return this.#source.reload()
  }

  /**
   * Ready: a first table applied, not draining, and some port of it bound (or
   * none to bind). A port that cannot be bound while others serve is the
   * listener's problem (Programmed=False, retried), not the replica's: one
   * Gateway's listener on a taken port (the admin port, a sidecar's) held every
   * replica's /readyz at 503, and the Service dropped all of them.
   */
  ready(): boolean {
    const table = this.#table
    if (table === null || this.#draining) return false
    return this.#failedPorts.length === 0 || this.#failedPorts.length < table.ports.size
  }

  table(): RouteTable | null {
    return this.#table
  }

  /** What /config_dump shows. Secret material never appears (dumpTable redacts). */
  configDump(): unknown {
    const table = this.#table
    return {
      version: table?.version ?? 0,
      builtAt: table === null ? null : new Date(table.builtAt).toISOString(),
      table: table === null ? null : dumpTable(table),
      failedPorts: this.#failedPorts.map((f) => ({ port: f.port, error: f.error })),
      status: this.#status === null ? [] : [...this.#status.objects.values()],
      problems: this.#problems.map((p) => ({ ...p, line: formatProblem(p) })),
      // The files on disk that are not what serves: each serves the objects of its last good version instead.
      reloadRejected: (this.#source.rejected?.() ?? []).map((p) => ({ ...p, line: formatProblem(p) })),
      upstreams: this.#upstreams.stats(),
      // Issue 6: health, ejection, overload and circuit state per backend.
      upstreamHealth: this.#upstreams.resilience?.health() ?? [],
    }
  }

  /** Stop accepting, let in-flight requests finish within `graceMs`, close pools. */
  async stop(graceMs: number): Promise<void> {
    this.#draining = true
    this.#notifyReady()
    this.#source.close()
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer)
    await this.#applying.catch(() => {})
    await this.#dataPlane.drain(graceMs)
    await this.#upstreams.close()
    this.#removedSeries.close()
  }

  #enqueue(step: () => Promise<void>): Promise<void> {
    const next = this.#applying.then(step, step)
    this.#applying = next.catch(() => {})
    return next
  }

  async #load(loaded: Snapshot): Promise<void> {
    if (this.#draining) return
    const previous = this.#compiled
    // A listener's certificate rotated to material TLS cannot use keeps its last valid version (warned).
    const snapshot = previous === null ? loaded : keepLastValidTls(previous.snapshot, (key) => previous.references.referenced('secrets', key), loaded)
    if (previous !== null && previous.references.onlyUnreferenced(previous.snapshot, snapshot)) {
      // F4: only Secrets, ConfigMaps, Services, EndpointSlices or
      // ClusterTrustBundles that no compile read changed (Kubernetes mode
      // watches them cluster-wide): the table, status and problems would be
      // the same. Keep serving; compare the next snapshot with this one.
      previous.snapshot = snapshot
      this.#compileCache.carry(snapshot)
      log.debug('only unreferenced objects changed; the route table stays')
      return
    }
    this.#statusLog.problems(snapshot.problems)
    // Pod churn reloads for the client identities; it is not a configuration change worth an info line each time.
    const podsOnly = previous !== null && onlyPodsChanged(previous.snapshot, snapshot)
    const version = this.#version + 1
    const started = performance.now()
    const references = new References()
    let compiled: { table: RouteTable; status: Status; problems: readonly ConfigProblem[] }
    try {
      compiled = compile(references.track(snapshot), {
        now: Date.now(), version, gatewayClass: this.#options.gatewayClass, controllerName: CONTROLLER_NAME,
        destination: { allowCidrs: this.#options.guard?.allowCidrs ?? [], clusterCidrs: this.#options.guard?.clusterCidrs ?? [] },
        freeze: false, // frozen right after the swap, below
        cache: this.#compileCache,
        publishService: this.#options.publishService ?? null,
      })
    } catch (err) {
      configReloadFailures.inc({ source: this.#sourceLabel, reason: 'compile' })
      log.error({ err, version }, 'compile failed; keeping the previous route table')
      return
    } finally {
      compileDuration.observe((performance.now() - started) / 1000)
    }
    this.#version = version
    // Lookups compile did not repeat because it reused the gateway plan and routes were made by the compiles before.
    if (previous !== null && this.#compileCache.planReused) references.merge(previous.references)
    // The status and problems, read below, still record into references.
    this.#compiled = { snapshot, references }
    const table = compiled.table
    // From the swap until served() below, no name retires (the new table's are not known yet).
    this.#removedSeries.applying()
    await this.#applyTable(table, false)
    this.#upstreams.retain(table)
    configReloads.inc({ source: this.#sourceLabel })
    tableVersion.set(table.version)
    tableBuiltAt.set(table.builtAt / 1000)
    const reuse = this.#compileCache.stats
    // Problems compile found in objects it kept (an extension's Secret reference): logged once per load, listed with the rest.
    const kept = compiled.problems
    this.#statusLog.keptProblems(kept)
    const applied = { version, ports: [...table.ports.keys()], clusters: table.clusters.size, problems: snapshot.problems.length + kept.length, routesReused: reuse.routesReused, routesCompiled: reuse.routesCompiled }
    if (podsOnly) log.debug({ ...applied, change: 'pods' }, 'route table applied')
    else log.info(applied, 'route table applied')
    // Issue 11: the new table serves from here. What is left — the freeze,
    // the compact lookup index (until it exists the matcher walks the host
    // maps) and the status — is ~35 ms at 5,000 routes of event-loop time,
    // and none of it is needed to serve. Run at once, it would hold up the
    // requests that queued during the compile for that long again; they take
    // a few loop turns (read, upstream, respond), so it waits SETTLE_MS.
    await new Promise<void>((resolve) => setTimeout(resolve, SETTLE_MS))
    deepFreeze(table)
    if (this.#table === table) ensureLookupIndexes(table)
    // Names the previous table had and this one lacks retire: their series go after the grace.
    this.#removedSeries.served(table)
    this.#problems = kept.length === 0 ? snapshot.problems : [...snapshot.problems, ...kept]
    setInvalidObjects(snapshot.problems)
    this.#published = { status: compiled.status, snapshot, table }
    this.#publishStatus()
  }

  /**
   * Status as it stands: compile's, with the listeners on ports of the serving
   * table that could not be bound Programmed=False. To /config_dump, the log
   * and onApplied (Kubernetes: the status writer).
   */
  #publishStatus(): void {
    const published = this.#published
    if (published === null) return
    const status = withBindFailures(published.status, published.table, this.#table === published.table ? this.#failedPorts : [])
    this.#publishedFailed = failedKey(this.#failedPorts)
    this.#status = status
    this.#statusLog.status(status)
    try {
      this.#options.onApplied?.({ status, snapshot: published.snapshot, table: published.table })
    } catch (err) {
      log.error({ err }, 'after-apply hook failed')
    }
  }

  /** `retry`: the bind retry re-applying the table that serves (not a reload). */
  async #applyTable(table: RouteTable, retry: boolean): Promise<void> {
    let failed: readonly BindFailure[]
    try {
      const result = await this.#dataPlane.apply(table)
      failed = result.failed.map((f) => ({ port: f.port, error: errorText(f.error), message: f.error.message }))
    } catch (err) {
      // apply() reports bind failures as values; a throw is a bug in a listener: count it, keep going.
      log.error({ err }, 'applying the route table to listeners failed')
      failed = [...table.ports.keys()].map((port) => ({ port, error: errorText(err), message: err instanceof Error ? err.message : String(err) }))
    }
    const before = this.#table === table ? this.#failedPorts : []
    this.#table = table
    this.#failedPorts = failed
    if (failed.length > 0) {
      // A reload whose table could not bind every port, counted once: a retry is
      // no reload, and counting each one (every 10 s at most) made a port held
      // for an hour ~360 "reload failures".
      if (!retry) configReloadFailures.inc({ source: this.#sourceLabel, reason: 'listen' })
      // The Gateways and listeners the port serves: what an operator looks up, and what the status names.
      for (const f of failed) log.error({ port: f.port, bind: this.#options.bind, listeners: listenersOnPort(table, f.port), error: f.error }, 'cannot listen on port; not ready until it binds')
      this.#scheduleBindRetry()
    } else {
      this.#retryCount = 0
    }
    for (const b of before) {
      if (!failed.some((f) => f.port === b.port)) log.info({ port: b.port, bind: this.#options.bind, listeners: listenersOnPort(table, b.port) }, 'port bound after retrying')
    }
    this.#notifyReady()
  }

  #scheduleBindRetry(): void {
    if (this.#retryTimer !== null || this.#draining) return
    const delay = BIND_RETRY_MS[Math.min(this.#retryCount, BIND_RETRY_MS.length - 1)] as number
    this.#retryCount++
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null
      const table = this.#table
      if (table === null || this.#failedPorts.length === 0 || this.#draining) return
      void this.#enqueue(async () => {
        await this.#applyTable(table, true)
        // The status of this table was published with the ports that failed then; a port bound since (or failing
        // differently) changes it — in Kubernetes mode, what the status writer writes.
        const published = this.#published
        if (published !== null && published.table === this.#table && this.#publishedFailed !== failedKey(this.#failedPorts)) this.#publishStatus()
      })
    }, delay)
    this.#retryTimer.unref()
  }

  #notifyReady(): void {
    const ready = this.ready()
    if (ready === this.#lastReady) return
    this.#lastReady = ready
    log.info({ ready }, ready ? 'ready' : 'not ready')
    this.#options.onReadyChange?.(ready)
  }
}

/** Identity of a set of bind failures (port and error), to tell whether the published status is stale. */
function failedKey(failed: readonly BindFailure[]): string {
  return failed.map((f) => `${f.port} ${f.error}`).sort().join('\n')
}

function errorText(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as NodeJS.ErrnoException).code
    return code === undefined ? err.message : `${code}: ${err.message}`
  }
  return String(err)
}

/** Count dropped objects (not problems: one object may have several) per kind. */
function setInvalidObjects(problems: readonly ConfigProblem[]): void {
  const seen = new Map<string, Set<string>>()
  for (const p of problems) {
    if (!dropsObject(p)) continue // a dropped route rule leaves its route in
    const kind = p.kind === '' ? '<none>' : p.kind
    let set = seen.get(kind)
    if (set === undefined) seen.set(kind, set = new Set())
    set.add(`${p.source.file}:${p.source.doc}`)
  }
  configInvalidObjects.reset()
  for (const [kind, set] of seen) configInvalidObjects.set({ kind }, set.size)
}
