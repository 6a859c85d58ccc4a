// The real CLI in Kubernetes mode when RBAC does not let it read
// BackendTLSPolicies: counted as none, the Services and Backends they cover
// would be reached in plaintext (credentials injected for them too), so the
// gateway serves nothing until it can read them; other kinds refused (Secrets
// here) are counted as empty, as before.
import './quiet.ts'
import t from 'tap'
import { eventually, request } from '../e2e/harness.ts'
import { startKubeCli } from './cli-fixture.ts'

t.test('CLI: a forbidden BackendTLSPolicy keeps the gateway unready and serving nothing until RBAC lets it read them', async (t) => {
  const { cli, fake, port, admin } = await startKubeCli(t, {
    waitReady: false,
    before: (fake) => { fake.forbid('backendtlspolicies'); fake.forbid('secrets') },
  })
  const line = JSON.parse(await cli.waitFor(/\{[^\n]*"resource":"backendtlspolicies"[^\n]*forbidden to list\/watch resource[^\n]*\}/, 20_000)) as { msg: string }
  t.match(line.msg, /deploy\/kubernetes\/rbac\.yaml\)\. Nothing is served until it can be read/, 'the line says what is held and why')
  t.equal((await request(`${admin}/readyz`)).status, 503, '/readyz 503')
  const refused = await request(`http://127.0.0.1:${port}/`, { host: 'one.example.test', timeoutMs: 2000 }).then((r) => r.status, (err: Error) => err.message)
  t.not(refused, 200, `the listener serves nothing (${refused})`)
  fake.allow('backendtlspolicies')
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20_000, '/readyz 200 once they can be read')
  t.equal((await request(`http://127.0.0.1:${port}/`, { host: 'one.example.test' })).status, 200, 'routes served; Secrets, still forbidden, did not hold it')
})
