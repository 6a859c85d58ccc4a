// Failover order (issue 6): three priority levels spill in order when the
// upper ones refuse connections; an Envoy Gateway `fallback: true` Backend is
// used only while the others are unavailable, and traffic returns after.
import t from 'tap'
import { configureLogger } from '../../lib/observe/log.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { PASSIVE, bodies, closedPort, countOf, gateway, metric, sleep, upstream } from './fixtures.ts'

configureLogger({ level: 'silent' })

t.test('priorities 0, 1, 2: refused connections spill to the next level in order, without a retry policy', async (t) => {
  const tertiary = await upstream(t, 'tertiary')
  const secondary = await upstream(t, 'secondary')
  const [dead0, dead1] = [await closedPort(), await closedPort()]
  const port = await freePort()
  const route = (name: string, hostnames: string[], second: string) => ({ name, hostnames, rules: [{ backends: [{ cluster: 'p0', priority: 0 }, { cluster: second, priority: 1 }, { cluster: 't2', priority: 2 }] }] })
  const table = buildTable({ [port]: { routes: [route('both-down', ['x'], 'd1'), route('one-down', ['y'], 's1')] } },
    [cluster('p0', dead0), cluster('d1', dead1), cluster('s1', secondary.port), cluster('t2', tertiary.port)])
  const gw = await gateway(t, table)
  const before = await metric('sallyport_upstream_failover_total', { route: 'test/both-down', from_priority: '1', to_priority: '2' })
  t.same(countOf(await bodies(gw.port, 4, { headers: { host: 'x' } })), { tertiary: 4 }, 'levels 0 and 1 refuse: level 2 answers')
  t.ok(await metric('sallyport_upstream_failover_total', { route: 'test/both-down', from_priority: '1', to_priority: '2' }) >= before + 4, 'failover 1 → 2 counted')
  t.same(countOf(await bodies(gw.port, 4, { headers: { host: 'y' } })), { secondary: 4 }, 'level 0 refuses: level 1 answers, level 2 untouched')
  t.equal(tertiary.hits, 4)
})

t.test('Backend fallback: true is used only while the regular backend is unavailable', async (t) => {
  let failing = false
  const main = await upstream(t, 'main', (_req, res) => { res.writeHead(failing ? 500 : 200).end('main') })
  const spare = await upstream(t, 'spare')
  const port = await freePort()
  const passive = { ...PASSIVE, consecutive5xxErrors: 1, baseEjectionTimeMs: 1000, maxEjectionPercent: 100 }
  // Both refs at priority 0: the fallback flag alone puts `spare` below `main`.
  const table = buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'main' }, { cluster: 'spare' }] }] }] } },
    [cluster('main', main.port, { healthCheck: { active: null, passive } }), cluster('spare', spare.port, { fallback: true })])
  const gw = await gateway(t, table)
  t.same(countOf(await bodies(gw.port, 10)), { main: 10 }, 'the fallback takes nothing while main is healthy')
  failing = true
  t.same(countOf(await bodies(gw.port, 1)), { main: 1 }, 'main answers 500 once and is ejected')
  t.same(countOf(await bodies(gw.port, 5)), { spare: 5 }, 'then the fallback takes the traffic')
  failing = false
  await sleep(1050) // a 1 s ejection: the five requests above fit inside it on a loaded machine
  t.same(countOf(await bodies(gw.port, 5)), { main: 5 }, 'back to main after its ejection')
})
