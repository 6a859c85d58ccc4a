// The real CLI (issue 9): CONNECT to the requested host when the route names
// no Backend, under the Gateway's destination policy; and a Gateway-level
// upstream proxy that carries those tunnels and the Gateway's external
// Backends, while a Backend that says `none` stays direct. Names resolve
// through a real dnsmasq; the corporate proxy records what it was asked.

import t from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { eventually, freePort, runCli, startCli, tempDir, curl } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'
import { startCorpProxy } from '../helpers/corp-proxy.ts'

function manifests(directPort: number, corpPort: number, proxyPort: number, rawPort: number, apiPort: number): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: direct
  namespace: default
  annotations:
    sallyport.io/allow-destination-cidrs: 127.0.0.0/8
    sallyport.io/destination-denylist: secret.example.test
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: ${directPort} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: corp
  namespace: default
  annotations:
    sallyport.io/allow-destination-cidrs: 127.0.0.0/8
    sallyport.io/upstream-proxy: http://127.0.0.1:${proxyPort}
    sallyport.io/upstream-proxy-secret: corp-proxy
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: ${corpPort} }]
---
apiVersion: v1
kind: Secret
metadata: { name: corp-proxy, namespace: default }
stringData: { username: egress, password: pw-for-the-corp-proxy }
---
# No backendRefs: CONNECT goes to the requested host itself.
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: anywhere
  namespace: default
  annotations: { sallyport.io/connect-ports: "${rawPort}" }
spec:
  parentRefs: [{ name: direct }, { name: corp }]
  hostnames: ["*.example.test"]
  rules: [{}]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: api, namespace: default }
spec:
  endpoints: [{ fqdn: { hostname: api.example.test, port: ${apiPort} } }]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: api-direct
  namespace: default
  annotations: { sallyport.io/upstream-proxy: none }
spec:
  endpoints: [{ fqdn: { hostname: direct-api.example.test, port: ${apiPort} } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: api, namespace: default }
spec:
  parentRefs: [{ name: corp }]
  hostnames: [api.internal]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: ${apiPort} }] }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: api-direct, namespace: default }
spec:
  parentRefs: [{ name: corp }]
  hostnames: [direct-api.internal]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api-direct, port: ${apiPort} }] }]
`
}

t.test('CLI: CONNECT to the requested host under the Gateway policy; a Gateway-level upstream proxy', { skip: dnsmasqSkip() ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.1 api.example.test direct-api.example.test secret.example.test'] })
  const raw = net.createServer((s) => { s.end('requested-host-ok\n') })
  await new Promise<void>((resolve) => raw.listen(0, '127.0.0.1', resolve))
  t.teardown(() => raw.close())
  const rawPort = (raw.address() as net.AddressInfo).port
  const api = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'api' })
  t.teardown(() => api.close())
  const corp = await startCorpProxy(t, 'egress:pw-for-the-corp-proxy')
  const [directPort, corpPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'all.yaml'), manifests(directPort, corpPort, corp.port, rawPort, api.address.port))

  const validate = await runCli(t, ['validate', dir])
  t.equal(validate.code, 0, 'the manifests validate')

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--dns-server', dns.server, '--access-log', 'on'])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  // Through the Gateway without a proxy: straight to the requested host.
  const direct = `http://127.0.0.1:${directPort}`
  const ok = await curl(['--proxy', direct, '--proxytunnel', `telnet://api.example.test:${rawPort}`])
  t.equal(ok.stdout, 'requested-host-ok\n', 'CONNECT to a requested host the route covers, with no Backend named')
  await cli.waitFor(/"protocol":"connect"[^\n]*"destination":"api.example.test:\d+"[^\n]*"backend":"CONNECT\/default\/anywhere\/0"/, 10000)
  t.pass('access log: the requested destination, the route as the backend label')
  const denied = await curl(['--proxy', direct, '-v', '--proxytunnel', `telnet://secret.example.test:${rawPort}`])
  t.match(denied.stderr, /< HTTP\/1.1 403/, 'a host on the Gateway deny-list: 403')
  const otherPort = await curl(['--proxy', direct, '-v', '--proxytunnel', `telnet://api.example.test:${rawPort === 65535 ? 1 : rawPort + 1}`])
  t.match(otherPort.stderr, /< HTTP\/1.1 403/, 'a port the route does not list: 403')
  const otherHost = await curl(['--proxy', direct, '-v', '--proxytunnel', `telnet://api.other.test:${rawPort}`])
  t.match(otherHost.stderr, /< HTTP\/1.1 403/, 'a host no route covers: 403')
  t.same(corp.tunnels, [], 'nothing went through the corporate proxy')

  // Through the Gateway with a proxy: the tunnel and the external Backend go through it.
  const viaCorp = `http://127.0.0.1:${corpPort}`
  const tunnelled = await curl(['--proxy', viaCorp, '--proxytunnel', `telnet://api.example.test:${rawPort}`])
  t.equal(tunnelled.stdout, 'requested-host-ok\n', 'the requested-host tunnel through the corporate proxy')
  t.same(corp.tunnels, [`api.example.test:${rawPort}`], 'the proxy was asked for the requested host, by name')
  const reply = await get(`http://127.0.0.1:${corpPort}/v1/models`, 'api.internal')
  t.equal(reply.status, 200, 'the Gateway\'s external Backend answers')
  t.same(corp.tunnels.slice(1), [`api.example.test:${api.address.port}`], 'its connection went through the proxy')
  t.equal(corp.auths[1], 'Basic ' + Buffer.from('egress:pw-for-the-corp-proxy').toString('base64'), 'with the Gateway\'s proxy credential')
  const own = await get(`http://127.0.0.1:${corpPort}/v1/models`, 'direct-api.internal')
  t.equal(own.status, 200, 'the Backend with upstream-proxy: none answers')
  t.equal(corp.tunnels.length, 2, 'and did not use the proxy')

  const dump = await get(`http://127.0.0.1:${adminPort}/config_dump`, 'x')
  t.notMatch(dump.body, /pw-for-the-corp-proxy|ZWdyZXNz/, 'the proxy credential is not in /config_dump')
  t.match(dump.body, /sallyport.io\/UpstreamProxy/, 'status says the Gateway proxy was read')
})

t.test('validate: unreadable proxy and CONNECT annotations are named, field by field', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'bad.yaml'), `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: egress
  namespace: default
  annotations:
    sallyport.io/upstream-proxy: https://user:pw@proxy.corp:3128
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: 8080 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: r
  namespace: default
  annotations: { sallyport.io/connect-ports: "443, 70000", sallyport.io/connect-verify-sni: "yes" }
spec:
  parentRefs: [{ name: egress }]
  rules: [{}]
`)
  const r = await runCli(t, ['validate', dir])
  t.equal(r.code, 0, 'warnings only: the objects still serve')
  t.match(r.stdout, /bad\.yaml:0: Gateway default\/egress: metadata\.annotations\[sallyport\.io\/upstream-proxy\]: credentials in the URL would show in status and dumps/)
  t.notMatch(r.stdout, /user:pw/, 'and they are not shown')
  t.match(r.stdout, /bad\.yaml:1: HTTPRoute default\/r: metadata\.annotations\[sallyport\.io\/connect-ports\]: "70000" is not a port/)
  t.match(r.stdout, /bad\.yaml:1: HTTPRoute default\/r: metadata\.annotations\[sallyport\.io\/connect-verify-sni\]: "yes" is not "true" or "false"/)
})
