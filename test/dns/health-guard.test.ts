// The real CLI, dnsmasq on a loopback port, and an ExternalHostname Backend
// whose name resolves to 127.0.0.1 with active health checks on. The data path
// refused the address (destination guard), but the health checker resolved the
// name with DNS alone and sent its probes there, every interval: a confused
// deputy aimed at whatever the name says (the metadata service included).
// Health checks go through the guard as requests do: a refused address gets
// no probe, and the endpoint is unhealthy. With the range allowed, probes flow.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from '../e2e/harness.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'

const skip = dnsmasqSkip()
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

function config(httpPort: number, upPort: number, allow: boolean): string {
  return [
    // No allowance at all, or 127.0.0.1 allowed (the annotation holds something either way).
    gatewayYaml(httpPort, '', { 'sallyport.io/allow-destination-cidrs': allow ? '127.0.0.1/32' : '192.0.2.0/24' }),
    `apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata:
  name: internal
  namespace: default
spec:
  type: ExternalHostname
  externalHostname:
    hostname: internal.test
  port:
    name: http
    port: ${upPort}
  protocol: HTTP
`,
    `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: internal
  namespace: default
spec:
  parentRefs:
    - name: egress
  hostnames: [internal.example.test]
  rules:
    - backendRefs:
        - group: gateway.networking.x-k8s.io
          kind: XBackend
          name: internal
          port: ${upPort}
`,
    `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: probe
  namespace: default
spec:
  targetRefs:
    - group: gateway.networking.k8s.io
      kind: HTTPRoute
      name: internal
  healthCheck:
    active:
      type: HTTP
      interval: 1s
      timeout: 500ms
      unhealthyThreshold: 1
      healthyThreshold: 1
      http:
        path: /latest/meta-data/
`,
  ].join('---\n')
}

t.test('active health checks never reach an address the destination guard refuses', { skip: skip ?? false }, async (t) => {
  const probes: string[] = []
  const upstream = http.createServer((req, res) => {
    if (req.url === '/latest/meta-data/') probes.push(req.url)
    res.end('ok')
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { upstream.closeAllConnections(); upstream.close(() => resolve()) }))
  const up = (upstream.address() as AddressInfo).port
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.1 internal.test'], ttl: 1 })

  for (const allow of [false, true]) {
    probes.length = 0
    const [httpPort, adminPort] = [await freePort(), await freePort()]
    const dir = tempDir(t)
    fs.writeFileSync(path.join(dir, 'config.yaml'), config(httpPort, up, allow))
    const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`,
      '--dns-server', dns.server, '--dns-min-ttl', '1', '--drain-seconds', '0', '--access-log', 'off'])
    await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')
    if (allow) {
      await eventually(async () => probes.length, (n) => n >= 2, 10000, 'allowed: the probes reach the endpoint')
      t.equal((await request(`http://127.0.0.1:${httpPort}/`, { host: 'internal.example.test' })).status, 200, 'and so do requests')
    } else {
      t.equal((await request(`http://127.0.0.1:${httpPort}/`, { host: 'internal.example.test' })).status, 502, 'refused: the request gets 502')
      // Three intervals: the checker ran (it starts within a tenth of one) and sent nothing.
      await sleep(3000)
      t.same(probes, [], 'and no health check probe reached the refused address')
    }
    cli.child.kill('SIGTERM')
    await cli.exited
  }
})
