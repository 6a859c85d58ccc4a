// `--namespace NS`: objects of other namespaces are not watched, so a reference
// into one cannot resolve, whatever ReferenceGrant exists there. Status says
// that (ResolvedRefs=False, RefNotPermitted, "... which this gateway does not
// watch"), not "no ReferenceGrant allows it", which sent operators looking for
// a grant they had.
import './quiet.ts'
import t from 'tap'
import { KubeSource } from '../../lib/config/kube-source.ts'
import { compile } from '../../lib/compile/compile.ts'
import { resolveDataRef, resolveTlsSecret } from '../../lib/compile/refs.ts'
import { compileExtension } from '../../lib/compile/extensions.ts'
import { emptySnapshot } from '../../lib/resources/snapshot.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'
import { backend, clientFor, gateway, gatewayClass, startFake } from './fixtures.ts'
import type { Test } from 'tap'
import type { FakeApiServer } from '../helpers/fake-apiserver.ts'

async function resolvedRefs(t: Test, fake: FakeApiServer, namespaces: string[]): Promise<{ status: string; reason: string; message: string } | undefined> {
  const source = new KubeSource({ client: clientFor(fake), namespaces, debounceMs: 10 })
  t.teardown(() => source.close())
  let snapshot: Snapshot | null = null
  await source.start((s) => { snapshot = s })
  const result = compile(snapshot as unknown as Snapshot, { now: Date.now(), version: 1, gatewayClass: 'sallyport' })
  const r = result.status.objects.get('HTTPRoute/default/r')
  return r?.parents[0]?.conditions.find((c) => c.type === 'ResolvedRefs')
}

function setUp(fake: FakeApiServer, backendNamespace: string, grant: boolean): void {
  fake.apply(gatewayClass())
  fake.apply(gateway(8080))
  fake.apply(backend('a', 9000, backendNamespace))
  if (grant) {
    fake.apply({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'ReferenceGrant', metadata: { name: 'routes-from-default', namespace: backendNamespace },
      spec: { from: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', namespace: 'default' }], to: [{ group: 'gateway.envoyproxy.io', kind: 'Backend' }] } })
  }
  fake.apply({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'r', namespace: 'default' },
    spec: { parentRefs: [{ name: 'egress' }], hostnames: ['r.example.test'], rules: [{ backendRefs: [{ group: 'gateway.envoyproxy.io', kind: 'Backend', name: 'a', namespace: backendNamespace, port: 9000 }] }] } })
}

t.test('a backendRef into a namespace --namespace leaves out says so, though a ReferenceGrant exists there', async (t) => {
  const fake = await startFake(t)
  setUp(fake, 'other', true)
  const c = await resolvedRefs(t, fake, ['default'])
  t.match(c, { status: 'False', reason: 'RefNotPermitted' })
  t.equal(c?.message, 'Backend other/a is in namespace other, which this gateway does not watch (--namespace)')
})

t.test('the same references, every namespace watched: the grant allows it', async (t) => {
  const fake = await startFake(t)
  setUp(fake, 'other', true)
  t.match(await resolvedRefs(t, fake, []), { status: 'True' })
})

t.test('no grant in a watched namespace: the ReferenceGrant message, as before', async (t) => {
  const fake = await startFake(t)
  setUp(fake, 'other', false)
  const c = await resolvedRefs(t, fake, ['default', 'other'])
  t.match(c, { status: 'False', reason: 'RefNotPermitted', message: 'Backend other/a is in another namespace and no ReferenceGrant allows it' })
})

t.test('certificate and CA references say the same', async (t) => {
  const snapshot: Snapshot = { ...emptySnapshot(), watchedNamespaces: new Set(['default']) }
  const from = { group: 'gateway.networking.k8s.io', kind: 'Gateway', namespace: 'default' }
  t.match(resolveTlsSecret(snapshot, from, { group: '', kind: 'Secret', namespace: 'pki', name: 'cert' }, 'InvalidCertificateRef'),
    { ok: false, reason: 'RefNotPermitted', message: 'Secret pki/cert is in namespace pki, which this gateway does not watch (--namespace)' })
  t.match(resolveDataRef(snapshot, from, { group: '', kind: 'ConfigMap', namespace: 'pki', name: 'ca', key: null }, 'ca.crt', 'InvalidCACertificateRef'),
    { ok: false, reason: 'RefNotPermitted', message: 'ConfigMap pki/ca is in namespace pki, which this gateway does not watch (--namespace)' })
})

t.test('an extension\'s Secret reference says the same', async (t) => {
  const snapshot: Snapshot = { ...emptySnapshot(), watchedNamespaces: new Set(['default']) }
  const owner = { kind: 'Backend' as const, group: 'gateway.envoyproxy.io', namespace: 'default', name: 'api', createdAt: '', firstSeen: 0 }
  const spec = { name: 'cred', type: 'CredentialInjector', phase: null, priority: 0, failOpen: false, config: { secretRef: { name: 'key', namespace: 'vault' } } }
  const compiled = compileExtension(snapshot, 'Backend', owner, spec, new Uint8Array(32))
  t.equal(compiled.error, 'Secret vault/key is in namespace vault, which this gateway does not watch (--namespace)')
  const watchedAll = compileExtension({ ...snapshot, watchedNamespaces: null }, 'Backend', owner, spec, new Uint8Array(32))
  t.equal(watchedAll.error, 'Secret vault/key is in another namespace and no ReferenceGrant allows it', 'every namespace watched: the ReferenceGrant message')
})
