// Step 4: policy attachment (Envoy Gateway BackendTrafficPolicy, sallyport
// EgressExtension). Precedence: Route > Backend > Gateway listener (sectionName)
// > whole Gateway, for rule-scope fields (forRule: a Backend's policy decides a
// rule all of whose backendRefs name Backends under that one policy) and
// cluster-scope fields (forCluster) alike; between policies on the same target the oldest
// creationTimestamp, then namespace/name, wins and the others are Conflicted.
// A winning policy replaces a less specific one whole (Envoy Gateway's default,
// no field-level merge); the less specific one gets Overridden=True.

import type { BackendTrafficPolicy, EgressExtension, ExtensionSpec, PolicyTargetRef } from '../resources/model.ts'
import { backendKey } from '../resources/model.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import { GATEWAY_GROUP, compareAge } from './conditions.ts'
import { isBackendKind } from './backends.ts'

type Policy = BackendTrafficPolicy | EgressExtension

export interface PolicyVerdict {
  /** Accepted=False reason and message, or null when attached. */
  rejected: { reason: string; message: string } | null
  /** Overridden by more specific policies (message names them). */
  overriddenBy: Set<string>
}

/** The policy slot of a Backend object (its snapshot key, resources/model.ts backendKey). */
export function backendSlot(key: string): string {
  return `Backend/${key}`
}

function slotOf(ref: PolicyTargetRef, namespace: string): string | null {
  if (ref.group === GATEWAY_GROUP && ref.kind === 'Gateway') return ref.sectionName === null ? `Gateway/${namespace}/${ref.name}` : `Listener/${namespace}/${ref.name}/${ref.sectionName}`
  if (ref.group === GATEWAY_GROUP && (ref.kind === 'HTTPRoute' || ref.kind === 'GRPCRoute' || ref.kind === 'TCPRoute' || ref.kind === 'TLSRoute')) return `${ref.kind}/${namespace}/${ref.name}`
  if (isBackendKind(ref.group, ref.kind)) return backendSlot(backendKey(ref.group, ref.kind, namespace, ref.name))
  return null
}

/** Whether a policy's targetRef names an object of the snapshot (a Gateway's listener, when it names a section). */
export function targetExists(snapshot: Snapshot, ref: PolicyTargetRef, namespace: string): boolean {
  const key = `${namespace}/${ref.name}`
  switch (ref.kind) {
    case 'Gateway': {
      const g = snapshot.gateways.get(key)
      return g !== undefined && (ref.sectionName === null || g.listeners.some(l => l.name === ref.sectionName))
    }
    case 'HTTPRoute': return snapshot.httpRoutes.has(key)
    case 'GRPCRoute': return snapshot.grpcRoutes.has(key)
    case 'TCPRoute': return snapshot.tcpRoutes.has(key)
    case 'TLSRoute': return snapshot.tlsRoutes.has(key)
    default: return snapshot.backends.has(backendKey(ref.group, ref.kind, namespace, ref.name))
  }
}

/** Winners per target slot plus a verdict per policy. */
export class PolicyIndex<P extends Policy> {
  readonly winners = new Map<string, P>()
  readonly verdicts = new Map<string, PolicyVerdict>()

  constructor(snapshot: Snapshot, policies: ReadonlyMap<string, P>) {
    for (const p of [...policies.values()].sort(compareAge)) {
      const key = `${p.meta.namespace}/${p.meta.name}`
      const verdict: PolicyVerdict = { rejected: null, overriddenBy: new Set() }
      this.verdicts.set(key, verdict)
      for (const ref of p.targetRefs) {
        // Policy attachment: targetRefs are local; a policy targets objects in its own namespace.
        const slot = slotOf(ref, p.meta.namespace)
        if (slot === null) { verdict.rejected = { reason: 'Invalid', message: `targetRef ${ref.group === '' ? '' : ref.group + '/'}${ref.kind} is not supported` }; continue }
        if (!targetExists(snapshot, ref, p.meta.namespace)) { verdict.rejected = { reason: 'TargetNotFound', message: `${ref.kind} ${p.meta.namespace}/${ref.name}${ref.sectionName !== null ? ` section ${ref.sectionName}` : ''} not found` }; continue }
        const owner = this.winners.get(slot)
        if (owner !== undefined && owner !== p) {
          verdict.rejected = { reason: 'Conflicted', message: `${slot} already has policy ${owner.meta.namespace}/${owner.meta.name} (older wins)` }
          continue
        }
        this.winners.set(slot, p)
      }
    }
  }

  get(slot: string): P | null {
    if (this.winners.size === 0) return null
    return this.winners.get(slot) ?? null
  }

  /**
   * The policy for a route rule attached through a Gateway listener: the
   * route's own, else the listener's, else the Gateway's. Marks the less
   * specific ones Overridden.
   */
  forRoute(routeKind: string, routeNs: string, routeName: string, gatewayKey: string, listener: string): P | null {
    return this.forRule(routeKind, routeNs, routeName, gatewayKey, listener, null)
  }

  /**
   * The policy for one rule of a route through a Gateway listener: the route's
   * own; else the policy of the Backends the rule sends to, when every one of
   * its backendRefs names a Backend (`backendSlots`, null when one does not)
   * and they all have the same policy; else the listener's, else the
   * Gateway's. Marks the less specific ones Overridden.
   */
  forRule(routeKind: string, routeNs: string, routeName: string, gatewayKey: string, listener: string, backendSlots: readonly string[] | null): P | null {
    if (this.winners.size === 0) return null // the common case: no policies at all; skip building three keys per route (issue 11)
    const route = this.get(`${routeKind}/${routeNs}/${routeName}`)
    const backend = route === null && backendSlots !== null ? this.#shared(backendSlots) : null
    const section = this.get(`Listener/${gatewayKey}/${listener}`)
    const gateway = this.get(`Gateway/${gatewayKey}`)
    const chosen = route ?? backend ?? section ?? gateway
    if (chosen === null) return null
    for (const lower of [section, gateway]) {
      if (lower !== null && lower !== chosen) this.#override(lower, chosen)
    }
    return chosen
  }

  /** The one policy every slot has; null when one has none or two differ. */
  #shared(slots: readonly string[]): P | null {
    let found: P | null = null
    for (const slot of slots) {
      const p = this.get(slot)
      if (p === null || (found !== null && p !== found)) return null
      found = p
    }
    return found
  }

  /**
   * Cluster-scope policy (load balancing, circuit breaking, health checks,
   * connect timeout): the oldest route policy among the cluster's users, else
   * the Backend's, else the oldest policy on a listener (sectionName) the
   * users attach through, else the oldest whole-Gateway policy.
   * `listenerKeys`: `namespace/gateway/listener`.
   */
  forCluster(backendKey: string | null, routeSlots: readonly string[], gatewayKeys: readonly string[], listenerKeys: readonly string[] = []): P | null {
    if (this.winners.size === 0) return null
    const routes = routeSlots.map(s => this.get(s)).filter((p): p is P => p !== null).sort(compareAge)
    const backend = backendKey === null ? null : this.get(backendSlot(backendKey))
    const listeners = listenerKeys.map(l => this.get(`Listener/${l}`)).filter((p): p is P => p !== null).sort(compareAge)
    const gateways = gatewayKeys.map(g => this.get(`Gateway/${g}`)).filter((p): p is P => p !== null).sort(compareAge)
    const chosen = routes[0] ?? backend ?? listeners[0] ?? gateways[0] ?? null
    if (chosen === null) return null
    // Less specific policies that lost this cluster are Overridden (the same
    // rule forRoute applies to rule-scope fields).
    if (backend !== null && backend !== chosen) this.#override(backend, chosen)
    // Among equals (several listeners or Gateways use the cluster) the oldest serves it; the others did not lose to a more specific one.
    if (chosen !== listeners[0]) for (const l of listeners) this.#override(l, chosen)
    if (chosen !== gateways[0]) for (const g of gateways) this.#override(g, chosen)
    return chosen
  }

  #override(lower: P, winner: P): void {
    this.verdicts.get(`${lower.meta.namespace}/${lower.meta.name}`)?.overriddenBy.add(`${winner.meta.namespace}/${winner.meta.name}`)
  }
}

/**
 * Extensions for a route rule: Gateway scope, then the route's EgressExtension
 * policy, then ExtensionRef filters; an extension of the same name at a more
 * specific scope replaces the less specific one. Higher priority runs first.
 */
export function mergeExtensions(scopes: ReadonlyArray<readonly ExtensionSpec[] | null>): ExtensionSpec[] | null {
  if (scopes.every(s => s === null || s.length === 0)) return null // the common case: no Map per rule (issue 11)
  const byName = new Map<string, ExtensionSpec>()
  for (const scope of scopes) {
    if (scope === null) continue
    for (const ext of scope) byName.set(ext.name, ext)
  }
  if (byName.size === 0) return null
  return [...byName.values()].sort((a, b) => b.priority - a.priority)
}
