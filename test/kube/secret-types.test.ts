// Secrets are watched cluster-wide, but Helm's release Secrets (every revision
// of every release: the rendered chart, often hundreds of KiB) are left to the
// API server to filter out, in the list and in the watch alike.
import './quiet.ts'
import t from 'tap'
import { KubeSource } from '../../lib/config/kube-source.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { clientFor, startFake, until } from './fixtures.ts'

function secret(name: string, type: string, size = 16): Record<string, unknown> {
  return { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: 'apps' }, type, data: { release: Buffer.alloc(size, 1).toString('base64') } }
}

t.test("Helm's release Secrets are never listed or watched; other Secrets are", async (t) => {
  const fake = await startFake(t)
  fake.apply(secret('sh.helm.release.v1.shop.v1', 'helm.sh/release.v1', 512 * 1024))
  fake.apply(secret('api-key', 'Opaque'))
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10 })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  const names = (): string[] => [...((last as Snapshot | null)?.secrets.keys() ?? [])].sort()
  t.same(names(), ['apps/api-key'], 'listed without the release Secret')
  const secretRequests = fake.requests.filter((r) => r.path.endsWith('/secrets'))
  t.ok(secretRequests.length >= 1 && secretRequests.every((r) => new URLSearchParams(r.query).get('fieldSelector') === 'type!=helm.sh/release.v1'), 'every list and watch of Secrets asks the server to filter')

  fake.apply(secret('sh.helm.release.v1.shop.v2', 'helm.sh/release.v1', 512 * 1024))
  fake.apply(secret('token', 'Opaque'))
  await until('the new Secret arrives', () => names().includes('apps/token'))
  t.same(names(), ['apps/api-key', 'apps/token'], 'the watch filters too')
})

t.test('the fake API server answers a field it does not index with 400, as the real one does', async (t) => {
  const fake = await startFake(t)
  const r = await fetch(`${fake.url}/api/v1/pods?fieldSelector=spec.unknownField%3Dx`)
  t.equal(r.status, 400)
  const ok = await fetch(`${fake.url}/api/v1/secrets?fieldSelector=type%21%3Dhelm.sh%2Frelease.v1`)
  t.equal(ok.status, 200)
})
