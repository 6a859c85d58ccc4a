// Entry point of the readers: one validated manifest in, one model object out
// (or null for kinds the model does not use, e.g. Deployment or unknown CRDs).
// The kind is recognized by API group + kind so that a foreign CRD that happens
// to be called "Backend" is not mistaken for one of ours.

import type { SourceRef } from './meta.ts'
import type { ModelObject } from './model.ts'
import { type Fields, textAt } from './read-fields.ts'
import { apiVersionOf, groupOf } from './read-meta.ts'
import { readGateway, readGatewayClass } from './read-gateway.ts'
import { readGRPCRoute, readHTTPRoute, readReferenceGrant, readTCPRoute, readTLSRoute } from './read-routes.ts'
import { readBackend } from './read-backend.ts'
import { readBackendTLSPolicy, readEgressExtension } from './read-policies.ts'
import { readBackendTrafficPolicy } from './read-traffic-policy.ts'
import { readCore } from './read-core.ts'

const GATEWAY_GROUPS = new Set(['gateway.networking.k8s.io', 'gateway.networking.x-k8s.io'])
const CORE_GROUPS: Readonly<Record<string, string>> = {
  Secret: '',
  ConfigMap: '',
  Service: '',
  Namespace: '',
  Pod: '',
  EndpointSlice: 'discovery.k8s.io',
  ClusterTrustBundle: 'certificates.k8s.io',
}

/** Normalize one validated manifest into the internal model. null: a kind the model does not use. */
export function readObject(doc: Record<string, unknown>, source: SourceRef): ModelObject | null {
  const fields: Fields = doc
  const kind = textAt(fields, 'kind')
  if (kind === null) return null
  const group = groupOf(apiVersionOf(fields))

  if (GATEWAY_GROUPS.has(group)) {
    switch (kind) {
      case 'GatewayClass': return readGatewayClass(fields, source)
      case 'Gateway': return readGateway(fields, source)
      case 'HTTPRoute': return readHTTPRoute(fields, source)
      case 'GRPCRoute': return readGRPCRoute(fields, source)
      case 'TCPRoute': return readTCPRoute(fields, source)
      case 'TLSRoute': return readTLSRoute(fields, source)
      case 'ReferenceGrant': return readReferenceGrant(fields, source)
      case 'BackendTLSPolicy': return readBackendTLSPolicy(fields, source)
      // GEP-4488 document / egress proposal (Backend) and the experimental channel (XBackend).
      case 'Backend': case 'XBackend': return readBackend(fields, source)
      default: return null
    }
  }
  if (group === 'gateway.envoyproxy.io') {
    if (kind === 'Backend') return readBackend(fields, source)
    if (kind === 'BackendTrafficPolicy') return readBackendTrafficPolicy(fields, source)
    return null
  }
  if (group === 'sallyport.io') return kind === 'EgressExtension' ? readEgressExtension(fields, source) : null
  if (Object.hasOwn(CORE_GROUPS, kind) && CORE_GROUPS[kind] === group) return readCore(fields, kind, source)
  return null
}
