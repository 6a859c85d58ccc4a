// The real CLI while its DNS server fails: --dns-server points at a relay in
// front of dnsmasq (helpers/dns-switch.ts) that stops answering or answers
// SERVFAIL. Answers
// expire each second (--dns-min-ttl/--dns-max-ttl 1); requests keep being
// served from the last answer at once (--dns-stale-ttl) instead of waiting
// for a refresh query that times out (here about 2 s a try; each request
// waited that long before) — for a Backend with enableIPv6 on a name that has
// no AAAA record too. A name that fails with nothing to serve answers 503
// saying it was DNS (SP_ERR_UPSTREAM_DNS, body and access line), the failing
// resolver is not asked once per request, and a lower priority level takes
// the requests of a Backend whose name does not exist.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { backendYaml, eventually, failoverRouteYaml, freePort, gatewayYaml, metricSum, request, routeYaml, startCli, tempDir } from '../e2e/harness.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'
import { startDnsSwitch } from '../helpers/dns-switch.ts'

const skip = dnsmasqSkip()

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

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
    backendYaml('v4', up, 'api.v4.test'), routeYaml('v4', 'v4.example.test', 'v4', up),
    backendYaml('dual', up, 'api.dual.test'), routeYaml('dual', 'dual.example.test', 'dual', up), enableIPv6('dual'),
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

t.test('serve: a name that fails DNS answers 503 saying so; the failing resolver is asked about once a second', { skip: skip ?? false }, async (t) => {
  const upstream = http.createServer((_req, res) => res.end('secondary'))
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { upstream.closeAllConnections(); upstream.close(() => resolve()) }))
  const up = (upstream.address() as AddressInfo).port

  const dns = await startDnsmasq(t, { hosts: ['127.0.0.1 api.flaky.test'], ttl: 1 })
  const sw = await startDnsSwitch(t, dns.server)
  sw.set('servfail', { name: 'api.flaky.test' })
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(httpPort),
    backendYaml('gone', up, 'api.gone.test'), routeYaml('gone', 'gone.example.test', 'gone', up),
    backendYaml('flaky', up, 'api.flaky.test'), routeYaml('flaky', 'flaky.example.test', 'flaky', up),
    // A primary whose name does not exist, a secondary level that answers.
    backendYaml('primary', up, 'api.gone.test'), backendYaml('secondary', up),
    failoverRouteYaml('failover', 'failover.example.test', [{ name: 'primary', port: up }, { name: 'secondary', port: up }]),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`,
    '--dns-server', sw.server, '--dns-min-ttl', '1', '--dns-max-ttl', '1', '--drain-seconds', '1'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')

  const gone = await request(`http://127.0.0.1:${httpPort}/`, { host: 'gone.example.test' })
  t.equal(gone.status, 503)
  t.equal(gone.body, 'upstream DNS lookup failed: api.gone.test: NXDOMAIN\n', 'the body says it was DNS, which name, and what DNS said')
  t.match(await cli.waitFor(/\{[^\n]*"authority":"gone\.example\.test"[^\n]*/, 5000),
    /"status":503.*"code":"SP_ERR_UPSTREAM_DNS","reason":"upstream DNS lookup failed: api\.gone\.test: NXDOMAIN"/, 'so does the access line, with its own code')

  const flaky = await request(`http://127.0.0.1:${httpPort}/`, { host: 'flaky.example.test' })
  t.equal(flaky.status, 503)
  t.equal(flaky.body, 'upstream DNS lookup failed: api.flaky.test: SERVFAIL\n')

  // Many requests to the failing name: each answered at once with the cached failure, about one query a second.
  const started = Date.now()
  for (let i = 0; i < 100; i++) {
    const r = await request(`http://127.0.0.1:${httpPort}/`, { host: 'flaky.example.test' })
    if (r.status !== 503) t.fail(`request ${i}: ${r.status}`)
  }
  const elapsed = Date.now() - started
  const asked = sw.queries('api.flaky.test', 'A')
  t.ok(asked <= 3 + Math.ceil(elapsed / 1000), `${asked} queries for 101 requests in ${elapsed} ms`)
  const m = (await request(`http://127.0.0.1:${adminPort}/metrics`)).body
  t.ok(metricSum(m, 'sallyport_upstream_connect_errors_total', { backend: 'Backend/default/flaky:' + up, reason: 'dns' }) >= 1, 'the connect-error metric still says dns')

  const failover = await request(`http://127.0.0.1:${httpPort}/`, { host: 'failover.example.test' })
  t.equal(failover.status, 200, 'a DNS failure of the primary fails over to the secondary level')
  t.equal(failover.body, 'secondary')
})
