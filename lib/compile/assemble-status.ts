// Status for every object compile saw: GatewayClass, Gateways and listeners,
// Routes per parent, Backends, policies per ancestor, and the objects the
// source dropped as invalid (snapshot.problems).

import type { BackendTLSPolicy, BackendTrafficPolicy, EgressExtension, GRPCRoute, HTTPRoute } from '../resources/model.ts'
import { unsupportedFields } from './rules.ts'
import { backendKey, keyOfBackend } from '../resources/model.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import { dropsObject } from '../resources/problem.ts'
import type { Condition, ObjectStatus, ParentStatus, Status } from './status.ts'
import type { RouteOutcome } from './compile.ts'
import type { GatewayPlan, ServedListener } from './gateways.ts'
import { gatewayConditions, gatewayStatus, listenersAccepted } from './gateways.ts'
import { gatewayAddressing, type PublishedAddresses } from './addresses.ts'
import type { BackendResolver } from './backends.ts'
import type { PolicyIndex } from './policies.ts'
import { condition, gatewayParent, sortedValues, statusKey } from './conditions.ts'
import { addTlsWarnings } from './tls.ts'
import { addExtensionVerdicts, addSecretRefConditions, type ExtensionVerdict, type SecretRefProblem } from './extensions.ts'
import type { UpstreamProxies } from './upstream-proxy.ts'

export interface StatusInput {
  readonly snapshot: Snapshot
  readonly controllerName: string
  readonly plan: GatewayPlan
  readonly attached: ReadonlyMap<ServedListener, number>
  readonly outcomes: readonly RouteOutcome[]
  readonly resolver: BackendResolver
  readonly traffic: PolicyIndex<BackendTrafficPolicy>
  readonly extensions: PolicyIndex<EgressExtension>
  /** Issue 7: extension precedence decisions (Conflicted / Overridden). */
  readonly extensionVerdicts?: readonly ExtensionVerdict[]
  /** Extension Secret references that cannot be used (ResolvedRefs=False on their owners). */
  readonly secretRefs?: readonly SecretRefProblem[]
  /** The --publish-service Service's addresses (null or absent: no flag). */
  readonly published?: PublishedAddresses | null
}

/** A route's status is a function of its outcome (and the controller name): kept per outcome object. */
const ROUTE_STATUS = new WeakMap<RouteOutcome, { readonly controllerName: string; readonly key: string; readonly status: ObjectStatus | null }>()

export function assembleStatus(input: StatusInput): Status {
  const { snapshot, controllerName } = input
  const objects = new Map<string, ObjectStatus>()
  const put = (s: ObjectStatus): void => { objects.set(statusKey(s.kind, s.namespace, s.name), s) }

  for (const s of input.plan.statuses) put(s)
  for (const sg of input.plan.served) {
    const gen = sg.gateway.meta.generation
    // A Gateway none of whose listeners serves is bound to no address.
    const addressing = gatewayAddressing(sg.gateway, input.published ?? null, listenersAccepted(sg))
    put(gatewayStatus(sg.gateway, gatewayConditions(sg, addressing), sg.listeners.map(l => ({
      name: l.listener.name,
      attachedRoutes: input.attached.get(l) ?? 0,
      supportedKinds: l.kinds,
      conditions: l.conditions.map(c => ({ ...c, observedGeneration: gen })),
    })), addressing.addresses))
  }

  // Routes: one RouteParentStatus per parentRef naming a served Gateway.
  const routeGateways = new Map<string, string[]>()
  // Only policy ancestors read routeGateways: without policies, skip a key and a Set per route (issue 11).
  const policiesPresent = snapshot.backendTrafficPolicies.size > 0 || snapshot.egressExtensions.size > 0
  for (const o of input.outcomes) {
    const route = o.attachment.route
    if (policiesPresent) routeGateways.set(`${route.kind}/${route.meta.namespace}/${route.meta.name}`, [...new Set(o.attachment.parents.filter(p => p.attachments.length > 0).map(p => p.gatewayKey))])
    // Issue 11: a route reused from the previous compile brings the same outcome object; its status is the same object too.
    const known = ROUTE_STATUS.get(o)
    if (known !== undefined && known.controllerName === controllerName) {
      if (known.status !== null) objects.set(known.key, known.status)
      continue
    }
    const gen = route.meta.generation
    const refs = o.refProblems.length === 0
      ? condition('ResolvedRefs', true, 'ResolvedRefs', '', gen)
      // A reference named by several rules is reported once.
      : condition('ResolvedRefs', false, o.refProblems[0].reason, [...new Set(o.refProblems.map(p => p.message))].join('; '), gen)
    const dropped = route.kind === 'HTTPRoute' || route.kind === 'GRPCRoute' ? droppedRulesMessage(route, o) : null
    const unsupported = route.kind === 'HTTPRoute' || route.kind === 'GRPCRoute' ? unsupportedFields(route) : []
    const parents: ParentStatus[] = o.attachment.parents.map(p => {
      let accepted = p.accepted
      if (accepted.status === 'True' && dropped?.none === true) {
        // Every rule left after validation failed in compile: nothing of the route serves. The
        // reason is the one of a route validation found no valid rule in (dropped whole: Invalid).
        accepted = condition('Accepted', false, 'Invalid', `${dropped.message}: no valid rule left`, gen)
      } else if (accepted.status === 'True' && unsupported.length > 0) {
        accepted = condition('Accepted', true, accepted.reason, `served without what is not supported: ${unsupported.join(', ')} (see sallyport validate)`, gen)
      }
      // A reference failed through this parent only (a BackendTLSPolicy's ancestors list full).
      const own = o.parentRefProblems?.get(p.gatewayKey)
      const problems = own === undefined ? null : [...o.refProblems, ...own]
      const conditions: Condition[] = [accepted, problems === null ? refs : condition('ResolvedRefs', false, problems[0].reason, [...new Set(problems.map(q => q.message))].join('; '), gen)]
      // Gateway API RouteConditionPartiallyInvalid, "Dropped Rule" approach: the
      // message starts with that prefix and names the rules, Accepted stays True.
      if (dropped !== null && !dropped.none) conditions.push(condition('PartiallyInvalid', true, 'UnsupportedValue', dropped.message, gen))
      if (o.conflicts.includes(p.gatewayKey)) conditions.push(condition('Conflicted', true, 'Conflicted', 'an older route already serves this port', gen))
      return { parentRef: { ...p.parentRef }, controllerName, conditions }
    })
    const status: ObjectStatus | null = parents.length === 0 ? null // not ours
      : { kind: route.kind, apiVersion: route.apiVersion, namespace: route.meta.namespace, name: route.meta.name, generation: gen, conditions: [], parents, listeners: [] }
    const key = statusKey(route.kind, route.meta.namespace, route.meta.name)
    ROUTE_STATUS.set(o, { controllerName, key, status })
    if (status !== null) objects.set(key, status)
  }

  const ancestors = (keys: Iterable<string>, conditions: readonly Condition[]): ParentStatus[] =>
    [...new Set(keys)].sort().map(k => {
      const [ns, name] = k.split('/') as [string, string]
      return gatewayParent(ns, name, null, controllerName, conditions)
    })

  const destinations = input.resolver.destinations
  for (const b of sortedValues(snapshot.backends)) {
    const gen = b.meta.generation
    // Keyed by group and kind too (backendKey): an XBackend and a Backend of one name each get their status.
    const key = keyOfBackend(b)
    const conditions = [condition('Accepted', true, 'Accepted', '', gen)]
    let parents = ancestors(input.resolver.backendUse.get(key) ?? [], conditions)
    // Issue 5: a Gateway whose destination policy denies the Backend says so on its parent entry;
    // denied by every Gateway using it, the Backend itself is not Accepted.
    const denials = destinations.denials.get(key)
    let objectConditions = conditions
    if (denials !== undefined) {
      parents = parents.map(p => {
        const d = denials.get(`${p.parentRef.namespace}/${p.parentRef.name}`)
        return d === undefined ? p : { ...p, conditions: [condition('Accepted', false, d.reason, d.message, gen)] }
      })
      if (parents.length > 0 && parents.every(p => p.conditions[0]?.status === 'False')) objectConditions = [parents[0].conditions[0]]
    }
    const problems = destinations.backendProblems.get(key)
    if (problems !== undefined) objectConditions = [...objectConditions, condition('sallyport.io/DestinationPolicy', false, 'Invalid', problems.join('; '), gen)]
    input.resolver.proxies.forBackend(key)
    const proxy = proxyCondition(input.resolver.proxies, key, gen)
    if (proxy !== null) objectConditions = [...objectConditions, proxy]
    objects.set(key, { kind: 'Backend', apiVersion: b.apiVersion, namespace: b.meta.namespace, name: b.meta.name, generation: gen, conditions: objectConditions, parents, listeners: [] })
  }

  // Gateways with destination annotations (issue 5): one condition says whether they were read.
  for (const sg of input.plan.served) {
    if (!destinations.hasPolicy(sg.key)) continue
    const s = objects.get(statusKey('Gateway', sg.gateway.meta.namespace, sg.gateway.meta.name))
    if (s === undefined) continue
    const problems = destinations.gatewayProblems(sg.key)
    const gen = sg.gateway.meta.generation
    const c = problems.length === 0
      ? condition('sallyport.io/DestinationPolicy', true, 'Accepted', '', gen)
      : condition('sallyport.io/DestinationPolicy', false, 'Invalid', `entries ignored: ${problems.join('; ')}`, gen)
    put({ ...s, conditions: [...s.conditions, c] })
  }

  // Gateways with an upstream proxy (issue 9): one condition says whether it was read.
  for (const sg of input.plan.served) {
    input.resolver.proxies.forGateway(sg.key)
    const c = proxyCondition(input.resolver.proxies, `Gateway/${sg.key}`, sg.gateway.meta.generation)
    const s = c === null ? undefined : objects.get(statusKey('Gateway', sg.gateway.meta.namespace, sg.gateway.meta.name))
    if (c !== null && s !== undefined) put({ ...s, conditions: [...s.conditions, c] })
  }

  for (const p of sortedValues(snapshot.backendTLSPolicies)) {
    const gen = p.meta.generation
    const key = `${p.meta.namespace}/${p.meta.name}`
    const plan = input.resolver.tlsPlan
    const invalid = plan.invalid.get(key)
    const conflictedWith = plan.conflicted.get(key)
    const error = input.resolver.tlsPolicyErrors.get(key)
    let conditions: Condition[]
    if (invalid !== undefined) conditions = [condition('Accepted', false, 'Invalid', invalid, gen)]
    else if (conflictedWith !== undefined) conditions = [condition('Accepted', false, 'Conflicted', `BackendTLSPolicy ${conflictedWith} is older and targets the same Service port`, gen)]
    else if (error !== undefined) conditions = [condition('Accepted', false, 'NoValidCACertificate', error.message, gen), condition('ResolvedRefs', false, error.reason, error.message, gen)]
    else conditions = [condition('Accepted', true, 'Accepted', '', gen), condition('ResolvedRefs', true, 'ResolvedRefs', '', gen)]
    put({ kind: 'BackendTLSPolicy', apiVersion: p.apiVersion, namespace: p.meta.namespace, name: p.meta.name, generation: gen, conditions, parents: ancestors(tlsPolicyAncestors(input.resolver, p), conditions), listeners: [] })
  }

  const policyStatus = (p: BackendTrafficPolicy | EgressExtension, index: PolicyIndex<BackendTrafficPolicy> | PolicyIndex<EgressExtension>): void => {
    const gen = p.meta.generation
    const verdict = index.verdicts.get(`${p.meta.namespace}/${p.meta.name}`)
    const conditions: Condition[] = []
    if (verdict?.rejected != null) conditions.push(condition('Accepted', false, verdict.rejected.reason, verdict.rejected.message, gen))
    else conditions.push(condition('Accepted', true, 'Accepted', '', gen))
    if (verdict !== undefined && verdict.overriddenBy.size > 0) {
      conditions.push(condition('Overridden', true, 'Overridden', `more specific policies win for some targets: ${[...verdict.overriddenBy].sort().join(', ')}`, gen))
    }
    const keys: string[] = []
    for (const t of p.targetRefs) {
      if (t.kind === 'Gateway') keys.push(`${p.meta.namespace}/${t.name}`)
      else keys.push(...(routeGateways.get(`${t.kind}/${p.meta.namespace}/${t.name}`) ?? input.resolver.backendUse.get(backendKey(t.group, t.kind, p.meta.namespace, t.name)) ?? []))
    }
    put({ kind: p.kind, apiVersion: p.apiVersion, namespace: p.meta.namespace, name: p.meta.name, generation: gen, conditions, parents: ancestors(keys, conditions), listeners: [] })
  }
  for (const p of sortedValues(snapshot.backendTrafficPolicies)) policyStatus(p, input.traffic)
  for (const p of sortedValues(snapshot.egressExtensions)) policyStatus(p, input.extensions)

  // Dropped objects: Accepted=False Invalid, naming the field.
  const problems = new Map<string, string[]>()
  for (const pr of snapshot.problems) {
    if (!dropsObject(pr) || pr.kind === '' || pr.name === '') continue
    const key = statusKey(pr.kind, pr.namespace, pr.name)
    const list = problems.get(key) ?? []
    list.push(pr.field === '' ? pr.message : `${pr.field}: ${pr.message}`)
    problems.set(key, list)
  }
  for (const [key, messages] of problems) {
    if (objects.has(key)) continue
    const [kind, namespace, name] = key.split('/') as [string, string, string]
    put({ kind, apiVersion: '', namespace, name, generation: 0, conditions: [condition('Accepted', false, 'Invalid', messages.join('; '), 0)], parents: [], listeners: [] })
  }
  addTlsWarnings(snapshot, objects)
  if (input.extensionVerdicts !== undefined) addExtensionVerdicts(objects, input.extensionVerdicts)
  if (input.secretRefs !== undefined) addSecretRefConditions(objects, input.secretRefs)
  const sorted = new Map([...objects].sort((a, b) => a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
  return { objects: sorted, servedGateways: new Set(input.plan.served.map(sg => sg.key)) }
}

/**
 * The Gateways a BackendTLSPolicy's status.ancestors names: those whose routes
 * use it, and, where it is not applied (conflicted, its CA refs broken, a
 * Backend target), those whose routes reach its target — else the
 * Accepted=False saying why would have no entry to be written in (Gateway API
 * conformance reads it from the Gateway's entry). Never a Gateway its full
 * ancestors list refused (ancestor-limit.ts).
 */
function tlsPolicyAncestors(resolver: BackendResolver, p: BackendTLSPolicy): Set<string> {
  const key = `${p.meta.namespace}/${p.meta.name}`
  const out = new Set(resolver.tlsPolicyUse.get(key))
  const refused = resolver.tlsPolicyRefused.get(key)
  for (const g of resolver.tlsPolicyReach.get(key) ?? []) if (refused === undefined || !refused.has(g)) out.add(g)
  for (const t of p.targetRefs) {
    if (t.kind !== 'Backend' && t.kind !== 'XBackend') continue
    for (const g of resolver.backendUse.get(backendKey(t.group, t.kind, p.meta.namespace, t.name)) ?? []) out.add(g)
  }
  return out
}

/**
 * The PartiallyInvalid message of a route some of whose rules are not served
 * (validation's droppedRules and compile's): `Dropped Rule(s) 0, 2 ("api"):
 * FIELD: WHY; FIELD: WHY`; null when every rule serves. `none`: no rule is left.
 */
function droppedRulesMessage(route: HTTPRoute | GRPCRoute, o: RouteOutcome): { message: string; none: boolean } | null {
  if (route.droppedRules.length === 0 && o.droppedRules.length === 0) return null
  const rules = new Map<number, { name: string | null; reasons: string[] }>()
  for (const d of route.droppedRules) rules.set(d.index, { name: d.name, reasons: [...d.reasons] })
  for (const d of o.droppedRules) {
    const entry = rules.get(d.index) ?? { name: d.name, reasons: [] }
    entry.reasons.push(`${d.field}: ${d.message}`)
    rules.set(d.index, entry)
  }
  const sorted = [...rules].sort((a, b) => a[0] - b[0])
  const which = sorted.map(([i, r]) => r.name === null ? String(i) : `${i} (${JSON.stringify(r.name)})`).join(', ')
  const why = sorted.flatMap(([, r]) => r.reasons).join('; ')
  return { message: `Dropped Rule(s) ${which}: ${why}`, none: rules.size >= route.rules.length }
}

/** `sallyport.io/UpstreamProxy` for an object carrying sallyport.io/upstream-proxy; null for others. */
function proxyCondition(proxies: UpstreamProxies, holder: string, gen: number): Condition | null {
  if (!proxies.annotated.has(holder)) return null
  const problems = proxies.problems.get(holder)
  return problems === undefined
    ? condition('sallyport.io/UpstreamProxy', true, 'Accepted', '', gen)
    : condition('sallyport.io/UpstreamProxy', false, 'Invalid', problems.join('; '), gen)
}
