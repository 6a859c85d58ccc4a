// Adversarial probe of forward-proxy mode through the real CLI: CONNECT
// target spellings, absolute-form Host mismatches, DNS rebinding, wildcard
// edges. Every refused destination is a listener that records connections:
// nothing may reach it, and the process must stay up.

import t from 'tap'
import type { Test } from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { eventually, freePort, rawExchange, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'
import { startCorpProxy } from '../helpers/corp-proxy.ts'

function manifests(anyPort: number, wildPort: number, p: number): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: any
  namespace: default
  annotations: { sallyport.io/allow-destination-cidrs: 127.0.0.2/32 }
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: ${anyPort} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: wild
  namespace: default
  annotations: { sallyport.io/allow-destination-cidrs: 127.0.0.2/32 }
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: ${wildPort} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: any
  namespace: default
  annotations: { sallyport.io/connect-ports: "${p}" }
spec:
  parentRefs: [{ name: any }]
  rules: [{}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: wild
  namespace: default
  annotations: { sallyport.io/connect-ports: "${p}" }
spec:
  parentRefs: [{ name: wild }]
  hostnames: ["*.wild.test"]
  rules: [{}]
`
}

async function listen(t: Test, host: string, port: number, name: string, hits: string[]): Promise<void> {
  const s = net.createServer((c) => { hits.push(name); c.on('error', () => {}); c.end(`${name}\n`) })
  await new Promise<void>((resolve, reject) => { s.once('error', reject); s.listen(port, host, resolve) })
  t.teardown(() => s.close())
}

t.test('CLI: hostile CONNECT targets reach nothing refused', { skip: dnsmasqSkip() ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: [
    '127.0.0.2 ok.wild.test a.b.wild.test wild.test pub.example.test',
    '127.0.0.1 lo.example.test',
    '169.254.169.254 meta.example.test',
  ] })
  const p = await freePort()
  const hits: string[] = []
  await listen(t, '127.0.0.1', p, 'forbidden-127.0.0.1', hits)
  await listen(t, '::1', p, 'forbidden-::1', hits).catch(() => {})
  await listen(t, '127.0.0.2', p, 'allowed-127.0.0.2', hits)
  const [anyPort, wildPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'all.yaml'), manifests(anyPort, wildPort, p))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--dns-server', dns.server, '--access-log', 'on'])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const connect = async (gw: number, target: string): Promise<string> => {
    const out = await rawExchange(gw, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`, { until: /\r\n\r\n[\s\S]*\n/, timeoutMs: 3000 })
    return out
  }
  const status = (s: string): string => /^HTTP\/1\.1 (\d+)/.exec(s)?.[1] ?? `none:${JSON.stringify(s.slice(0, 60))}`

  const ok = await connect(wildPort, `ok.wild.test:${p}`)
  t.match(ok, /allowed-127\.0\.0\.2/, 'control: an allowed tunnel works')
  const before = hits.length
  // [target, status]: addresses the guard refuses 403; names no DNS answers 502;
  // not host:port 400 — numeric spellings of an address too (2130706433, 0x7f.1:
  // inet_aton, and so an upstream proxy's resolver, reads them as 127.0.0.1).
  const targets: Array<[string, string]> = [
    [`127.0.0.1:${p}`, '403'], [`127.0.0.1.:${p}`, '403'], [`0.0.0.0:${p}`, '403'], [`[::1]:${p}`, '403'], [`[::]:${p}`, '403'],
    [`[::ffff:127.0.0.1]:${p}`, '403'], [`[::ffff:7f00:1]:${p}`, '403'], [`[0:0:0:0:0:ffff:7f00:1]:${p}`, '403'], [`[::127.0.0.1]:${p}`, '403'],
    [`[64:ff9b::7f00:1]:${p}`, '403'], [`[::1%lo]:${p}`, '403'], [`[::ffff:127.0.0.1%lo]:${p}`, '403'],
    [`lo.example.test:${p}`, '403'], [`LO.EXAMPLE.TEST.:${p}`, '403'], [`meta.example.test:${p}`, '403'],
    [`127.1:${p}`, '400'], [`2130706433:${p}`, '400'], [`0x7f.1:${p}`, '400'], [`0x7f000001:${p}`, '400'], [`017700000001:${p}`, '400'],
    [`0177.0.0.1:${p}`, '400'], [`0:${p}`, '400'], [`127.0.0.01:${p}`, '400'], [`a.0X7F:${p}`, '400'],
    [`localhost:${p}`, '502'], [`LOCALHOST.:${p}`, '502'], [`xn--lo-example.test:${p}`, '502'], [`1.example.test:${p}`, '502'],
    [`lo%2eexample.test:${p}`, '400'], [`user@127.0.0.1:${p}`, '400'], [`127.0.0.1:${p}@ok.wild.test`, '400'], [`127.0.0.1:+${p}`, '400'],
    [`127.0.0.1:0${p}`, '400'], [`127.0.0.1: ${p}`, '400'], [`127.0.0.1`, '400'], [`127.0.0.1:0`, '400'], [`127.0.0.1:${p + 65536}`, '400'],
    [`127.0.0.1..:${p}`, '400'], [`[127.0.0.1]:${p}`, '400'],
  ]
  for (const [target, want] of targets) t.equal(status(await connect(anyPort, target)), want, `CONNECT ${target}: ${want}`)
  await cli.waitFor(new RegExp(`"destination":"\\[::1\\]:${p}"[^\\n]*"reason":"destination_refused"[^\\n]*"msg":"CONNECT refused"`), 5000)
  t.pass('an IPv6 destination is logged in brackets, [::1]:port, not ::1:port')
  // Gateway API wildcards: one or more labels, never the parent itself.
  t.equal(status(await connect(wildPort, `wild.test:${p}`)), '403', 'the bare parent of *.wild.test: 403')
  t.match(await connect(wildPort, `a.b.wild.test:${p}`), /^HTTP\/1\.1 200[\s\S]*allowed/, 'a deeper subdomain matches the wildcard')
  t.match(await connect(wildPort, `OK.WILD.TEST.:${p}`), /^HTTP\/1\.1 200[\s\S]*allowed/, 'case and a trailing dot are the same name')
  t.equal(status(await connect(wildPort, `ok.wild.test:${p + 1}`)), '403', 'a port not in connect-ports: 403')
  t.same(hits.slice(before).filter((h) => h.startsWith('forbidden')), [], 'nothing reached a forbidden listener')
  t.equal(cli.child.exitCode, null, 'still running')
})

/**
 * The real CLI with a Gateway whose egress goes through `corp` (an upstream
 * proxy recording the tunnels it is asked for), one destination-policy
 * annotation, and a catch-all route allowing CONNECT to port `p`.
 */
async function behindCorpProxy(t: Test, policy: string): Promise<{ corp: Awaited<ReturnType<typeof startCorpProxy>>; p: number; gwPort: number; cli: ReturnType<typeof startCli> }> {
  const corp = await startCorpProxy(t)
  const p = await freePort()
  const [gwPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'all.yaml'), `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: corp
  namespace: default
  annotations:
    sallyport.io/upstream-proxy: http://127.0.0.1:${corp.port}
    ${policy}
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: ${gwPort} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: any
  namespace: default
  annotations: { sallyport.io/connect-ports: "${p}" }
spec:
  parentRefs: [{ name: corp }]
  rules: [{}]
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'on'])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  return { corp, p, gwPort, cli }
}

t.test('CLI: through a Gateway upstream proxy, a requested IP literal is still checked by the guard and the CIDR lists', async (t) => {
  const { corp, p, gwPort, cli } = await behindCorpProxy(t, 'sallyport.io/destination-denylist: 203.0.113.0/24')
  for (const target of [`169.254.169.254:${p}`, `127.0.0.1:${p}`, `[::ffff:a9fe:a9fe]:${p}`, `10.1.2.3:${p}`, `203.0.113.7:${p}`]) {
    const r = await rawExchange(gwPort, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`, { until: /\r\n\r\n/, timeoutMs: 3000 })
    t.match(r, /^HTTP\/1\.1 403 /, `CONNECT ${target}: 403`)
  }
  // Numeric spellings the proxy's resolver would read as addresses (inet_aton): 169.254.169.254, 127.0.0.1.
  for (const target of [`2852039166:${p}`, `0xa9fea9fe:${p}`, `169.254.43518:${p}`, `127.1:${p}`, `0177.0.0.1:${p}`]) {
    const r = await rawExchange(gwPort, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`, { until: /\r\n\r\n/, timeoutMs: 3000 })
    t.match(r, /^HTTP\/1\.1 400 /, `CONNECT ${target}: 400`)
  }
  t.same(corp.tunnels, [], 'the proxy was asked for none of them')
  await cli.waitFor(/"destination":"169.254.169.254:\d+"[^\n]*"reason":"destination_refused","status":403[^\n]*"msg":"CONNECT refused"/, 5000)
  t.equal(cli.child.exitCode, null, 'still running')
})

t.test('CLI: through a Gateway upstream proxy, an allow-list with CIDRs admits no unlisted name (its addresses are never seen)', async (t) => {
  const { corp, p, gwPort, cli } = await behindCorpProxy(t, 'sallyport.io/destination-allowlist: ok.example.test, 198.51.100.0/24')
  const connect = (target: string): Promise<string> => rawExchange(gwPort, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`, { until: /\r\n\r\n/, timeoutMs: 3000 })
  t.match(await connect(`evil.example.test:${p}`), /^HTTP\/1\.1 403 /, 'an unlisted name: 403')
  t.match(await connect(`203.0.113.9:${p}`), /^HTTP\/1\.1 403 /, 'an address outside the CIDRs: 403')
  t.same(corp.tunnels, [], 'the proxy was asked for neither')
  await connect(`ok.example.test:${p}`)
  await connect(`198.51.100.7:${p}`)
  t.same(corp.tunnels, [`ok.example.test:${p}`, `198.51.100.7:${p}`], 'a listed name and an address inside the CIDRs go to the proxy')
  await cli.waitFor(/"destination":"evil.example.test:\d+"[^\n]*"reason":"destination_denied","status":403[^\n]*"msg":"CONNECT refused"/, 5000)
  t.equal(cli.child.exitCode, null, 'still running')
})
