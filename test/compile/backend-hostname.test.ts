// The hostname of an Envoy Gateway Backend (the Host the upstream gets, the
// name TLS sends and verifies when nothing else names one): its one fqdn
// endpoint's — or the one name all its fqdn endpoints share (a:443 and
// a:8443). Endpoints of different names have none: each connection's TLS
// names its own endpoint, and the Host is the client's.
import t from 'tap'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { compile } from '../../lib/compile/compile.ts'

function clusterHostname(endpoints: string): string | null | undefined {
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
  listeners: [{ name: http, protocol: HTTP, port: 8080 }]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: api, namespace: default }
spec:
  endpoints: ${endpoints}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: api, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [api.test]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: 443 }] }]
`
  const parsed = parseManifests('t.yaml', yaml)
  const { table } = compile(buildSnapshot(parsed.docs, parsed.problems), { now: 0, version: 1, gatewayClass: 'sallyport' })
  return [...table.clusters.values()].find(c => c.id.startsWith('Backend/default/api'))?.hostname
}

t.test('one name across every fqdn endpoint is the Backend\'s hostname; several names are none', async t => {
  t.equal(clusterHostname('[{fqdn: {hostname: a.example.com, port: 443}}]'), 'a.example.com', 'one endpoint')
  t.equal(clusterHostname('[{fqdn: {hostname: a.example.com, port: 443}}, {fqdn: {hostname: a.example.com, port: 8443}}]'), 'a.example.com', 'one name on two ports')
  t.equal(clusterHostname('[{fqdn: {hostname: a.example.com, port: 443}}, {fqdn: {hostname: b.example.com, port: 443}}]'), null, 'two names')
  t.equal(clusterHostname('[{fqdn: {hostname: a.example.com, port: 443}}, {ip: {address: 192.0.2.1, port: 443}}]'), null, 'a name and an address')
})
