// DestinationResolver against a real DNS server (dnsmasq on a loopback port):
// TTL expiry and refresh, NXDOMAIN, SERVFAIL with the stale answer served (and
// its bound), rebinding to metadata/loopback refused, reverse-DNS checks,
// IPv6 on and off, Gateway deny/allow CIDRs. Addresses outside loopback are
// only resolved here, never connected to.
import t from 'tap'
import { DestinationResolver, type Resolution } from '../../lib/upstream/resolve.ts'
import { registry } from '../../lib/observe/metrics.ts'
import type { Cluster, ClusterDestination, GatewayAddressPolicy } from '../../lib/compile/table.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'
import { startDnsSwitch } from '../helpers/dns-switch.ts'
import { cluster } from './fixtures.ts'

const skip = dnsmasqSkip()

function hostCluster(host: string, over: Partial<Cluster> = {}): Cluster {
  return cluster({ hostname: host, endpoints: [{ host, port: 443, kind: 'hostname', weight: 1, zone: null }], ...over })
}

function gateway(over: Partial<GatewayAddressPolicy> = {}): GatewayAddressPolicy {
  return { gateway: 'ns/egress', allowCidrs: [], denyCidrs: [], onlyCidrs: null, reverseDnsSuffixes: null, ...over }
}

function destination(gateways: GatewayAddressPolicy[], reverseDnsSuffixes: string[] | null = null): ClusterDestination {
  return { gateways, reverseDnsSuffixes }
}

async function until(fn: () => Promise<boolean>, what: string, timeoutMs = 8000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (let i = 0; i < 400; i++) {
    if (await fn()) return
    if (Date.now() > deadline) break
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`)
}

async function metric(name: string): Promise<string> {
  return (await registry.metrics()).split('\n').filter((l) => l.startsWith(name)).join('\n')
}

function counterValue(text: string, labels: string): number {
  const line = text.split('\n').find((l) => l.includes(labels))
  return line === undefined ? 0 : Number(line.split(' ').pop())
}

t.test('answers honour the TTL: a changed record is picked up after expiry, refreshed ahead while in use', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.1 api.ttl.test'], ttl: 1 })
  const r = new DestinationResolver({ dns: { servers: [dns.server], minTtlMs: 1000, maxTtlMs: 1000, staleMs: 0, timeoutMs: 500, tries: 1 } })
  t.teardown(() => r.close())
  const c = hostCluster('api.ttl.test')
  const first = await r.resolve(c, 'api.ttl.test')
  t.same(first.addresses, ['203.0.113.1'])
  t.equal(first.error, null)
  t.equal(r.peek(c, 'api.ttl.test'), first, 'a fresh answer is served from the cache, same object')
  await dns.update(['203.0.113.2 api.ttl.test'], { name: 'api.ttl.test', expect: '203.0.113.2' })
  // Keep using the name: the refresh-ahead timer (80% of the TTL) re-queries in the background.
  let seen: Resolution | null = null
  await until(async () => {
    seen = r.peek(c, 'api.ttl.test') ?? await r.resolve(c, 'api.ttl.test')
    return seen.addresses[0] === '203.0.113.2'
  }, 'the new address')
  t.not(seen, first, 'a changed answer is a new Resolution (the registry rotates pools on it)')
})

t.test('TTLs are clamped to the minimum: a 1 s record is kept for minTtl', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.3 api.clamp.test'], ttl: 1 })
  const r = new DestinationResolver({ dns: { servers: [dns.server], minTtlMs: 30_000, staleMs: 0, timeoutMs: 500, tries: 1 } })
  t.teardown(() => r.close())
  const c = hostCluster('api.clamp.test')
  t.same((await r.resolve(c, 'api.clamp.test')).addresses, ['203.0.113.3'])
  await dns.update(['203.0.113.4 api.clamp.test'], { name: 'api.clamp.test', expect: '203.0.113.4' })
  await new Promise((res) => setTimeout(res, 1500))
  t.same(r.peek(c, 'api.clamp.test')?.addresses, ['203.0.113.3'], 'still the first answer: the TTL was raised to 30 s')
})

t.test('NXDOMAIN fails the name (never served stale) and is counted', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.5 api.gone.test'] })
  const r = new DestinationResolver({ dns: { servers: [dns.server], minTtlMs: 1000, maxTtlMs: 1000, staleMs: 60_000, timeoutMs: 500, tries: 1 } })
  t.teardown(() => r.close())
  const c = hostCluster('api.gone.test')
  t.same((await r.resolve(c, 'api.gone.test')).addresses, ['203.0.113.5'])
  const before = counterValue(await metric('sallyport_dns_failures_total'), 'kind="nxdomain"')
  const missing = await r.resolve(hostCluster('nope.test'), 'nope.test')
  t.equal(missing.error?.code, 'SP_ERR_UPSTREAM_DNS', 'a DNS failure, told apart from a connect failure')
  t.equal(missing.error?.status, 503)
  t.equal(missing.error?.detail, 'nope.test: NXDOMAIN', 'the name and what DNS said, for the client and the access line')
  t.match(missing.error?.message, /NXDOMAIN/)
  t.equal((missing.error?.cause as { code: string }).code, 'ENOTFOUND', 'the cause keeps the c-ares code (reason "dns" in connect metrics)')
  // The name disappears: once the answer expires, the stale window does not apply to NXDOMAIN.
  await dns.update([], { name: 'api.gone.test', expect: null })
  await until(async () => (await r.resolve(c, 'api.gone.test')).error !== null, 'the name to fail')
  t.ok(counterValue(await metric('sallyport_dns_failures_total'), 'kind="nxdomain"') >= before + 2, 'nxdomain failures counted')
})

t.test('SERVFAIL: the last answer is served for the stale window, then the name fails', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.6 api.flaky.example'], servfailZones: ['flaky.example'] })
  const r = new DestinationResolver({ dns: { servers: [dns.server], minTtlMs: 1000, maxTtlMs: 1000, staleMs: 2500, timeoutMs: 500, tries: 1 } })
  t.teardown(() => r.close())
  const c = hostCluster('api.flaky.example')
  t.same((await r.resolve(c, 'api.flaky.example')).addresses, ['203.0.113.6'])
  const staleBefore = counterValue(await metric('sallyport_dns_stale_answers_total'), 'sallyport_dns_stale_answers_total')
  // The record leaves the hosts file: dnsmasq forwards the name upstream, which answers SERVFAIL.
  await dns.update([])
  const failedAt = Date.now()
  await new Promise((res) => setTimeout(res, 1300)) // past the 1 s TTL
  const stale = await r.resolve(c, 'api.flaky.example')
  t.same(stale.addresses, ['203.0.113.6'], 'the expired answer is still served while the resolver fails')
  t.ok(counterValue(await metric('sallyport_dns_stale_answers_total'), 'sallyport_dns_stale_answers_total') > staleBefore, 'stale answers counted')
  // Served before its refresh came back; the refresh's SERVFAIL follows.
  await until(async () => /kind="servfail"/.test(await metric('sallyport_dns_failures_total')), 'SERVFAIL classified')
  // Bounded: past TTL + stale window, the name fails.
  await until(async () => (await r.resolve(c, 'api.flaky.example')).error !== null, 'the stale window to close', 6000)
  t.ok(Date.now() - failedAt >= 2500, 'not before the stale window closed')
})

t.test('a resolver that does not answer at all (dnsmasq stopped): stale answer, then failure', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.7 api.down.test'] })
  const r = new DestinationResolver({ dns: { servers: [dns.server], minTtlMs: 1000, maxTtlMs: 1000, staleMs: 60_000, timeoutMs: 300, tries: 1 } })
  t.teardown(() => r.close())
  const c = hostCluster('api.down.test')
  t.same((await r.resolve(c, 'api.down.test')).addresses, ['203.0.113.7'])
  await dns.stop()
  await new Promise((res) => setTimeout(res, 1300))
  t.same((await r.resolve(c, 'api.down.test')).addresses, ['203.0.113.7'], 'served stale')
  const cold = await r.resolve(hostCluster('api.other.test'), 'api.other.test')
  t.equal(cold.error?.code, 'SP_ERR_UPSTREAM_DNS', 'a name never answered has nothing stale to serve')
  t.equal(cold.error?.detail, 'api.other.test: UNREACHABLE', 'the resolver refused the connection')
})

t.test('a name rebinding to the metadata service or loopback is refused (confused-deputy guard)', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.8 api.rebind.test'] })
  const r = new DestinationResolver({ dns: { servers: [dns.server], minTtlMs: 1000, maxTtlMs: 1000, staleMs: 0, timeoutMs: 500, tries: 1 } })
  t.teardown(() => r.close())
  const c = hostCluster('api.rebind.test')
  t.same((await r.resolve(c, 'api.rebind.test')).addresses, ['203.0.113.8'])
  await dns.update(['169.254.169.254 api.rebind.test'], { name: 'api.rebind.test', expect: '169.254.169.254' })
  let res: Resolution | null = null
  await until(async () => { res = await r.resolve(c, 'api.rebind.test'); return res.error !== null }, 'the rebinding to be refused')
  t.equal(res!.error?.code, 'SP_ERR_DESTINATION_REFUSED')
  t.equal(res!.error?.status, 502)
  t.match(res!.error?.message, /169\.254\.169\.254 \(link-local\)/)
  await dns.update(['127.0.0.1 api.rebind.test'], { name: 'api.rebind.test', expect: '127.0.0.1' })
  await until(async () => { res = await r.resolve(c, 'api.rebind.test'); return /127\.0\.0\.1/.test(res.error?.message ?? '') }, 'loopback refused')
  t.match(res!.error?.message, /127\.0\.0\.1 \(loopback\)/)
  const m = await metric('sallyport_destination_refusals_total')
  t.match(m, new RegExp(`backend="${c.id.replace(/[/.]/g, '.')}",reason="link-local"`))
  t.match(m, /reason="loopback"/)

  // A Service with a name for an endpoint is an ExternalName Service: guarded like a Backend
  // (Services with addresses are in-cluster destinations and resolve nothing).
  const svc = hostCluster('api.rebind.test', { kind: 'Service' })
  t.match((await r.resolve(svc, 'api.rebind.test')).error?.message, /127\.0\.0\.1 \(loopback\)/)
  const svcAllowed = hostCluster('api.rebind.test', { kind: 'Service', destination: destination([gateway({ allowCidrs: ['127.0.0.0/8'] })]) })
  t.same((await r.resolve(svcAllowed, 'api.rebind.test')).addresses, ['127.0.0.1'], 'an ExternalName Service allowed by its Gateway')
  // Allowed explicitly by the Gateway (annotation) or globally (flag).
  const allowed = hostCluster('api.rebind.test', { destination: destination([gateway({ allowCidrs: ['127.0.0.0/8'] })]) })
  t.same((await r.resolve(allowed, 'api.rebind.test')).addresses, ['127.0.0.1'], 'allowed by the Gateway')
  const strict = hostCluster('api.rebind.test', { destination: destination([gateway({ allowCidrs: ['127.0.0.0/8'] }), gateway({ gateway: 'ns/other' })]) })
  t.ok((await r.resolve(strict, 'api.rebind.test')).error !== null, 'every Gateway using the Backend must allow it')
  const global = new DestinationResolver({ dns: { servers: [dns.server], timeoutMs: 500, tries: 1 }, guard: { allowCidrs: ['127.0.0.1/32'] } })
  t.teardown(() => global.close())
  t.same((await global.resolve(c, 'api.rebind.test')).addresses, ['127.0.0.1'], 'allowed by --allow-destination-cidr')
  const clusterRange = new DestinationResolver({ dns: { servers: [dns.server], timeoutMs: 500, tries: 1 }, guard: { clusterCidrs: ['203.0.113.0/24'] } })
  t.teardown(() => clusterRange.close())
  await dns.update(['203.0.113.9 api.pod.test'], { name: 'api.pod.test', expect: '203.0.113.9' })
  t.match((await clusterRange.resolve(hostCluster('api.pod.test'), 'api.pod.test')).error?.message, /\(cluster\)/, '--cluster-cidr ranges are refused')
})

t.test('only refused addresses are dropped: the others of the answer are used', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.10 api.mixed.test', '10.1.2.3 api.mixed.test'] })
  const r = new DestinationResolver({ dns: { servers: [dns.server], timeoutMs: 500, tries: 1 } })
  t.teardown(() => r.close())
  t.same((await r.resolve(hostCluster('api.mixed.test'), 'api.mixed.test')).addresses, ['203.0.113.10'])
  const denied = hostCluster('api.mixed.test', { destination: destination([gateway({ allowCidrs: ['10.0.0.0/8'], denyCidrs: ['203.0.113.0/24'] })]) })
  t.same((await r.resolve(denied, 'api.mixed.test')).addresses, ['10.1.2.3'], 'deny-list CIDR drops the public one, the allowance admits the private one')
  const only = hostCluster('api.mixed.test', { destination: destination([gateway({ onlyCidrs: ['198.51.100.0/24'] })]) })
  t.match((await r.resolve(only, 'api.mixed.test')).error?.message, /not-allowed/, 'allow-list CIDRs: nothing else is reachable')
})

t.test('reverse-DNS check: forward-confirmed PTR under the suffix passes; others are refused', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, {
    hosts: [
      '203.0.113.20 edge1.trusted.example api.ptr-ok.test',
      '203.0.113.21 api.ptr-bad.test',
      '203.0.113.22 api.ptr-spoof.test',
    ],
    args: [
      '--ptr-record=21.113.0.203.in-addr.arpa,host.elsewhere.example',
      // Claims a trusted name that does not resolve back to it.
      '--ptr-record=22.113.0.203.in-addr.arpa,fake.trusted.example',
    ],
  })
  const r = new DestinationResolver({ dns: { servers: [dns.server], timeoutMs: 500, tries: 1 } })
  t.teardown(() => r.close())
  const ok = hostCluster('api.ptr-ok.test', { destination: destination([], ['.trusted.example']) })
  t.same((await r.resolve(ok, 'api.ptr-ok.test')).addresses, ['203.0.113.20'], 'PTR edge1.trusted.example → 203.0.113.20')
  const bad = hostCluster('api.ptr-bad.test', { destination: destination([], ['.trusted.example']) })
  const badRes = await r.resolve(bad, 'api.ptr-bad.test')
  t.equal(badRes.error?.code, 'SP_ERR_DESTINATION_REFUSED')
  t.match(badRes.error?.message, /reverse-dns/)
  const spoof = hostCluster('api.ptr-spoof.test', { destination: destination([gateway({ reverseDnsSuffixes: ['trusted.example'] })]) })
  t.match((await r.resolve(spoof, 'api.ptr-spoof.test')).error?.message, /reverse-dns/, 'a PTR that does not forward-confirm fails (Gateway-scoped suffixes)')
  t.match(await metric('sallyport_destination_refusals_total'), /reason="reverse-dns"/)
  t.match(await metric('sallyport_dns_lookups_total'), /type="PTR",result="ok"/)
})

t.test('IPv6 per cluster: AAAA only with enableIPv6; IPv4 only by default', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.30 api.dual.test', '2001:db8::30 api.dual.test', '2001:db8::31 api.v6only.test', 'fd00::1 api.ula.test'] })
  const r = new DestinationResolver({ dns: { servers: [dns.server], timeoutMs: 500, tries: 1 } })
  t.teardown(() => r.close())
  t.same((await r.resolve(hostCluster('api.dual.test'), 'api.dual.test')).addresses, ['203.0.113.30'], 'IPv4 only by default')
  t.same((await r.resolve(hostCluster('api.dual.test', { enableIPv6: true }), 'api.dual.test')).addresses, ['203.0.113.30', '2001:db8::30'], 'both, IPv4 first')
  t.same((await r.resolve(hostCluster('api.v6only.test', { enableIPv6: true }), 'api.v6only.test')).addresses, ['2001:db8::31'], 'NODATA for A is fine when AAAA answers')
  t.ok((await r.resolve(hostCluster('api.v6only.test'), 'api.v6only.test')).error !== null, 'an IPv6-only name fails with IPv6 off')
  t.match((await r.resolve(hostCluster('api.ula.test', { enableIPv6: true }), 'api.ula.test')).error?.message, /fd00::1 \(private\)/, 'fc00::/7 is guarded')
})

t.test('enableIPv6: an AAAA query that times out does not hold up the A answer that arrived (and the other way round)', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.32 api.noaaaa.test', '203.0.113.33 api.slowa.test', '2001:db8::33 api.slowa.test'], ttl: 1 })
  const sw = await startDnsSwitch(t, dns.server)
  sw.set('silent', { name: 'api.noaaaa.test', type: 'AAAA' })
  sw.set('silent', { name: 'api.slowa.test', type: 'A' })
  // A query to the silent side waits 3 s before it fails.
  const r = new DestinationResolver({ dns: { servers: [sw.server], minTtlMs: 1000, maxTtlMs: 1000, staleMs: 30_000, timeoutMs: 3000, tries: 1 } })
  t.teardown(() => r.close())
  const c = hostCluster('api.noaaaa.test', { enableIPv6: true })
  let started = Date.now()
  const first = await r.resolve(c, 'api.noaaaa.test')
  t.same(first.addresses, ['203.0.113.32'], 'the A answer')
  t.equal(first.error, null)
  t.ok(Date.now() - started < 1500, `served within 1.5 s although the AAAA query waits 3 s (took ${Date.now() - started} ms)`)
  // Requests for five seconds: while the AAAA query is out, after it timed out, and while it is asked again.
  const until = Date.now() + 5000
  let slowest = 0
  while (Date.now() < until) {
    started = Date.now()
    const res = r.peek(c, 'api.noaaaa.test') ?? await r.resolve(c, 'api.noaaaa.test')
    slowest = Math.max(slowest, Date.now() - started)
    if (res.addresses[0] !== '203.0.113.32') t.fail(`unexpected ${JSON.stringify(res)}`)
    await new Promise((res) => setTimeout(res, 50))
  }
  t.ok(slowest < 1000, `each within 1 s (slowest ${slowest} ms)`)

  // A resolver of its own: c-ares shortens its timeouts for a server that timed out before.
  const r2 = new DestinationResolver({ dns: { servers: [sw.server], minTtlMs: 1000, maxTtlMs: 1000, staleMs: 30_000, timeoutMs: 3000, tries: 1 } })
  t.teardown(() => r2.close())
  started = Date.now()
  const v6 = await r2.resolve(hostCluster('api.slowa.test', { enableIPv6: true }), 'api.slowa.test')
  t.same(v6.addresses, ['2001:db8::33'], 'the AAAA answer while the A query is out')
  t.ok(Date.now() - started < 1500, `served within 1.5 s although the A query waits 3 s (took ${Date.now() - started} ms)`)
})

t.test('a Gateway deny-list CIDR also refuses IPv6 addresses carrying a denied IPv4 one (DNS64/NAT64, 6to4, IPv4-compatible)', { skip: skip ?? false }, async (t) => {
  // An IPv6-only cluster's DNS64 answers every IPv4-only name with 64:ff9b::<IPv4>;
  // its NAT64 gateway then reaches the IPv4 address the deny-list names.
  const dns = await startDnsmasq(t, { hosts: ['64:ff9b::cb00:7107 api.dns64.test', '2002:cb00:7108::1 api.6to4.test', '2001:db8::40 api.plain6.test'] })
  const r = new DestinationResolver({ dns: { servers: [dns.server], timeoutMs: 500, tries: 1 } })
  t.teardown(() => r.close())
  const denied = (host: string): Cluster => hostCluster(host, { enableIPv6: true, destination: destination([gateway({ denyCidrs: ['203.0.113.0/24'] })]) })
  t.match((await r.resolve(denied('api.dns64.test'), 'api.dns64.test')).error?.message, /64:ff9b::cb00:7107 \(denied\)/, 'NAT64 answer carrying a denied address')
  t.match((await r.resolve(denied('api.6to4.test'), 'api.6to4.test')).error?.message, /\(denied\)/, '6to4 answer carrying a denied address')
  for (const literal of ['64:ff9b::cb00:7107', '::203.0.113.7', '::ffff:0:203.0.113.7', '::ffff:203.0.113.7']) {
    t.match((await r.resolve(denied(literal), literal)).error?.message, /\(denied\)/, `a requested IP literal ${literal}`)
  }
  t.same((await r.resolve(denied('api.plain6.test'), 'api.plain6.test')).addresses, ['2001:db8::40'], 'an ordinary IPv6 address is not affected')
})

t.test('an ExternalName Service\'s name is guarded like a Backend\'s: it must not resolve to loopback or metadata', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.1 lo.extname.test', '169.254.169.254 meta.extname.test', '203.0.113.50 pub.extname.test'] })
  const r = new DestinationResolver({ dns: { servers: [dns.server], timeoutMs: 500, tries: 1 } })
  t.teardown(() => r.close())
  const extName = (host: string): Cluster => hostCluster(host, { kind: 'Service', id: `Service/ns/${host}:80` })
  t.match((await r.resolve(extName('lo.extname.test'), 'lo.extname.test')).error?.message, /127\.0\.0\.1 \(loopback\)/)
  t.match((await r.resolve(extName('meta.extname.test'), 'meta.extname.test')).error?.message, /169\.254\.169\.254 \(link-local\)/)
  t.same((await r.resolve(extName('pub.extname.test'), 'pub.extname.test')).addresses, ['203.0.113.50'])
  t.match((await r.resolve(extName('169.254.169.254'), '169.254.169.254')).error?.message, /\(link-local\)/, 'externalName: 169.254.169.254')
})

t.test('reverse-DNS check: a PTR lookup the resolver fails (SERVFAIL) refuses the address only until the check succeeds', { skip: skip ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['203.0.113.23 edge2.trusted.example api.ptr-blip.test'] })
  const sw = await startDnsSwitch(t, dns.server)
  // Verdicts are kept for the max TTL (60 s here): far longer than this test waits.
  const r = new DestinationResolver({ dns: { servers: [sw.server], timeoutMs: 500, tries: 1, maxTtlMs: 60_000 } })
  t.teardown(() => r.close())
  const c = hostCluster('api.ptr-blip.test', { destination: destination([], ['.trusted.example']) })
  sw.set('servfail', { name: '23.113.0.203.in-addr.arpa' })
  const blip = await r.resolve(c, 'api.ptr-blip.test')
  t.match(blip.error?.message, /reverse-dns/, 'no verdict while the resolver fails: refused (fail closed)')
  sw.set('pass')
  let res: Resolution | null = null
  await until(async () => { res = r.peek(c, 'api.ptr-blip.test') ?? await r.resolve(c, 'api.ptr-blip.test'); return res.error === null }, 'the address checked again once the resolver answers', 8000)
  t.same(res!.addresses, ['203.0.113.23'])
})
