// Issue 11: what one compile hands the next, so that a reload recompiles only
// what changed. At 5,000 routes a full compile allocates ~40 MB, most of it
// per route (attachment, rules, matches, vhosts); the next compile drops it
// all, and that garbage is what fills the old generation between the
// mark-compacts that set the reload's p99. Sources keep the model object of
// every unchanged Kubernetes object or file document (kube-source.ts,
// DocumentCache), so object identity says what did not change.
//
// Two memos, each keyed by identity:
// - per route object: its attachment, compiled rules and placed matches, plus
//   the calls it made that record usage for status (resolver users and
//   denials, policy overrides), which a reuse repeats. Valid only while
//   everything else a route compiles against is the same: every non-route
//   object of the snapshot (Pods only when a Backend selects Pods), the compile
//   options, and the policy winners (a policy's target may be a route that came
//   or went). Any change there drops the route memo: the next compile is a
//   full one.
// - per port and host pattern: the VirtualHost built from a list of placed
//   matches, reused when the list holds the same match objects in the same
//   order. It depends on nothing else.
//
// Compiled every time: routes that took extension chains (one compile's
// ExtensionCompiler shares them across rules, and the table lists them), and
// TCPRoutes and TLSRoutes (few, and their port and SNI claims are decided
// route against route). test/compile/compile-cache.test.ts compares cached and
// fresh compiles over random change sequences.

import type { ModelObject } from '../resources/model.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import type { ResolverCall } from './backends.ts'
import type { AnyRoute, RouteAttachment } from './attach.ts'
import type { GatewayPlan } from './gateways.ts'
import type { CompiledRoute } from './rules.ts'
import type { RouteOutcome } from './compile.ts'
import type { MatchSpec } from './precedence.ts'
import type { VirtualHost } from './table.ts'
import { untracked } from './references.ts'
import { NO_LIMITS, type TlsAncestorLimits } from './ancestor-limit.ts'
import type { PlacedMatch } from './vhosts.ts'

/** The snapshot maps a compiled route depends on besides its own object. */
const ENVIRONMENT = [
  'gatewayClasses', 'gateways', 'referenceGrants', 'backends', 'backendTLSPolicies', 'backendTrafficPolicies',
  'egressExtensions', 'secrets', 'configMaps', 'services', 'endpointSlices', 'namespaces', 'pods', 'clusterTrustBundles',
] as const satisfies ReadonlyArray<keyof Snapshot>

type Environment = ReadonlyArray<ReadonlyMap<string, ModelObject>>

/** One route compiled for one listener (the unit compile.ts caches per route). */
export interface ListenerCompile {
  readonly gatewayKey: string
  readonly listenerName: string
  /** `gateway/listener`, the key of listener-level policy use. */
  readonly listenerKey: string
  readonly compiled: CompiledRoute
  /** The resolver calls compiling it made, repeated when it is reused. */
  readonly calls: readonly ResolverCall[]
}

export interface RouteMemo {
  readonly attachment: RouteAttachment
  readonly listeners: readonly ListenerCompile[]
  /** Placed matches per port, in the order they were placed. */
  readonly placements: ReadonlyArray<{ readonly port: number; readonly matches: readonly PlacedMatch[] }>
  /** The same object every compile that reuses the route: status assembly keeps the route's status per outcome. */
  readonly outcome: RouteOutcome
}

export interface VhostMemo {
  /** The matches the vhost was built from, in the order given (before ranking). */
  readonly specs: readonly MatchSpec[]
  readonly vhost: VirtualHost
}

export interface CompileCacheStats {
  readonly routesReused: number
  readonly routesCompiled: number
  readonly vhostsReused: number
  readonly vhostsBuilt: number
}

/** Owned by whoever compiles one configuration over and over (the runtime); pass it as CompileOptions.cache. */
export class CompileCache {
  #environment: Environment | null = null
  #optionsKey = ''
  #winners: ReadonlyArray<ReadonlyMap<string, unknown>> = []
  #plan: GatewayPlan | null = null
  #routes = new Map<AnyRoute, RouteMemo>()
  /** Port → host pattern → vhost. */
  #vhosts: ReadonlyMap<number, ReadonlyMap<string, VhostMemo>> = new Map()
  /** The BackendTLSPolicy ancestor limits the last compile applied: the next one starts from them (ancestor-limit.ts). */
  tlsLimits: TlsAncestorLimits = NO_LIMITS
  /** What the last compile reused; for logs and tests. */
  stats: CompileCacheStats = { routesReused: 0, routesCompiled: 0, vhostsReused: 0, vhostsBuilt: 0 }
  /**
   * Whether the last plan() call returned the previous plan: that compile then
   * read nothing anew that the plan and reused routes had read before
   * (references.ts keeps what the earlier compile read).
   */
  planReused = false

  /** The previous compile's gateway plan when nothing it depends on changed (its listeners key the route memo's attachments), else null. */
  plan(snapshot: Snapshot, optionsKey: string): GatewayPlan | null {
    const plan = this.#plan !== null && optionsKey === this.#optionsKey && sameEnvironment(this.#environment, snapshot) ? this.#plan : null
    this.planReused = plan !== null
    return plan
  }

  /**
   * The route memo to read in this compile: the previous one when the plan
   * was reused and the policy winners are the same objects, else empty.
   */
  routes(planReused: boolean, winners: ReadonlyArray<ReadonlyMap<string, unknown>>): ReadonlyMap<AnyRoute, RouteMemo> {
    if (!planReused || winners.length !== this.#winners.length) return EMPTY_ROUTES
    for (let i = 0; i < winners.length; i++) if (!sameEntries(this.#winners[i] as ReadonlyMap<string, unknown>, winners[i] as ReadonlyMap<string, unknown>)) return EMPTY_ROUTES
    return this.#routes
  }

  vhost(port: number, pattern: string): VhostMemo | undefined {
    return this.#vhosts.get(port)?.get(pattern)
  }

  /**
   * F4: the runtime skipped compiling `snapshot`, which differs from the last
   * compiled one only in objects no compile read (references.ts): the memos
   * hold for it as they did, so the next compile compares against it.
   */
  carry(snapshot: Snapshot): void {
    if (this.#environment !== null) this.#environment = ENVIRONMENT.map((name) => untracked(snapshot[name] as ReadonlyMap<string, ModelObject>))
  }

  /** Replaces the memos with what a compile that finished built and reused (entries of objects that are gone are dropped). */
  commit(next: {
    readonly snapshot: Snapshot; readonly optionsKey: string; readonly plan: GatewayPlan; readonly winners: ReadonlyArray<ReadonlyMap<string, unknown>>
    readonly routes: Map<AnyRoute, RouteMemo>; readonly vhosts: ReadonlyMap<number, ReadonlyMap<string, VhostMemo>>
    readonly stats: CompileCacheStats; readonly tlsLimits: TlsAncestorLimits
  }): void {
    // The maps as the source made them, not as references.ts wraps them for one compile.
    this.#environment = ENVIRONMENT.map((name) => untracked(next.snapshot[name] as ReadonlyMap<string, ModelObject>))
    this.#optionsKey = next.optionsKey
    this.#plan = next.plan
    this.#winners = next.winners
    this.#routes = next.routes
    this.#vhosts = next.vhosts
    this.stats = next.stats
    this.tlsLimits = next.tlsLimits
  }
}

/** Whether two match lists hold the same objects in the same order. */
export function sameSpecs(a: readonly MatchSpec[], b: readonly MatchSpec[]): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

const EMPTY_ROUTES: ReadonlyMap<AnyRoute, RouteMemo> = new Map()

const PODS = ENVIRONMENT.indexOf('pods')

function sameEnvironment(previous: Environment | null, snapshot: Snapshot): boolean {
  if (previous === null) return false
  // Backends are compared too, so whether one selects Pods is as before.
  const podsMatter = selectsPods(snapshot)
  for (let i = 0; i < ENVIRONMENT.length; i++) {
    if (i === PODS && !podsMatter) continue
    if (!sameEntries(previous[i] as ReadonlyMap<string, unknown>, untracked(snapshot[ENVIRONMENT[i] as (typeof ENVIRONMENT)[number]] as ReadonlyMap<string, unknown>))) return false
  }
  return true
}

/**
 * Whether a compiled route can depend on Pods: only through a Backend that
 * selects them by label (GEP-4488 EndpointSelector). Pods come and go far more
 * often than routes; without such a Backend they change only the table's
 * client identities, which every compile builds afresh.
 */
function selectsPods(snapshot: Snapshot): boolean {
  for (const b of snapshot.backends.values()) if (b.destination.type === 'EndpointSelector' && b.destination.selector !== null) return true
  return false
}

function sameEntries(a: ReadonlyMap<string, unknown>, b: ReadonlyMap<string, unknown>): boolean {
  if (a === b) return true
  if (a.size !== b.size) return false
  for (const [k, v] of b) if (a.get(k) !== v) return false
  return true
}
