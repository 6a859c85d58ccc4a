// The real CLI while its DNS server fails: --dns-server points at a relay in
// front of dnsmasq (helpers/dns-switch.ts) that stops answering. Answers
// expire each second (--dns-min-ttl/--dns-max-ttl 1); requests keep being
// served from the last answer at once (--dns-stale-ttl) instead of waiting
// for a refresh query that times out (here about 2 s a try; each request
// waited that long before) — for a Backend with enableIPv6 on a name that has
// no AAAA record too.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from '../e2e/harness.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'
import { startDnsSwitch } from '../helpers/dns-switch.ts'

const skip = dnsmasqSkip()

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

function fqdnBackend(name: string, hostname: string, port: number): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
spec:
  endpoints:
    - fqdn:
        hostname: ${hostname}
        port: ${port}
`
}

function enableIPv6(backend: string): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: ${backend}-v6
  namespace: default
spec:
  targetRefs:
    - group: gateway.envoyproxy.io
      kind: Backend
      name: ${backend}
  enableIPv6: true
`
}

t.test('serve: a DNS server that stops answering does not hold requests; the last answers are served', { skip: skip ?? false }, async (t) => {
  const upstream = http.createServer((req, res) => res.end(`ok host=${req.headers.host}`))
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { upstream.closeAllConnections(); upstream.close(() => resolve()) }))
  const up = (upstream.address() as AddressInfo).port

  // Both names have an A record only: AAAA is NODATA.
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.1 api.v4.test', '127.0.0.1 api.dual.test'], ttl: 1 })
  const sw = await startDnsSwitch(t, dns.server)
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(httpPort),
    fqdnBackend('v4', 'api.v4.test', up), routeYaml('v4', 'v4.example.test', 'v4', up),
    fqdnBackend('dual', 'api.dual.test', up), routeYaml('dual', 'dual.example.test', 'dual', up), enableIPv6('dual'),
  ].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`,
    '--dns-server', sw.server, '--dns-min-ttl', '1', '--dns-max-ttl', '1', '--dns-stale-ttl', '60',
    '--drain-seconds', '1', '--access-log', 'off'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')

  for (const host of ['v4.example.test', 'dual.example.test']) {
    const ok = await request(`http://127.0.0.1:${httpPort}/`, { host })
    t.equal(ok.status, 200, `${host} resolved`)
  }

  sw.set('silent')
  // Eight seconds of requests through the outage: past the answers' expiry and
  // past the time the first refresh queries take to time out.
  const until = Date.now() + 8000
  let slowest = 0
  let n = 0
  while (Date.now() < until) {
    for (const host of ['v4.example.test', 'dual.example.test']) {
      const started = Date.now()
      const r = await request(`http://127.0.0.1:${httpPort}/`, { host, timeoutMs: 15000 })
      const took = Date.now() - started
      slowest = Math.max(slowest, took)
      n++
      if (r.status !== 200 || took >= 1000) t.fail(`${host}: ${r.status} in ${took} ms (${r.body.trim()})`)
    }
    await sleep(200)
  }
  t.ok(n >= 20, `${n} requests during the outage`)
  t.ok(slowest < 1000, `each served within 1 s while the resolver is silent (slowest ${slowest} ms)`)
  const m = (await request(`http://127.0.0.1:${adminPort}/metrics`)).body
  t.match(m, /sallyport_dns_stale_answers_total [1-9]/, 'stale answers counted')
  t.ok(sw.queries('api.dual.test', 'AAAA') >= 1, 'the AAAA side was asked too')
})
