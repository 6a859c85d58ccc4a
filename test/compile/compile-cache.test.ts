// CompileCache (issue 11): a compile that reuses the previous compile's routes
// and vhosts gives the same table and status as a compile from scratch.
// Random sequences of configuration changes, as a source delivers them (an
// unchanged document keeps its model object: DocumentCache), each step compiled
// both ways and compared in full. The world is a set of slots (one object
// each), every slot with a few variants, "absent" among them; a step sets one to
// three slots to a random variant. Variants cover what a reused route must
// repeat: resolver users and denials (destination policy), policy overrides,
// ReferenceGrants, namespaces, mirrors, GRPCRoutes; and what is never reused:
// extension chains, CONNECT to requested hosts, L4 routes.
import t, { type Test } from 'tap'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot, DocumentCache, type SourcedDoc } from '../../lib/config/snapshot-builder.ts'
import { compile } from '../../lib/compile/compile.ts'
import { CompileCache } from '../../lib/compile/compile-cache.ts'
import { References } from '../../lib/compile/references.ts'
import { ensureLookupIndexes } from '../../lib/compile/lookup-index.ts'
import type { RouteTable } from '../../lib/compile/table.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { prng } from '../helpers/prng.ts'

const CLASS = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: sallyport}
spec: {controllerName: sallyport.io/gateway-controller}`

const gateway = (listeners: string, annotations = '{}'): string => `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default, annotations: ${annotations}}
spec:
  gatewayClassName: sallyport
  listeners:
${listeners}`

const ALL = 'allowedRoutes: {namespaces: {from: All}}'

/** Environment slots: everything but routes. Changing one invalidates the route memo. */
const ENVIRONMENT: Record<string, ReadonlyArray<string | null>> = {
  class: [CLASS],
  gw: [
    gateway(`  - {name: http, protocol: HTTP, port: 8080, ${ALL}}`),
    gateway(`  - {name: http, protocol: HTTP, port: 8080, ${ALL}}
  - {name: wild, protocol: HTTP, port: 8081, hostname: "*.example.com", ${ALL}}
  - {name: tcp, protocol: TCP, port: 9000, ${ALL}}`),
    gateway(`  - {name: http, protocol: HTTP, port: 8080, hostname: a.example.com, ${ALL}}
  - {name: other, protocol: HTTP, port: 8080, ${ALL}}`, '{sallyport.io/deny-destinations: "api.example.net"}'),
    gateway(`  - {name: http, protocol: HTTP, port: 8080, allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {team: a}}}}}`),
    gateway(`  - {name: http, protocol: HTTP, port: 8080, ${ALL}}`, '{sallyport.io/upstream-proxy: "http://proxy.corp:3128"}'),
    gateway(`  - {name: http, protocol: HTTP, port: 8080, ${ALL}}
  addresses: [{type: IPAddress, value: 203.0.113.7}]`),
  ],
  nsOther: [null, `apiVersion: v1
kind: Namespace
metadata: {name: other, labels: {team: a}}`, `apiVersion: v1
kind: Namespace
metadata: {name: other, labels: {team: b}}`],
  svc: [`apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {ports: [{name: http, port: 80}]}`, `apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {ports: [{name: http, port: 80}, {name: alt, port: 81, appProtocol: kubernetes.io/h2c}]}`, null],
  slice: [null, `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc-abc, namespace: default, labels: {kubernetes.io/service-name: svc}}
addressType: IPv4
endpoints: [{addresses: [10.0.0.1], conditions: {ready: true}}]
ports: [{name: http, port: 8080}]`],
  svcOther: [null, `apiVersion: v1
kind: Service
metadata: {name: svc, namespace: other}
spec: {ports: [{name: http, port: 80}]}`],
  ext: [`apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: {name: ext, namespace: default}
spec:
  endpoints: [{fqdn: {hostname: api.example.net, port: 443}}]`, `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: {name: ext, namespace: default}
spec:
  endpoints: [{fqdn: {hostname: other.example.net, port: 443}}]`, null],
  pod: [null, `apiVersion: v1
kind: Pod
metadata: {name: client-a, namespace: default, labels: {app: search}}
spec: {serviceAccountName: bot, containers: [{name: app, image: example/app}]}
status: {podIP: 10.1.0.1}`, `apiVersion: v1
kind: Pod
metadata: {name: client-a, namespace: default, labels: {app: search}}
spec: {serviceAccountName: bot, containers: [{name: app, image: example/app}]}
status: {podIP: 10.1.0.2}`],
  selector: [null, `apiVersion: gateway.networking.k8s.io/v1alpha1
kind: Backend
metadata: {name: search, namespace: default}
spec:
  type: EndpointSelector
  endpointSelector: {selector: {matchLabels: {app: search}}}
  port: {name: http, port: 8080}
  protocol: HTTP11`],
  btp: [null, `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: gw-defaults, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  retry: {numRetries: 2}`, `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: r1-timeout, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r1}]
  timeout: {http: {requestTimeout: 5s}}`],
  btp2: [null, `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: r2-limit, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r2}]
  rateLimit: {type: Local, local: {rules: [{limit: {requests: 10, unit: Second}}]}}`],
  eext: [null, `apiVersion: sallyport.io/v1alpha1
kind: EgressExtension
metadata: {name: audit, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r3}]
  extensions: [{name: audit, type: sallyport.io/AuditLog:v1, phase: response-headers, failOpen: true}]`],
  // F4: objects nothing references (the runtime skips a reload that changes only these).
  junkSecret: [null, `apiVersion: v1
kind: Secret
metadata: {name: helm-release, namespace: kube-system}
type: Opaque
data: {x: eA==}`, `apiVersion: v1
kind: Secret
metadata: {name: helm-release, namespace: kube-system}
type: Opaque
data: {x: eQ==}`],
  junkSlice: [null, `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: dns-abc, namespace: kube-system, labels: {kubernetes.io/service-name: dns}}
addressType: IPv4
endpoints: [{addresses: [10.9.0.1], conditions: {ready: true}}]
ports: [{name: http, port: 53}]`, `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: dns-abc, namespace: kube-system, labels: {kubernetes.io/service-name: dns}}
addressType: IPv4
endpoints: [{addresses: [10.9.0.2], conditions: {ready: true}}]
ports: [{name: http, port: 53}]`],
  // --publish-service (OPTIONS): absent (a warning), a ClusterIP Service, one with a load balancer address.
  publish: [null, `apiVersion: v1
kind: Service
metadata: {name: sallyport, namespace: sallyport-system}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}`, `apiVersion: v1
kind: Service
metadata: {name: sallyport, namespace: sallyport-system}
spec: {type: LoadBalancer, clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}
status: {loadBalancer: {ingress: [{ip: 203.0.113.7}]}}`],
  grant: [null, `apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: allow-default, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]
  to: [{group: "", kind: Service}]`],
}

const route = (name: string, body: string, namespace = 'default', annotations = '{}'): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ${name}, namespace: ${namespace}, annotations: ${annotations}}
spec:
  parentRefs: [{name: gw, namespace: default}]
${body}`

/** Route variants; `n` is the slot's route name. */
const ROUTE_VARIANTS: ReadonlyArray<((n: string) => string) | null> = [
  null,
  (n) => route(n, `  hostnames: [${n}.example.com]
  rules: [{backendRefs: [{name: svc, port: 80}]}]`),
  (n) => route(n, `  hostnames: ["*.example.com"]
  rules:
  - matches: [{path: {type: Exact, value: /x}, headers: [{name: X-Tenant, value: t1}]}]
    backendRefs: [{name: svc, port: 80, weight: 2}, {group: gateway.envoyproxy.io, kind: Backend, name: ext, port: 443, weight: 1}]`,
  'default', '{sallyport.io/backend-priority: "ext=1"}'),
  (n) => route(n, `  rules:
  - filters:
    - {type: RequestMirror, requestMirror: {backendRef: {name: svc, port: 80}}}
    - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-A, value: "1"}]}}
    backendRefs: [{group: gateway.envoyproxy.io, kind: Backend, name: ext, port: 443}]`),
  (n) => route(n, `  hostnames: [a.example.com, b.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /v1}}}]
    backendRefs: [{name: svc, namespace: other, port: 80}]`),
  (n) => route(n, `  hostnames: [${n}.example.com]
  rules: [{}]`, 'default', '{sallyport.io/connect-ports: "443"}'),
  (n) => route(n, `  hostnames: [a.example.com]
  rules:
  - matches: [{path: {type: RegularExpression, value: "/r/[0-9]+"}}]
    filters: [{type: ExtensionRef, extensionRef: {group: sallyport.io, kind: EgressExtension, name: audit}}]
    backendRefs: [{name: svc, port: 80}, {name: missing, port: 80}]`),
  (n) => route(n, `  hostnames: [${n}.example.com]
  rules: [{backendRefs: [{name: svc, port: 80}]}]`, 'other'),
  (n) => route(n, `  hostnames: [${n}.example.com]
  rules: [{backendRefs: [{group: gateway.networking.k8s.io, kind: Backend, name: search, port: 8080}]}]`),
]

const GRPC: ReadonlyArray<string | null> = [null, `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [grpc.example.com]
  rules: [{matches: [{method: {service: pkg.Svc, method: Get}}], backendRefs: [{name: svc, port: 81}]}]`]

const TCP: ReadonlyArray<string | null> = [null, `apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: t, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: tcp}]
  rules: [{backendRefs: [{name: svc, port: 80}]}]`]

const ROUTES = Array.from({ length: 8 }, (_, i) => `r${i}`)

/** Every slot's text for a choice of variants (null: absent). */
function textOf(slot: string, variant: number): string | null {
  if (slot in ENVIRONMENT) return (ENVIRONMENT[slot] as ReadonlyArray<string | null>)[variant] ?? null
  if (slot === 'grpc') return GRPC[variant] ?? null
  if (slot === 'tcp') return TCP[variant] ?? null
  return ROUTE_VARIANTS[variant]?.(slot) ?? null
}

function variants(slot: string): number {
  if (slot in ENVIRONMENT) return (ENVIRONMENT[slot] as unknown[]).length
  if (slot === 'grpc') return GRPC.length
  if (slot === 'tcp') return TCP.length
  return ROUTE_VARIANTS.length
}

const SLOTS = [...Object.keys(ENVIRONMENT), ...ROUTES, 'grpc', 'tcp']

function docsOf(choice: ReadonlyMap<string, number>): SourcedDoc[] {
  const docs: SourcedDoc[] = []
  for (const slot of SLOTS) {
    const text = textOf(slot, choice.get(slot) ?? 0)
    if (text === null) continue
    // One file per slot: a slot's document keeps its position whatever the others do.
    const parsed = parseManifests(`${slot}.yaml`, text)
    if (parsed.problems.length > 0) throw new Error(`${slot}: ${JSON.stringify(parsed.problems)}`)
    docs.push(...parsed.docs)
  }
  return docs
}

/** Everything a table or status holds, as text: Maps and Sets in order, RegExps with flags, Buffers as hex. */
function canon(value: unknown): string {
  const walk = (v: unknown): unknown => {
    if (v === null || typeof v !== 'object') return v
    if (v instanceof RegExp) return `/${v.source}/${v.flags}`
    if (Buffer.isBuffer(v)) return `hex:${v.toString('hex')}`
    if (v instanceof Map) return { map: [...v].map(([k, x]) => [walk(k), walk(x)]) }
    if (v instanceof Set) return { set: [...v].map(walk) }
    if (Array.isArray(v)) return v.map(walk)
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]))
  }
  return JSON.stringify(walk(value))
}

/** Equal texts, or a failure showing where they part (the whole texts run to tens of kB). */
function same(t: Test, cached: string, fresh: string, what: string): boolean {
  if (cached === fresh) return true
  let i = 0
  while (cached[i] === fresh[i]) i++
  t.fail(what, { cached: cached.slice(Math.max(0, i - 300), i + 300), fresh: fresh.slice(Math.max(0, i - 300), i + 300) })
  return false
}

/** Each HTTP port's compact lookup index (a non-enumerable property, so canon() of the table leaves it out). */
function lookupIndexes(table: RouteTable): unknown[] {
  ensureLookupIndexes(table)
  return [...table.ports.values()].map((p) => p.http?.lookup?.index ?? null)
}

const OPTIONS = { now: 1700000000000, version: 1, gatewayClass: 'sallyport', publishService: 'sallyport-system/sallyport' }
const STEPS = 40

t.test('random change sequences: the cached compile equals a compile from scratch', async (t) => {
  let reusedTotal = 0
  let vhostsReusedTotal = 0
  let skipped = 0
  for (let seed = 1; seed <= Number(process.env.SALLYPORT_CACHE_SEEDS ?? 12); seed++) {
    const rand = prng(seed)
    const choice = new Map<string, number>(SLOTS.map((s) => [s, s in ENVIRONMENT ? 0 : 1 + Math.floor(rand() * (variants(s) - 1))]))
    const documents = new DocumentCache()
    const cache = new CompileCache()
    // F4: what the runtime keeps to skip reloads of unreferenced objects.
    let last: { snapshot: Snapshot; references: References; table: string; status: string; problems: string; version: number } | null = null
    for (let step = 0; step < STEPS; step++) {
      const changed: string[] = []
      const before = new Map(choice)
      if (step > 0) {
        const n = 1 + Math.floor(rand() * 3)
        for (let k = 0; k < n; k++) {
          // Mostly routes, as in a cluster where routes change more than the rest.
          const pool = rand() < 0.7 ? [...ROUTES, 'grpc', 'tcp'] : Object.keys(ENVIRONMENT)
          const slot = pool[Math.floor(rand() * pool.length)] as string
          const variant = Math.floor(rand() * variants(slot))
          if (variant === choice.get(slot)) continue
          choice.set(slot, variant)
          changed.push(`${slot}=${variant}`)
        }
      }
      const snapshot = buildSnapshot(docsOf(choice), [], documents)
      if (snapshot.problems.length > 0) { t.fail(`seed ${seed} step ${step}: every variant is valid`, { problems: snapshot.problems }); return }
      const where = `seed ${seed} step ${step} (${changed.join(', ') || 'start'})`
      if (last !== null && last.references.onlyUnreferenced(last.snapshot, snapshot)) {
        // The runtime keeps the table: a fresh compile must give the same one.
        const again = compile(snapshot, { ...OPTIONS, version: last.version })
        if (!same(t, canon(again.table), last.table, `${where}: skipped reload, table`)) return
        if (!same(t, canon(again.status), last.status, `${where}: skipped reload, status`)) return
        if (!same(t, canon(again.problems), last.problems, `${where}: skipped reload, problems`)) return
        last.snapshot = snapshot
        cache.carry(snapshot)
        skipped++
        continue
      }
      const references = new References()
      const fresh = compile(snapshot, { ...OPTIONS, version: step })
      const cached = compile(references.track(snapshot), { ...OPTIONS, version: step, cache })
      if (last !== null && cache.planReused) references.merge(last.references)
      if (!same(t, canon(cached.table), canon(fresh.table), `${where}: table`)) return
      if (!same(t, canon(cached.status), canon(fresh.status), `${where}: status`)) return
      // The lookup index of reused vhosts is built from the keys kept per vhost (lookup-index.ts).
      if (!same(t, canon(lookupIndexes(cached.table)), canon(lookupIndexes(fresh.table)), `${where}: lookup index`)) return
      // Pods are part of the environment only while a Backend selects Pods.
      const envChanged = Object.keys(ENVIRONMENT).some((slot) => choice.get(slot) !== before.get(slot) && (slot !== 'pod' || choice.get('selector') !== 0))
      if (step > 0 && envChanged && cache.stats.routesReused !== 0) { t.fail(`${where}: reused routes after an environment change`); return }
      // The runtime reads the problems and status of what it applies (both record into references).
      void cached.problems
      last = { snapshot, references, table: canon(fresh.table), status: canon(fresh.status), problems: canon(fresh.problems), version: step }
      reusedTotal += cache.stats.routesReused
      vhostsReusedTotal += cache.stats.vhostsReused
    }
  }
  t.ok(reusedTotal > 100, `routes were reused (${reusedTotal})`)
  t.ok(vhostsReusedTotal > 100, `vhosts were reused (${vhostsReusedTotal})`)
  t.ok(skipped > 5, `reloads of unreferenced objects were skipped (${skipped})`)
})

t.test('a route-only change recompiles that route alone; an environment change recompiles all', async (t) => {
  const choice = new Map<string, number>(SLOTS.map((s) => [s, s in ENVIRONMENT ? 0 : 1]))
  choice.set('gw', 1) // with the TCP listener
  const documents = new DocumentCache()
  const cache = new CompileCache()
  const run = (): void => { compile(buildSnapshot(docsOf(choice), [], documents), { ...OPTIONS, cache }) }
  run()
  // Routes: r0…r7, the GRPCRoute and the TCPRoute (L4 routes are compiled every time).
  t.same(cache.stats, { routesReused: 0, routesCompiled: ROUTES.length + 2, vhostsReused: 0, vhostsBuilt: cache.stats.vhostsBuilt }, 'first compile: nothing to reuse')
  choice.set('r0', 4) // r0.example.com → a.example.com and b.example.com
  run()
  t.equal(cache.stats.routesCompiled, 2, 'one route changed: it and the TCPRoute compiled')
  t.equal(cache.stats.routesReused, ROUTES.length, 'the other HTTPRoutes and the GRPCRoute reused')
  t.ok(cache.stats.vhostsReused > 0 && cache.stats.vhostsBuilt <= 4, `vhosts the change does not touch are reused (${JSON.stringify(cache.stats)})`)
  choice.set('pod', 1)
  run()
  t.equal(cache.stats.routesReused, ROUTES.length + 1, 'a Pod came: routes reused (no Backend selects Pods)')
  choice.set('pod', 2)
  choice.set('selector', 1)
  run()
  t.equal(cache.stats.routesReused, 0, 'a Backend that selects Pods came: every route compiled again')
  choice.set('pod', 1)
  run()
  t.equal(cache.stats.routesReused, 0, 'a Pod changed while a Backend selects Pods: every route compiled again')
  choice.set('slice', 1)
  run()
  t.equal(cache.stats.routesReused, 0, 'an EndpointSlice changed: every route compiled again')
  run()
  t.equal(cache.stats.routesReused, ROUTES.length + 1, 'nothing changed: every HTTPRoute and GRPCRoute reused')
})
