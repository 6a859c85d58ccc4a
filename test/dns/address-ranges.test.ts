// CIDR parsing and the guarded ranges (lib/address-ranges.ts): the tables the
// confused-deputy guard and the destination annotations rest on.
import t from 'tap'
import { guardedRangeOf, matchCidr, matchCidrCarried, parseCidr, parseCidrList, parseIp } from '../../lib/address-ranges.ts'

t.test('addresses and CIDRs parse, normalize, and reject garbage', async t => {
  t.same(parseCidr('10.1.2.3/8')?.text, '10.0.0.0/8', 'host bits cleared')
  t.same(parseCidr('127.0.0.1')?.text, '127.0.0.1/32', 'a bare address is a /32')
  t.same(parseCidr('fd00::1/8')?.text, 'fd00::/8')
  t.same(parseCidr('::1')?.text, '::1/128')
  for (const bad of ['10.0.0.0/33', '256.1.1.1', '1.2.3', 'fe80::1/129', 'example.com', '1.2.3.4/x', '::ffff:1.2.3.4.5', '1:2:3:4:5:6:7:8:9']) {
    t.equal(parseCidr(bad), null, `${bad} is not a CIDR`)
  }
  t.same(parseCidrList(['10.0.0.0/8', 'nope']), { cidrs: [parseCidr('10.0.0.0/8')], invalid: ['nope'] })
  t.equal(parseIp('::ffff:127.0.0.1')?.family, 4, 'IPv4-mapped IPv6 is IPv4')
  t.equal(parseIp('fe80::1%eth0')?.family, 6, 'zone ids are ignored')
})

t.test('matchCidr: family-aware, first match wins', async t => {
  const list = parseCidrList(['10.0.0.0/8', '2001:db8::/32', '0.0.0.0/0']).cidrs
  t.equal(matchCidr(list, '10.9.9.9')?.text, '10.0.0.0/8')
  t.equal(matchCidr(list, '8.8.8.8')?.text, '0.0.0.0/0')
  t.equal(matchCidr(list, '2001:db8::5')?.text, '2001:db8::/32')
  t.equal(matchCidr(list, '2001:db9::5'), null, 'an IPv4 /0 does not match IPv6')
  t.equal(matchCidr(list, 'not-an-ip'), null)
})

t.test('guarded ranges: what the guard refuses without an allowance, and what it lets through', async t => {
  const cases: Array<[string, string | null]> = [
    ['127.0.0.1', 'loopback'], ['127.255.0.9', 'loopback'], ['::1', 'loopback'], ['::ffff:127.0.0.1', 'loopback'],
    ['169.254.169.254', 'link-local'], ['fe80::1', 'link-local'], ['fd00:ec2::254', 'link-local'],
    ['10.0.0.1', 'private'], ['172.16.5.4', 'private'], ['172.31.255.255', 'private'], ['192.168.1.1', 'private'], ['fd12::1', 'private'],
    ['100.64.0.1', 'cgnat'], ['100.127.255.254', 'cgnat'],
    ['0.0.0.0', 'unspecified'], ['::', 'unspecified'],
    ['224.0.0.1', 'multicast'], ['ff02::1', 'multicast'], ['255.255.255.255', 'broadcast'], ['240.0.0.1', 'reserved'],
    ['8.8.8.8', null], ['172.32.0.1', null], ['100.128.0.1', null], ['192.0.2.10', null], ['2606:4700::1111', null],
  ]
  for (const [address, reason] of cases) t.equal(guardedRangeOf(address), reason, `${address}: ${reason ?? 'public'}`)
})

t.test('an IPv6 address that carries an IPv4 destination is judged by it', async t => {
  // In an IPv6-only cluster a NAT64 gateway reaches 64:ff9b::a9fe:a9fe at 169.254.169.254:
  // an AAAA record can name the metadata service that way. So can 6to4 and the old
  // IPv4-compatible form.
  const cases: Array<[string, string | null]> = [
    ['64:ff9b::a9fe:a9fe', 'link-local'], ['64:ff9b::169.254.169.254', 'link-local'], ['64:ff9b::7f00:1', 'loopback'],
    ['64:ff9b::a00:1', 'private'], ['64:ff9b:1::a9fe:a9fe', 'link-local'], ['2002:7f00:1::1', 'loopback'],
    ['2002:a9fe:a9fe::', 'link-local'], ['::127.0.0.1', 'loopback'], ['::a9fe:a9fe', 'link-local'],
    // IPv4-translated (SIIT, RFC 2765): ::ffff:0:a.b.c.d.
    ['::ffff:0:a9fe:a9fe', 'link-local'], ['::ffff:0:127.0.0.1', 'loopback'], ['::ffff:0:10.1.2.3', 'private'],
    // Their public IPv4 destinations stay public.
    ['64:ff9b::808:808', null], ['2002:808:808::1', null], ['::8.8.8.8', null], ['::ffff:0:8.8.8.8', null],
  ]
  for (const [address, reason] of cases) t.equal(guardedRangeOf(address), reason, `${address}: ${reason ?? 'public'}`)
  t.equal(guardedRangeOf('::'), 'unspecified', ':: stays unspecified')
  t.equal(guardedRangeOf('::1'), 'loopback', '::1 stays loopback')
})

t.test('the IPv6 discard-only prefix is reserved', async t => {
  // 100::/64 (RFC 6666) is routed to a black hole: never a real destination.
  t.equal(guardedRangeOf('100::1'), 'reserved')
  t.equal(guardedRangeOf('100::ffff:ffff:ffff:ffff'), 'reserved')
  t.equal(guardedRangeOf('100:0:0:1::1'), null, 'outside the /64')
})

t.test('matchCidrCarried: an IPv6 address carrying an IPv4 one matches that IPv4 address\'s ranges too', async t => {
  const list = [parseCidr('203.0.113.0/24'), parseCidr('2001:db8::/32')].filter(c => c !== null)
  for (const a of ['203.0.113.7', '::ffff:203.0.113.7', '64:ff9b::cb00:7107', '64:ff9b:1::cb00:7107', '2002:cb00:7107::1', '::ffff:0:cb00:7107', '::203.0.113.7', '2001:db8::1']) {
    t.ok(matchCidrCarried(list, a), a)
  }
  for (const a of ['198.51.100.1', '64:ff9b::c633:6401', '2001:db9::1', 'not-an-ip']) t.equal(matchCidrCarried(list, a), null, a)
  t.equal(matchCidr(list, '64:ff9b::cb00:7107'), null, 'matchCidr itself stays literal')
})
