// What compile's status says is wrong between objects, as problems naming the
// file, document, object and field (`sallyport validate`): a backendRef to a
// Backend or Service that is not there, a reference into another namespace
// without a ReferenceGrant, a policy whose targetRef matches nothing, listeners
// conflicting on a port, a listener certificate Secret that is missing, a
// parentRef to a Gateway that is not in the files.
//
// One line per condition that is False for Accepted, ResolvedRefs or Programmed
// (or a negative-polarity one that is True: Conflicted, PartiallyInvalid),
// except where a problem of the object itself already says it
// (validate/, secretRefProblems, certificateProblems): never two lines for one
// mistake. Informational conditions (Overridden, OverlappingTLSConfig,
// InsecureSkipVerify, the sallyport.io/ annotation conditions whose values
// validate reads) are left to status.
//
// Each finding notes the kind of the referenced object it is missing, if any:
// `sallyport validate` makes it a warning when the files hold no object of that
// kind at all (a partial configuration), an error otherwise (offline.ts).

import type { Backend, BackendRef, BackendTLSPolicy, BackendTrafficPolicy, EgressExtension, Gateway, ModelObject, ObjectRef, PolicyTargetRef } from '../resources/model.ts'
import { backendKey, groupKindOf, keyOfBackend } from '../resources/model.ts'
import { dropsObject, type ConfigProblem } from '../resources/problem.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import { MAP_OF_KIND } from '../resources/snapshot.ts'
import type { AnyRoute } from './attach.ts'
import type { RouteOutcome } from './compile.ts'
import type { Condition, ListenerStatus, ObjectStatus, Status } from './status.ts'
import { GATEWAY_GROUP, sortedValues, statusKey } from './conditions.ts'
import { isBackendKind } from './backends.ts'
import { isReferenceAllowed, refNotPermitted } from './refs.ts'
import { targetExists } from './policies.ts'
import type { RefProblem } from './rules.ts'
import { listenerConflicts } from '../validate/listener-conflicts.ts'
import { tlsSecretFault } from './tls-material.ts'

export interface Finding {
  /** Severity 'error', or 'warning' for what serves all the same. */
  readonly problem: ConfigProblem
  /**
   * The kind of the referenced object whose absence is the finding (Service,
   * Backend, Secret, Gateway, ReferenceGrant...), or null when the objects are
   * all there and disagree.
   */
  readonly missing: string | null
}

/** `MESSAGE (Type=False: Reason)`: the condition a line stands for, as `kubectl describe` would show it. */
function text(c: Condition): string {
  return `${c.message === '' ? c.reason : c.message} (${c.type}=${c.status}: ${c.reason})`
}

function isBad(c: Condition): boolean {
  if (c.type === 'Accepted' || c.type === 'ResolvedRefs' || c.type === 'Programmed') return c.status === 'False'
  return (c.type === 'Conflicted' || c.type === 'PartiallyInvalid') && c.status === 'True'
}

const ROUTE_MAPS = ['httpRoutes', 'grpcRoutes', 'tcpRoutes', 'tlsRoutes'] as const

/**
 * The findings of one compile. `outcomes`: compile's per-route results, whose
 * reference problems name their field; `gatewayClass`: the class compile served.
 */
export function statusFindings(snapshot: Snapshot, status: Status, outcomes: readonly RouteOutcome[], gatewayClass: string): Finding[] {
  const out: Finding[] = []
  const at = (o: ModelObject, field: string, message: string, missing: string | null = null, severity: ConfigProblem['severity'] = 'error'): void => {
    const kind = o.kind === 'Backend' ? groupKindOf(o).kind : o.kind
    out.push({ problem: { source: o.source, kind, namespace: o.meta.namespace, name: o.meta.name, field, message, severity }, missing })
  }
  for (const g of sortedValues(snapshot.gateways)) gatewayFindings(snapshot, status, g, gatewayClass, at)
  // A route attached to no listener was never resolved: its references are checked here instead.
  const compiled = outcomes.filter(o => o.attachment.parents.some(p => p.attachments.length > 0))
  const refs = new Map(compiled.map(o => [o.attachment.route, o.refProblems]))
  const drops = new Map(compiled.map(o => [o.attachment.route, o.droppedRules]))
  for (const map of ROUTE_MAPS) {
    for (const r of sortedValues<AnyRoute>(snapshot[map] as ReadonlyMap<string, AnyRoute>)) {
      routeFindings(snapshot, status, r, refs.get(r) ?? unattachedRefProblems(snapshot, r), at)
      // Rules compile dropped (PartiallyInvalid); validation's have their own lines (validate/rules-route.ts).
      for (const d of drops.get(r) ?? []) at(r, d.field, `${d.message}; rule ${d.index} is dropped (PartiallyInvalid=True: UnsupportedValue)`)
    }
  }
  for (const b of sortedValues(snapshot.backends)) backendFindings(status, b, at)
  for (const p of sortedValues(snapshot.backendTLSPolicies)) tlsPolicyFindings(snapshot, status, p, at)
  for (const p of sortedValues(snapshot.backendTrafficPolicies)) policyFindings(snapshot, status, p, at)
  for (const p of sortedValues(snapshot.egressExtensions)) policyFindings(snapshot, status, p, at)
  return out
}

type At = (o: ModelObject, field: string, message: string, missing?: string | null, severity?: ConfigProblem['severity']) => void

function gatewayFindings(snapshot: Snapshot, status: Status, g: Gateway, gatewayClass: string, at: At): void {
  const s = status.objects.get(statusKey('Gateway', g.meta.namespace, g.meta.name))
  if (g.gatewayClassName !== gatewayClass) {
    // Not of the class served: compile leaves it (and the routes on it) alone, which a typo in the class name would too.
    at(g, 'spec.gatewayClassName', `GatewayClass ${g.gatewayClassName} is not the one served (${gatewayClass}): this Gateway's listeners, and the routes attached only to it, are not served`, null, 'warning')
    return
  }
  if (!status.servedGateways.has(`${g.meta.namespace}/${g.meta.name}`)) {
    // Its GatewayClass belongs to another controller (gateways.ts planGateways).
    const c = s?.conditions.find(x => x.type === 'Accepted' && x.status === 'False')
    if (c !== undefined) at(g, 'spec.gatewayClassName', text(c))
    return
  }
  if (s === undefined) return
  // Listener problems of the Gateway alone are validate's (rules-gateway.ts); certificates TLS cannot use are certificateProblems'.
  const within = listenerConflicts(g.listeners.map(l => ({ name: l.name, protocol: l.protocol, port: l.port, hostname: l.hostname, tlsMode: l.tls?.mode ?? null })))
  g.listeners.forEach((l, i) => {
    const ls = s.listeners.find(x => x.name === l.name)
    if (ls === undefined || within.has(i)) return
    if (ls.conditions.some(c => c.type === 'Accepted' && c.status === 'False' && c.reason === 'UnsupportedProtocol')) return
    for (const c of listenerProblems(ls)) {
      const field = `spec.listeners[${i}]`
      if (c.type === 'ResolvedRefs' && c.reason === 'InvalidCACertificateRef') {
        // The frontend client-certificate validation's CA bundle (spec.tls.frontend), per port.
        at(g, 'spec.tls.frontend', `listener ${l.name}: ${text(c)}`, / not found$/.test(c.message) ? / ConfigMap /.test(c.message) ? 'ConfigMap' : 'Secret' : null)
      } else if (c.type === 'ResolvedRefs') {
        const ref = unresolvedCertificate(snapshot, g, l.tls?.certificateRefs ?? [])
        if (ref?.faulty === true) continue // certificateProblems names the Secret
        if (ref !== null) at(g, `${field}.tls.certificateRefs[${ref.index}]`, text(c), ref.missing)
        else at(g, field, text(c), c.reason === 'RefNotPermitted' ? 'ReferenceGrant' : null)
      } else {
        at(g, field, text(c))
      }
    }
  })
}

/**
 * The conditions of a listener worth a line: Accepted=False and
 * ResolvedRefs=False; Programmed=False only when neither says why (it repeats
 * their message), Conflicted=True never (Accepted=False carries it).
 */
function listenerProblems(ls: ListenerStatus): Condition[] {
  const bad = ls.conditions.filter(c => isBad(c) && c.type !== 'Conflicted')
  const why = bad.some(c => c.type === 'Accepted' || c.type === 'ResolvedRefs')
  return why ? bad.filter(c => c.type !== 'Programmed') : bad
}

/** The first certificateRef that does not resolve: absent (missing its kind), not permitted, or present but unusable (`faulty`). */
function unresolvedCertificate(snapshot: Snapshot, g: Gateway, refs: readonly ObjectRef[]): { index: number; missing: string | null; faulty: boolean } | null {
  const from = { group: GATEWAY_GROUP, kind: 'Gateway', namespace: g.meta.namespace }
  for (let i = 0; i < refs.length; i++) {
    const ref = refs[i] as ObjectRef
    if (ref.group !== '' || ref.kind !== 'Secret') return { index: i, missing: null, faulty: false }
    if (!isReferenceAllowed(snapshot, from, ref)) return { index: i, missing: 'ReferenceGrant', faulty: false }
    const secret = snapshot.secrets.get(`${ref.namespace}/${ref.name}`)
    if (secret === undefined) return { index: i, missing: 'Secret', faulty: false }
    if (secret.type === 'kubernetes.io/tls' && tlsSecretFault(secret) !== null) return { index: i, missing: null, faulty: true }
    if (secret.type !== 'kubernetes.io/tls' || secret.data['tls.crt'] === undefined || secret.data['tls.key'] === undefined) return { index: i, missing: null, faulty: false }
  }
  return null
}

function routeFindings(snapshot: Snapshot, status: Status, route: AnyRoute, refProblems: RouteOutcome['refProblems'], at: At): void {
  const s = status.objects.get(statusKey(route.kind, route.meta.namespace, route.meta.name))
  route.parentRefs.forEach((ref, i) => {
    if (ref.group !== GATEWAY_GROUP || ref.kind !== 'Gateway') return
    // Compile reads a parentRef to a Gateway it does not know as another controller's: the only way to see a typo.
    if (!snapshot.gateways.has(`${ref.namespace}/${ref.name}`)) {
      at(route, `spec.parentRefs[${i}]`, `Gateway ${ref.namespace}/${ref.name} is not in these files`, 'Gateway', 'warning')
      return
    }
    const p = s?.parents.find(x => x.parentRef.namespace === ref.namespace && x.parentRef.name === ref.name && x.parentRef.sectionName === ref.sectionName && x.parentRef.port === ref.port)
    if (p === undefined) return
    for (const c of p.conditions) {
      // ResolvedRefs is the route's, the same on every parent: one line per reference, below.
      // PartiallyInvalid: one line per dropped rule, naming its field (validate's, or the caller's for compile's).
      if (!isBad(c) || c.type === 'ResolvedRefs' || c.type === 'PartiallyInvalid') continue
      at(route, `spec.parentRefs[${i}]`, text(c))
    }
  })
  const seen = new Set<string>()
  for (const r of refProblems) {
    const key = `${r.field}\0${r.message}`
    if (seen.has(key)) continue
    seen.add(key)
    const missing = missingOf(snapshot, route, r.field, r.reason)
    if (missing === DROPPED) continue // the object is in the files, with an error of its own
    at(route, r.field, text({ type: 'ResolvedRefs', status: 'False', reason: r.reason, message: r.message, observedGeneration: 0 }), missing)
  }
}

const DROPPED = '\0dropped'

/**
 * A route compile attached to no listener (its Gateways are not in the files,
 * are not ours, or refuse it) was never resolved: its references are checked here as resolve() would
 * start, for what the files can say of them — a reference into another
 * namespace without a ReferenceGrant, an object that is not there. (Ports,
 * TLS and destination policies depend on the Gateway: left to status.)
 */
function unattachedRefProblems(snapshot: Snapshot, route: AnyRoute): RefProblem[] {
  const out: RefProblem[] = []
  const from = { group: GATEWAY_GROUP, kind: route.kind, namespace: route.meta.namespace }
  const check = (ref: BackendRef | ObjectRef, field: string): void => {
    const what = `${ref.kind === 'Service' && ref.group === '' ? 'Service' : ref.kind} ${ref.namespace}/${ref.name}`
    if (ref.kind !== 'EgressExtension' && !isReferenceAllowed(snapshot, from, { group: ref.group, kind: ref.kind, namespace: ref.namespace, name: ref.name })) {
      out.push({ reason: 'RefNotPermitted', message: refNotPermitted(snapshot, what, ref.namespace), field })
      return
    }
    const missing = missingOf(snapshot, route, field, 'BackendNotFound')
    if (missing === null || missing === DROPPED) return
    if (ref.kind === 'EgressExtension') out.push({ reason: 'BackendNotFound', message: `ExtensionRef ${ref.group}/${ref.kind} ${ref.name} cannot be resolved`, field })
    else if (missing === 'Service' && !(ref.group === '' && ref.kind === 'Service')) out.push({ reason: 'BackendNotFound', message: `Backend ${ref.namespace}/${ref.name}: its Service is not found`, field })
    // In compile's words (backends.ts): a Backend kind names its group, the three kinds share a name.
    else out.push({ reason: 'BackendNotFound', message: `${what}${ref.group === '' ? '' : ` (${ref.group})`} not found`, field })
  }
  route.rules.forEach((rule, i) => {
    if (route.kind !== 'TCPRoute' && route.kind !== 'TLSRoute' && route.droppedRules.some(d => d.index === i)) return // not served
    const filters = (rule as { readonly filters?: ReadonlyArray<import('../resources/model.ts').HTTPRouteFilter> }).filters ?? []
    filters.forEach((f, j) => {
      if (f.type === 'RequestMirror') check(f.requestMirror.backendRef, `spec.rules[${i}].filters[${j}].requestMirror.backendRef`)
      else if (f.type === 'ExtensionRef') check({ ...f.extensionRef, namespace: route.meta.namespace }, `spec.rules[${i}].filters[${j}].extensionRef`)
    })
    rule.backendRefs.forEach((ref, j) => check(ref, `spec.rules[${i}].backendRefs[${j}]`))
  })
  return out
}

/** The reference at `field` of a route (a backendRef, a mirror's, an ExtensionRef), from compile's RefProblem field. */
function refAt(route: AnyRoute, field: string): BackendRef | ObjectRef | null {
  const m = /^spec\.rules\[(\d+)\]\.(?:backendRefs\[(\d+)\]|filters\[(\d+)\]\.(requestMirror\.backendRef|extensionRef))$/.exec(field)
  if (m === null) return null
  const rule = route.rules[Number(m[1])]
  if (rule === undefined) return null
  if (m[2] !== undefined) return rule.backendRefs[Number(m[2])] ?? null
  const f = (rule as { readonly filters?: ReadonlyArray<import('../resources/model.ts').HTTPRouteFilter> }).filters?.[Number(m[3])]
  if (f?.type === 'RequestMirror') return f.requestMirror.backendRef
  if (f?.type === 'ExtensionRef') return { ...f.extensionRef, namespace: route.meta.namespace }
  return null
}

/** Which kind of object a reference problem misses (DROPPED: it is in the files but validation dropped it). */
function missingOf(snapshot: Snapshot, route: AnyRoute, field: string, reason: string): string | null {
  if (reason === 'RefNotPermitted') return 'ReferenceGrant'
  const ref = refAt(route, field)
  if (ref === null) return null
  const dropped = (kind: string): boolean => snapshot.problems.some(p => dropsObject(p) && p.kind === kind && p.namespace === ref.namespace && p.name === ref.name)
  if (ref.kind === 'EgressExtension') return snapshot.egressExtensions.has(`${ref.namespace}/${ref.name}`) ? null : dropped('EgressExtension') ? DROPPED : 'EgressExtension'
  if (ref.group === '' && ref.kind === 'Service') return snapshot.services.has(`${ref.namespace}/${ref.name}`) ? null : dropped('Service') ? DROPPED : 'Service'
  if (!isBackendKind(ref.group, ref.kind)) return null
  const backend = snapshot.backends.get(backendKey(ref.group, ref.kind, ref.namespace, ref.name))
  if (backend === undefined) return dropped(ref.kind) ? DROPPED : 'Backend'
  // A Backend wrapping a Service that is not there.
  const d = backend.destination
  const svc = d.type === 'Service' ? d.service : d.type === 'EndpointSelector' && d.selector === null ? d.selectorRef : null
  return reason === 'BackendNotFound' && svc != null && !snapshot.services.has(`${svc.namespace}/${svc.name}`) ? 'Service' : null
}

function backendFindings(status: Status, b: Backend, at: At): void {
  const s = status.objects.get(keyOfBackend(b))
  if (s === undefined) return
  // A Gateway's destination policy denying the Backend (issue 5): per Gateway. Its ResolvedRefs
  // (extension Secrets) are secretRefProblems'; its annotation conditions validate reads.
  for (const p of s.parents) {
    for (const c of p.conditions) {
      // Refused for its address range (loopback, private...): `serve --allow-destination-cidr` may
      // allow it, and validate does not know serve's flags; status and the log say it.
      if (!isBad(c) || c.reason === 'DestinationRefused') continue
      at(b, '', `Gateway ${p.parentRef.namespace}/${p.parentRef.name}: ${text(c)}`)
    }
  }
}

function tlsPolicyFindings(snapshot: Snapshot, status: Status, p: BackendTLSPolicy, at: At): void {
  // Compile applies a policy to the Service ports routes use; one whose Service is not there applies to nothing.
  p.targetRefs.forEach((t, i) => {
    if (t.group !== '' || t.kind !== 'Service') return
    const svc = snapshot.services.get(`${p.meta.namespace}/${t.name}`)
    if (svc === undefined) at(p, `spec.targetRefs[${i}]`, `Service ${p.meta.namespace}/${t.name} not found (TargetNotFound)`, 'Service')
    else if (t.sectionName !== null && !svc.ports.some(x => x.name === t.sectionName)) at(p, `spec.targetRefs[${i}].sectionName`, `Service ${p.meta.namespace}/${t.name} has no port named ${t.sectionName} (TargetNotFound)`)
  })
  const s = status.objects.get(statusKey('BackendTLSPolicy', p.meta.namespace, p.meta.name))
  if (s === undefined) return
  const bad = s.conditions.filter(isBad)
  for (const c of bad) {
    // A CA that does not resolve is both Accepted=False and ResolvedRefs=False, with one message.
    if (c.type === 'Accepted' && bad.some(o => o.type === 'ResolvedRefs' && o.message === c.message)) continue
    const field = c.reason === 'Invalid' || c.reason === 'Conflicted' ? 'spec.targetRefs' : 'spec.validation'
    at(p, field, text(c), c.type === 'ResolvedRefs' ? absentDataRef(snapshot, p) : null)
  }
}

/** The kind of the first CA (or client certificate) reference of a BackendTLSPolicy whose object is not there. */
function absentDataRef(snapshot: Snapshot, p: BackendTLSPolicy): string | null {
  for (const ref of [...p.tls.caCertificateRefs, ...(p.tls.clientCertificateRef === null ? [] : [p.tls.clientCertificateRef])]) {
    const kind = ref.kind as keyof typeof MAP_OF_KIND
    const map = MAP_OF_KIND[kind]
    if (map === undefined) continue
    const key = kind === 'ClusterTrustBundle' ? ref.name : `${ref.namespace}/${ref.name}`
    if (!(snapshot[map] as ReadonlyMap<string, unknown>).has(key)) return kind
  }
  return null
}

function policyFindings(snapshot: Snapshot, status: Status, p: BackendTrafficPolicy | EgressExtension, at: At): void {
  const s: ObjectStatus | undefined = status.objects.get(statusKey(p.kind, p.meta.namespace, p.meta.name))
  if (s === undefined) return
  for (const c of s.conditions) {
    // ResolvedRefs (extension Secrets) is secretRefProblems'; Overridden is how precedence is meant to work.
    if (!isBad(c) || c.type === 'ResolvedRefs') continue
    if (c.type === 'Accepted' && c.reason === 'TargetNotFound') {
      // Status keeps the last target not found; each gets its line.
      p.targetRefs.forEach((t, i) => {
        if (!targetExists(snapshot, t, p.meta.namespace)) at(p, `spec.targetRefs[${i}]`, `${t.kind} ${p.meta.namespace}/${t.name}${t.sectionName !== null ? ` section ${t.sectionName}` : ''} not found (Accepted=False: TargetNotFound)`, targetKind(t))
      })
      continue
    }
    // Conflicted (an older policy holds the target), Conflicted extensions (extensions.ts): the rest applies.
    at(p, c.type === 'Accepted' ? 'spec.targetRefs' : 'spec.extensions', text(c), null, c.type === 'Conflicted' ? 'warning' : 'error')
  }
}

/** The kind whose absence makes a targetRef match nothing: a Gateway without that listener is there, so not missing. */
function targetKind(ref: PolicyTargetRef): string | null {
  if (ref.kind === 'XBackend') return 'Backend'
  return ref.kind
}

/** Whether the snapshot holds any object of `kind` (Backend: of any flavour). */
export function holdsKind(snapshot: Snapshot, kind: string): boolean {
  const map = MAP_OF_KIND[kind as keyof typeof MAP_OF_KIND]
  return map !== undefined && (snapshot[map] as ReadonlyMap<string, unknown>).size > 0
}

/**
 * The severity rule of `sallyport validate`: a finding about a missing object
 * is an error when the files hold objects of its kind (a complete
 * configuration, where it should be), a warning when they hold none (a part
 * of one: routes without their Gateways, manifests whose Secrets live in the
 * cluster). Other findings keep their own severity.
 */
export function findingProblems(snapshot: Snapshot, findings: readonly Finding[]): ConfigProblem[] {
  return findings.map(f => f.missing === null || f.problem.severity === 'warning' || holdsKind(snapshot, f.missing) ? f.problem : { ...f.problem, severity: 'warning' })
}
