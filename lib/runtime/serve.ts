// `sallyport serve`: one process, or a primary with N workers (node:cluster).
//
// Worker mode — who compiles: every worker runs its own Runtime (file source,
// watch, compile, data plane). That keeps workers independent (no snapshot
// shipped over IPC, no primary on the request path) at the cost of N compiles per
// change; the files are the same, so they converge on the same table. In
// Kubernetes mode the primary alone lists and watches the API server and relays
// the raw objects to the workers (kube-relay.ts), so a replica puts one
// informer set's load on the API server, not N; each worker still builds its
// snapshots, compiles and writes (status from the first, Events from each). The
// listening sockets are shared through cluster (the primary owns the handles).
// The primary runs only the admin server: /metrics aggregates every worker's
// registry, keeping the counts of workers that died (lib/observe/cluster-metrics.ts),
// /readyz is "every worker ready",
// /config_dump asks the first live worker. Only worker 0 logs status and problems
// at info/warn; the others log them at debug, so a change is reported once.

import cluster, { type Worker } from 'node:cluster'
import { logger } from '../observe/log.ts'
import { registry } from '../observe/metrics.ts'
import { ClusterMetrics, parseMetricJson, parseNames } from '../observe/cluster-metrics.ts'
import { keptNames } from '../observe/series-retention.ts'
import { dumpJson, startAdminServer, type AdminServer, type ConfigDumpAccess } from '../observe/admin.ts'
import { Runtime } from './runtime.ts'
import type { DnsSettings } from '../upstream/resolve.ts'
import type { GuardOptions } from '../upstream/destination-guard.ts'
import type { Http1Client } from '../upstream/pool.ts'
import { installTracer, shutdownTracer, type TracingOptions } from '../observe/tracing.ts'
import type { KubeRelay, KubeSubscribeMessage } from './kube-relay.ts'
import { configReloadFailures } from '../observe/metrics.ts'

const log = logger('serve')

export interface ServeOptions {
  readonly configPaths: readonly string[]
  readonly gatewayClass: string
  readonly bind: string
  /** null: no admin server. */
  readonly admin: { readonly host: string; readonly port: number } | null
  /** `--worker-watchdog-seconds` (default 30; 0: off): a worker silent this long is killed and replaced. */
  readonly workerWatchdogSeconds?: number
  /** `--config-dump`: who may read /config_dump (default local: loopback clients). */
  readonly configDump?: ConfigDumpAccess
  /** 0: no cluster, serve in this process. */
  readonly workers: number
  readonly accessLog: boolean
  readonly drainSeconds: number
  /** `--removed-series-seconds` (default 300): metric series naming removed configuration leave /metrics this long after the reload. */
  readonly removedSeriesSeconds?: number
  /** `--max-connections` (default 10 000): open client connections per listening port, per process. */
  readonly maxConnections?: number
  /** `--kubernetes`: watch the API server (in-cluster unless a kubeconfig is given); null: files only. */
  readonly kubernetes?: { readonly kubeconfig: string | null; readonly namespaces: readonly string[]; readonly labelSelector: string | null } | null
  /** Backend DNS and the destination guard (issue 5); defaults when absent. */
  readonly dns?: DnsSettings
  readonly guard?: GuardOptions
  /** `--http1-client`: HTTP/1.1 client for ordinary upstream requests; default sallyport's own. */
  readonly http1Client?: Http1Client
  /** Issue 10: OTLP span export (`--otlp-endpoint`); null/absent: tracing off. */
  readonly tracing?: TracingOptions | null
  /** `--publish-service NAMESPACE/NAME`: the Service whose addresses the served Gateways get in status.addresses; null/absent: none. */
  readonly publishService?: string | null
}

/** Runs until SIGTERM/SIGINT, then drains and exits 0. */
export async function serve(options: ServeOptions): Promise<void> {
  if (options.workers > 0 && cluster.isPrimary) return servePrimary(options)
  if (cluster.isWorker) return serveWorker(options)
  return serveSingle(options)
}

async function serveSingle(options: ServeOptions): Promise<void> {
  if (options.tracing != null) installTracer(options.tracing)
  const kube = await kubeMode(options, true)
  const runtime = new Runtime({
    ...kube?.runtimeOptions,
    configPaths: options.configPaths, gatewayClass: options.gatewayClass, bind: options.bind, accessLog: options.accessLog,
    dns: options.dns, guard: options.guard, http1Client: options.http1Client, removedSeriesMs: removedSeriesMs(options), maxConnections: options.maxConnections,
    publishService: options.publishService ?? null,
  })
  // Admin first: /healthz answers and /readyz says 503 while the first table loads.
  const admin = options.admin === null ? null : await startAdminServer({
    ...options.admin,
    configDumpAccess: options.configDump,
    ready: () => runtime.ready(),
    metrics: async () => ({ contentType: registry.contentType, body: await registry.metrics() }),
    configDump: async () => dumpJson(runtime.configDump()),
  })
  onShutdownSignal(async (signal) => {
    log.info({ signal, drainSeconds: options.drainSeconds }, 'shutting down: draining')
    // The drain starts now; alongside it the lease is handed over (so a successor
    // writes status at once, not after the lease expires). The hand-over is
    // bounded: an API server that does not answer must not delay the drain.
    await Promise.all([kube?.stop(), runtime.stop(options.drainSeconds * 1000)])
    await shutdownTracer() // spans of the drained requests go out
    await admin?.close()
    log.info('stopped')
  })
  // SIGHUP: re-read the files now (for file systems where watching is unreliable, e.g. some network mounts).
  process.on('SIGHUP', () => { void runtime.reload() })
  await runtime.start()
  kube?.start()
}

/** Kubernetes mode pieces (loaded only then: client-node is large). `writeStatus`: campaign for the lease. */
/** `first`: the process that campaigns for the lease, writes status and records config Events (serve alone, or worker 0). */
/** `relayed`: a --workers worker, fed its objects by the primary (kube-relay.ts) rather than watching the API server itself. */
async function kubeMode(options: ServeOptions, first: boolean, relayed = false): Promise<import('./kube-mode.ts').KubeMode | null> {
  const k = options.kubernetes
  if (k == null) return null
  const { createKubeMode } = await import('./kube-mode.ts')
  const feed = relayed ? (await import('./kube-relay.ts')).primaryFeed() : undefined
  return createKubeMode({
    kubeconfig: k.kubeconfig, namespaces: k.namespaces, labelSelector: k.labelSelector, feed,
    configPaths: options.configPaths, writeStatus: first, configEvents: first, gatewayClass: options.gatewayClass,
  })
}

function removedSeriesMs(options: ServeOptions): number | undefined {
  return options.removedSeriesSeconds === undefined ? undefined : options.removedSeriesSeconds * 1000
}

// ───────────────────────────── cluster ─────────────────────────────

type ToPrimary =
  | { readonly type: 'sallyport:ready'; readonly ready: boolean }
  /** JSON text: cluster IPC would turn the dump's Maps into `{}`. */
  | { readonly type: 'sallyport:config_dump'; readonly id: number; readonly json: string }
  /**
   * The worker's registry as `getMetricsAsJSON()` gives it (checked on arrival:
   * parseMetricJson), and the configuration names it keeps series of (null
   * before its first table): the primary drops dead workers' counts of others.
   */
  | { readonly type: 'sallyport:metrics'; readonly id: number; readonly metrics: unknown; readonly names: unknown }
  /** The answer to a watchdog ping: the worker's event loop runs. */
  | { readonly type: 'sallyport:pong' }
  /** Kubernetes mode: the worker's source listens; send it the store, then its changes (kube-relay.ts). */
  | KubeSubscribeMessage
type ToWorker =
  | { readonly type: 'sallyport:shutdown' }
  | { readonly type: 'sallyport:ping' }
  | { readonly type: 'sallyport:config_dump'; readonly id: number }
  | { readonly type: 'sallyport:metrics'; readonly id: number }

const WORKER_INDEX_ENV = 'SALLYPORT_WORKER_INDEX'
const RESPAWN_DELAY_MS = 1000
/** How long the primary waits for a worker's answer (a scrape then counts its previous one; a dump says so). */
const WORKER_ANSWER_MS = 5000
/** How often the watchdog pings each worker. */
const WATCHDOG_PING_MS = 1000

async function servePrimary(options: ServeOptions): Promise<void> {
  // by index; `heard`: it sent a message, so it is far enough along to answer a scrape
  const workers = new Map<number, { worker: Worker; ready: boolean; heard: boolean; lastHeard: number }>()
  /** Questions to workers waiting for their answers, by id (config dumps, metric scrapes). */
  const pending = new Map<number, (answer: unknown) => void>()
  let nextId = 1
  let shuttingDown = false
  const clusterMetrics = new ClusterMetrics()
  // Kubernetes mode: the replica's one informer set, its store relayed to the workers.
  let relay: KubeRelay | null = null
  if (options.kubernetes != null) {
    const { KubeRelay } = await import('./kube-relay.ts')
    relay = new KubeRelay(options.kubernetes)
    relay.start()
  }

  const fork = (index: number): void => {
    const worker = cluster.fork({ [WORKER_INDEX_ENV]: String(index) })
    workers.set(index, { worker, ready: false, heard: false, lastHeard: performance.now() })
    worker.on('message', (msg: ToPrimary) => {
      const heard = workers.get(index)
      if (heard?.worker === worker) { heard.heard = true; heard.lastHeard = performance.now() }
      if (msg?.type === 'sallyport:ready') {
        const entry = workers.get(index)
        if (entry?.worker === worker) entry.ready = msg.ready
      } else if (msg?.type === 'sallyport:config_dump') {
        pending.get(msg.id)?.(msg.json)
      } else if (msg?.type === 'sallyport:metrics') {
        pending.get(msg.id)?.({ metrics: msg.metrics, names: msg.names })
      } else if (msg?.type === 'sallyport:kube-subscribe') {
        relay?.subscribe(worker)
      }
    })
    worker.on('exit', (code, signal) => {
      // Its counters and histograms stay in the aggregate (as of its last scrape).
      clusterMetrics.exited(worker.id)
      relay?.unsubscribe(worker)
      const entry = workers.get(index)
      if (entry?.worker !== worker) return
      entry.ready = false
      if (shuttingDown) return
      log.error({ worker: index, code, signal }, 'worker exited; restarting')
      setTimeout(() => { if (!shuttingDown) fork(index) }, RESPAWN_DELAY_MS).unref()
    })
  }
  for (let i = 0; i < options.workers; i++) fork(i)

  // The watchdog (--worker-watchdog-seconds): a worker whose event loop has not
  // answered for that long (a Plugin in an endless loop, a stuck native call) is
  // killed and replaced. The primary answers /healthz and /readyz for all of
  // them, so without it a wedged worker was invisible to kubelet while the
  // connections handed to it hung, as a single process's own probes would not be.
  const watchdogMs = (options.workerWatchdogSeconds ?? 30) * 1000
  if (watchdogMs > 0) {
    setInterval(() => {
      if (shuttingDown) return
      const now = performance.now()
      for (const [index, entry] of workers) {
        // Watched once it has spoken (its start, slow on a busy machine, is /readyz's business).
        if (!entry.heard || !entry.worker.isConnected() || entry.worker.isDead()) continue
        const silentMs = now - entry.lastHeard
        if (silentMs > watchdogMs) {
          log.error({ worker: index, pid: entry.worker.process.pid, silentMs: Math.round(silentMs) }, 'worker stopped answering; killing it (it is replaced)')
          entry.ready = false
          entry.worker.process.kill('SIGKILL')
          continue
        }
        try { entry.worker.send({ type: 'sallyport:ping' } satisfies ToWorker) } catch { /* gone: its exit handler replaces it */ }
      }
    }, Math.min(WATCHDOG_PING_MS, watchdogMs / 2)).unref()
  }

  /** Asks one worker (`question` given its id); its answer, or undefined once it timed out, exited or could not be asked. */
  const ask = (worker: Worker, question: (id: number) => ToWorker): Promise<unknown> => new Promise<unknown>((resolve) => {
    const id = nextId++
    const done = (answer?: unknown): void => { clearTimeout(timer); pending.delete(id); worker.off('exit', gone); resolve(answer) }
    const gone = (): void => { done() }
    const timer = setTimeout(gone, WORKER_ANSWER_MS)
    worker.once('exit', gone)
    pending.set(id, done)
    try { worker.send(question(id)) } catch { gone() }
  })

  /** One worker's metrics into the aggregate; a worker that does not answer counts with its previous answer. */
  const scrapeWorker = async (worker: Worker): Promise<void> => {
    const answer = await ask(worker, (id) => ({ type: 'sallyport:metrics', id })) as { metrics: unknown; names: unknown } | undefined
    if (answer === undefined) return
    const parsed = parseMetricJson(answer.metrics)
    if (parsed === null) log.warn({ worker: worker.id }, 'worker sent metrics that are not metric JSON; using its previous answer')
    else clusterMetrics.observe(worker.id, parsed, parseNames(answer.names))
  }

  const admin: AdminServer | null = options.admin === null ? null : await startAdminServer({
    ...options.admin,
    configDumpAccess: options.configDump,
    ready: () => !shuttingDown && workers.size === options.workers && [...workers.values()].every((w) => w.ready),
    metrics: async () => {
      // A worker still starting (not heard from) is left out rather than waited for: it has counted
      // next to nothing, and is in the next scrape; leaving it out takes nothing away from the aggregate.
      await Promise.all([...workers.values()].filter((w) => w.heard && w.worker.isConnected()).map((w) => scrapeWorker(w.worker)))
      // The primary's own failed lists and watches (Kubernetes mode: its informers are the replica's).
      const own = relay === null ? null : parseMetricJson([await configReloadFailures.get()])
      return { contentType: registry.contentType, body: await clusterMetrics.render(own ?? []) }
    },
    configDump: async () => {
      const live = [...workers.values()].find((w) => w.worker.isConnected())
      if (live === undefined) return dumpJson({ error: 'no live worker' })
      const json = await ask(live.worker, (id) => ({ type: 'sallyport:config_dump', id }))
      return typeof json === 'string' ? json : dumpJson({ error: 'worker did not answer' })
    },
  })
  log.info({ workers: options.workers }, 'primary started')
  process.on('SIGHUP', () => { for (const { worker } of workers.values()) worker.process.kill('SIGHUP') })

  onShutdownSignal(async (signal) => {
    shuttingDown = true
    log.info({ signal, drainSeconds: options.drainSeconds }, 'shutting down: draining workers')
    const exits = [...workers.values()].map(({ worker }) => new Promise<void>((resolve) => {
      if (worker.isDead()) return resolve()
      worker.once('exit', () => resolve())
      // A worker stuck past the grace period (plus slack to close pools) is killed.
      const kill = setTimeout(() => worker.process.kill('SIGKILL'), options.drainSeconds * 1000 + 5000)
      kill.unref()
      try { worker.send({ type: 'sallyport:shutdown' } satisfies ToWorker) } catch { worker.process.kill('SIGTERM') }
    }))
    await Promise.all(exits)
    relay?.close()
    await admin?.close()
    log.info('stopped')
  })
}

async function serveWorker(options: ServeOptions): Promise<void> {
  const index = Number(process.env[WORKER_INDEX_ENV] ?? 0)
  const send = (msg: ToPrimary): void => { if (process.connected) process.send?.(msg) }
  // Scrapes are answered from the start: a worker just forked (a replacement) is
  // asked along with the others, and an unanswered ask holds the scrape for METRICS_TIMEOUT_MS.
  process.on('message', (msg: ToWorker) => {
    if (msg?.type === 'sallyport:ping') { send({ type: 'sallyport:pong' }); return }
    if (msg?.type !== 'sallyport:metrics') return
    const id = msg.id
    registry.getMetricsAsJSON().then(
      (metrics) => send({ type: 'sallyport:metrics', id, metrics, names: keptNames() }),
      (err: unknown) => { log.error({ err }, 'collecting metrics failed'); send({ type: 'sallyport:metrics', id, metrics: null, names: null }) },
    )
  })
  if (options.tracing != null) installTracer(options.tracing)
  // One identity per Pod: only the first worker campaigns for the lease, writes status and records
  // config Events (each worker compiles the same configuration). No worker lists or watches: the
  // primary's informers feed them all (kube-relay.ts), one list/watch set per Pod.
  const kube = await kubeMode(options, index === 0, true)
  const runtime = new Runtime({
    ...kube?.runtimeOptions,
    configPaths: options.configPaths, gatewayClass: options.gatewayClass, bind: options.bind, accessLog: options.accessLog,
    dns: options.dns, guard: options.guard, http1Client: options.http1Client, removedSeriesMs: removedSeriesMs(options), maxConnections: options.maxConnections,
    publishService: options.publishService ?? null,
    reportStatus: index === 0,
    onReadyChange: (ready) => send({ type: 'sallyport:ready', ready }),
  })
  let stopping: Promise<void> | null = null
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      // As serveSingle: drain and hand the lease over together.
      await Promise.all([kube?.stop(), runtime.stop(options.drainSeconds * 1000)])
      await shutdownTracer()
      if (process.connected) process.disconnect?.()
      process.exit(0)
    })()
    return stopping
  }
  process.on('message', (msg: ToWorker) => {
    if (msg?.type === 'sallyport:shutdown') void stop()
    else if (msg?.type === 'sallyport:config_dump') send({ type: 'sallyport:config_dump', id: msg.id, json: dumpJson(runtime.configDump()) })
  })
  // Ctrl-C reaches the whole process group: the primary coordinates, workers wait for it.
  process.on('SIGINT', () => {})
  process.on('SIGTERM', () => { void stop() })
  process.on('SIGHUP', () => { void runtime.reload() })
  // The primary gone (killed hard): nobody would ever tell us to stop, so we drain
  // and exit. node's cluster child exits at once on a disconnect unless the worker
  // is marked as leaving on purpose (exitedAfterDisconnect); this listener runs
  // first (node emits the worker's 'disconnect' before it checks), and marks it.
  cluster.worker?.once('disconnect', () => {
    if (cluster.worker !== undefined) cluster.worker.exitedAfterDisconnect = true
    void stop()
  })
  await runtime.start()
  kube?.start()
  send({ type: 'sallyport:ready', ready: runtime.ready() })
}

/**
 * SIGTERM and SIGINT: run `shutdown` once, then exit 0 (a second signal exits at once).
 * Until then the process stays up whatever it has open: with `--admin off` and no
 * listener yet (an empty directory, no Gateway so far) nothing else would keep it
 * running, and it exited at once instead of waiting for the files to come.
 */
function onShutdownSignal(shutdown: (signal: string) => Promise<void>): void {
  setInterval(() => {}, 2 ** 30) // kept; process.exit() ends it
  let started = false
  const handler = (signal: NodeJS.Signals): void => {
    if (started) {
      log.warn({ signal }, 'second signal: exiting now')
      process.exit(1)
    }
    started = true
    shutdown(signal).then(() => process.exit(0), (err: unknown) => {
      log.error({ err }, 'shutdown failed')
      process.exit(1)
    })
  }
  process.on('SIGTERM', handler)
  process.on('SIGINT', handler)
}
