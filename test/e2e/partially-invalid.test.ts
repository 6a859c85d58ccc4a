// Gateway API RouteConditionPartiallyInvalid through the real CLI: an
// HTTPRoute with one rule whose regular expression JavaScript cannot compile
// (RE2's `(?P<name>...)`, which the API server admits) and one good rule. The
// good rule serves; the bad rule is dropped whole (its PathPrefix match too),
// so its paths are 404; `validate` names the field and says the rule is
// dropped; /config_dump's status says PartiallyInvalid "Dropped Rule ...".
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, runCli, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

const route = (upstream: number): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: partial, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [api.example.test]
  rules:
    - matches:
        - path: { type: RegularExpression, value: '/bad/(?P<id>[0-9]+)' }
        - path: { type: PathPrefix, value: /also-bad }
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: up, port: ${upstream} }]
    - matches: [{ path: { type: PathPrefix, value: /good } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: up, port: ${upstream} }]
`

t.test('CLI: one rule with a bad regular expression is dropped, the route\'s good rule serves', async (t) => {
  const upstream = http.createServer((_req, res) => res.end('upstream'))
  const upstreamPort = await listenLoopback(upstream)
  t.teardown(() => new Promise<void>((resolve) => upstream.close(() => resolve())))
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('up', upstreamPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), route(upstreamPort))

  const v = await runCli(t, ['validate', dir])
  t.equal(v.code, 1, 'validate: an error (the rule does not serve)')
  t.match(v.stdout, /route\.yaml:0: HTTPRoute default\/partial: spec\.rules\[0\]\.matches\[0\]\.path\.value: regular expression "\/bad\/\(\?P<id>\[0-9\]\+\)" does not compile: .*; rule 0 is dropped, the route's other rules are served/)
  t.equal(v.stdout.trim().split('\n').length, 1, 'one line for one mistake')

  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  const good = await get(`http://127.0.0.1:${port}/good/x`, 'api.example.test')
  t.equal(good.status, 200, 'the good rule serves')
  t.equal(good.body, 'upstream')
  t.equal((await get(`http://127.0.0.1:${port}/bad/42`, 'api.example.test')).status, 404, 'the bad rule\'s regex path: no route')
  t.equal((await get(`http://127.0.0.1:${port}/also-bad`, 'api.example.test')).status, 404, 'the bad rule\'s other match is dropped with it')

  type Dump = { status: Array<{ kind: string; name: string; parents: Array<{ conditions: Array<{ type: string; status: string; reason: string; message: string }> }> }> }
  const dump = JSON.parse((await get(`http://127.0.0.1:${adminPort}/config_dump`, 'x')).body) as Dump
  const conditions = dump.status.find((s) => s.kind === 'HTTPRoute' && s.name === 'partial')?.parents[0]?.conditions ?? []
  t.equal(conditions.find((c) => c.type === 'Accepted')?.status, 'True', 'still Accepted')
  const partial = conditions.find((c) => c.type === 'PartiallyInvalid')
  t.equal(partial?.status, 'True')
  t.match(partial?.message, /^Dropped Rule\(s\) 0: spec\.rules\[0\]\.matches\[0\]\.path\.value: regular expression/)
})
