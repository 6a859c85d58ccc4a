// Load balancing through the real data plane and registry (issue 6): the
// distribution each BackendTrafficPolicy loadBalancer type gives over real
// upstreams, session persistence by header, cookie and source address, and
// slow start after an ejection. Counts are bounded; shares are asserted with
// wide margins, never timings.
import t, { type Test } from 'tap'
import http from 'node:http'
import net from 'node:net'
import type { Cluster, LoadBalancerPolicy } from '../../lib/compile/table.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { PASSIVE, ask, bodies, countOf, ep, gateway, metric, sleep, until, upstream, type Upstream } from './fixtures.ts'

configureLogger({ level: 'silent' })

async function three(t: Test): Promise<Upstream[]> {
  return [await upstream(t, 'a'), await upstream(t, 'b'), await upstream(t, 'c')]
}

function lbCluster(us: readonly Upstream[], lb: LoadBalancerPolicy | null, over: Partial<Cluster> = {}): Cluster {
  return cluster('pool', us[0].port, { endpoints: us.map((u) => ep(u.port)), lb, ...over })
}

async function serve(t: Test, c: Cluster): Promise<number> {
  const port = await freePort()
  return (await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: c.id }] }] }] } }, [c]))).port
}

t.test('RoundRobin: an even split, and weights honoured', async (t) => {
  const us = await three(t)
  const gw = await serve(t, lbCluster(us, { type: 'RoundRobin', consistentHash: null, slowStartWindowMs: null }))
  t.same(countOf(await bodies(gw, 30)), { a: 10, b: 10, c: 10 })

  const w = await three(t)
  const weighted = cluster('w', w[0].port, { endpoints: [ep(w[0].port, 2), ep(w[1].port, 1), ep(w[2].port, 1)] })
  const gw2 = await serve(t, weighted)
  t.same(countOf(await bodies(gw2, 40)), { a: 20, b: 10, c: 10 }, 'smooth weighted round robin: 2:1:1')
})

t.test('Random: every endpoint gets a rough third of 300 requests', async (t) => {
  const us = await three(t)
  const gw = await serve(t, lbCluster(us, { type: 'Random', consistentHash: null, slowStartWindowMs: null }))
  const counts = countOf(await bodies(gw, 300))
  for (const name of ['a', 'b', 'c']) t.ok(counts[name] >= 50 && counts[name] <= 150, `${name}: ${counts[name]} of 300`)
})

t.test('LeastRequest: with one endpoint held busy, the idle one takes the new requests', async (t) => {
  const held: http.ServerResponse[] = []
  const a = await upstream(t, 'a')
  // b holds /hold requests; a answers everything at once.
  const b = await upstream(t, 'b', (req, res) => { if (req.url === '/hold') held.push(res); else res.end('b') })
  const gw = await serve(t, lbCluster([a, b], { type: 'LeastRequest', consistentHash: null, slowStartWindowMs: null }))
  const pending: Array<Promise<unknown>> = []
  for (let i = 0; i < 20 && held.length === 0; i++) {
    const p = ask(gw, { path: '/hold' })
    pending.push(p)
    await Promise.race([p, until(() => held.length > 0, 2000)])
  }
  t.equal(held.length, 1, 'one request held on b')
  t.same(countOf(await bodies(gw, 20)), { a: 20 }, 'b is busy: all 20 new requests go to a')
  for (const res of held) res.end('held')
  await Promise.all(pending)
  t.same(countOf(await bodies(gw, 40)).b !== undefined, true, 'b takes traffic again once idle')
})

/** Opens a WebSocket-shaped tunnel through the gateway; resolves with the socket once the 101 head arrived. */
function openTunnel(port: number): Promise<{ socket: net.Socket; head: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    let head = ''
    socket.setEncoding('latin1')
    socket.on('error', reject)
    socket.on('data', function onData(s: string) {
      head += s
      if (!head.includes('\r\n\r\n')) return
      socket.off('data', onData)
      resolve({ socket, head })
    })
    socket.write('GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n')
  })
}

t.test('LeastRequest counts open tunnels: WebSocket load spreads, the active-requests gauge holds them until they close', async (t) => {
  const us = [await upstream(t, 'a'), await upstream(t, 'b')]
  const held = { a: 0, b: 0 } as Record<string, number>
  const sockets = new Set<net.Socket>()
  for (const u of us) {
    u.server.on('upgrade', (_req: http.IncomingMessage, socket: net.Socket) => {
      held[u.name]++
      sockets.add(socket)
      socket.on('error', () => {})
      socket.on('end', () => socket.end())
      socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Upstream: ${u.name}\r\n\r\n`)
    })
  }
  t.teardown(() => { for (const s of sockets) s.destroy() })
  const c = lbCluster(us, { type: 'LeastRequest', consistentHash: null, slowStartWindowMs: null }, { id: 'ws-pool' })
  const gw = await serve(t, c)
  const tunnels: net.Socket[] = []
  for (let i = 0; i < 10; i++) {
    const { socket, head } = await openTunnel(gw)
    t.match(head, /^HTTP\/1\.1 101 /)
    tunnels.push(socket)
  }
  t.same(held, { a: 5, b: 5 }, 'each open tunnel counts as a request in flight: 10 tunnels, 5 each')
  const active = (): Promise<number> => metric('sallyport_upstream_active_requests', { backend: 'ws-pool' })
  const settlesAt = async (want: number): Promise<number> => {
    for (let i = 0; i < 250 && await active() !== want; i++) await sleep(20)
    return active()
  }
  t.equal(await active(), 10, 'the gauge counts the open tunnels')
  for (const s of tunnels.slice(0, 5)) s.end()
  t.equal(await settlesAt(5), 5, 'closed tunnels leave the gauge')
  for (const s of tunnels.slice(5)) s.destroy()
  t.equal(await settlesAt(0), 0, 'reset tunnels leave it too')
})

t.test('ConsistentHash by header: the same key sticks, different keys spread', async (t) => {
  const us = await three(t)
  const gw = await serve(t, lbCluster(us, { type: 'ConsistentHash', consistentHash: { type: 'Header', header: 'X-User', cookie: null }, slowStartWindowMs: null }))
  for (const user of ['alice', 'bob']) {
    const got = countOf(await bodies(gw, 50, { headers: { 'x-user': user } }))
    t.equal(Object.keys(got).length, 1, `${user}: 50 requests, one endpoint (${JSON.stringify(got)})`)
  }
  const spread = new Set<string>()
  for (let i = 0; i < 30; i++) spread.add((await ask(gw, { headers: { 'x-user': `user-${i}` } })).body)
  t.ok(spread.size >= 2, `30 keys reach ${spread.size} endpoints`)
})

t.test('ConsistentHash by cookie: the same cookie sticks, different cookies spread', async (t) => {
  const us = await three(t)
  const gw = await serve(t, lbCluster(us, { type: 'ConsistentHash', consistentHash: { type: 'Cookie', header: null, cookie: 'session' }, slowStartWindowMs: null }))
  const got = countOf(await bodies(gw, 50, { headers: { cookie: 'theme=dark; session=abc123; lang=en' } }))
  t.equal(Object.keys(got).length, 1, `one endpoint for session=abc123 (${JSON.stringify(got)})`)
  const spread = new Set<string>()
  for (let i = 0; i < 30; i++) spread.add((await ask(gw, { headers: { cookie: `session=s${i}` } })).body)
  t.ok(spread.size >= 2, `30 sessions reach ${spread.size} endpoints`)
})

t.test('ConsistentHash by source IP: one client address sticks, several addresses spread', async (t) => {
  const us = await three(t)
  const gw = await serve(t, lbCluster(us, { type: 'ConsistentHash', consistentHash: { type: 'SourceIP', header: null, cookie: null }, slowStartWindowMs: null }))
  const got = countOf(await bodies(gw, 50, { localAddress: '127.0.0.1' }))
  t.equal(Object.keys(got).length, 1, `127.0.0.1: one endpoint (${JSON.stringify(got)})`)
  const spread = new Set<string>()
  for (let i = 2; i < 32; i++) spread.add((await ask(gw, { localAddress: `127.0.0.${i}` })).body)
  t.ok(spread.size >= 2, `30 loopback source addresses reach ${spread.size} endpoints`)
})

t.test('ConsistentHash skips an ejected endpoint and keys return to it after un-ejection', async (t) => {
  const us = await three(t)
  const c = lbCluster(us, { type: 'ConsistentHash', consistentHash: { type: 'Header', header: 'x-user', cookie: null }, slowStartWindowMs: null },
    { healthCheck: { active: null, passive: { ...PASSIVE, consecutive5xxErrors: 1, baseEjectionTimeMs: 1000, maxEjectionPercent: 50 } } })
  const gw = await serve(t, c)
  const home = (await ask(gw, { headers: { 'x-user': 'carol' } })).body
  const owner = us.find((u) => u.name === home) as Upstream
  owner.handler = (_req, res) => { res.writeHead(500).end(owner.name) }
  t.equal((await ask(gw, { headers: { 'x-user': 'carol' } })).status, 500, 'one 500 ejects the owner')
  const moved = countOf(await bodies(gw, 10, { headers: { 'x-user': 'carol' } }))
  t.notOk(home in moved, 'while ejected, the key goes elsewhere')
  t.equal(Object.keys(moved).length, 1, 'to one other endpoint consistently')
  owner.handler = (_req, res) => { res.end(owner.name) }
  await sleep(1100) // a 1 s ejection: the ten requests above fit inside it on a loaded machine
  t.same(countOf(await bodies(gw, 5, { headers: { 'x-user': 'carol' } })), { [home]: 5 }, 'back home after baseEjectionTime')
})

t.test('slow start: an endpoint back from ejection gets a small share at first', async (t) => {
  let failing = true
  const a = await upstream(t, 'a')
  const b = await upstream(t, 'b', (_req, res) => { res.writeHead(failing ? 500 : 200).end('b') })
  const c = cluster('ss', a.port, {
    endpoints: [ep(a.port), ep(b.port)],
    lb: { type: 'RoundRobin', consistentHash: null, slowStartWindowMs: 1000 },
    healthCheck: { active: null, passive: { ...PASSIVE, consecutive5xxErrors: 1, baseEjectionTimeMs: 100, maxEjectionPercent: 50 } },
  })
  const gw = await serve(t, c)
  // Past the first window: both endpoints at full weight; b answers 500 once and is ejected.
  await sleep(1100)
  for (let i = 0; i < 4 && b.hits === 0; i++) await ask(gw)
  t.equal(b.hits, 1, 'b ejected after its first 500')
  failing = false
  await sleep(1100) // ejection (100 ms) over long ago, and a's window too; b re-enters at the first pick
  const got = countOf(await bodies(gw, 30))
  t.ok((got.b ?? 0) >= 1 && (got.b ?? 0) <= 10, `b ramps from 10 % weight: ${got.b ?? 0} of 30 (even split would be 15)`)
})
