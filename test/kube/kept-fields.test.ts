// What the Kubernetes source keeps of the kinds it watches cluster-wide: a
// ConfigMap's PEM values (the only ones sallyport reads) and its other keys
// without their values; a Secret whole but for kubectl's plain-text copy.
import './quiet.ts'
import t from 'tap'
import { KubeSource } from '../../lib/config/kube-source.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { clientFor, startFake, until } from './fixtures.ts'

const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n'

t.test('ConfigMaps keep their PEM; Secrets lose kubectl\'s last-applied copy', async (t) => {
  const fake = await startFake(t)
  fake.apply({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'dashboards', namespace: 'monitoring' }, data: { 'ca.crt': PEM, 'board.json': '{}'.repeat(100_000) } })
  const applied = { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'api-key', namespace: 'apps' }, type: 'Opaque', data: { token: Buffer.from('s3cret').toString('base64') } }
  fake.apply({ ...applied, metadata: { ...applied.metadata, annotations: { 'kubectl.kubernetes.io/last-applied-configuration': JSON.stringify(applied), owner: 'team-a' } } })
  const source = new KubeSource({ client: clientFor(fake), debounceMs: 10 })
  t.teardown(() => source.close())
  let last: Snapshot | null = null
  await source.start((s) => { last = s })
  const cm = (last as Snapshot | null)?.configMaps.get('monitoring/dashboards')
  t.equal(cm?.data['ca.crt'], PEM)
  t.equal(cm?.data['board.json'], '', 'a value that is no PEM: the key only')
  const secret = (last as Snapshot | null)?.secrets.get('apps/api-key')
  t.equal(secret?.data.token?.toString('utf8'), 's3cret')
  t.same(secret?.meta.annotations, { owner: 'team-a' })

  // A watch event is cut the same way.
  fake.apply({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'dashboards', namespace: 'monitoring' }, data: { 'ca.crt': PEM, 'board.json': '[]'.repeat(100_000), 'new.json': '{}' } })
  await until('the update', () => (last as Snapshot | null)?.configMaps.get('monitoring/dashboards')?.data['new.json'] !== undefined)
  t.same((last as Snapshot | null)?.configMaps.get('monitoring/dashboards')?.data, { 'ca.crt': PEM, 'board.json': '', 'new.json': '' })
})
