// The real CLI with extension Secret references that cannot be used (the
// prober's bug 2) and one granted by the Backend's own group/kind (bug 3):
// `validate` names file, object and field; `serve` says so in /config_dump
// problems and in the Backend's status (ResolvedRefs=False) while the requests
// through the broken ones keep failing with 500, never sent without the
// credential; the valid rest works.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, runCli, startCli, tempDir } from './harness.ts'
import { get, recorder, route } from './extensions-helpers.ts'

function backend(name: string, port: number, secretRef: string): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${port} } }]
  extensions:
    - name: inject
      type: CredentialInjector
      config: { secretRef: ${secretRef} }
`
}

function manifests(port: number): string {
  return [
    backend('missing', port, '{ name: no-such-secret }'),
    backend('wrongkey', port, '{ name: key-a, key: apikey }'),
    backend('xns', port, '{ name: shared-key, namespace: secrets }'),
    `apiVersion: v1
kind: Secret
metadata: { name: key-a, namespace: default }
stringData: { token: SECRET-A-123 }
`,
    `apiVersion: v1
kind: Secret
metadata: { name: shared-key, namespace: secrets }
stringData: { token: XNS-SECRET }
`,
    `apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: envoy-backends, namespace: secrets }
spec:
  from: [{ group: gateway.envoyproxy.io, kind: Backend, namespace: default }]
  to: [{ group: "", kind: Secret }]
`,
    route('missing', 'missing.test', 'missing', port),
    route('wrongkey', 'wrongkey.test', 'wrongkey', port),
    route('xns', 'xns.test', 'xns', port),
  ].join('---\n')
}

interface Dump {
  problems: Array<{ kind: string; namespace: string; name: string; field: string; line: string }>
  status: Array<{ kind: string; apiVersion: string; name: string; conditions: Array<{ type: string; status: string; reason: string; message: string }> }>
}

t.test('CLI: unusable extension Secret references are reported by validate, /config_dump and status; requests fail closed', async (t) => {
  const up = await recorder(t)
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), manifests(up.port))

  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 1, 'validate fails')
  const file = path.join(dir, 'backends.yaml')
  t.match(v.stdout, `${file}:0: Backend default/missing: spec.extensions[0].config.secretRef: Secret default/no-such-secret not found`)
  t.match(v.stdout, `${file}:1: Backend default/wrongkey: spec.extensions[0].config.secretRef: Secret default/key-a has no key apikey`)
  t.notMatch(v.stdout, /xns/, 'the Secret granted to gateway.envoyproxy.io Backends is fine')

  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  t.equal((await get(`http://127.0.0.1:${httpPort}/`, 'missing.test')).status, 500, 'missing Secret: 500')
  t.equal((await get(`http://127.0.0.1:${httpPort}/`, 'wrongkey.test')).status, 500, 'missing key: 500')
  t.equal(up.seen.length, 0, 'nothing sent without its credential')
  const ok = await get(`http://127.0.0.1:${httpPort}/`, 'xns.test')
  t.equal(ok.status, 200, 'the valid rest works')
  t.equal(up.seen[0]?.headers.authorization, 'Bearer XNS-SECRET', 'cross-namespace Secret under a grant from gateway.envoyproxy.io Backend')

  const dump = await eventually(async () => JSON.parse((await get(`http://127.0.0.1:${adminPort}/config_dump`, 'x')).body) as Dump,
    (d) => d.status.length > 0, 10000, 'status in /config_dump')
  t.same(dump.problems.map(p => `${p.kind} ${p.namespace}/${p.name} ${p.field}`).sort(), [
    'Backend default/missing spec.extensions[0].config.secretRef',
    'Backend default/wrongkey spec.extensions[0].config.secretRef',
  ])
  const resolved = (name: string) => dump.status.find(s => s.kind === 'Backend' && s.name === name)?.conditions.find(c => c.type === 'ResolvedRefs')
  t.match(resolved('missing'), { status: 'False', reason: 'InvalidSecretRef', message: /no-such-secret not found/ })
  t.match(resolved('wrongkey'), { status: 'False', reason: 'InvalidSecretRef', message: /has no key apikey/ })
  t.equal(resolved('xns'), undefined)
})
