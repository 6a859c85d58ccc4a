// Hand-built RouteTables for data-path tests: ports, virtual hosts with ranked
// matches (the shape compile produces), clusters on loopback endpoints.

import { unusedPort } from './ports.ts'
import { ANY_HOST, buildHostnameIndex } from '../../lib/hostname-index.ts'
import type {
  Cluster, HostIndex, PathMatcher, PortEntry, PrefixNode, RouteMatch, RouteRule, RouteTable, ServerCert, ServerTls, VirtualHost, WeightedCluster,
} from '../../lib/compile/table.ts'

export interface MatchSpec {
  readonly path?: { readonly type: PathMatcher['type']; readonly value: string }
  readonly method?: string
  readonly headers?: ReadonlyArray<{ readonly name: string; readonly value: string }>
}

export interface BackendSpec extends Partial<Omit<WeightedCluster, 'cluster'>> {
  readonly cluster: string | null
}

export interface RuleSpec extends Partial<Omit<RouteRule, 'backends'>> {
  readonly matches?: readonly MatchSpec[]
  readonly backends?: readonly BackendSpec[] | null
}

export interface RouteSpec {
  readonly name: string
  readonly namespace?: string
  /** null: any hostname. */
  readonly hostnames?: readonly string[] | null
  readonly rules: readonly RuleSpec[]
  readonly grpc?: boolean
}

export interface PortSpec {
  readonly protocol?: 'HTTP' | 'HTTPS'
  readonly routes: readonly RouteSpec[]
  readonly tls?: ServerTls
}

const NO_TIMEOUTS = { requestMs: null, backendRequestMs: null, connectMs: null, idleMs: null }

export function cluster(id: string, port: number, over: Partial<Cluster> = {}): Cluster {
  return {
    id, kind: 'Service', namespace: 'test', name: id, port, protocol: 'HTTP11', hostname: null,
    endpoints: [{ host: '127.0.0.1', port, kind: 'ip', weight: 1, zone: null }],
    tls: null, mcpPath: null, extensions: null, lb: null, circuitBreaker: null, healthCheck: null,
    fallback: false, region: null, enableIPv6: false, ...over,
  }
}

export function serverTls(certs: ReadonlyArray<{ readonly hostname: string | null; readonly certPem: string; readonly keyPem: string; readonly id: string }>, clientValidation: ServerTls['clientValidation'] = null): ServerTls {
  const byName = buildHostnameIndex(certs.map((c): [string, ServerCert] =>
    [c.hostname ?? ANY_HOST, { id: c.id, hostname: c.hostname, certPem: c.certPem, keyPem: c.keyPem, minVersion: 'TLSv1.2' }]))
  return { ...byName, clientValidation, alpn: ['h2', 'http/1.1'], listenerNames: null, minVersion: 'TLSv1.2', maxVersion: 'TLSv1.3' }
}

export function buildTable(ports: ReadonlyMap<number, PortSpec> | Record<number, PortSpec>, clusters: readonly Cluster[], version = 1): RouteTable {
  const entries = new Map<number, PortEntry>()
  const list = ports instanceof Map ? [...ports] : Object.entries(ports).map(([p, s]) => [Number(p), s] as const)
  for (const [port, spec] of list) entries.set(port, portEntry(port, spec))
  return { version, builtAt: 0, gatewayClass: 'test', ports: entries, clusters: new Map(clusters.map((c) => [c.id, c])), clients: new Map() }
}

function portEntry(port: number, spec: PortSpec): PortEntry {
  const protocol = spec.protocol ?? 'HTTP'
  let rank = 0
  const byHost = new Map<string, RouteMatch[]>()
  for (const route of spec.routes) {
    const ns = route.namespace ?? 'test'
    route.rules.forEach((r, i) => {
      const rule = makeRule(ns, route, r, i)
      const matches = r.matches ?? [{ path: { type: 'PathPrefix', value: '/' } }]
      for (const m of matches) {
        const path = m.path ?? { type: 'PathPrefix' as const, value: '/' }
        const match: RouteMatch = {
          path: { type: path.type, value: path.value, regex: path.type === 'RegularExpression' ? new RegExp(`^(?:${path.value})$`) : null },
          method: m.method ?? null,
          headers: m.headers === undefined ? null : m.headers.map((h) => ({ name: h.name.toLowerCase(), exact: h.value, regex: null })),
          query: null, rule, rank: rank++,
        }
        for (const h of route.hostnames ?? ['*']) {
          const list = byHost.get(h) ?? []
          list.push(match)
          byHost.set(h, list)
        }
      }
    })
  }
  const http: HostIndex = buildHostnameIndex([...byHost].map(([h, matches]) => [h, vhostOf(h, matches)] as const))
  return {
    port, protocol, listeners: [{ gateway: 'test/gw', name: `l${port}`, hostname: null }],
    http, serverTls: spec.tls ?? null, tcp: null, sni: null,
  }
}

function makeRule(ns: string, route: RouteSpec, r: RuleSpec, i: number): RouteRule {
  const backends: WeightedCluster[] | null = r.backends === null ? null : (r.backends ?? []).map((b) => ({
    cluster: b.cluster, weight: b.weight ?? 1, priority: b.priority ?? 0, requestHeaders: b.requestHeaders ?? null, responseHeaders: b.responseHeaders ?? null,
    ...(b.extensions === undefined ? {} : { extensions: b.extensions }),
  }))
  return {
    id: `httproute/${ns}/${route.name}/rule/${i}`, route: { kind: route.grpc === true ? 'GRPCRoute' : 'HTTPRoute', namespace: ns, name: route.name },
    ruleIndex: i, ruleName: null, gateway: 'test/gw', requestHeaders: null, responseHeaders: null, redirect: null, rewriteHost: null,
    rewritePath: null, mirrors: null, direct: null, totalWeight: backends === null ? 0 : backends.reduce((s, b) => s + b.weight, 0),
    timeouts: NO_TIMEOUTS, retry: null, extensions: null, meshed: false, grpc: route.grpc === true,
    ...r, backends,
  } as RouteRule
}

function vhostOf(hostname: string, matches: readonly RouteMatch[]): VirtualHost {
  const exactPaths = new Map<string, RouteMatch[]>()
  const root: { children: Map<string, PrefixNode>; matches: RouteMatch[] } = { children: new Map(), matches: [] }
  const regexes: RouteMatch[] = []
  for (const m of matches) {
    if (m.path.type === 'Exact') {
      const list = exactPaths.get(m.path.value) ?? []
      list.push(m)
      exactPaths.set(m.path.value, list)
    } else if (m.path.type === 'RegularExpression') {
      regexes.push(m)
    } else {
      let node = root
      for (const seg of m.path.value.split('/').filter((s) => s.length > 0)) {
        let child = node.children.get(seg) as typeof root | undefined
        if (child === undefined) {
          child = { children: new Map(), matches: [] }
          node.children.set(seg, child)
        }
        node = child
      }
      node.matches.push(m)
    }
  }
  return { hostname, exactPaths, prefixes: root, regexes, needsQuery: false }
}

/** A port that was free a moment ago (listeners bind the table's port numbers); see ports.ts unusedPort. */
export async function freePort(): Promise<number> {
  return unusedPort()
}
