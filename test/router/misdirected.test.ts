// Listener isolation on a shared HTTPS port (lib/router/misdirected.ts, GEP-3567):
// the listener a name selects, and which requests a connection's SNI rules out.
import t from 'tap'
import type { ListenerNames } from '../../lib/compile/table.ts'
import { ConnectionSni, selectListener } from '../../lib/router/misdirected.ts'

// Listeners: 0 a.example.com, 1 *.example.com, 2 *.b.example.com, 3 (no hostname).
const names: ListenerNames = {
  exact: new Map([['a.example.com', 0]]),
  wildcards: [{ suffix: '.b.example.com', value: 2 }, { suffix: '.example.com', value: 1 }],
  fallback: 3,
}

t.test('selectListener: exact, then the longest wildcard, then the listener without hostname', async t => {
  t.equal(selectListener(names, 'a.example.com'), 0)
  t.equal(selectListener(names, 'c.example.com'), 1)
  t.equal(selectListener(names, 'x.y.example.com'), 1, 'a wildcard covers one or more labels')
  t.equal(selectListener(names, 'c.b.example.com'), 2, 'the longest suffix')
  t.equal(selectListener(names, 'example.com'), 3, 'a wildcard does not cover its parent')
  t.equal(selectListener(names, 'other.test'), 3)
  t.equal(selectListener({ ...names, fallback: null }, 'other.test'), null, 'none: null')
})

t.test('ConnectionSni: a host of another listener than the SNI\'s is misdirected; its own, or one no listener takes, is not', async t => {
  const viaA = new ConnectionSni('a.example.com')
  t.equal(viaA.misdirects(names, 'a.example.com'), false)
  t.equal(viaA.misdirects(names, 'c.example.com'), true, 'the wildcard listener\'s host')
  t.equal(viaA.misdirects(names, 'other.test'), true, 'the catch-all listener\'s host')
  const viaWild = new ConnectionSni('c.example.com')
  t.equal(viaWild.misdirects(names, 'd.example.com'), false, 'another name of the same listener')
  t.equal(viaWild.misdirects(names, 'a.example.com'), true, 'the exact listener\'s host')
  t.equal(viaWild.misdirects(names, 'x.b.example.com'), true, 'a more specific wildcard listener\'s host')
  const onlyExact: ListenerNames = { exact: new Map([['a.example.com', 0], ['b.example.com', 1]]), wildcards: [], fallback: null }
  t.equal(new ConnectionSni('a.example.com').misdirects(onlyExact, 'nobody.test'), false, 'no listener takes it: not misdirected (a 404 elsewhere)')
})

t.test('ConnectionSni: the SNI\'s listener is selected again in a new table', async t => {
  const conn = new ConnectionSni('a.example.com')
  t.equal(conn.misdirects(names, 'c.example.com'), true)
  // A reload that renumbers: a.example.com is now listener 1, the wildcard 0.
  const renumbered: ListenerNames = { exact: new Map([['a.example.com', 1]]), wildcards: [{ suffix: '.example.com', value: 0 }], fallback: null }
  t.equal(conn.misdirects(renumbered, 'a.example.com'), false)
  t.equal(conn.misdirects(renumbered, 'c.example.com'), true, 'still the wildcard\'s host, whatever its index')
  // A reload that drops a's value: the wildcard takes both names, one listener.
  const merged: ListenerNames = { exact: new Map(), wildcards: [{ suffix: '.example.com', value: 0 }], fallback: 1 }
  t.equal(conn.misdirects(merged, 'c.example.com'), false, 'the connection\'s name now selects the wildcard listener too')
  t.equal(conn.misdirects(merged, 'other.test'), true)
})

t.test('a connection without a server name below TLS 1.3: the hosts of a TLSv1.3 listener are refused, others not', async (t) => {
  const cert = (hostname: string | null, minVersion: 'TLSv1.2' | 'TLSv1.3') => ({ id: hostname ?? 'default', hostname, certPem: '', keyPem: '', minVersion })
  const tls = {
    exact: new Map([['strict.test', cert('strict.test', 'TLSv1.3')], ['legacy.test', cert('legacy.test', 'TLSv1.2')]]),
    wildcards: [], fallback: null, clientValidation: null, alpn: [], listenerNames: null, minVersion: 'TLSv1.2', maxVersion: 'TLSv1.3',
  } as unknown as import('../../lib/compile/table.ts').ServerTls
  const below = new ConnectionSni('', true)
  t.equal(below.refuses(tls, 'strict.test'), true, 'the strict listener\'s host')
  t.equal(below.refuses(tls, 'legacy.test'), false)
  t.equal(below.refuses(tls, 'nobody.test'), false, 'a host no listener takes: a 404 as anywhere')
  t.equal(new ConnectionSni('', false).refuses(tls, 'strict.test'), false, 'over TLS 1.3')
})
