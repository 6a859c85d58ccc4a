// Gateway API PolicyStatus.ancestors holds at most 16 entries, and the field's
// documentation says what happens past that: an implementation MUST NOT add
// further entries and MUST consider the policy unimplementable for the
// ancestors that do not fit. For a BackendTLSPolicy that means the Gateways
// past the limit may not use the Services it targets: their references fail
// (ResolvedRefs=False, 500), never plaintext.
//
// Decided here, in compile, and not by the status writer: only the leader
// writes status but every replica serves, and each must make the same choice.
// The Gateways that use a policy are ordered by namespace/name and the first
// ones keep it, as many as the slots the other controllers' entries (as read
// from the API server's status; none in file mode) leave free. Which Gateways
// use a policy is known only once every route is compiled, so compile.ts runs
// a second pass with these limits when the first shows a policy over them
// (compile-cache.ts keeps the last limits, so a steady state compiles once).

import type { Snapshot } from '../resources/snapshot.ts'
import type { ConfigProblem } from '../resources/problem.ts'

/** PolicyStatus.ancestors maxItems. */
export const MAX_POLICY_ANCESTORS = 16

/** The ResolvedRefs reason of a reference refused because its BackendTLSPolicy's ancestors list is full. */
export const ANCESTORS_FULL = 'PolicyAncestorsFull'

export interface TlsAncestorLimit {
  /** How many Gateways may use the policy (16 less the other controllers' entries). */
  readonly budget: number
  /** The Gateways (`namespace/name`) that may not, past the budget in namespace/name order. */
  readonly refused: ReadonlySet<string>
}

/** BackendTLSPolicy key → its limit; only policies with Gateways left out have one. */
export type TlsAncestorLimits = ReadonlyMap<string, TlsAncestorLimit>

export const NO_LIMITS: TlsAncestorLimits = new Map()

/**
 * The limits the use a compile pass saw calls for: `used` and `refused` are
 * that pass's Gateways per policy (together, every Gateway whose routes reached
 * a backend the policy applies to, whatever limits the pass ran with).
 */
export function tlsAncestorLimits(
  snapshot: Snapshot, controllerName: string, served: ReadonlySet<string>,
  used: ReadonlyMap<string, ReadonlySet<string>>, refused: ReadonlyMap<string, ReadonlySet<string>>,
): TlsAncestorLimits {
  const out = new Map<string, TlsAncestorLimit>()
  for (const key of [...new Set([...used.keys(), ...refused.keys()])].sort()) {
    const gateways = [...new Set([...(used.get(key) ?? []), ...(refused.get(key) ?? [])])].sort()
    const budget = Math.max(0, MAX_POLICY_ANCESTORS - otherEntries(snapshot, key, controllerName, served))
    if (gateways.length > budget) out.set(key, { budget, refused: new Set(gateways.slice(budget)) })
  }
  return out
}

/**
 * Slots of the policy's status.ancestors that are not ours to fill: other
 * controllers' entries, and those of another deployment of our controller
 * (an entry of our controllerName naming an existing Gateway we do not serve:
 * another GatewayClass's). The status writer keeps all of them where they are.
 */
function otherEntries(snapshot: Snapshot, key: string, controllerName: string, served: ReadonlySet<string>): number {
  const policy = snapshot.backendTLSPolicies.get(key)
  if (policy === undefined) return 0
  let n = 0
  for (const a of policy.statusAncestors) {
    const gateway = `${a.namespace}/${a.name}`
    if (a.controllerName !== controllerName || (!served.has(gateway) && snapshot.gateways.has(gateway))) n++
  }
  return n
}

/** Two limit sets that refuse the same Gateways of the same policies with the same budgets. */
export function sameLimits(a: TlsAncestorLimits, b: TlsAncestorLimits): boolean {
  if (a === b) return true
  if (a.size !== b.size) return false
  for (const [key, x] of a) {
    const y = b.get(key)
    if (y === undefined || y.budget !== x.budget || y.refused.size !== x.refused.size) return false
    for (const g of x.refused) if (!y.refused.has(g)) return false
  }
  return true
}

/** The limits as one comparable string per policy (compile-cache.ts compares route memos' environments with it). */
export function limitsFingerprint(limits: TlsAncestorLimits): ReadonlyMap<string, string> {
  const out = new Map<string, string>()
  for (const [key, l] of limits) out.set(key, `${l.budget}:${[...l.refused].sort().join(',')}`)
  return out
}

/**
 * A warning on each policy with Gateways left out (the log, `sallyport
 * validate`, and a Warning Event on the policy in Kubernetes mode).
 */
export function limitProblems(snapshot: Snapshot, limits: TlsAncestorLimits): ConfigProblem[] {
  const out: ConfigProblem[] = []
  for (const [key, l] of limits) {
    const policy = snapshot.backendTLSPolicies.get(key)
    if (policy === undefined) continue
    out.push({
      source: policy.source, kind: 'BackendTLSPolicy', namespace: policy.meta.namespace, name: policy.meta.name, field: 'status.ancestors', severity: 'warning',
      message: `ancestors list full (${MAX_POLICY_ANCESTORS} entries, ${MAX_POLICY_ANCESTORS - l.budget} held by other controllers): the policy is not implemented for Gateway(s) ${[...l.refused].sort().join(', ')}; their routes' references to the backends it targets fail (ResolvedRefs=False, 500), never plaintext`,
    })
  }
  return out
}
