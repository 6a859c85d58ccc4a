// BackendTrafficPolicy rateLimit rules' `shared` and `cost` (Envoy Gateway):
// a Gateway-wide policy counts each route on its own unless the rule is
// `shared: true`, which gives all the routes it covers one bucket; a rule's
// `cost.request` `{from: Number, number: N}` takes N tokens a request (0 only
// checks the bucket). The real CLI, over sockets.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, routeYaml, runCli, startCli, tempDir } from './harness.ts'
import { get, pod, recorder, send } from './extensions-helpers.ts'

const POLICY = `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: limits, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: Gateway, name: egress }]
  rateLimit:
    type: Local
    local:
      rules:
        - clientSelectors: [{ headers: [{ name: x-rule, value: shared }] }]
          limit: { requests: 2, unit: Hour }
          shared: true
        - clientSelectors: [{ headers: [{ name: x-rule, value: per-route }] }]
          limit: { requests: 2, unit: Hour }
        - clientSelectors: [{ headers: [{ name: x-rule, value: costly }] }]
          limit: { requests: 5, unit: Hour }
          cost: { request: { from: Number, number: 2 } }
        - clientSelectors: [{ headers: [{ name: x-rule, value: check }] }]
          limit: { requests: 1, unit: Hour }
          cost: { request: { from: Number, number: 0 } }
`

t.test('CLI: shared rules count every route in one bucket, others per route; cost.request takes N tokens', async (t) => {
  const up = await recorder(t)
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [backendYaml('up', up.port), routeYaml('a', 'a.example.test', 'up', up.port), routeYaml('b', 'b.example.test', 'up', up.port)].join('---\n'))
  fs.writeFileSync(path.join(dir, 'policy.yaml'), POLICY)
  // Clients of two namespaces: a rule without Distinct selectors counts them together (Envoy Gateway).
  fs.writeFileSync(path.join(dir, 'pods.yaml'), [pod('team-a', 'a-1', 'app', '127.0.0.2'), pod('team-b', 'b-1', 'bot', '127.0.0.3')].join('---\n'))

  const validate = await runCli(t, ['validate', dir])
  t.equal(validate.code, 0, 'validate accepts the policy')
  t.notMatch(validate.stdout + validate.stderr, /unknown field/, 'shared and cost are known fields')

  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  const st = async (host: string, rule: string, from = '127.0.0.2'): Promise<number> => (await send(httpPort, { host, from, headers: { 'x-rule': rule } })).status

  t.same([await st('a.example.test', 'shared'), await st('b.example.test', 'shared', '127.0.0.3'), await st('a.example.test', 'shared', '127.0.0.3'), await st('b.example.test', 'shared')],
    [200, 200, 429, 429], 'shared: 2 an hour for both routes and every client together')
  t.same([await st('a.example.test', 'per-route'), await st('a.example.test', 'per-route'), await st('a.example.test', 'per-route')],
    [200, 200, 429], 'not shared: 2 an hour on route a')
  t.equal(await st('a.example.test', 'per-route', '127.0.0.3'), 429, 'whichever namespace the client is in')
  t.equal(await st('b.example.test', 'per-route'), 200, 'and route b has its own bucket')
  t.same([await st('a.example.test', 'costly'), await st('a.example.test', 'costly'), await st('a.example.test', 'costly')],
    [200, 200, 429], 'cost 2 of 5 tokens: the third request finds 1')
  t.same([await st('a.example.test', 'check'), await st('a.example.test', 'check'), await st('a.example.test', 'check')],
    [200, 200, 200], 'cost 0 checks the bucket and takes nothing')
})

t.test('validate: a cost sallyport cannot take is a warning naming the field', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(8080))
  fs.writeFileSync(path.join(dir, 'policy.yaml'), `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: metered, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: Gateway, name: egress }]
  rateLimit:
    type: Local
    local:
      rules:
        - limit: { requests: 100, unit: Minute }
          cost:
            request: { from: Metadata, metadata: { namespace: io.envoy.ai_gateway, key: llm_input_token } }
            response: { from: Metadata, metadata: { namespace: io.envoy.ai_gateway, key: llm_total_token } }
`)
  const r = await runCli(t, ['validate', dir])
  t.equal(r.code, 0, 'warnings only')
  t.match(r.stdout, /BackendTrafficPolicy default\/metered: spec\.rateLimit\.local\.rules\[0\]\.cost\.request: .*Metadata/, 'request cost from Metadata named')
  t.match(r.stdout, /BackendTrafficPolicy default\/metered: spec\.rateLimit\.local\.rules\[0\]\.cost\.response: .*AIUsage/, 'response cost named, AIUsage pointed to')
})
