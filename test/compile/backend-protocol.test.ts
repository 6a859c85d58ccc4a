// The egress proposal's own example writes `protocol: TLS` on the port of a
// Backend that an HTTPRoute sends HTTP to (api.openai.com). For HTTP routes
// that means HTTP over TLS (ALPN picks h2 or http/1.1); for TCP/TLS routes it
// stays raw TLS origination. Before this test an HTTPRoute to such a port got
// an L4 cluster and every request failed with 502.
import t from 'tap'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { compile } from '../../lib/compile/compile.ts'

const YAML = `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: egress, namespace: ai }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: http, protocol: HTTP, port: 8080 }
    - { name: tcp, protocol: TCP, port: 9443 }
---
apiVersion: gateway.networking.k8s.io/v1alpha1
kind: Backend
metadata: { name: openai-backend, namespace: ai }
spec:
  destination:
    type: FQDN
    fqdn: { hostname: api.openai.com }
    ports:
      - number: 443
        protocol: TLS
        tls: { mode: Simple, sni: api.openai.com }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ai, namespace: ai }
spec:
  parentRefs: [{ name: egress, sectionName: http }]
  rules:
    - backendRefs: [{ group: gateway.networking.k8s.io, kind: Backend, name: openai-backend, port: 443 }]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: { name: raw, namespace: ai }
spec:
  parentRefs: [{ name: egress, sectionName: tcp }]
  rules:
    - backendRefs: [{ group: gateway.networking.k8s.io, kind: Backend, name: openai-backend, port: 443 }]
`

t.test('port protocol TLS: HTTP over TLS for HTTPRoutes, raw TLS for TCPRoutes', async (t) => {
  const parsed = parseManifests('proposal.yaml', YAML)
  const snapshot = buildSnapshot(parsed.docs, parsed.problems)
  t.same(snapshot.problems.filter((p) => p.severity === 'error'), [])
  const { table } = compile(snapshot, { now: 0, version: 1, gatewayClass: 'sallyport' })
  const http = table.ports.get(8080)?.http
  const rule = http?.fallback?.prefixes.matches[0]?.rule
  const httpCluster = table.clusters.get(rule?.backends?.[0]?.cluster ?? '')
  t.equal(httpCluster?.protocol, 'HTTP', 'the HTTPRoute speaks HTTP over TLS')
  t.equal(httpCluster?.tls?.servername, 'api.openai.com')
  const tcp = table.ports.get(9443)?.tcp
  const tcpCluster = table.clusters.get(tcp?.backends[0]?.cluster ?? '')
  t.equal(tcpCluster?.protocol, 'TLS', 'the TCPRoute originates raw TLS')
})
