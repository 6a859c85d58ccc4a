// The documents the compile tests of a global rate limit's Redis share
// (redis-secret.test.ts, redis-tls.test.ts): a Backend with one extension and
// its route, the Gateway they attach to, a BackendTrafficPolicy with a global
// rule, and where the compiled extension lands.
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { parseManifests } from '../../lib/config/parse.ts'
import type { CompiledExtension, RouteTable } from '../../lib/compile/table.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'

/** A Backend (192.0.2.1:80) with one extension `limit`, and an HTTPRoute `${name}.test` to it. */
export function backend(name: string, type: string, config: string, namespace = 'default'): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: ${namespace} }
spec:
  endpoints: [{ ip: { address: 192.0.2.1, port: 80 } }]
  extensions:
    - name: limit
      type: ${type}
      config: ${config}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: ${namespace} }
spec:
  parentRefs: [{ name: gw, namespace: default }]
  hostnames: [${name}.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${name}, port: 80 }]
`
}

export const GATEWAY = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: default }
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: 8080, allowedRoutes: { namespaces: { from: All } } }]
`

/** GATEWAY and `docs`, read as one file. */
export function snapshotOf(...docs: string[]): Snapshot {
  const parsed = parseManifests('set.yaml', [GATEWAY, ...docs].join('---\n'))
  return buildSnapshot(parsed.docs, parsed.problems)
}

/** The compiled extension `name` of the route for `host` on port 8080. */
export function extensionOf(table: RouteTable, host: string, name = 'limit'): CompiledExtension | undefined {
  return table.ports.get(8080)?.http?.exact.get(host)?.prefixes.matches[0]?.rule.backends?.[0]?.extensions?.extensions.find(e => e.name === name)
}

/** A BackendTrafficPolicy with `annotations`, a Global rate-limit rule, on HTTPRoute api (and its Backend). */
export const POLICY = (annotations: Record<string, string>): string => `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: per-tenant, namespace: default, annotations: ${JSON.stringify(annotations)} }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: api }]
  rateLimit:
    type: Global
    global:
      rules:
      - limit: { requests: 5, unit: Minute }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: api, namespace: default }
spec:
  parentRefs: [{ name: gw }]
  hostnames: [api.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: 80 }]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: api, namespace: default }
spec:
  endpoints: [{ ip: { address: 192.0.2.1, port: 80 } }]
`
