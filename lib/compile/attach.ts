// Step 2: route attachment. Each parentRef that names a Gateway we serve is
// checked against the Gateway's listeners (sectionName, port, allowedRoutes
// namespaces and kinds, hostname intersection) and gets its own
// RouteParentStatus; parentRefs to Gateways we do not serve are left to
// their controllers.

import type { GRPCRoute, HTTPRoute, ParentRef, TCPRoute, TLSRoute } from '../resources/model.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import { matchesSelector } from '../resources/meta.ts'
import type { Condition } from './status.ts'
import { GATEWAY_GROUP, condition } from './conditions.ts'
import type { ServedGateway, ServedListener } from './gateways.ts'
import { intersectHostnames } from './hostnames.ts'

export type AnyRoute = HTTPRoute | GRPCRoute | TCPRoute | TLSRoute

export interface Attachment {
  readonly listener: ServedListener
  /** Hostname patterns this route serves through the listener (ANY_HOST for any). */
  readonly hostnames: readonly string[]
}

export interface ParentOutcome {
  readonly parentRef: ParentRef
  readonly gatewayKey: string
  readonly accepted: Condition
  readonly attachments: readonly Attachment[]
  /**
   * Listeners this parentRef counts toward in attachedRoutes: every listener
   * whose allowedRoutes admit the route (with intersecting hostnames), even
   * one that is not programmed. Gateway API ListenerStatus.attachedRoutes:
   * attachment "is based solely on the combination of the AllowedRoutes field
   * on the corresponding Listener and the Route's ParentRefs field", and the
   * count "MUST be set for Listeners with condition Accepted: false".
   */
  readonly counted: readonly ServedListener[]
}

export interface RouteAttachment {
  readonly route: AnyRoute
  /** One entry per parentRef naming a served Gateway. */
  readonly parents: readonly ParentOutcome[]
}

function routeHostnames(route: AnyRoute): readonly string[] {
  return route.kind === 'TCPRoute' ? [] : route.hostnames
}

function namespaceLabels(snapshot: Snapshot, namespace: string): Readonly<Record<string, string>> {
  const ns = snapshot.namespaces.get(namespace)
  // The API server sets kubernetes.io/metadata.name on every Namespace; file mode may not list them.
  return { 'kubernetes.io/metadata.name': namespace, ...(ns?.meta.labels ?? {}) }
}

function isNamespaceAllowed(snapshot: Snapshot, l: ServedListener, routeNamespace: string): boolean {
  const ar = l.listener.allowedRoutes
  switch (ar.namespacesFrom) {
    case 'All': return true
    case 'Same': return routeNamespace === l.gateway.meta.namespace
    case 'None': return false
    case 'Selector': return ar.namespaceSelector !== null && matchesSelector(ar.namespaceSelector, namespaceLabels(snapshot, routeNamespace))
  }
}

export function attachRoute(snapshot: Snapshot, served: ReadonlyMap<string, ServedGateway>, route: AnyRoute): RouteAttachment {
  const gen = route.meta.generation
  const parents: ParentOutcome[] = []
  for (const ref of route.parentRefs) {
    if (ref.group !== GATEWAY_GROUP || ref.kind !== 'Gateway') continue
    const gatewayKey = `${ref.namespace}/${ref.name}`
    const sg = served.get(gatewayKey)
    if (sg === undefined) continue
    const candidates = sg.listeners.filter(l =>
      (ref.sectionName === null || l.listener.name === ref.sectionName) && (ref.port === null || l.listener.port === ref.port))
    if (candidates.length === 0) {
      const what = ref.sectionName !== null ? `listener ${ref.sectionName}` : `port ${ref.port}`
      parents.push({ parentRef: ref, gatewayKey, attachments: [], counted: [], accepted: condition('Accepted', false, 'NoMatchingParent', `Gateway ${gatewayKey} has no ${what}`, gen) })
      continue
    }
    const attachments: Attachment[] = []
    const counted: ServedListener[] = []
    let allowed = 0
    let notReady = 0
    for (const l of candidates) {
      if (!l.ready) notReady++
      if (!l.kinds.some(k => k.group === GATEWAY_GROUP && k.kind === route.kind)) continue
      if (!isNamespaceAllowed(snapshot, l, route.meta.namespace)) continue
      const hostnames = l.protocol === 'TCP' ? [intersectHostnames(null, [])[0]] : intersectHostnames(l.hostname, routeHostnames(route))
      if (hostnames.length > 0) counted.push(l)
      if (!l.ready) continue // counted, but an unprogrammed listener serves nothing
      allowed++
      if (hostnames.length > 0) attachments.push({ listener: l, hostnames })
    }
    let accepted: Condition
    if (attachments.length > 0) accepted = condition('Accepted', true, 'Accepted', '', gen)
    else if (allowed > 0) accepted = condition('Accepted', false, 'NoMatchingListenerHostname', `no listener hostname of Gateway ${gatewayKey} intersects the route's hostnames`, gen)
    else if (notReady === candidates.length) accepted = condition('Accepted', false, 'NoMatchingParent', `no listener of Gateway ${gatewayKey} is ready`, gen)
    else accepted = condition('Accepted', false, 'NotAllowedByListeners', `listeners of Gateway ${gatewayKey} do not allow ${route.kind} from namespace ${route.meta.namespace}`, gen)
    parents.push({ parentRef: ref, gatewayKey, accepted, attachments, counted })
  }
  return { route, parents }
}
