// ReverseDnsChecker: PTR verdicts are cached, and the cache stays bounded
// (10000 addresses) even when none of its verdicts has expired yet.
import t from 'tap'
import { ReverseDnsChecker } from '../../lib/upstream/dns-reverse.ts'

t.test('verdicts are cached per address; past 10000 fresh ones the oldest go', async (t) => {
  const asked = new Map<string, number>()
  const client = {
    reverse: async (address: string): Promise<string[]> => { asked.set(address, (asked.get(address) ?? 0) + 1); return [`h-${address.replaceAll('.', '-')}.example.com`] },
    query: async (name: string): Promise<{ addresses: string[]; ttlSec: number }> => ({ addresses: [name.slice(2, name.indexOf('.')).replaceAll('-', '.')], ttlSec: 60 }),
  }
  const checker = new ReverseDnsChecker(client, 300_000)
  t.same(await checker.verifiedNames('10.0.0.1'), ['h-10-0-0-1.example.com'], 'a PTR name that resolves back confirms')
  await checker.verifiedNames('10.0.0.1')
  t.equal(asked.get('10.0.0.1'), 1, 'the verdict is cached')
  for (let i = 0; i < 12_000; i++) await checker.verifiedNames(`10.1.${i >> 8}.${i & 255}`)
  await checker.verifiedNames('10.1.46.223')
  t.equal(asked.get('10.1.46.223'), 1, 'a recent verdict is still cached')
  await checker.verifiedNames('10.0.0.1')
  t.equal(asked.get('10.0.0.1'), 2, 'the oldest verdict was dropped to keep the cache bounded, and is asked again')
})
