// The real CLI with --dns-server pointing at dnsmasq on a loopback port:
// an ExternalHostname Backend whose name resolves to 127.0.0.1 (allowed by
// the Gateway's CIDR annotation) reaches the upstream there; a name that
// resolves to the metadata service is refused (502, counted, logged); a
// Backend outside the Gateway's regions gets 403; a re-pointed name is
// followed without restarting and without dropping a request in flight.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { eventually, freePort, gatewayYaml, request, runCli, startCli, tempDir } from '../e2e/harness.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'

const skip = dnsmasqSkip()

function backend(name: string, hostname: string, port: number, region: string): string {
  return `apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata:
  name: ${name}
  namespace: default
  labels:
    sallyport.io/region: ${region}
spec:
  type: ExternalHostname
  externalHostname:
    hostname: ${hostname}
  port:
    name: http
    port: ${port}
  protocol: HTTP
`
}

function route(name: string, host: string, backendName: string, port: number): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs:
    - name: egress
  hostnames: [${host}]
  rules:
    - backendRefs:
        - group: gateway.networking.x-k8s.io
          kind: XBackend
          name: ${backendName}
          port: ${port}
`
}

function gateway(port: number): string {
  return gatewayYaml(port, '', { 'sallyport.io/allow-destination-cidrs': '127.0.0.1/32', 'sallyport.io/allowed-regions': 'eu-west-1' })
}

t.test('serve --dns-server: ExternalHostname backends resolved by a real DNS server, guarded', { skip: skip ?? false }, async (t) => {
  let slow: (() => void) | null = null
  const upstream = http.createServer((req, res) => {
    if (req.url === '/slow') { slow = () => res.end(`slow host=${req.headers.host}`); return }
    res.end(`ok host=${req.headers.host}`)
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { upstream.closeAllConnections(); upstream.close(() => resolve()) }))
  const up = (upstream.address() as AddressInfo).port

  const dns = await startDnsmasq(t, {
    hosts: ['127.0.0.1 api.local.test', '169.254.169.254 metadata.evil.test', '127.0.0.1 api.us.test'],
    ttl: 1,
  })
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gateway(httpPort),
    backend('local', 'api.local.test', up, 'eu-west-1'), route('local', 'local.example.test', 'local', up),
    backend('evil', 'metadata.evil.test', 80, 'eu-west-1'), route('evil', 'evil.example.test', 'evil', 80),
    backend('us', 'api.us.test', up, 'us-east-1'), route('us', 'us.example.test', 'us', up),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`,
    '--dns-server', dns.server, '--dns-min-ttl', '1', '--dns-max-ttl', '1', '--drain-seconds', '1', '--access-log', 'off'])
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20000, 'ready')

  const ok = await request(`http://127.0.0.1:${httpPort}/`, { host: 'local.example.test' })
  t.equal(ok.status, 200, 'resolved through dnsmasq, allowed by the Gateway annotation')
  t.equal(ok.body, 'ok host=api.local.test', 'Host is the Backend hostname')

  const refused = await request(`http://127.0.0.1:${httpPort}/`, { host: 'evil.example.test' })
  t.equal(refused.status, 502, 'a name resolving to the metadata service is refused')
  t.match(refused.body, /destination refused/)
  await cli.waitFor(/destination address refused/, 5000)

  const region = await request(`http://127.0.0.1:${httpPort}/`, { host: 'us.example.test' })
  t.equal(region.status, 403, 'a Backend outside the allowed regions is denied')
  // Issue 5: a denial is an Event (in file mode, an `event` log line naming reason and route).
  t.match(await cli.waitFor(/"reason":"DestinationDenied"[^\n]*/, 5000), /HTTPRoute default\//)

  const m = (await request(`${admin}/metrics`)).body
  t.match(m, /sallyport_destination_refusals_total\{backend="XBackend\/default\/evil:80",reason="link-local"\} 1/)
  t.match(m, /sallyport_dns_lookups_total\{type="A",result="ok"\} \d+/)
  const dump = JSON.parse((await request(`${admin}/config_dump`)).body) as { status: Array<{ kind: string; name: string; parents: Array<{ conditions: Array<{ reason: string }> }> }> }
  t.equal(dump.status.find((s) => s.kind === 'Backend' && s.name === 'us')?.parents[0]?.conditions[0]?.reason, 'RegionNotAllowed', 'status says why')

  // A request in flight while the name is re-pointed finishes; new requests follow the new answer.
  const inFlight = request(`http://127.0.0.1:${httpPort}/slow`, { host: 'local.example.test' })
  await eventually(async () => slow !== null, (v) => v, 5000, 'slow request at the upstream')
  await dns.update(['169.254.169.254 api.local.test', '169.254.169.254 metadata.evil.test'], { name: 'api.local.test', expect: '169.254.169.254' })
  await eventually(() => request(`http://127.0.0.1:${httpPort}/`, { host: 'local.example.test' }), (r) => r.status === 502, 10000, 'the rebinding refused')
  ;(slow as unknown as () => void)()
  const finished = await inFlight
  t.equal(finished.status, 200, 'the in-flight request was not dropped')
  t.equal(finished.body, 'slow host=api.local.test')
})

t.test('DNS and guard flags are checked before anything starts (exit 2, usage)', async (t) => {
  for (const [args, message] of [
    [['--dns-server', 'dns.example'], /--dns-server: DNS server "dns.example" is not ADDR\[:PORT\]/],
    [['--dns-server', '127.0.0.1:99999'], /bad port/],
    [['--allow-destination-cidr', '10.0.0.0/33'], /--allow-destination-cidr "10.0.0.0\/33" is not a CIDR/],
    [['--cluster-cidr', 'pods'], /--cluster-cidr "pods" is not a CIDR/],
    [['--dns-min-ttl', '10', '--dns-max-ttl', '5'], /--dns-max-ttl must not be less than --dns-min-ttl/],
    [['--dns-stale-ttl', '1.5'], /--dns-stale-ttl wants an integer/],
    // 0 would query the DNS server once per request for a TTL-0 name (Envoy never refreshes faster than a floor).
    [['--dns-min-ttl', '0'], /--dns-min-ttl wants an integer from 1 to 86400, got "0"/],
  ] as const) {
    const r = await runCli(t, ['serve', '--config', 'fixtures/quickstart', '--admin', 'off', ...args])
    t.equal(r.code, 2, args.join(' '))
    t.match(r.stderr, message)
  }
})
