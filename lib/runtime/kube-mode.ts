// `serve --kubernetes`: the pieces around the Runtime in Kubernetes mode.
//   source     KubeSource (informers; with --workers N the primary's, relayed:
//              kube-relay.ts), or files + API server (CombinedSource)
//   leader     LeaderElector on a Lease (POD_NAMESPACE / POD_NAME)
//   status     StatusWriter, writing only while leader
//   events     KubeEventRecorder (every replica), fed config problems (one worker
//              per replica) and the data path's denials (every worker)
// The Runtime stays source-agnostic: it gets `source` and calls `onApplied`.

import { FileSource } from '../config/file-source.ts'
import { CombinedSource, type ConfigSource } from '../config/kube-combined-source.ts'
import { KubeClient } from '../config/kube-client.ts'
import { KubeSource, type KubeFeed } from '../config/kube-source.ts'
import { apiVersion } from '../config/kube-resources.ts'
import { logger } from '../observe/log.ts'
import { ConfigEvents } from './events-config.ts'
import { KubeEventRecorder, type EventRecorder, type InvolvedObject } from './events.ts'
import { defaultExtensionRuntime } from '../extensions/chain.ts'
import { LeaderElector, RELEASE_TIMEOUT_MS, leaseNameFor, podIdentity } from './leader-election.ts'
import { CONTROLLER_NAME } from './runtime.ts'
import { StatusWriter } from './status-writer.ts'
import type { RuntimeOptions } from './runtime.ts'

const log = logger('kube-mode')

export interface KubeModeOptions {
  /** A kubeconfig file; null: in-cluster service account. Or a ready client (tests). */
  readonly kubeconfig?: string | null
  readonly client?: KubeClient
  readonly namespaces?: readonly string[]
  readonly labelSelector?: string | null
  /**
   * Objects fed by the primary of `serve --workers` (kube-relay.ts primaryFeed) instead of
   * informers of our own; the client then only writes (status, Events, the Lease).
   */
  readonly feed?: KubeFeed
  /** Files served together with the API server's objects (file wins on collisions). */
  readonly configPaths?: readonly string[]
  /** Campaign for leadership and write status (false: a --workers worker other than the first). */
  readonly writeStatus?: boolean
  /**
   * Record config Events (Invalid, InsecureSkipVerify, Shadowed; default true). With
   * --workers N every worker compiles the same configuration: only the first records
   * them, or each would be N Events. Data-path Events are recorded by every worker.
   */
  readonly configEvents?: boolean
  readonly gatewayClass?: string
  /** Lease timings (defaults: client-go's 15 s / 10 s / 2 s). */
  readonly lease?: { readonly name?: string; readonly namespace?: string; readonly identity?: string; readonly durationMs?: number; readonly renewDeadlineMs?: number; readonly retryPeriodMs?: number }
  readonly debounceMs?: number
  readonly backoffMs?: { readonly base: number; readonly max: number }
}

export interface KubeMode {
  readonly client: KubeClient
  readonly kubeSource: KubeSource
  readonly elector: LeaderElector | null
  readonly statusWriter: StatusWriter | null
  readonly events: EventRecorder
  /** What to give the Runtime. */
  readonly runtimeOptions: Pick<RuntimeOptions, 'source' | 'sourceLabel' | 'onApplied'>
  /** Start campaigning (after the Runtime started). */
  start(): void
  /**
   * Release the lease and stop watching. `release: false`: as if the process
   * died. Bounded (about RELEASE_TIMEOUT_MS) whether or not the API server
   * answers: shutdown runs it alongside the drain.
   */
  stop(options?: { release?: boolean }): Promise<void>
}

export function createKubeMode(options: KubeModeOptions): KubeMode {
  const client = options.client ?? (options.kubeconfig == null ? KubeClient.inCluster() : KubeClient.fromFile(options.kubeconfig))
  const settings = { namespaces: options.namespaces ?? [], labelSelector: options.labelSelector ?? null, debounceMs: options.debounceMs, backoffMs: options.backoffMs }
  const kubeSource = options.feed === undefined ? new KubeSource({ client, ...settings }) : new KubeSource({ feed: options.feed, ...settings })
  const paths = options.configPaths ?? []
  const source: ConfigSource = paths.length === 0 ? kubeSource : new CombinedSource(new FileSource(paths, { debounceMs: options.debounceMs ?? 200 }), kubeSource)
  const pod = podIdentity()
  const identity = options.lease?.identity ?? pod.identity
  const leaseNamespace = options.lease?.namespace ?? pod.namespace
  const events = new KubeEventRecorder({ client, instance: identity, fallbackNamespace: leaseNamespace })
  // Events name their object's uid (and the resourceVersion we saw), as client-go's
  // reference.GetReference does: `kubectl describe` selects an object's Events by uid.
  const configEvents = new ConfigEvents({
    record: (o, type, reason, message) => events.record({ ...o, ...(kubeSource.reference(o.apiVersion, o.kind, o.namespace, o.name) ?? {}) }, type, reason, message),
    close: () => events.close(),
  })
  // Denials and transform failures from the data path (extensions, CONNECT refusals) are
  // Events on the object that declared the rule; in file mode they stay log lines.
  defaultExtensionRuntime().events.setTarget({
    emit: (e) => events.record(dataPathObject(kubeSource, e.object), e.type, e.reason, e.message),
  })
  let statusWriter: StatusWriter | null = null
  let elector: LeaderElector | null = null
  if (options.writeStatus ?? true) {
    elector = new LeaderElector({
      client, namespace: leaseNamespace, identity,
      name: options.lease?.name ?? leaseNameFor(options.gatewayClass ?? 'sallyport'),
      leaseDurationMs: options.lease?.durationMs, renewDeadlineMs: options.lease?.renewDeadlineMs, retryPeriodMs: options.lease?.retryPeriodMs,
      // A new term writes everything due at once: what failed in an earlier one (an API server outage) is not left backing off.
      onChange: (leader) => { if (leader) { statusWriter?.resetBackoff(); void statusWriter?.sync() } },
    })
    const e = elector
    const w = new StatusWriter({ client, source: kubeSource, controllerName: CONTROLLER_NAME, isLeader: () => e.isLeader() })
    // A status changed by someone else (erased, overwritten) is checked again at once, without a compile.
    kubeSource.onStatusChange((obj) => w.statusChanged(obj))
    statusWriter = w
  }
  const writer = statusWriter
  const recordConfigEvents = options.configEvents ?? true
  log.info({ server: client.server(), namespaces: options.namespaces ?? [], labelSelector: options.labelSelector ?? null, files: paths, identity, leaseNamespace, objectsFrom: options.feed === undefined ? 'api-server' : 'primary' }, 'kubernetes mode')
  return {
    client, kubeSource, elector, statusWriter, events,
    runtimeOptions: {
      source,
      sourceLabel: 'kubernetes',
      onApplied: ({ status, snapshot }) => {
        if (recordConfigEvents) configEvents.update(snapshot.problems)
        writer?.update(status, snapshot)
      },
    },
    start: () => elector?.start(),
    stop: async (stopOptions = {}) => {
      writer?.close()
      source.close()
      // The lease release and the last Events are best effort: an API server that
      // does not answer must not hold up the shutdown (the lease then expires).
      await Promise.all([elector?.stop(stopOptions), within(events.close(), RELEASE_TIMEOUT_MS)])
      if (options.client === undefined) client.close() // a client passed in is its owner's to close
    },
  }
}

/** `p`, or nothing after `ms`. */
function within(p: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<void>((resolve) => { timer = setTimeout(resolve, ms) })
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer))
}

/**
 * The object a data-path Event is about, as the API server has it: the data path
 * knows its model kind, namespace and name only, and a Backend may be the Gateway
 * API's, Envoy Gateway's or an XBackend.
 */
function dataPathObject(source: KubeSource, o: { readonly kind: string; readonly namespace: string; readonly name: string }): InvolvedObject {
  const found = source.lookup(o.kind, '', o.namespace, o.name)
  if (found === null) return { apiVersion: apiVersionOfKind(o.kind), ...o } // a file-defined object (--config too)
  const meta = found.raw.metadata
  return {
    apiVersion: apiVersion(found.resource.group, found.version), kind: found.resource.kind, namespace: o.namespace, name: o.name,
    ...(meta?.uid === undefined ? {} : { uid: meta.uid }), ...(meta?.resourceVersion === undefined ? {} : { resourceVersion: meta.resourceVersion }),
  }
}

/** The apiVersion an Event's involvedObject names for the kinds the data path reports on, when the API server has no such object. */
function apiVersionOfKind(kind: string): string {
  switch (kind) {
    case 'EgressExtension': return 'sallyport.io/v1alpha1'
    case 'BackendTrafficPolicy': return 'gateway.envoyproxy.io/v1alpha1'
    case 'Backend': return 'gateway.networking.k8s.io/v1alpha1'
    default: return 'gateway.networking.k8s.io/v1'
  }
}
