// The lookup index is derived data: compile attaches it to every HTTP
// HostIndex, dumps and goldens never show it, and it indexes every key of the
// vhosts (the matcher's answers are tested in test/router/match-index.test.ts).
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import { dumpTable } from '../../lib/compile/print.ts'
import { buildLookupIndex, ensureLookupIndexes } from '../../lib/compile/lookup-index.ts'
import { FLAG_EXACT, FLAG_QUERY, FLAG_REGEX, HEAD_FINAL, HEAD_FITS_ALL, INFO_WORDS, SLOT_WORDS } from '../../lib/lookup-hash.ts'
import * as b from './builders.ts'

function table() {
  const routes = [
    b.httpRoute('a', [b.rule([b.match('/x', 'Exact'), b.match('/p/q/'), b.match('/'), b.match('/r[0-9]', 'RegularExpression')])], { hostnames: ['a.example.com'] }),
    b.httpRoute('w', [b.rule([b.match('/w', 'PathPrefix', { queryParams: [{ type: 'Exact', name: 'v', value: '1' }] })])], { hostnames: ['*.example.com'] }),
    b.httpRoute('any', [b.rule([b.match('/any', 'Exact')])]),
  ]
  return compile(b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 80)]), b.service('svc'), ...routes]), b.opts).table
}

t.test('attached to the HostIndex, not enumerable: dumps, JSON and freezing skip it', async t => {
  const hosts = table().ports.get(80)?.http
  if (hosts == null) return t.fail('no port 80')
  t.ok(hosts.lookup !== undefined, 'a slot for the index')
  t.equal(hosts.lookup?.index, undefined, 'empty until ensureLookupIndexes (the runtime runs it after the swap)')
  const t2 = table()
  ensureLookupIndexes(t2)
  t.ok(t2.ports.get(80)?.http?.lookup?.index !== undefined, 'filled by ensureLookupIndexes')
  t.notOk(Object.keys(hosts).includes('lookup'))
  t.notMatch(JSON.stringify(dumpTable(table())), /lookup|hostSlots|pathSlots/)
  t.ok(Object.isFrozen(hosts), 'the HostIndex itself is frozen')
})

t.test('every key of every vhost is in the index; root lists and flags per vhost', async t => {
  const hosts = table().ports.get(80)?.http
  if (hosts == null) return t.fail('no port 80')
  const ix = buildLookupIndex(hosts)
  t.same(ix.vhosts.map(v => v.hostname), ['a.example.com', '*.example.com', '*'], 'ids: exact, wildcards, catch-all')
  t.equal(ix.fallback, 2)
  t.equal(ix.wildcards, 1)
  t.equal(ix.maxDepth, 2, "'/p/q/' is two segments deep")
  const keys = (slots: ReadonlyArray<unknown>): string[] => {
    const out: string[] = []
    for (let at = 0; at < slots.length; at += SLOT_WORDS) if (slots[at] !== 0) out.push(`${(slots[at + 1] as number) >> 1}:${slots[at + 2] as string}`)
    return out.sort()
  }
  t.same(keys(ix.hostSlots), ['0:a.example.com', '1:.example.com'])
  // a.example.com also carries the wildcard's /w and the catch-all's /any (ranked after its own); the wildcard carries /any.
  t.same(keys(ix.pathSlots), ['0:/any', '0:/p/q', '0:/w', '0:/x', '1:/any', '1:/w', '2:/any'])
  const info = (vid: number, word: number): number => ix.vhostInfo[vid * INFO_WORDS + word]
  t.ok(info(0, 1) >= 0, "vhost 0 has a root '/' list")
  t.equal(ix.matches[info(0, 1)]?.path.value, '/')
  t.equal(info(1, 1), -1)
  t.equal(info(0, 3), FLAG_EXACT | FLAG_REGEX | FLAG_QUERY)
  t.equal(info(1, 3), FLAG_EXACT | FLAG_QUERY)
  t.equal(info(2, 3), FLAG_EXACT)
})

t.test('a path slot carries its list head (rank, no condition, ends the lookup) and first match', async t => {
  const hosts = table().ports.get(80)?.http
  if (hosts == null) return t.fail('no port 80')
  const ix = buildLookupIndex(hosts)
  const heads = new Map<string, number>()
  for (let at = 0; at < ix.pathSlots.length; at += SLOT_WORDS) {
    if (ix.pathSlots[at] === 0) continue
    heads.set(`${(ix.pathSlots[at + 1] as number) >> 1}:${ix.pathSlots[at + 2] as string}`, ix.pathSlots[at + 3] as number)
    t.equal(ix.pathSlots[at + 4], ix.matches[ix.pathLists[at / SLOT_WORDS]], 'the slot holds the first match of its list')
  }
  const head = (key: string): { rank: number; fitsAll: boolean; final: boolean } => {
    const w = heads.get(key)
    if (w === undefined) throw new Error(`no slot ${key}`)
    return { rank: w >> 2, fitsAll: (w & HEAD_FITS_ALL) !== 0, final: (w & HEAD_FINAL) !== 0 }
  }
  const v0 = hosts.exact.get('a.example.com')
  const rankOf = (path: string): number => {
    const m = [...v0?.exactPaths.values() ?? []].flat().find(m => m.path.value === path)
    return m?.rank ?? -1
  }
  // a.example.com: its own Exact '/x' ranks before everything else of the vhost.
  t.same(head('0:/x'), { rank: rankOf('/x'), fitsAll: true, final: true })
  // The catch-all's Exact '/any' ranks after a.example.com's own prefixes: a hit must still look at them.
  t.same(head('0:/any'), { rank: rankOf('/any'), fitsAll: true, final: false })
  // The wildcard's '/w' tests the query: its RouteMatch is read when it is a candidate.
  t.equal(head('0:/w').fitsAll, false)
  t.equal(head('0:/w').final, false, 'a prefix slot never ends the lookup by itself')
  // On the catch-all's own vhost, '/any' is all there is.
  t.same(head('2:/any'), { rank: 0, fitsAll: true, final: true })
})

t.test('prefix keys are the configured PathPrefix values without the trailing slash', async t => {
  const hosts = table().ports.get(80)?.http
  if (hosts == null) return t.fail('no port 80')
  const ix = buildLookupIndex(hosts)
  const keys: string[] = []
  for (let at = 0; at < ix.pathSlots.length; at += SLOT_WORDS) {
    if (ix.pathSlots[at] !== 0 && ((ix.pathSlots[at + 1] as number) & 1) === 1) keys.push(ix.pathSlots[at + 2] as string)
  }
  // '/w' twice: on *.example.com and on a.example.com, which carries the wildcard's matches too.
  t.same(keys.sort(), ['/p/q', '/w', '/w'])
  t.equal(ix.pathSlots.length % SLOT_WORDS, 0)
  t.ok(ix.pathSlots.every(v => v !== undefined), 'no holes')
})

t.test('compile freezes the table unless told not to (the runtime freezes it after the swap)', async t => {
  const snap = b.snapshotOf([b.gatewayClass(), b.gateway('gw', [b.listener('http', 80)]), b.service('svc'), b.httpRoute('a', [b.rule([b.match('/x')])], { hostnames: ['a.example.com'] })])
  const frozen = compile(snap, b.opts).table
  t.ok(Object.isFrozen(frozen) && Object.isFrozen(frozen.ports.get(80)?.http?.exact.get('a.example.com')))
  const open = compile(snap, { ...b.opts, freeze: false }).table
  t.notOk(Object.isFrozen(open))
  t.same(dumpTable(open), dumpTable(frozen), 'the same table either way')
})
