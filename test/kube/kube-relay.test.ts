// The primary's side of `serve --kubernetes --workers N` (lib/runtime/kube-relay.ts):
// a subscriber gets the whole store in bounded batches, `synced` only on the
// last batch of a send (a worker never compiles half a store), then every
// change, removals included; a fed KubeSource ends up with the primary's store.
import './quiet.ts'
import t from 'tap'
import type { Worker } from 'node:cluster'
import { KubeSource, type KubeFeed, type KubeObject, type KubeStoreListener } from '../../lib/config/kube-source.ts'
import { KUBE_CHANGES, KubeRelay, type KubeChangesMessage } from '../../lib/runtime/kube-relay.ts'
import { KUBE_RESOURCES, type KubeResource } from '../../lib/config/kube-resources.ts'
import { gateway, kubeconfigFile, startFake, until } from './fixtures.ts'

/** A stand-in for a cluster Worker: what the relay sends it, in order. */
function fakeWorker(id: number): { worker: Worker; messages: KubeChangesMessage[] } {
  const messages: KubeChangesMessage[] = []
  // JSON round trip: what node's IPC channel does to a message.
  const worker = { id, send: (m: unknown) => { messages.push(JSON.parse(JSON.stringify(m)) as KubeChangesMessage); return true } } as unknown as Worker
  return { worker, messages }
}

function configMap(i: number): Record<string, unknown> {
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `cm-${i}`, namespace: 'default' }, data: { v: 'x'.repeat(100) } }
}

t.test('the store in batches, synced on the last one only, then changes and removals', async (t) => {
  const fake = await startFake(t)
  const N = 1203
  for (let i = 0; i < N; i++) fake.apply(configMap(i))
  const relay = new KubeRelay({ kubeconfig: kubeconfigFile(t, fake), namespaces: [], labelSelector: null })
  t.teardown(() => relay.close())
  const early = fakeWorker(1)
  relay.subscribe(early.worker) // before any list: an empty store, not synced
  t.same(early.messages, [{ type: KUBE_CHANGES, changes: [], synced: false }])
  relay.start()
  await until('early subscriber synced', () => early.messages.some((m) => m.synced), 20_000)
  const names = (ms: readonly KubeChangesMessage[]): Set<string> => new Set(ms.flatMap((m) => m.changes.filter((c) => c.op === 'put' && c.resource === '|ConfigMap').map((c) => String((c.raw.metadata as { name: string }).name))))
  t.equal(names(early.messages).size, N, 'every object before the sync')
  const firstSynced = early.messages.findIndex((m) => m.synced)
  t.ok(early.messages.slice(firstSynced + 1).every((m) => m.changes.length === 0 || m.synced), 'nothing of the first sync after its synced batch')

  const late = fakeWorker(2)
  relay.subscribe(late.worker)
  t.ok(late.messages.length >= 3, `${N} objects in ${late.messages.length} messages`)
  t.ok(late.messages.every((m) => m.changes.length <= 500), 'at most 500 objects a message')
  t.same(late.messages.map((m) => m.synced), late.messages.map((_, i) => i === late.messages.length - 1), 'synced on the last batch only')
  t.equal(names(late.messages).size, N, 'the whole store')

  // Changes go to both, removals with the object's name.
  const before = late.messages.length
  fake.remove('v1', 'ConfigMap', 'default', 'cm-7')
  fake.apply({ ...configMap(N), metadata: { name: 'new', namespace: 'default' } })
  await until('both changes relayed', () => late.messages.slice(before).flatMap((m) => m.changes).length >= 2)
  const changes = late.messages.slice(before).flatMap((m) => m.changes)
  t.match(changes, [{ op: 'remove', resource: '|ConfigMap', raw: { metadata: { name: 'cm-7', namespace: 'default' } } }, { op: 'put', raw: { metadata: { name: 'new' } } }])
  t.same(early.messages.slice(-changes.length).flatMap((m) => m.changes), changes, 'the early subscriber got the same')
})

t.test('a fed KubeSource serves the store it is fed, and hears status-only changes', async (t) => {
  const fake = await startFake(t)
  fake.apply(configMap(1))
  fake.apply(configMap(2))
  fake.apply(gateway(8080))
  const relay = new KubeRelay({ kubeconfig: kubeconfigFile(t, fake), namespaces: [], labelSelector: null })
  t.teardown(() => relay.close())
  relay.start()
  // A worker's feed (primaryFeed) minus the process channel: the relay's messages, applied in order on a later turn.
  let listener: KubeStoreListener | null = null
  const feed: KubeFeed = { subscribe: (l) => { listener = l }, close: () => { listener = null } }
  const source = new KubeSource({ feed, debounceMs: 10 })
  t.teardown(() => source.close())
  const statusChanges: string[] = []
  source.onStatusChange((obj) => statusChanges.push(`${obj.resource.kind}/${String(obj.raw.metadata?.name)}`))
  const resources = new Map(KUBE_RESOURCES.map((r) => [`${r.group}|${r.kind}`, r]))
  const worker = { id: 3, send: (m: KubeChangesMessage) => {
    const copy = JSON.parse(JSON.stringify(m)) as KubeChangesMessage
    setImmediate(() => {
      const l = listener as KubeStoreListener | null
      if (l === null) return
      for (const c of copy.changes) {
        const obj = { resource: resources.get(c.resource) as KubeResource, version: c.version, raw: c.raw as KubeObject['raw'] }
        if (c.op === 'put') l.put(obj)
        else l.remove(obj)
      }
      if (copy.synced) l.synced()
    })
    return true
  } } as unknown as Worker
  const started = source.start(() => {})
  relay.subscribe(worker)
  await started
  t.ok(source.synced())
  const configMaps = (): string[] => [...source.snapshot().configMaps.keys()].sort()
  t.same(configMaps(), ['default/cm-1', 'default/cm-2'])
  fake.remove('v1', 'ConfigMap', 'default', 'cm-1')
  await until('the removal fed', () => configMaps().length === 1)
  t.same(configMaps(), ['default/cm-2'])
  t.not(source.lookup('ConfigMap', '', 'default', 'cm-2'), null, 'lookup() works on the fed store')
  // Someone else writes the Gateway's status: the status writer hears of it, as with informers of its own.
  fake.apply({ ...gateway(8080), status: { conditions: [{ type: 'Accepted', status: 'False', reason: 'Other', message: 'not ours', lastTransitionTime: '2024-01-01T00:00:00Z', observedGeneration: 1 }] } })
  await until('the status change heard', () => statusChanges.length > 0)
  t.same(statusChanges, ['Gateway/egress'])
})
