// F4: a change confined to Secrets, ConfigMaps, Services, EndpointSlices or
// ClusterTrustBundles that the serving configuration does not reference applies
// no new table; a change to a referenced one reloads as before, and so does
// creating an object a reference was missing (its problem clears).
import t from 'tap'
import { configureLogger } from '../../lib/observe/log.ts'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot, DocumentCache, type SourcedDoc } from '../../lib/config/snapshot-builder.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import type { SnapshotListener } from '../../lib/config/kube-combined-source.ts'
import { freePort } from '../e2e/harness.ts'

configureLogger({ level: 'silent' })
const { Runtime } = await import('../../lib/runtime/runtime.ts')

const b64 = (s: string): string => Buffer.from(s).toString('base64')

function objects(port: number): Record<string, string> {
  return {
    class: `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: sallyport}
spec: {controllerName: sallyport.io/gateway-controller}`,
    gw: `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: sallyport
  listeners: [{name: http, protocol: HTTP, port: ${port}}]`,
    ext: `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: {name: ext, namespace: default}
spec:
  endpoints: [{ip: {address: 192.0.2.1, port: 80}}]
  extensions: [{name: inject, type: CredentialInjector, config: {secretRef: {name: key-a}}}]`,
    later: `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: {name: later, namespace: default}
spec:
  endpoints: [{ip: {address: 192.0.2.2, port: 80}}]
  extensions: [{name: inject, type: CredentialInjector, config: {secretRef: {name: key-later}}}]`,
    r1: route('r1', '{group: gateway.envoyproxy.io, kind: Backend, name: ext, port: 80}'),
    r2: route('r2', '{name: svc, port: 80}'),
    r3: route('r3', '{group: gateway.envoyproxy.io, kind: Backend, name: later, port: 80}'),
    svc: service('default', 'svc'),
    svcSlice: slice('default', 'svc', '10.0.0.1'),
    keyA: secret('default', 'key-a', 'a1'),
    unrelated: secret('kube-system', 'sh.helm.release.v1.x.v1', 'x1'),
    otherSvc: service('kube-system', 'other'),
    otherSlice: slice('kube-system', 'other', '10.1.0.1'),
    cm: `apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated, namespace: kube-system}
data: {x: "1"}`,
  }
}

function route(name: string, ref: string): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ${name}, namespace: default}
spec:
  parentRefs: [{name: gw}]
  hostnames: [${name}.example.test]
  rules: [{backendRefs: [${ref}]}]`
}

function service(ns: string, name: string): string {
  return `apiVersion: v1
kind: Service
metadata: {name: ${name}, namespace: ${ns}}
spec: {ports: [{name: http, port: 80}]}`
}

function slice(ns: string, service: string, ip: string): string {
  return `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ${service}-abc, namespace: ${ns}, labels: {kubernetes.io/service-name: ${service}}}
addressType: IPv4
endpoints: [{addresses: [${ip}], conditions: {ready: true}}]
ports: [{name: http, port: 8080}]`
}

function secret(ns: string, name: string, value: string): string {
  return `apiVersion: v1
kind: Secret
metadata: {name: ${name}, namespace: ${ns}}
type: Opaque
data: {token: ${b64(value)}}`
}

/** A source the test pushes snapshots through, as kube-source does (unchanged objects keep their model object). */
class PushSource {
  #on: SnapshotListener | null = null
  readonly #documents = new DocumentCache()
  texts: Record<string, string>
  constructor(texts: Record<string, string>) { this.texts = texts }
  snapshot(): Snapshot {
    const docs: SourcedDoc[] = []
    for (const [slot, text] of Object.entries(this.texts)) {
      const parsed = parseManifests(`${slot}.yaml`, text)
      if (parsed.problems.length > 0) throw new Error(`${slot}: ${JSON.stringify(parsed.problems)}`)
      docs.push(...parsed.docs)
    }
    return buildSnapshot(docs, [], this.#documents)
  }
  async start(on: SnapshotListener): Promise<void> {
    this.#on = on
    await on(this.snapshot())
  }
  async set(slot: string, text: string | null): Promise<void> {
    if (text === null) delete this.texts[slot]
    else this.texts[slot] = text
    await this.#on?.(this.snapshot())
  }
  reload(): Promise<void> { return Promise.resolve() }
  close(): void {}
}

t.test('only changes to referenced Secrets, Services and EndpointSlices reload', async (t) => {
  const port = await freePort()
  const source = new PushSource(objects(port))
  const applied: number[] = []
  const runtime = new Runtime({
    configPaths: [], gatewayClass: 'sallyport', bind: '127.0.0.1', accessLog: false, source,
    onApplied: ({ table }) => { applied.push(table.version) },
  })
  t.teardown(() => runtime.stop(0))
  await runtime.start()
  const version = (): number => runtime.table()?.version ?? 0
  const problems = (): string[] => (runtime.configDump() as { problems: Array<{ line: string }> }).problems.map((p) => p.line)
  t.equal(version(), 1)
  t.ok(problems().some((l) => l.includes('Secret default/key-later not found')), 'the missing Secret is a problem')

  await source.set('unrelated', secret('kube-system', 'sh.helm.release.v1.x.v1', 'x2'))
  t.equal(version(), 1, 'an unreferenced Secret changed: no new table')
  await source.set('otherSlice', slice('kube-system', 'other', '10.1.0.2'))
  t.equal(version(), 1, 'an EndpointSlice of an unreferenced Service changed: no new table')
  await source.set('otherSvc', null)
  await source.set('otherSlice', null)
  await source.set('cm', null)
  await source.set('another', secret('kube-system', 'new-one', 'n'))
  t.equal(version(), 1, 'unreferenced objects removed and added: no new table')
  t.same(applied, [1], 'no status published for them')

  await source.set('keyA', secret('default', 'key-a', 'a2'))
  t.equal(version(), 2, 'the referenced Secret changed: reloaded')
  const injected = (): unknown => runtime.table()?.extensionChains?.flatMap((c) => c.extensions.map((e) => e.secrets))
  t.match(JSON.stringify(injected()), /a2/, 'with its new content')

  await source.set('svcSlice', slice('default', 'svc', '10.0.0.2'))
  t.equal(version(), 3, 'an EndpointSlice of a referenced Service changed: reloaded')
  const endpoints = [...(runtime.table()?.clusters.values() ?? [])].flatMap((c) => c.endpoints.map((e) => e.host))
  t.ok(endpoints.includes('10.0.0.2'), 'with its new endpoints')

  await source.set('keyLater', secret('default', 'key-later', 'l1'))
  t.equal(version(), 4, 'the Secret a reference was missing was created: reloaded')
  t.notOk(problems().some((l) => l.includes('key-later')), 'its problem cleared')

  // An object that becomes referenced later is read as it is then.
  await source.set('lateSvc', service('default', 'late'))
  await source.set('lateSlice', slice('default', 'late', '10.2.0.1'))
  await source.set('lateSlice', slice('default', 'late', '10.2.0.9'))
  t.equal(version(), 4, 'a Service and slice no route references yet: no new table')
  await source.set('r4', route('r4', '{name: late, port: 80}'))
  t.equal(version(), 5, 'a route edit reloads')
  const all = [...(runtime.table()?.clusters.values() ?? [])].flatMap((c) => c.endpoints.map((e) => e.host))
  t.ok(all.includes('10.2.0.9'), 'and sees the slice as it is now')
  await source.set('lateSlice', slice('default', 'late', '10.2.0.10'))
  t.equal(version(), 6, 'now referenced: its change reloads')

  // A route-only edit reuses the plan and the other routes: what they read counts still.
  await source.set('r2', route('r2', '{name: svc, port: 80}').replace('r2.example.test', 'r2b.example.test'))
  t.equal(version(), 7, 'a route edit reloads')
  await source.set('keyA', secret('default', 'key-a', 'a3'))
  t.equal(version(), 8, 'the Secret of another route still counts')
  await source.set('unrelated', secret('kube-system', 'sh.helm.release.v1.x.v1', 'x3'))
  t.equal(version(), 8, 'an unreferenced one still does not')
  await source.set('svcSlice', slice('default', 'svc', '10.0.0.3'))
  t.equal(version(), 9, 'a referenced slice still reloads after skipped loads')
})
