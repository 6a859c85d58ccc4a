// The real CLI, dnsmasq and a Backend whose name resolves to three addresses
// whose connects hang (a dead host dropping SYNs). While those connects are
// pending, the provider pulls the addresses: the answer changes to two live
// ones. When the hanging connects time out, the retry to the next address used
// to index the new, shorter list with the old position and the process died
// (uncaught TypeError, every listener gone). Now the requests move to the
// current addresses and the process keeps serving.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from '../e2e/harness.ts'
import { addressesOnOnePort } from '../helpers/blackhole.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'

const skip = dnsmasqSkip()
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

function config(httpPort: number, upPort: number): string {
  return [
    gatewayYaml(httpPort),
    backendYaml('api', upPort, 'api.svc.test'),
    routeYaml('api', 'api.example.test', 'api', upPort),
    `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: api, namespace: default }
spec:
  targetRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api }]
  timeout: { tcp: { connectTimeout: 4s } }
`,
  ].join('---\n')
}

t.test('serve: a DNS answer that changes while connects to the old addresses hang does not end the process', { skip: skip ?? false }, async (t) => {
  const dead = ['127.0.0.4', '127.0.0.8', '127.0.0.9']
  const live = ['127.0.0.5', '127.0.0.6']
  const upPort = await addressesOnOnePort(t, live, dead)
  const dns = await startDnsmasq(t, { hosts: dead.map((a) => `${a} api.svc.test`), ttl: 1 })
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), config(httpPort, upPort))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`,
    '--dns-server', dns.server, '--dns-min-ttl', '1', '--dns-max-ttl', '1', '--drain-seconds', '0', '--access-log', 'off'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')
  const url = `http://127.0.0.1:${httpPort}/`

  // One request per dead address (round robin): three connects hang.
  const hanging = dead.map(() => request(url, { host: 'api.example.test', timeoutMs: 15000 }))
  await sleep(300)
  await dns.update(live.map((a) => `${a} api.svc.test`), { name: 'api.svc.test', expect: live[0] })
  // Past the old answer's TTL (1 s), traffic goes on and the gateway takes the new answer.
  await sleep(1200)
  const fresh = await request(url, { host: 'api.example.test', timeoutMs: 10000 })
  t.equal(fresh.status, 200, 'a new request is served')
  t.ok(live.includes(fresh.body), `by a new address (${fresh.body})`)

  // The hanging connects time out (4 s): those requests move to a current address.
  for (const r of await Promise.all(hanging)) {
    t.equal(r.status, 200, 'the request whose connect timed out was answered')
    t.ok(live.includes(r.body), `by a current address (${r.body})`)
  }
  t.equal(cli.child.exitCode, null, 'the gateway is still running')
  t.notMatch(cli.stderr(), /TypeError/, 'and logged no crash')
  t.equal((await request(url, { host: 'api.example.test' })).status, 200, 'and still serves')
})
