// Backend-scope extensions (lib/compile/extensions.ts): Secret references
// resolved in compile, under ReferenceGrant with the owning object's own
// group and kind.
import t from 'tap'
import { createHash } from 'node:crypto'
import { compile, type CompileOptions } from '../../lib/compile/compile.ts'
import type { CompiledExtension, RouteTable } from '../../lib/compile/table.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { parseManifests } from '../../lib/config/parse.ts'
import * as b from './builders.ts'

const GATEWAY = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: gw, namespace: default }
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: 8080 }]
`

const INJECT = `  extensions:
    - name: inject
      type: CredentialInjector
      config: { secretRef: { name: shared-key, namespace: secrets } }`

/** An Envoy Backend, an XBackend and a GEP-4488 Backend, each injecting the Secret secrets/shared-key, each with a route. */
const BACKENDS = `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: eg, namespace: default }
spec:
  endpoints: [{ ip: { address: 192.0.2.1, port: 80 } }]
${INJECT}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: { name: xb, namespace: default }
spec:
  type: ExternalHostname
  externalHostname: { hostname: xb.example.com }
  port: { port: 80 }
  protocol: HTTP
${INJECT}
---
apiVersion: gateway.networking.k8s.io/v1alpha1
kind: Backend
metadata: { name: gep, namespace: default }
spec:
  type: ExternalHostname
  externalHostname: { hostname: gep.example.com }
  port: { port: 80 }
  protocol: HTTP
${INJECT}
---
apiVersion: v1
kind: Secret
metadata: { name: shared-key, namespace: secrets }
stringData: { token: XNS-SECRET }
`

function routeTo(host: string, group: string, kind: string, name: string): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: default }
spec:
  parentRefs: [{ name: gw }]
  hostnames: [${host}]
  rules:
    - backendRefs: [{ group: ${group}, kind: ${kind}, name: ${name}, port: 80 }]
`
}

function grant(from: ReadonlyArray<{ group: string; kind: string }>): string {
  return `apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: backends-read-keys, namespace: secrets }
spec:
  from:
${from.map(f => `    - { group: ${f.group}, kind: ${f.kind}, namespace: default }`).join('\n')}
  to: [{ group: "", kind: Secret }]
`
}

function build(...docs: string[]): RouteTable {
  const parsed = parseManifests('set.yaml', [GATEWAY, BACKENDS, routeTo('eg.test', 'gateway.envoyproxy.io', 'Backend', 'eg'),
    routeTo('xb.test', 'gateway.networking.x-k8s.io', 'XBackend', 'xb'), routeTo('gep.test', 'gateway.networking.k8s.io', 'Backend', 'gep'), ...docs].join('---\n'))
  const snapshot = buildSnapshot(parsed.docs, parsed.problems)
  return compile(snapshot, b.opts).table
}

function injector(table: RouteTable, host: string): CompiledExtension | undefined {
  return table.ports.get(8080)?.http?.exact.get(host)?.prefixes.matches[0]?.rule.backends?.[0]?.extensions?.extensions[0]
}

t.test('a Secret in another namespace: the ReferenceGrant must name the Backend\'s own group and kind', async t => {
  const own = build(grant([
    { group: 'gateway.envoyproxy.io', kind: 'Backend' },
    { group: 'gateway.networking.x-k8s.io', kind: 'XBackend' },
    { group: 'gateway.networking.k8s.io', kind: 'Backend' },
  ]))
  for (const host of ['eg.test', 'xb.test', 'gep.test']) {
    t.equal(injector(own, host)?.error, null, `${host}: granted by its own group/kind`)
    t.same(injector(own, host)?.secrets, { secretRef: { token: 'XNS-SECRET' } })
  }

  const envoyOnly = build(grant([{ group: 'gateway.envoyproxy.io', kind: 'Backend' }]))
  t.equal(injector(envoyOnly, 'eg.test')?.error, null, 'the Envoy Gateway Backend grant is the one that counts')
  t.match(injector(envoyOnly, 'gep.test')?.error, /no ReferenceGrant allows it/)
  const xOnly = build(grant([{ group: 'gateway.networking.x-k8s.io', kind: 'XBackend' }]))
  t.equal(injector(xOnly, 'xb.test')?.error, null, 'an XBackend is granted as XBackend')
  t.match(injector(xOnly, 'eg.test')?.error, /no ReferenceGrant allows it/)

  // A grant for gateway.networking.k8s.io Backends covers exactly those.
  const k8sOnly = build(grant([{ group: 'gateway.networking.k8s.io', kind: 'Backend' }]))
  t.equal(injector(k8sOnly, 'gep.test')?.error, null)
  t.match(injector(k8sOnly, 'eg.test')?.error, /Secret secrets\/shared-key is in another namespace and no ReferenceGrant allows it/, 'not an Envoy Gateway Backend')
  t.match(injector(k8sOnly, 'xb.test')?.error, /no ReferenceGrant allows it/, 'not an XBackend')
  t.same(injector(k8sOnly, 'eg.test')?.secrets, {}, 'nothing of the Secret is read')
})

const UNRESOLVED = `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: missing, namespace: default }
spec:
  endpoints: [{ ip: { address: 192.0.2.1, port: 80 } }]
  extensions:
    - name: inject
      type: CredentialInjector
      config: { secretRef: { name: no-such-secret } }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: wrongkey, namespace: default }
spec:
  endpoints: [{ ip: { address: 192.0.2.1, port: 80 } }]
  extensions:
    - name: audit
      type: Audit
    - name: inject
      type: CredentialInjector
      config: { secretRef: { name: key-a, key: apikey } }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: fine, namespace: default }
spec:
  endpoints: [{ ip: { address: 192.0.2.1, port: 80 } }]
  extensions:
    - name: inject
      type: CredentialInjector
      config: { secretRef: { name: key-a } }
---
apiVersion: v1
kind: Secret
metadata: { name: key-a, namespace: default }
stringData: { token: SECRET-A-123 }
`

t.test('an extension\'s missing Secret or Secret key is a problem naming file, object and field, and ResolvedRefs=False on its owner', async t => {
  const parsed = parseManifests('set.yaml', [GATEWAY, UNRESOLVED, routeTo('m.test', 'gateway.envoyproxy.io', 'Backend', 'missing'),
    routeTo('w.test', 'gateway.envoyproxy.io', 'Backend', 'wrongkey'), routeTo('f.test', 'gateway.envoyproxy.io', 'Backend', 'fine')].join('---\n'))
  const snapshot = buildSnapshot(parsed.docs, parsed.problems)
  t.same(snapshot.problems, [])
  const { table, status, problems } = compile(snapshot, b.opts)
  t.same(problems.map(p => [p.source.file, p.source.doc, p.kind, p.namespace, p.name, p.field, p.severity]), [
    ['set.yaml', 1, 'Backend', 'default', 'missing', 'spec.extensions[0].config.secretRef', 'error'],
    ['set.yaml', 2, 'Backend', 'default', 'wrongkey', 'spec.extensions[1].config.secretRef', 'error'],
  ])
  t.match(problems[0]?.message, /Secret default\/no-such-secret not found/)
  t.match(problems[1]?.message, /Secret default\/key-a has no key apikey/)

  const cond = (name: string) => status.objects.get(`Backend/default/${name}`)?.conditions.find(c => c.type === 'ResolvedRefs')
  t.match(cond('missing'), { status: 'False', reason: 'InvalidSecretRef', message: /spec\.extensions\[0\]\.config\.secretRef: Secret default\/no-such-secret not found/ })
  t.match(cond('wrongkey'), { status: 'False', reason: 'InvalidSecretRef', message: /has no key apikey/ })
  t.equal(cond('fine'), undefined, 'a Backend whose references resolve gets no such condition')

  // Requests keep failing (never sent without the credential): the compiled extension carries the error.
  t.match(injector(table, 'm.test')?.error, /not found/)
  const w = table.ports.get(8080)?.http?.exact.get('w.test')?.prefixes.matches[0]?.rule.backends?.[0]?.extensions?.extensions.find(e => e.name === 'inject')
  t.match(w?.error, /has no key apikey/)
  t.equal(injector(table, 'f.test')?.error, null)
})

// The key is printed in /config_dump and logs next to the type, phase and config;
// a plain digest of those and the Secret values let anyone who reads the dump test
// guesses of a value offline (sha256 of each candidate, compared with the key).
t.test('an extension key changes with its Secret values, but is no digest of them anyone can recompute', async t => {
  const granted = grant([{ group: 'gateway.envoyproxy.io', kind: 'Backend' }])
  const withValue = (value: string, options: Partial<CompileOptions> = {}): CompiledExtension => {
    const parsed = parseManifests('set.yaml', [GATEWAY, BACKENDS.replace('XNS-SECRET', value), routeTo('eg.test', 'gateway.envoyproxy.io', 'Backend', 'eg'), granted].join('---\n'))
    const ext = injector(compile(buildSnapshot(parsed.docs, parsed.problems), { ...b.opts, ...options }).table, 'eg.test')
    if (ext === undefined) throw new Error('no extension')
    return ext
  }
  const a = withValue('hunter2')
  t.same(a.secrets, { secretRef: { token: 'hunter2' } })
  t.match(a.key, /^gateway\.envoyproxy\.io\/Backend default\/eg\/inject#[0-9a-f]{16}$/)
  t.equal(withValue('hunter2').key, a.key, 'the same inputs give the same key (extension state is kept across reloads by it)')
  t.not(withValue('hunter3').key, a.key, 'a new Secret value gives a new key (the instance is rebuilt with it)')
  const pinned = { extensionKeySecret: Buffer.alloc(32, 'pinned') }
  t.equal(withValue('hunter2', pinned).key, withValue('hunter2', pinned).key, 'a pinned extensionKeySecret gives the same key every run')
  t.not(withValue('hunter2', pinned).key, a.key, 'another process (another key) gives another key: a key means nothing outside its process')
  t.not(withValue('hunter3', pinned).key, withValue('hunter2', pinned).key)
  // What the key was: sha256 over what the dump shows and the value; a guess that matched it was confirmed.
  const hash = a.key.slice(a.key.indexOf('#') + 1)
  for (const [type, phase] of [['CredentialInjector', null], [a.type, null], [a.type, a.phases[0]]] as const) {
    t.not(createHash('sha256').update(JSON.stringify([type, phase, a.config, a.secrets])).digest('hex').slice(0, 16), hash, `not the sha256 of [${type}, ${phase}, config, secrets]`)
  }
})
