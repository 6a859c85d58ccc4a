// Step 7: TCPRoute and TLSRoute → L4Route per port / per SNI. One TCPRoute
// serves a TCP port (the oldest attached); a TLS port indexes TLSRoutes by
// SNI, exact names before wildcards, the oldest route winning each name — in
// both listener modes (Passthrough forwards the raw stream, Terminate
// decrypts with the listener's certificate first).
//
// TLS origination to L4 backends — GEP-1897 "How a client behaves" leaves the
// TCPRoute and TLSRoute-Terminate rows implementation-dependent; ours (README
// "TCPRoute and TLSRoute"): a backend with TLS (Backend `tls`, or a Service
// targeted by a BackendTLSPolicy — backends.ts resolves it for every route
// kind) gets cluster TLS, and the data plane originates it for TCPRoute and
// for TLSRoute on a Terminate listener (re-encrypt). A TLSRoute in
// Passthrough never does: the client's own TLS goes through untouched
// (lib/upstream/l4-dial.ts, `originateTls: false`).

import type { BackendTrafficPolicy, TCPRoute, TLSRoute } from '../resources/model.ts'
import type { L4Route, SniIndex, WeightedCluster } from './table.ts'
import { GATEWAY_GROUP } from './conditions.ts'
import type { BackendResolver } from './backends.ts'
import type { PolicyIndex } from './policies.ts'
import type { RefProblem } from './rules.ts'
import { buildHostnameIndex } from '../hostname-index.ts'

export function compileL4Route(route: TCPRoute | TLSRoute, resolver: BackendResolver, traffic: PolicyIndex<BackendTrafficPolicy>,
  gatewayKey: string, listenerName: string, problems: RefProblem[]): L4Route {
  const from = { group: GATEWAY_GROUP, kind: route.kind, namespace: route.meta.namespace, name: route.meta.name }
  const backends: WeightedCluster[] = []
  let totalWeight = 0
  route.rules.forEach((rule, ruleIndex) => {
    rule.backendRefs.forEach((ref, refIndex) => {
      const r = resolver.resolve(ref, from, route.kind, gatewayKey)
      if (!r.ok) problems.push({ reason: r.reason, message: r.message, field: `spec.rules[${ruleIndex}].backendRefs[${refIndex}]` })
      // Issue 5: a denied destination gets no cluster (the connection is refused) and says why.
      const denial = r.ok ? resolver.denial(r.value, gatewayKey) : null
      backends.push(denial === null
        ? { cluster: r.ok ? r.value : null, weight: ref.weight, priority: ref.priority, requestHeaders: null, responseHeaders: null }
        : { cluster: null, weight: ref.weight, priority: ref.priority, requestHeaders: null, responseHeaders: null, denied: denial.direct })
      totalWeight += ref.weight
    })
  })
  const policy = traffic.forRoute(route.kind, route.meta.namespace, route.meta.name, gatewayKey, listenerName)
  return {
    route: { kind: route.kind, namespace: route.meta.namespace, name: route.meta.name },
    backends, totalWeight,
    idleMs: policy?.timeout?.idleMs ?? null,
    connectMs: policy?.timeout?.connectMs ?? null,
  }
}

/** Routes arrive oldest first; the first route for a name keeps it. */
export function buildSniIndex(entries: ReadonlyArray<{ hostname: string; route: L4Route }>, mode: SniIndex['mode']): SniIndex {
  return { ...buildHostnameIndex(entries.map(e => [e.hostname, e.route] as const)), mode }
}
