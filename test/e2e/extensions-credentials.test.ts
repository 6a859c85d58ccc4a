// The real CLI with a CredentialInjector on a Backend: the credential comes
// from a Secret, replaces the client's own header, is never in the dump or the
// logs, and a Secret edited under the running process is used by the next
// requests (rotation without restart).
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { eventually, freePort, gatewayYaml, settleLogs, startCli, tempDir } from './harness.ts'
import { egressBackend, get, route } from './extensions-helpers.ts'

interface Echo { headers: Record<string, string>; path: string }

function secret(value: string): string {
  return `apiVersion: v1
kind: Secret
metadata:
  name: openai-api-key
  namespace: platform-secrets
type: Opaque
stringData:
  token: ${value}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata:
  name: backends-read-keys
  namespace: platform-secrets
spec:
  from:
    - group: gateway.networking.k8s.io
      kind: Backend
      namespace: default
    - group: gateway.envoyproxy.io
      kind: Backend
      namespace: default
  to:
    - group: ""
      kind: Secret
`
}

t.test('CLI: credential injection from a Secret, replaced client value, redacted dump, rotation', async (t) => {
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'ai' })
  t.teardown(() => upstream.close())
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const up = upstream.address.port
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'secret.yaml'), secret('sk-first-1234'))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), egressBackend('ai', up, `  - name: inject-credentials
    type: gateway.networking.k8s.io/CredentialInjector:v1
    phase: request-headers
    priority: 10
    failOpen: false
    config:
      secretRef:
        name: openai-api-key
        namespace: platform-secrets
  - name: api-key-header
    type: CredentialInjector
    config:
      header: x-api-key
      secretRef: { name: openai-api-key, namespace: platform-secrets, key: token }
`))
  fs.writeFileSync(path.join(dir, 'route.yaml'), route('ai', 'ai.example.test', 'ai', up))

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'on', '--log-level', 'debug'])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const r = await get(`http://127.0.0.1:${httpPort}/v1/chat`, 'ai.example.test', { authorization: 'Bearer client-own', 'x-api-key': 'client-key' })
  t.equal(r.status, 200)
  const echo = JSON.parse(r.body) as Echo
  t.equal(echo.headers.authorization, 'Bearer sk-first-1234', 'Authorization: Bearer {value} from the Secret, replacing the client value')
  // Two injectors of one type on one Backend: one credential applies per request; the other is Conflicted in status.
  const dump = await get(`http://127.0.0.1:${adminPort}/config_dump`, 'x')
  t.notMatch(dump.body, /sk-first-1234/, 'the credential is not in /config_dump')
  t.match(dump.body, /\[redacted\]/, 'secret data shows as [redacted]')

  // Rotation: edit the Secret file under the running process.
  fs.writeFileSync(path.join(dir, 'secret.yaml'), secret('sk-second-5678'))
  const rotated = await eventually(async () => JSON.parse((await get(`http://127.0.0.1:${httpPort}/v1/chat`, 'ai.example.test')).body) as Echo,
    (e) => e.headers.authorization === 'Bearer sk-second-5678', 15000, 'rotated credential')
  t.equal(rotated.headers.authorization, 'Bearer sk-second-5678', 'the next requests carry the new credential, no restart')

  // Without the ReferenceGrant the cross-namespace Secret is refused: failOpen false → 500.
  fs.writeFileSync(path.join(dir, 'secret.yaml'), secret('sk-third').split('---')[0] as string)
  const refused = await eventually(() => get(`http://127.0.0.1:${httpPort}/v1/chat`, 'ai.example.test'), (x) => x.status === 500, 15000, '500 without grant')
  t.match(refused.body, /SP_ERR_EXTENSION_FAILED/, '500 SP_ERR_EXTENSION_FAILED')

  await cli.waitFor(/"reason":"ExtensionFailed"/, 10000)
  t.pass('the failure emitted an Event (a log line in file mode)')
  await settleLogs()
  const logs = cli.stdout() + cli.stderr()
  t.notMatch(logs, /sk-first-1234|sk-second-5678|sk-third/, 'the credential never appears in logs')
})
