// The real CLI with rate-limit matches that cannot work (the prober's bug 1):
// a RegularExpression that does not compile and a sourceCIDR that does not
// parse, in a Backend's RateLimit extension and in a BackendTrafficPolicy's
// clientSelectors. `validate` names each field; `serve` drops the two objects
// (their problems in /config_dump) and the valid rest keeps serving.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, routeYaml, runCli, startCli, tempDir } from './harness.ts'
import { get, recorder } from './extensions-helpers.ts'

function manifests(port: number): string {
  return [`apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: a, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${port} } }]
  extensions:
    - name: per-tenant
      type: RateLimit
      config:
        rules:
          - requests: 5
            unit: Second
            match:
              headers: [{ name: x-tenant, type: RegularExpression, value: "team-(a|b" }]
              sourceCIDR: "300.1.1.1/40"
`, routeYaml('a', 'a.test', 'a', port), backendYaml('b', port), routeYaml('b', 'b.test', 'b', port), `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: per-plan, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: b }]
  rateLimit:
    type: Local
    local:
      rules:
        - clientSelectors: [{ headers: [{ name: x-plan, type: RegularExpression, value: "free-(a|b" }] }]
          limit: { requests: 2, unit: Minute }
`].join('---\n')
}

t.test('CLI: invalid rate-limit regular expressions and CIDRs are validate errors naming the field; the rest serves', async (t) => {
  const up = await recorder(t)
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'all.yaml'), manifests(up.port))

  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 1)
  const file = path.join(dir, 'all.yaml')
  t.match(v.stdout, `${file}:0: Backend default/a: spec.extensions[0].config.rules[0].match.headers[0].value: not a valid regular expression "team-(a|b"`)
  t.match(v.stdout, `${file}:0: Backend default/a: spec.extensions[0].config.rules[0].match.sourceCIDR: must be a CIDR`)
  t.match(v.stdout, `${file}:4: BackendTrafficPolicy default/per-plan: spec.rateLimit.local.rules[0].clientSelectors[0].headers[0].value: not a valid regular expression "free-(a|b"`)

  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  // Problems show in /config_dump once the table settles (runtime.ts SETTLE_MS).
  const dump = await eventually(async () => JSON.parse((await get(`http://127.0.0.1:${adminPort}/config_dump`, 'x')).body) as { problems: Array<{ name: string; field: string }> },
    (d) => d.problems.length > 0, 10000, 'problems in /config_dump')
  t.same(dump.problems.map(p => `${p.name} ${p.field}`).sort(), [
    'a spec.extensions[0].config.rules[0].match.headers[0].value',
    'a spec.extensions[0].config.rules[0].match.sourceCIDR',
    'per-plan spec.rateLimit.local.rules[0].clientSelectors[0].headers[0].value',
  ])
  // The policy is dropped, not its route: b serves, without a limit that would answer 500 or never match.
  for (let i = 0; i < 4; i++) t.equal((await get(`http://127.0.0.1:${httpPort}/`, 'b.test', { 'x-plan': 'free-a' })).status, 200)
})

t.test('CLI validate: a fractional RateLimit requests (every request would get 429 forever) is an error naming the field', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(await freePort()))
  fs.writeFileSync(path.join(dir, 'half.yaml'), `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: half, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: 41001 } }]
  extensions:
    - name: slow
      type: RateLimit
      config: { requests: 0.5, unit: Second }
`)
  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 1)
  t.match(v.stdout, `${path.join(dir, 'half.yaml')}:0: Backend default/half: spec.extensions[0].config.requests: must be a whole number of requests, at least 1, got 0.5`)
})
