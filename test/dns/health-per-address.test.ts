// Active health checks of hostname endpoints are per resolved address (issue 6
// with issue 5's "every usable address is an endpoint ... health-tracked like
// static ones", as Envoy checks every host of a STRICT_DNS cluster). A
// name's checker probed only the first address that accepted a connection and
// gave its verdict to every address; and each address took the verdict of the
// first hostname of the Backend on the same port, not of its own name. So a
// bad address kept its traffic, or a healthy one was taken out with it. Now
// every address is probed and has its own verdict, and what is kept per
// address is bounded by the current answers: an address that left the answer
// is forgotten. Real parts: the data plane and registry, dnsmasq, node:http
// upstreams on 127.0.0.x sharing one port.
import t from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { ActiveHealthCheck, Cluster, Endpoint } from '../../lib/compile/table.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { Resilience } from '../../lib/upstream/resilience.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'
import { ask, countOf, gateway, sleep, until, type Gateway } from '../resilience/fixtures.ts'

configureLogger({ level: 'silent' })

const skip = dnsmasqSkip()

const CHECK: ActiveHealthCheck = {
  type: 'HTTP', intervalMs: 100, timeoutMs: 500, unhealthyThreshold: 2, healthyThreshold: 1,
  http: { path: '/healthz', method: 'GET', expectedStatuses: [200], hostname: null, expectedResponse: null }, tcp: null,
}

interface Upstreams { port: number; probes: Map<string, number> }

/** node:http on each address, one port: `sick` ones answer 503 to everything; probes counted per address. */
async function upstreams(t: Parameters<typeof gateway>[0], healthy: readonly string[], sick: readonly string[]): Promise<Upstreams> {
  const probes = new Map<string, number>()
  for (let attempt = 0; attempt < 20; attempt++) {
    const servers: http.Server[] = []
    try {
      let port = 0
      for (const host of [...healthy, ...sick]) {
        const s = http.createServer((req, res) => {
          if (req.url === '/healthz') probes.set(host, (probes.get(host) ?? 0) + 1)
          res.writeHead(sick.includes(host) ? 503 : 200).end(host)
        })
        await new Promise<void>((resolve, reject) => { s.once('error', reject); s.listen(port, host, () => { s.off('error', reject); resolve() }) })
        servers.push(s)
        port = (s.address() as AddressInfo).port
      }
      t.teardown(async () => { for (const s of servers) await new Promise<void>((r) => { s.closeAllConnections(); s.close(() => r()) }) })
      return { port, probes }
    } catch (err) {
      for (const s of servers) s.close()
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err
    }
  }
  throw new Error('no port free on every address')
}

function named(host: string, port: number): Endpoint {
  return { host, port, kind: 'hostname', weight: 1, zone: null }
}

async function serve(t: Parameters<typeof gateway>[0], dnsServer: string, c: Cluster): Promise<Gateway> {
  const listen = await freePort()
  return gateway(t, buildTable({ [listen]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: c.id }] }] }] } }, [c]), {
    dns: { servers: [dnsServer], minTtlMs: 1000, maxTtlMs: 1000, staleMs: 0, timeoutMs: 500, tries: 1 },
    guard: { allowCidrs: ['127.0.0.0/8'] },
  })
}

interface Dump { available: boolean; endpoints: Array<{ endpoint: string; healthy: boolean; activeCheckHealthy: boolean }> }

function dump(gw: Gateway, id: string): Dump {
  return gw.upstreams.resilience?.health().find((h) => h.backend === id) as unknown as Dump
}

function verdict(gw: Gateway, id: string, address: string, port: number): boolean | undefined {
  return dump(gw, id).endpoints.find((e) => e.endpoint === `${address}:${port}`)?.activeCheckHealthy
}

t.test('one name, two addresses: each address is probed and judged on its own', { skip: skip ?? false }, async (t) => {
  const up = await upstreams(t, ['127.0.0.2'], ['127.0.0.3'])
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.2 multi.test', '127.0.0.3 multi.test'], ttl: 1 })
  const c = cluster('multi', up.port, { hostname: 'multi.test', endpoints: [named('multi.test', up.port)], healthCheck: { active: CHECK, passive: null } })
  const gw = await serve(t, dns.server, c)
  await ask(gw.port) // the registry resolves the name
  t.ok(await until(() => (up.probes.get('127.0.0.3') ?? 0) >= 2 && (up.probes.get('127.0.0.2') ?? 0) >= 2), 'both addresses get probes')
  t.ok(await until(() => verdict(gw, 'multi', '127.0.0.3', up.port) === false), 'the failing address is unhealthy')
  t.equal(verdict(gw, 'multi', '127.0.0.2', up.port), true, 'the passing one is healthy')
  t.same(countOf((await Promise.all(Array.from({ length: 10 }, () => ask(gw.port)))).map((r) => `${r.status} ${r.body}`)), { '200 127.0.0.2': 10 }, 'traffic goes to the healthy address only')
  t.equal(dump(gw, 'multi').available, true, 'the backend is available')
})

for (const order of [['good', 'bad'], ['bad', 'good']]) {
  t.test(`two names on one port (${order.join(', ')}): each address takes its own verdict`, { skip: skip ?? false }, async (t) => {
    const up = await upstreams(t, ['127.0.0.2'], ['127.0.0.3'])
    const dns = await startDnsmasq(t, { hosts: ['127.0.0.2 good.test', '127.0.0.3 bad.test'], ttl: 1 })
    const c = cluster('two', up.port, { hostname: null, endpoints: order.map((n) => named(`${n}.test`, up.port)), healthCheck: { active: CHECK, passive: null } })
    const gw = await serve(t, dns.server, c)
    await ask(gw.port)
    t.ok(await until(() => verdict(gw, 'two', '127.0.0.3', up.port) === false), 'the bad name\'s address is unhealthy')
    await sleep(300)
    t.equal(verdict(gw, 'two', '127.0.0.2', up.port), true, 'the good name\'s address stays healthy')
    t.equal(dump(gw, 'two').available, true, 'the backend is available')
    t.same(countOf((await Promise.all(Array.from({ length: 10 }, () => ask(gw.port)))).map((r) => `${r.status} ${r.body}`)), { '200 127.0.0.2': 10 }, 'traffic goes to the healthy address only')
  })
}

t.test('a name rotating through addresses: what is kept per address is bounded by the current answer', { skip: skip ?? false }, async (t) => {
  const up = await upstreams(t, ['127.0.0.2'], [])
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.2 rot.test'], ttl: 1 })
  const check: ActiveHealthCheck = { type: 'TCP', intervalMs: 100, timeoutMs: 300, unhealthyThreshold: 1, healthyThreshold: 1, http: null, tcp: null }
  const passive = { consecutive5xxErrors: 5, consecutiveGatewayErrors: 0, consecutiveLocalOriginFailures: 5, splitExternalLocalOriginErrors: false, intervalMs: 1000, baseEjectionTimeMs: 30_000, maxEjectionPercent: 10 }
  const c = cluster('rot', up.port, { hostname: 'rot.test', endpoints: [named('rot.test', up.port)], healthCheck: { active: check, passive } })
  const gw = await serve(t, dns.server, c)
  const resilience = gw.upstreams.resilience
  if (!(resilience instanceof Resilience)) throw new Error('expected the registry\'s Resilience')
  await ask(gw.port)
  for (let round = 0; round < 5; round++) {
    // Three new addresses each time (nothing listens there: refused, which is fine).
    const answer = [10, 11, 12].map((n) => `127.0.${round + 1}.${n}`)
    await dns.update(answer.map((a) => `${a} rot.test`), { name: 'rot.test', expect: answer[0] })
    await sleep(1100)
    await ask(gw.port) // the registry takes the new answer
    t.ok(await until(() => answer.every((a) => verdict(gw, 'rot', a, up.port) === false)), `round ${round}: the new addresses are checked`)
  }
  t.ok(resilience.endpointStates('rot') <= 1 + 3, `per-endpoint state: the name and its current addresses (${resilience.endpointStates('rot')})`)
})

t.test('without active checks too: a rotating name keeps no state for addresses it no longer has', { skip: skip ?? false }, async (t) => {
  const up = await upstreams(t, ['127.0.0.2'], [])
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.2 spin.test'], ttl: 1 })
  const passive = { consecutive5xxErrors: 5, consecutiveGatewayErrors: 0, consecutiveLocalOriginFailures: 5, splitExternalLocalOriginErrors: false, intervalMs: 1000, baseEjectionTimeMs: 30_000, maxEjectionPercent: 10 }
  const c = cluster('spin', up.port, { hostname: 'spin.test', endpoints: [named('spin.test', up.port)], healthCheck: { active: null, passive } })
  const gw = await serve(t, dns.server, c)
  const resilience = gw.upstreams.resilience
  if (!(resilience instanceof Resilience)) throw new Error('expected the registry\'s Resilience')
  await ask(gw.port)
  for (let round = 0; round < 4; round++) {
    const answer = [10, 11, 12].map((n) => `127.0.${round + 1}.${n}`)
    await dns.update(answer.map((a) => `${a} spin.test`), { name: 'spin.test', expect: answer[0] })
    await sleep(1100)
    await ask(gw.port)
    t.same(dump(gw, 'spin').endpoints.map((e) => e.endpoint).sort(), answer.map((a) => `${a}:${up.port}`).sort(), `round ${round}: balanced over the new answer`)
  }
  t.ok(resilience.endpointStates('spin') <= 1 + 3, `per-endpoint state: the name and its current addresses (${resilience.endpointStates('spin')})`)
})
