// The real CLI, dnsmasq and the README's failover shape: a primary Backend
// behind a name, a secondary by address, `sallyport.io/backend-priority`.
// Three seconds of NXDOMAIN for the primary's name failed traffic over to the
// secondary, and it stayed there for good: nothing looked the name up again,
// with or without active health checks (whose passing verdict went nowhere
// the availability check reads). Now traffic comes back once the name resolves.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { backendYaml, eventually, failoverRouteYaml, freePort, gatewayYaml, request, startCli, tempDir } from '../e2e/harness.ts'
import { addressesOnOnePort } from '../helpers/blackhole.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'

const skip = dnsmasqSkip()
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

function config(httpPort: number, upPort: number, activeChecks: boolean): string {
  const docs = [
    gatewayYaml(httpPort),
    backendYaml('primary', upPort, 'primary.svc.test'),
    backendYaml('secondary', upPort, '127.0.0.3'),
    failoverRouteYaml('api', 'api.example.test', [{ name: 'primary', port: upPort }, { name: 'secondary', port: upPort }]),
  ]
  if (activeChecks) {
    docs.push(`apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: primary-hc, namespace: default }
spec:
  targetRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: primary }]
  healthCheck:
    active:
      type: HTTP
      interval: 1s
      timeout: 500ms
      http: { path: /healthz, expectedStatuses: [200] }
`)
  }
  return docs.join('---\n')
}

for (const activeChecks of [false, true]) {
  t.test(`serve: traffic fails back to the primary after its name was NXDOMAIN for a while${activeChecks ? ' (active health checks on)' : ''}`, { skip: skip ?? false }, async (t) => {
    const upPort = await addressesOnOnePort(t, ['127.0.0.2', '127.0.0.3'], [])
    const dns = await startDnsmasq(t, { hosts: ['127.0.0.2 primary.svc.test'], ttl: 1 })
    const [httpPort, adminPort] = [await freePort(), await freePort()]
    const dir = tempDir(t)
    fs.writeFileSync(path.join(dir, 'config.yaml'), config(httpPort, upPort, activeChecks))
    startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`,
      '--dns-server', dns.server, '--dns-min-ttl', '1', '--drain-seconds', '0', '--access-log', 'off'])
    await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')
    const url = `http://127.0.0.1:${httpPort}/`
    const ask = (): Promise<string> => request(url, { host: 'api.example.test' }).then((r) => `${r.status} ${r.body}`)

    t.equal(await ask(), '200 127.0.0.2', 'the primary serves')
    await dns.update([], { name: 'primary.svc.test', expect: null })
    await eventually(ask, (r) => r === '200 127.0.0.3', 10000, 'failed over to the secondary')
    await sleep(2000)
    t.equal(await ask(), '200 127.0.0.3', 'NXDOMAIN for a while: the secondary serves')

    await dns.update(['127.0.0.2 primary.svc.test'], { name: 'primary.svc.test', expect: '127.0.0.2' })
    await eventually(ask, (r) => r === '200 127.0.0.2', 10000, 'failed back to the primary')
    t.pass('the primary serves again once its name resolves')
    const dump = JSON.parse((await request(`http://127.0.0.1:${adminPort}/config_dump`)).body) as { upstreamHealth: Array<{ backend: string; available: boolean }> }
    t.equal(dump.upstreamHealth.find((b) => b.backend.startsWith('Backend/default/primary'))?.available, true, '/config_dump: the primary is available')
  })
}
