// A change confined to Pods (a cluster's churn: created, bound, IP written,
// ready, gone) changes only the table's client identities: the new table is
// applied, and logged at debug, not as an info 'route table applied' line per
// batch of Pod events.
import '../helpers/capture-logs.ts'
import t from 'tap'
import { clearLogs, linesWith } from '../helpers/capture-logs.ts'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot, DocumentCache } from '../../lib/config/snapshot-builder.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import type { SnapshotListener } from '../../lib/config/kube-combined-source.ts'
import { Runtime } from '../../lib/runtime/runtime.ts'
import { freePort } from '../e2e/harness.ts'

function config(port: number, pods: readonly string[], host = 'api'): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: sallyport}
spec: {controllerName: sallyport.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec: {gatewayClassName: sallyport, listeners: [{name: http, protocol: HTTP, port: ${port}}]}
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: {name: ext, namespace: default}
spec: {endpoints: [{ip: {address: 192.0.2.1, port: 80}}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: default}
spec: {parentRefs: [{name: gw}], hostnames: [${host}.example.test], rules: [{backendRefs: [{group: gateway.envoyproxy.io, kind: Backend, name: ext, port: 80}]}]}
${pods.map((ip, i) => `---
apiVersion: v1
kind: Pod
metadata: {name: p${i}, namespace: team-a}
spec: {serviceAccountName: worker, containers: [{name: c, image: x}]}
status: {phase: Running, podIP: ${ip}}
`).join('')}`
}

class PushSource {
  #on: SnapshotListener | null = null
  readonly #documents = new DocumentCache()
  text: string
  constructor(text: string) { this.text = text }
  snapshot(): Snapshot { return buildSnapshot(parseManifests('all.yaml', this.text).docs, [], this.#documents) }
  async start(on: SnapshotListener): Promise<void> { this.#on = on; await on(this.snapshot()) }
  async set(text: string): Promise<void> { this.text = text; await this.#on?.(this.snapshot()) }
  reload(): Promise<void> { return Promise.resolve() }
  close(): void {}
}

t.test('Pods only: new identities served, logged at debug; anything else: info as before', async (t) => {
  const port = await freePort()
  const source = new PushSource(config(port, ['10.0.0.1']))
  const runtime = new Runtime({ configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, source })
  t.teardown(() => runtime.stop(0))
  await runtime.start()
  t.equal(linesWith('route table applied', 30).length, 1, 'the first table: info')
  clearLogs()
  await source.set(config(port, ['10.0.0.1', '10.0.0.2']))
  t.equal(runtime.table()?.clients.get('10.0.0.2')?.namespace, 'team-a', 'the new Pod identifies its requests')
  t.same(linesWith(/route table applied/, 30), [], 'no info line for a Pod change')
  t.equal(linesWith(/route table applied/, 20).length, 1, 'a debug line instead')
  await source.set(config(port, ['10.0.0.1', '10.0.0.2'], 'other'))
  t.equal(linesWith('route table applied', 30).length, 1, 'a route change: info')
})
