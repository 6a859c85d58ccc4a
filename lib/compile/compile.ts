// compile(): Snapshot → RouteTable + Status. Pure: no I/O, no clock (`now` is
// passed in), no randomness. Each step lives in its own file and returns its
// piece; this file wires them and assembles the frozen table.

import type { GRPCRoute, HTTPRoute, TCPRoute, TLSRoute } from '../resources/model.ts'
import { matchesSelector } from '../resources/meta.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import type { Status } from './status.ts'
import type { Cluster, ClientIdentity, L4Route, ListenerNames, PortEntry, RouteTable } from './table.ts'
import { certificateProblems, planGateways, DEFAULT_CONTROLLER } from './gateways.ts'
import type { ServedGateway, ServedListener } from './gateways.ts'
import { attachRoute } from './attach.ts'
import type { AnyRoute, RouteAttachment } from './attach.ts'
import { findKindConflicts, withoutConflicts } from './kind-conflicts.ts'
import { BackendResolver } from './backends.ts'
import { planTlsPolicies } from './tls.ts'
import { DestinationPolicies, type DestinationDefaults } from './destination-policy.ts'
import { PolicyIndex } from './policies.ts'
import { compileHttpLikeRoute, routePolicies } from './rules.ts'
import type { CompiledRoute, RefProblem, RuleDrop } from './rules.ts'
import type { ResolverCall } from './backends.ts'
import { sameSpecs, type CompileCache, type ListenerCompile, type RouteMemo, type VhostMemo } from './compile-cache.ts'
import { buildHostIndex } from './vhosts.ts'
import type { PlacedMatch } from './vhosts.ts'
import { buildSniIndex, compileL4Route } from './l4.ts'
import { ANY_HOST } from './hostnames.ts'
import { buildHostnameIndex } from '../hostname-index.ts'
import { sortedValues } from './conditions.ts'
import { assembleStatus } from './assemble-status.ts'
import { deepFreeze } from './freeze.ts'
import { ExtensionCompiler, secretRefProblems, type SecretRefProblem } from './extensions.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import { PROCESS_KEY } from '../process-key.ts'
import { publishedAddresses } from './addresses.ts'
import { statusFindings, type Finding } from './findings.ts'
import { ANCESTORS_FULL, NO_LIMITS, limitProblems, limitsFingerprint, sameLimits, tlsAncestorLimits, type TlsAncestorLimits } from './ancestor-limit.ts'

export { DEFAULT_CONTROLLER }

export interface CompileOptions {
  readonly now: number
  readonly version: number
  readonly gatewayClass: string
  /** Default 'sallyport.io/gateway-controller'. */
  readonly controllerName?: string
  /** Destination safety flags (issue 5): --allow-destination-cidr, --cluster-cidr. */
  readonly destination?: DestinationDefaults
  /**
   * Freeze the table before returning it (default true). The runtime passes
   * false and freezes it right after the swap (issue 11: the freeze walk is
   * ~15 ms at 5,000 routes and nothing writes a table), so tests, the CLI
   * and everything else get a frozen table from compile itself.
   */
  readonly freeze?: boolean
  /**
   * Issue 11: the previous compile's results, reused where nothing they
   * depend on changed (compile-cache.ts). The table and status are the same
   * as without it.
   */
  readonly cache?: CompileCache
  /**
   * The HMAC key of each compiled extension's `key`, which digests its Secret
   * values among the rest (extensions.ts stateKey). Default: PROCESS_KEY, random
   * per process, so the key printed in /config_dump and logs cannot be used to
   * test guesses of a value; keys compare equal only within one process. Golden
   * tests pin it to print the same keys every run.
   */
  readonly extensionKeySecret?: Uint8Array
  /**
   * `--publish-service NAMESPACE/NAME`: the Service in front of sallyport,
   * whose addresses every served Gateway gets in status.addresses
   * (addresses.ts). Absent or null: sallyport publishes no addresses.
   */
  readonly publishService?: string | null
}

export interface CompileResult {
  readonly table: RouteTable
  readonly status: Status
  /** What compile found wrong in objects it kept (extension Secret references, listener certificates): for /config_dump and the log. */
  readonly problems: readonly ConfigProblem[]
  /**
   * What the status says is wrong between objects, as problems naming the
   * field (findings.ts): `sallyport validate` prints them. Built on first read.
   */
  readonly findings: readonly Finding[]
}

/** What the route step learned about each route, for status. */
export interface RouteOutcome {
  readonly attachment: RouteAttachment
  readonly refProblems: readonly RefProblem[]
  /**
   * Gateway key → reference problems through that Gateway only: a
   * BackendTLSPolicy whose ancestors list is full (ancestor-limit.ts) fails
   * the references of some parents and not others. Absent: none.
   */
  readonly parentRefProblems?: ReadonlyMap<string, readonly RefProblem[]>
  /** Rules compile dropped (validation's are the route's droppedRules). */
  readonly droppedRules: readonly RuleDrop[]
  /** Gateway keys where another route already owns the TCP port / SNI name. */
  readonly conflicts: readonly string[]
}

function isMeshed(snapshot: Snapshot, sg: ServedGateway, route: AnyRoute): boolean {
  const mesh = sg.gateway.mesh
  if (mesh === null) return false
  // GEP-3792: an absent selector meshes every route.
  const selector = mesh.selector
  if (selector === null) return true
  if (matchesSelector(selector, route.meta.labels)) return true
  const ns = snapshot.namespaces.get(route.meta.namespace)
  return ns !== undefined && matchesSelector(selector, ns.meta.labels)
}

export function compile(snapshot: Snapshot, options: CompileOptions): CompileResult {
  // PolicyStatus.ancestors (ancestor-limit.ts): which Gateways use a
  // BackendTLSPolicy is known once every route is compiled. The first pass
  // runs with the limits the last compile found (none without a cache); when
  // the use it saw calls for others, a second pass applies those.
  const guess = options.cache?.tlsLimits ?? NO_LIMITS
  const first = compilePass(snapshot, options, guess)
  if (snapshot.backendTLSPolicies.size === 0) return first.result
  const needed = tlsAncestorLimits(snapshot, options.controllerName ?? DEFAULT_CONTROLLER, first.served, first.resolver.tlsPolicyUse, first.resolver.tlsPolicyRefused)
  return sameLimits(needed, guess) ? first.result : compilePass(snapshot, options, needed).result
}

function compilePass(snapshot: Snapshot, options: CompileOptions, tlsLimits: TlsAncestorLimits): { result: CompileResult; resolver: BackendResolver; served: ReadonlySet<string> } {
  const controllerName = options.controllerName ?? DEFAULT_CONTROLLER
  const cache = options.cache ?? null
  // The watched namespaces word RefNotPermitted messages: routes compiled under other ones are not reused.
  const optionsKey = cache === null ? '' : JSON.stringify([options.gatewayClass, controllerName, options.destination ?? null, [...(snapshot.watchedNamespaces ?? [])]])
  const reusedPlan = cache?.plan(snapshot, optionsKey) ?? null
  const plan = reusedPlan ?? planGateways(snapshot, options.gatewayClass, controllerName)
  const served = new Map(plan.served.map(g => [g.key, g]))
  const resolver = new BackendResolver(snapshot, planTlsPolicies(snapshot), new DestinationPolicies(snapshot, options.destination), tlsLimits)
  const traffic = new PolicyIndex(snapshot, snapshot.backendTrafficPolicies)
  const extensions = new PolicyIndex(snapshot, snapshot.egressExtensions)
  const extensionCompiler = new ExtensionCompiler(snapshot, options.extensionKeySecret ?? PROCESS_KEY)
  // Read in every compile (a reused plan reads no Services): this lookup is what makes a change to that Service recompile (references.ts).
  const published = publishedAddresses(snapshot, options.publishService ?? null)
  // A route compiled under other ancestor limits resolved its references differently: not reused.
  const winners = [traffic.winners, extensions.winners, limitsFingerprint(tlsLimits)]
  const memo = cache === null ? null : cache.routes(reusedPlan !== null, winners)
  const nextMemo = new Map<AnyRoute, RouteMemo>()
  let routesReused = 0

  const attached = new Map<ServedListener, number>()
  const placed = new Map<number, PlacedMatch[]>()
  const tcp = new Map<number, L4Route>()
  const sni = new Map<number, Array<{ hostname: string; route: L4Route }>>()
  const outcomes: RouteOutcome[] = []

  const httpRoutes = sortedValues<HTTPRoute>(snapshot.httpRoutes)
  const grpcRoutes = sortedValues<GRPCRoute>(snapshot.grpcRoutes)
  const routes: AnyRoute[] = [...httpRoutes, ...grpcRoutes, ...sortedValues<TCPRoute>(snapshot.tcpRoutes), ...sortedValues<TLSRoute>(snapshot.tlsRoutes)]
  // An HTTPRoute and a GRPCRoute sharing a listener hostname: the younger is turned away there.
  const kindConflicts = findKindConflicts(httpRoutes, grpcRoutes, r => attachRoute(snapshot, served, r))
  const listenerUse = new Map<string, Set<string>>()
  for (const route of routes) {
    // A route turned away depends on the others: never reused, never kept for reuse.
    const turnedAway = kindConflicts.get(route)
    const reuse = turnedAway === undefined ? memo?.get(route) : undefined
    if (reuse !== undefined) {
      // Issue 11: unchanged route, unchanged environment: its compiled pieces
      // as they were, and the usage records its compile made, made again.
      countAttached(attached, reuse.attachment)
      for (const lc of reuse.listeners) {
        routePolicies(route as HTTPRoute | GRPCRoute, traffic, extensions, lc.gatewayKey, lc.listenerName)
        resolver.replay(lc.calls)
        noteListenerUse(listenerUse, lc.listenerKey, lc.compiled.rules)
      }
      for (const p of reuse.placements) place(placed, p.port, p.matches)
      outcomes.push(reuse.outcome)
      nextMemo.set(route, reuse)
      routesReused++
      continue
    }
    const asAttached = attachRoute(snapshot, served, route)
    const attachment = turnedAway === undefined ? asAttached : withoutConflicts(asAttached, turnedAway)
    const refProblems: RefProblem[] = []
    const droppedRules: RuleDrop[] = []
    const conflicts: string[] = []
    const parentRefProblems = new Map<string, RefProblem[]>()
    const compiledFor = new Map<string, CompiledRoute | L4Route>()
    const listeners: ListenerCompile[] = []
    const placements: Array<{ port: number; matches: PlacedMatch[] }> = []
    let reusable = cache !== null && turnedAway === undefined && (route.kind === 'HTTPRoute' || route.kind === 'GRPCRoute')
    countAttached(attached, attachment)
    for (const parent of attachment.parents) {
      const sg = served.get(parent.gatewayKey) as ServedGateway
      for (const a of parent.attachments) {
        const l = a.listener
        const listenerKey = `${parent.gatewayKey}/${l.listener.name}`
        const port = l.listener.port
        if (route.kind === 'HTTPRoute' || route.kind === 'GRPCRoute') {
          let compiled = compiledFor.get(listenerKey) as CompiledRoute | undefined
          if (compiled === undefined) {
            const calls: ResolverCall[] = []
            const chainsBefore = extensionCompiler.handedOut
            resolver.journal = reusable ? calls : null
            try {
              compiled = compileHttpLikeRoute(route, {
                resolver, traffic, extensions, egressExtensions: snapshot.egressExtensions,
                gatewayKey: parent.gatewayKey, listenerName: l.listener.name, meshed: isMeshed(snapshot, sg, route), extensionCompiler,
              })
            } finally {
              resolver.journal = null
            }
            if (compiledFor.size === 0) { refProblems.push(...compiled.refProblems.filter(p => p.reason !== ANCESTORS_FULL)); droppedRules.push(...compiled.droppedRules) }
            noteParentProblems(parentRefProblems, parent.gatewayKey, compiled.refProblems)
            compiledFor.set(listenerKey, compiled)
            noteListenerUse(listenerUse, listenerKey, compiled.rules)
            // A route that took extension chains is compiled every time: the ExtensionCompiler shares them across one compile's rules, and the table lists them.
            if (extensionCompiler.handedOut !== chainsBefore) reusable = false
            if (reusable) listeners.push({ gatewayKey: parent.gatewayKey, listenerName: l.listener.name, listenerKey, compiled, calls })
          }
          const mine: PlacedMatch[] = []
          for (const spec of compiled.matches) {
            for (const hostname of a.hostnames) mine.push({ spec: { ...spec, hostname }, listenerHost: l.hostname ?? ANY_HOST })
          }
          place(placed, port, mine)
          if (reusable) placements.push({ port, matches: mine })
        } else {
          let l4 = compiledFor.get(listenerKey) as L4Route | undefined
          if (l4 === undefined) {
            const found: RefProblem[] = []
            l4 = compileL4Route(route, resolver, traffic, parent.gatewayKey, l.listener.name, found)
            if (compiledFor.size === 0) refProblems.push(...found.filter(p => p.reason !== ANCESTORS_FULL))
            noteParentProblems(parentRefProblems, parent.gatewayKey, found)
            compiledFor.set(listenerKey, l4)
            noteListenerUse(listenerUse, listenerKey, [l4])
          }
          if (route.kind === 'TCPRoute') {
            // Routes arrive oldest first: the first keeps the port (the same route again,
            // through another parentRef, keeps it too; a namesake in another namespace does not).
            const holder = tcp.get(port)?.route
            if (holder !== undefined && (holder.name !== route.meta.name || holder.namespace !== route.meta.namespace)) conflicts.push(parent.gatewayKey)
            else tcp.set(port, l4)
          } else {
            const list = sni.get(port) ?? []
            for (const hostname of a.hostnames) list.push({ hostname, route: l4 })
            sni.set(port, list)
          }
        }
      }
    }
    const outcome: RouteOutcome = { attachment, refProblems, droppedRules, conflicts, ...(parentRefProblems.size > 0 ? { parentRefProblems } : {}) }
    outcomes.push(outcome)
    if (reusable) nextMemo.set(route, { attachment, listeners, placements, outcome })
  }

  const vhosts: VhostReuse | null = cache === null ? null : { cache, next: new Map(), reused: 0, built: 0 }
  const ports = buildPorts(plan.served, placed, tcp, sni, vhosts)
  const clusters = applyClusterPolicies(resolver, traffic, listenerUse)
  const clients = clientIdentities(snapshot)
  const chains = extensionCompiler.chains()
  if (vhosts !== null) {
    vhosts.cache.commit({
      snapshot, optionsKey, plan, winners, routes: nextMemo, vhosts: vhosts.next, tlsLimits,
      stats: { routesReused, routesCompiled: routes.length - routesReused, vhostsReused: vhosts.reused, vhostsBuilt: vhosts.built },
    })
  }
  const table: RouteTable = {
    version: options.version, builtAt: options.now, gatewayClass: options.gatewayClass, ports, clusters, clients,
    ...(chains.length > 0 ? { extensionChains: chains } : {}),
  }
  // Issue 11: status is assembled on first read — the runtime reads it after
  // the swap, so a reload's new routes serve without waiting for it. Every
  // input is final here; the result is the same whenever it is read.
  let status: Status | null = null
  let findings: Finding[] | null = null
  let secretRefs: SecretRefProblem[] | null = null
  const refs = (): SecretRefProblem[] => (secretRefs ??= secretRefProblems(snapshot))
  const result: CompileResult = {
    table: options.freeze === false ? table : deepFreeze(table),
    get status(): Status {
      status ??= assembleStatus({ snapshot, controllerName, plan, attached, outcomes, resolver, traffic, extensions, extensionVerdicts: extensionCompiler.verdicts, secretRefs: refs(), published })
      return status
    },
    get findings(): readonly Finding[] {
      findings ??= statusFindings(snapshot, this.status, outcomes, options.gatewayClass)
      return findings
    },
    get problems(): readonly ConfigProblem[] {
      return [
        ...refs().map(r => r.problem), ...certificateProblems(snapshot, plan.served.map(sg => sg.gateway), options.now),
        ...(published?.problem == null ? [] : [published.problem]),
        ...limitProblems(snapshot, tlsLimits),
      ]
    },
  }
  return { result, resolver, served: new Set(served.keys()) }
}

/** The problems of one listener's compile that hold for its Gateway only (a BackendTLSPolicy's ancestors list full). */
function noteParentProblems(into: Map<string, RefProblem[]>, gatewayKey: string, problems: readonly RefProblem[]): void {
  for (const p of problems) {
    if (p.reason !== ANCESTORS_FULL) continue
    const list = into.get(gatewayKey)
    if (list === undefined) into.set(gatewayKey, [p])
    else if (!list.some(q => q.field === p.field && q.message === p.message)) list.push(p)
  }
}

/**
 * attachedRoutes: one more route on each listener some parentRef of it counts
 * toward. Gateway API counts Routes, so a listener two of a route's parentRefs
 * reach (one without sectionName, one naming it; one spelling out the
 * namespace, one not) counts the route once.
 */
function countAttached(attached: Map<ServedListener, number>, attachment: RouteAttachment): void {
  const parents = attachment.parents
  if (parents.length === 1) {
    for (const l of parents[0].counted) attached.set(l, (attached.get(l) ?? 0) + 1)
    return
  }
  const seen = new Set<ServedListener>()
  for (const parent of parents) {
    for (const l of parent.counted) {
      if (seen.has(l)) continue
      seen.add(l)
      attached.set(l, (attached.get(l) ?? 0) + 1)
    }
  }
}

function place(placed: Map<number, PlacedMatch[]>, port: number, matches: readonly PlacedMatch[]): void {
  const list = placed.get(port)
  if (list === undefined) { placed.set(port, matches.slice()); return }
  for (const m of matches) list.push(m)
}

function buildPorts(
  served: readonly ServedGateway[], placed: ReadonlyMap<number, PlacedMatch[]>,
  tcp: ReadonlyMap<number, L4Route>, sni: ReadonlyMap<number, Array<{ hostname: string; route: L4Route }>>,
  vhosts: VhostReuse | null,
): Map<number, PortEntry> {
  const byPort = new Map<number, ServedListener[]>()
  for (const sg of served) {
    for (const l of sg.listeners) {
      if (!l.ready) continue
      const list = byPort.get(l.listener.port) ?? []
      list.push(l)
      byPort.set(l.listener.port, list)
    }
  }
  const ports = new Map<number, PortEntry>()
  for (const port of [...byPort.keys()].sort((a, b) => a - b)) {
    const listeners = byPort.get(port) as ServedListener[]
    const first = listeners[0]
    const protocol = first.protocol as PortEntry['protocol']
    const httpLike = protocol === 'HTTP' || protocol === 'HTTPS'
    const terminates = first.tlsMode === 'Terminate'
    let serverTls: PortEntry['serverTls'] = null
    if (terminates) {
      const certs = buildHostnameIndex(listeners.flatMap(l => l.cert === null ? [] : [[l.hostname ?? ANY_HOST, l.cert] as const]))
      // TLS settles the version before the server name picks a listener: the port offers
      // every version one of its listeners accepts (each listener's floor is checked after
      // the handshake), and a max-version caps the whole port (it cannot be held per name).
      const minVersion = listeners.every(l => l.tlsVersions.min === 'TLSv1.3') ? 'TLSv1.3' : 'TLSv1.2'
      const maxVersion = listeners.some(l => l.tlsVersions.max === 'TLSv1.2') ? 'TLSv1.2' : 'TLSv1.3'
      // One per port: planGateways throws out a listener whose validation differs from the port's.
      serverTls = {
        ...certs, clientValidation: first.clientValidation, alpn: protocol === 'HTTPS' ? ['h2', 'http/1.1'] : [],
        listenerNames: protocol === 'HTTPS' && listeners.length > 1 ? listenerNamesOf(listeners) : null,
        minVersion, maxVersion,
      }
    }
    ports.set(port, {
      port, protocol,
      listeners: listeners.map(l => ({ gateway: l.gatewayKey, name: l.listener.name, hostname: l.hostname })),
      http: httpLike ? buildHostIndex(placed.get(port) ?? [], listeners.map(l => l.hostname ?? ANY_HOST), vhosts === null ? undefined : vhostMemo(vhosts, port)) : null,
      serverTls,
      tcp: protocol === 'TCP' ? tcp.get(port) ?? null : null,
      // TLS listeners route TLSRoutes by SNI in both modes; Terminate first decrypts with serverTls (no ALPN: the stream is opaque).
      sni: protocol === 'TLS' ? buildSniIndex(sni.get(port) ?? [], first.tlsMode === 'Passthrough' ? 'Passthrough' : 'Terminate') : null,
    })
  }
  return ports
}

/**
 * GEP-3567: which listener a name (an SNI, a request's host) selects on a port:
 * exact, the longest wildcard, the listener without hostname — the rules the
 * certificate (selectCert) and the routes (a host's most specific listener,
 * vhosts.ts) are chosen by, so the three always agree.
 */
function listenerNamesOf(listeners: readonly ServedListener[]): ListenerNames {
  return buildHostnameIndex(listeners.map((l, i) => [l.hostname ?? ANY_HOST, i] as const))
}

interface VhostReuse { readonly cache: CompileCache; readonly next: Map<number, Map<string, VhostMemo>>; reused: number; built: number }

/** buildHostIndex's view of the vhost memo for one port. */
function vhostMemo(v: VhostReuse, port: number): import('./vhosts.ts').VhostCache {
  const next = new Map<string, VhostMemo>()
  v.next.set(port, next)
  return {
    get: (pattern, specs) => {
      const prev = v.cache.vhost(port, pattern)
      if (prev === undefined || !sameSpecs(prev.specs, specs)) return null
      next.set(pattern, prev)
      v.reused++
      return prev.vhost
    },
    set: (pattern, specs, vhost) => {
      next.set(pattern, { specs, vhost })
      v.built++
    },
  }
}

/**
 * Issue 6: the Gateway listeners (`namespace/gateway/listener`) whose routes
 * send to each cluster, so a BackendTrafficPolicy on a listener (sectionName)
 * reaches backend-level fields too.
 */
function noteListenerUse(use: Map<string, Set<string>>, listenerKey: string, rules: ReadonlyArray<{ readonly backends: ReadonlyArray<{ readonly cluster: string | null }> | null; readonly mirrors?: ReadonlyArray<{ readonly cluster: string | null }> | null }>): void {
  for (const rule of rules) {
    if (rule.backends !== null) for (const ref of rule.backends) noteUse(use, listenerKey, ref.cluster)
    if (rule.mirrors != null) for (const ref of rule.mirrors) noteUse(use, listenerKey, ref.cluster)
  }
}

function noteUse(use: Map<string, Set<string>>, listenerKey: string, cluster: string | null): void {
  if (cluster === null) return
  let set = use.get(cluster)
  if (set === undefined) use.set(cluster, set = new Set())
  set.add(listenerKey)
}

/** Cluster-scope BackendTrafficPolicy fields: load balancing, circuit breaking, health checks, IPv6. */
function applyClusterPolicies(resolver: BackendResolver, traffic: PolicyIndex<import('../resources/model.ts').BackendTrafficPolicy>, listenerUse: ReadonlyMap<string, ReadonlySet<string>>): Map<string, Cluster> {
  const out = new Map<string, Cluster>()
  for (const [id, c] of resolver.clusters()) {
    const users = resolver.users.get(id) ?? []
    // No BackendTrafficPolicy at all (the common case): skip building a slot per user of the cluster (issue 11).
    const policy = traffic.winners.size === 0 ? null : traffic.forCluster(
      c.backendKey ?? null,
      [...new Set(users.map(u => `${u.routeKind}/${u.routeKey}`))],
      [...new Set(users.map(u => u.gatewayKey))],
      [...(listenerUse.get(id) ?? [])],
    )
    const destination = resolver.destinations.clusterDestination(c, users.map(u => u.gatewayKey))
    // Issue 9: an external cluster without a proxy choice of its own takes its Gateways' proxy.
    const gatewayProxy = resolver.takesGatewayProxy(id, c) ? resolver.proxies.forGateways(users.map(u => u.gatewayKey)) : null
    const base = gatewayProxy === null ? c : { ...c, upstreamProxy: gatewayProxy }
    out.set(id, policy === null ? { ...base, destination } : {
      ...base,
      destination,
      lb: policy.loadBalancer,
      circuitBreaker: policy.circuitBreaker,
      healthCheck: policy.healthCheck,
      // Issue 6: the policy's TCP connect timeout applies to the cluster's pools.
      connectTimeoutMs: policy.timeout?.connectMs ?? null,
      enableIPv6: policy.enableIPv6 ?? c.enableIPv6,
    })
  }
  return out
}

/**
 * Source address → the Pod it identifies. A hostNetwork Pod's address is its
 * node's (every process there sends from it), and an address two identities
 * claim is not certain to be either: both identify nobody, as an address of
 * no Pod does. (Finished Pods carry no address: lib/resources/read-core.ts.)
 */
function clientIdentities(snapshot: Snapshot): Map<string, ClientIdentity> {
  const clients = new Map<string, ClientIdentity>()
  const ambiguous = new Set<string>()
  for (const pod of sortedValues(snapshot.pods)) {
    if (pod.hostNetwork) continue
    for (const ip of pod.podIPs) {
      if (ambiguous.has(ip)) continue
      const held = clients.get(ip)
      if (held === undefined) clients.set(ip, { namespace: pod.meta.namespace, serviceAccount: pod.serviceAccountName, pod: pod.meta.name })
      else if (held.namespace !== pod.meta.namespace || held.serviceAccount !== pod.serviceAccountName) {
        clients.delete(ip)
        ambiguous.add(ip)
      }
    }
  }
  return clients
}
