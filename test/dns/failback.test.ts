// Fail-back after a DNS failure of the primary (issue 6 failover, issue 5
// DNS). A primary Backend whose name briefly has no address (NXDOMAIN) fails
// over to the secondary; that much worked. But the failed answer left the
// primary with an empty endpoint list, counted unavailable, and nothing ever
// looked its name up again: traffic stayed on the secondary for good. A name
// with no usable address is now re-resolved in the background (through the
// DNS cache, so its negative TTL bounds the queries) and by the traffic that
// finds it unavailable; once it resolves, the primary takes traffic again.
// Real parts: the data plane and registry, dnsmasq, node:http upstreams on
// 127.0.0.2 (primary) and 127.0.0.3 (secondary).
import t from 'tap'
import { configureLogger } from '../../lib/observe/log.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { addressesOnOnePort } from '../helpers/blackhole.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'
import { ask, gateway, sleep, until, type Gateway } from '../resilience/fixtures.ts'

configureLogger({ level: 'silent' })

const skip = dnsmasqSkip()

function available(gw: Gateway, backend: string): boolean {
  return gw.upstreams.resilience?.health().find((h) => h.backend === backend)?.available === true
}

async function setup(t: Parameters<typeof gateway>[0]): Promise<{ gw: Gateway; dns: Awaited<ReturnType<typeof startDnsmasq>> }> {
  const port = await addressesOnOnePort(t, ['127.0.0.2', '127.0.0.3'], [])
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.2 primary.test'], ttl: 1 })
  const primary = cluster('primary', port, { hostname: 'primary.test', endpoints: [{ host: 'primary.test', port, kind: 'hostname', weight: 1, zone: null }] })
  const secondary = cluster('secondary', port, { endpoints: [{ host: '127.0.0.3', port, kind: 'ip', weight: 1, zone: null }] })
  const listen = await freePort()
  const table = buildTable({ [listen]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'primary', priority: 0 }, { cluster: 'secondary', priority: 1 }] }] }] } }, [primary, secondary])
  const gw = await gateway(t, table, {
    dns: { servers: [dns.server], minTtlMs: 1000, maxTtlMs: 1000, staleMs: 0, timeoutMs: 500, tries: 1 },
    guard: { allowCidrs: ['127.0.0.0/8'] },
  })
  t.equal((await ask(gw.port)).body, '127.0.0.2', 'the primary serves')
  // The primary's name is gone for a while: traffic fails over.
  await dns.update([], { name: 'primary.test', expect: null })
  await sleep(1100)
  t.equal((await ask(gw.port)).body, '127.0.0.3', 'NXDOMAIN: the secondary serves')
  t.notOk(available(gw, 'primary'), 'the primary is unavailable')
  await dns.update(['127.0.0.2 primary.test'], { name: 'primary.test', expect: '127.0.0.2' })
  return { gw, dns }
}

t.test('traffic fails back to the primary once its name resolves again', { skip: skip ?? false }, async (t) => {
  const { gw } = await setup(t)
  const seen: string[] = []
  for (let i = 0; i < 40 && seen.at(-1) !== '127.0.0.2'; i++) {
    seen.push((await ask(gw.port)).body)
    await sleep(200)
  }
  t.equal(seen.at(-1), '127.0.0.2', `requests reach the primary again (${seen.length} requests)`)
  t.ok(available(gw, 'primary'), 'and it counts available')
})

t.test('without traffic the name is re-resolved in the background: the next request goes to the primary', { skip: skip ?? false }, async (t) => {
  const { gw } = await setup(t)
  t.ok(await until(() => available(gw, 'primary'), 8000), 'the primary becomes available with no request sent')
  t.equal((await ask(gw.port)).body, '127.0.0.2', 'the first request goes to it')
})
