// The listener a request's metrics name: the most specific whose hostname
// covers the host (exact, then the longest wildcard), as routing picks it, not
// the first in the port's list. A wildcard listed before an exact one counted
// the exact one's requests as its own.
import t from 'tap'
import type { PortEntry } from '../../lib/compile/table.ts'
import { servingListener } from '../../lib/observe/serving-listener.ts'

const entry = (...hostnames: Array<string | null>): PortEntry => ({
  port: 8443, protocol: 'HTTPS', listeners: hostnames.map((hostname, i) => ({ gateway: 'default/egress', name: `l${i}`, hostname })),
}) as unknown as PortEntry

t.test('exact beats wildcard, a longer wildcard beats a shorter one, no hostname is the fallback', async (t) => {
  const e = entry(null, '*.example.com', '*.a.example.com', 'a.example.com', 'x.a.example.com')
  t.equal(servingListener(e, 'a.example.com')?.hostname, 'a.example.com')
  t.equal(servingListener(e, 'x.a.example.com')?.hostname, 'x.a.example.com')
  t.equal(servingListener(e, 'y.a.example.com')?.hostname, '*.a.example.com')
  t.equal(servingListener(e, 'b.example.com')?.hostname, '*.example.com')
  t.equal(servingListener(e, 'other.test')?.hostname, null)
  t.equal(servingListener(entry('*.example.com', 'a.example.com'), 'zz.other')?.hostname, undefined, 'none covers it and none lacks a hostname: null')
  t.equal(servingListener(entry('*.example.com'), 'example.com')?.hostname, '*.example.com', 'a single listener serves all')
})
