// Compile of TCPRoute and TLSRoute (lib/compile/l4.ts and the L4 parts of
// compile.ts): one TCPRoute per TCP port, SNI indexes on TLS ports in both
// modes, and our definition of TLS origination for L4 backends (README
// "TCPRoute and TLSRoute"): a BackendTLSPolicy-targeted Service or a Backend
// with TLS gets cluster TLS; passthrough ignores it in the data plane.

import t from 'tap'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { compile } from '../../lib/compile/compile.ts'
import { createCa, serverCert } from '../helpers/pki.ts'

const ca = createCa('compile l4 CA')
const listenerCert = serverCert(ca, ['*.term.test'])
const b64 = (s: string): string => Buffer.from(s).toString('base64')
const indent = (pem: string): string => pem.trim().split('\n').map((l) => `    ${l}`).join('\n')

const YAML = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: egress, namespace: default }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: tcp, protocol: TCP, port: 5432 }
    - name: pass
      protocol: TLS
      port: 8443
      tls: { mode: Passthrough }
    - name: term
      protocol: TLS
      port: 9443
      tls:
        mode: Terminate
        certificateRefs: [{ name: term-cert }]
---
apiVersion: v1
kind: Secret
metadata: { name: term-cert, namespace: default }
type: kubernetes.io/tls
data: { tls.crt: ${b64(listenerCert.certPem)}, tls.key: ${b64(listenerCert.keyPem)} }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: db-ca, namespace: default }
data:
  ca.crt: |
${indent(ca.certPem)}
---
apiVersion: v1
kind: Service
metadata: { name: db, namespace: default }
spec: { ports: [{ name: pg, port: 5432 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: db-1, namespace: default, labels: { kubernetes.io/service-name: db } }
addressType: IPv4
endpoints: [{ addresses: [10.0.0.7] }]
ports: [{ name: pg, port: 5432 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: { name: db-tls, namespace: default }
spec:
  targetRefs: [{ group: "", kind: Service, name: db }]
  validation:
    hostname: db.internal.test
    caCertificateRefs: [{ group: "", kind: ConfigMap, name: db-ca }]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: { name: pg, namespace: default }
spec:
  parentRefs: [{ name: egress, sectionName: tcp }]
  rules: [{ backendRefs: [{ name: db, port: 5432, weight: 3 }, { name: db, port: 5432, weight: 0 }] }]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: { name: wild, namespace: default }
spec:
  parentRefs: [{ name: egress, sectionName: pass }]
  hostnames: ["*.example.com"]
  rules: [{ backendRefs: [{ name: db, port: 5432 }] }]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: { name: exact, namespace: default }
spec:
  parentRefs: [{ name: egress, sectionName: pass }]
  hostnames: ["db.example.com"]
  rules: [{ backendRefs: [{ name: db, port: 5432 }] }]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: { name: terminated, namespace: default }
spec:
  parentRefs: [{ name: egress, sectionName: term }]
  hostnames: ["app.term.test"]
  rules: [{ backendRefs: [{ name: db, port: 5432 }] }]
`

const parsed = parseManifests('l4.yaml', YAML)
const result = compile(buildSnapshot(parsed.docs, parsed.problems), { now: 0, version: 1, gatewayClass: 'sallyport' })
const ports = result.table.ports

t.test('TCP port: the TCPRoute with its weights', async (t) => {
  const tcp = ports.get(5432)?.tcp
  t.ok(tcp !== null && tcp !== undefined)
  t.same(tcp?.backends.map((b) => [b.cluster, b.weight]), [['Service/default/db:5432#l4', 3], ['Service/default/db:5432#l4', 0]])
  t.equal(tcp?.totalWeight, 3)
})

t.test('TCPRoute to a Service targeted by a BackendTLSPolicy originates TLS (our definition)', async (t) => {
  const c = result.table.clusters.get('Service/default/db:5432#l4')
  t.ok(c?.tls !== null && c?.tls !== undefined, 'cluster TLS set')
  t.equal(c?.tls?.verifyHostname, 'db.internal.test')
  t.same(c?.tls?.alpn.filter((p) => p === 'h2'), [], 'no HTTP ALPN for an L4 cluster')
})

t.test('TLS Passthrough: SNI index, exact and wildcard, no server certificate', async (t) => {
  const e = ports.get(8443)
  t.equal(e?.sni?.mode, 'Passthrough')
  t.equal(e?.sni?.exact.get('db.example.com')?.route.name, 'exact')
  t.same(e?.sni?.wildcards.map((w) => [w.suffix, w.value.route.name]), [['.example.com', 'wild']])
  t.equal(e?.serverTls, null)
  t.equal(e?.http, null)
})

t.test('TLS Terminate: TLSRoutes by SNI, the listener certificate, no ALPN, no HTTP index', async (t) => {
  const e = ports.get(9443)
  t.equal(e?.sni?.mode, 'Terminate')
  t.equal(e?.sni?.exact.get('app.term.test')?.route.name, 'terminated')
  t.equal(e?.serverTls?.fallback?.certPem, listenerCert.certPem)
  t.same(e?.serverTls?.alpn, [])
  t.equal(e?.http, null)
  const route = [...result.status.objects.values()].find((o) => JSON.stringify(o).includes('"terminated"') && JSON.stringify(o).includes('TLSRoute'))
  t.match(JSON.stringify(route), /"type":"Accepted","status":"True"/, 'the TLSRoute is accepted by the Terminate listener')
})

t.test('TCP port: two TCPRoutes of one name in two namespaces: the older serves the port, the newer is Conflicted', async (t) => {
  // The conflict check compared route names only: the newer of two same-named
  // routes took the port over, with no Conflicted condition on either.
  const route = (ns: string, created: string): string => `apiVersion: v1
kind: Service
metadata: { name: db, namespace: ${ns} }
spec: { ports: [{ name: pg, port: 5432 }] }
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: { name: pg, namespace: ${ns}, creationTimestamp: "${created}" }
spec:
  parentRefs: [{ name: egress, namespace: default, sectionName: tcp }]
  rules: [{ backendRefs: [{ name: db, port: 5432 }] }]
`
  const yaml = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: egress, namespace: default }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: tcp, protocol: TCP, port: 5432, allowedRoutes: { namespaces: { from: All } } }
---
${route('b', '2024-02-01T00:00:00Z')}---
${route('a', '2024-01-01T00:00:00Z')}`
  const p = parseManifests('same-name.yaml', yaml)
  const r = compile(buildSnapshot(p.docs, p.problems), { now: 0, version: 1, gatewayClass: 'sallyport' })
  const served = r.table.ports.get(5432)?.tcp?.route
  t.same(served, { kind: 'TCPRoute', namespace: 'a', name: 'pg' }, 'the older route keeps the port')
  const statusOf = (ns: string): string => JSON.stringify([...r.status.objects.values()].find((o) => {
    const s = JSON.stringify(o)
    return s.includes('"TCPRoute"') && s.includes(`"namespace":"${ns}"`) && s.includes('"name":"pg"')
  }))
  t.match(statusOf('b'), /"type":"Conflicted","status":"True"/, 'the newer one says Conflicted')
  t.notMatch(statusOf('a'), /"type":"Conflicted","status":"True"/, 'the older one does not')
})
