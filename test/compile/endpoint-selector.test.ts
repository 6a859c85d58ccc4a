// A Backend of type EndpointSelector with a label selector does what a Service
// does (GEP-4488): its endpoints are the selected Pods that are ready and not
// being deleted, in the Backend's namespace.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { parseManifests } from '../../lib/config/parse.ts'
import * as b from './builders.ts'

function pod(name: string, ip: string, extra: { ready?: string; deleting?: boolean; ns?: string } = {}): string {
  const conditions = extra.ready === undefined ? '' : `, conditions: [{type: PodScheduled, status: "True"}, {type: Ready, status: "${extra.ready}"}]`
  return `apiVersion: v1
kind: Pod
metadata: {name: ${name}, namespace: ${extra.ns ?? 'default'}, labels: {app: search}${extra.deleting === true ? ', deletionTimestamp: "2026-11-27T00:00:00Z"' : ''}}
spec: {containers: [{name: c, image: x}]}
status: {phase: Running, podIP: ${ip}${conditions}}
---
`
}

t.test('EndpointSelector: the selected Pods that are ready and not being deleted', async (t) => {
  const yaml = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: sallyport}
spec: {controllerName: sallyport.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default, annotations: {sallyport.io/allow-destination-cidrs: 10.0.0.0/8}}
spec: {gatewayClassName: sallyport, listeners: [{name: http, protocol: HTTP, port: 8080}]}
---
apiVersion: gateway.networking.k8s.io/v1alpha1
kind: Backend
metadata: {name: search, namespace: default}
spec:
  type: EndpointSelector
  endpointSelector: {selector: {matchLabels: {app: search}}}
  port: {name: http, port: 8080}
  protocol: HTTP11
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: search, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [search.test]
  rules: [{backendRefs: [{group: gateway.networking.k8s.io, kind: Backend, name: search, port: 8080}]}]
---
${pod('ready', '10.0.0.1', { ready: 'True' })}${pod('starting', '10.0.0.2', { ready: 'False' })}${pod('leaving', '10.0.0.3', { ready: 'True', deleting: true })}${pod('by-hand', '10.0.0.4')}${pod('elsewhere', '10.0.0.5', { ready: 'True', ns: 'other' })}`
  const snapshot = buildSnapshot(parseManifests('set.yaml', yaml).docs)
  t.same(snapshot.problems, [])
  const { table } = compile(snapshot, b.opts)
  const rule = table.ports.get(8080)?.http?.exact.get('search.test')?.prefixes.matches[0]?.rule
  const cluster = table.clusters.get(rule?.backends?.[0]?.cluster ?? '')
  t.same(cluster?.endpoints.map((e) => e.host).sort(), ['10.0.0.1', '10.0.0.4'], 'ready, and the one with no conditions (written by hand)')
  t.equal(table.clients.get('10.0.0.2')?.namespace, 'default', 'a Pod not yet ready still identifies its requests')
})
