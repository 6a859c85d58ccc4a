// The real CLI with an XBackend and an Envoy Gateway Backend of one
// namespace/name (the prober's bug 4): both load, each backendRef reaches the
// object of its own group and kind, and a credential injected by one never
// reaches the other's destination. A ref to a group/kind with no such object
// is unresolved (500), never served by another kind's object.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, runCli, startCli, tempDir } from './harness.ts'
import { get, recorder } from './extensions-helpers.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'

function manifests(team1Port: number, partnerPort: number): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: api, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${team1Port} } }]
  extensions:
    - name: inject
      type: CredentialInjector
      config: { secretRef: { name: team1-key } }
---
apiVersion: v1
kind: Secret
metadata: { name: team1-key, namespace: default }
stringData: { token: TEAM1-SECRET }
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: { name: api, namespace: default }
spec:
  type: ExternalHostname
  externalHostname: { hostname: partner.example.test }
  port: { port: ${partnerPort} }
  protocol: HTTP
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: partner, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [partner.test]
  rules:
    - backendRefs: [{ group: gateway.networking.x-k8s.io, kind: XBackend, name: api, port: ${partnerPort} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: team1, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [team1.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: ${team1Port} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: nobody, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [nobody.test]
  rules:
    - backendRefs: [{ group: gateway.networking.k8s.io, kind: Backend, name: api, port: ${team1Port} }]
`
}

t.test('CLI: an XBackend and an Envoy Backend named alike are two objects; refs resolve by group and kind', { skip: dnsmasqSkip() ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.1 partner.example.test'] })
  const team1 = await recorder(t)
  const partner = await recorder(t)
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), manifests(team1.port, partner.port))

  const v = await runCli(t, ['validate', dir])
  // The one finding: the ref to a gateway.networking.k8s.io Backend, of which the files hold none by that name.
  t.equal(v.code, 1, 'validate: the ref to the missing Backend is an error')
  t.same(v.stdout.trim().split('\n').map((l) => l.replace(/^.*?:\d+: /, '')), [
    'HTTPRoute default/nobody: spec.rules[0].backendRefs[0]: Backend default/api (gateway.networking.k8s.io) not found (ResolvedRefs=False: BackendNotFound)',
  ])
  t.notMatch(v.stdout + v.stderr, /duplicate/)

  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--dns-server', dns.server])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const p = await get(`http://127.0.0.1:${httpPort}/p`, 'partner.test')
  t.equal(p.status, 200, 'the XBackend route is served: ' + p.body)
  t.equal(partner.seen.length, 1, 'by the XBackend\'s destination')
  t.equal(partner.seen[0]?.headers.authorization, undefined, 'without the Envoy Backend\'s credential')

  const e = await get(`http://127.0.0.1:${httpPort}/e`, 'team1.test')
  t.equal(e.status, 200)
  t.equal(team1.seen.length, 1, 'the Envoy Backend route reaches its own endpoint')
  t.equal(team1.seen[0]?.headers.authorization, 'Bearer TEAM1-SECRET', 'with its credential')

  const n = await get(`http://127.0.0.1:${httpPort}/n`, 'nobody.test')
  t.equal(n.status, 500, 'no gateway.networking.k8s.io Backend api exists: 500, not another kind\'s object')
  t.equal(team1.seen.length + partner.seen.length, 2, 'nothing sent for it')

  const dump = JSON.parse((await get(`http://127.0.0.1:${adminPort}/config_dump`, 'x')).body) as { problems: unknown[] }
  t.notMatch(JSON.stringify(dump.problems), /duplicate/, 'no duplicate problem')
})
