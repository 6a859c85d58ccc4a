// circuitBreaker.maxRequestsPerConnection (BackendTrafficPolicy): an upstream
// connection (HTTP/1.1) or session (HTTP/2) carries at most that many
// requests, then a fresh one is opened. Real upstreams on 127.0.0.1 record
// which connection each request came in on; the real data plane and registry.
import t, { type Test } from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import type { Cluster } from '../../lib/compile/table.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { ask, gateway, NO_LIMITS } from './fixtures.ts'

configureLogger({ level: 'silent' })

/** Runs of equal values, in order: [a, a, b] → [2, 1]. */
function runs(list: readonly number[]): number[] {
  const out: number[] = []
  for (let i = 0; i < list.length; i++) {
    if (i > 0 && list[i] === list[i - 1]) out[out.length - 1]++
    else out.push(1)
  }
  return out
}

async function h1Upstream(t: Test): Promise<{ port: number; sockets: number[]; closeHeaders: string[] }> {
  const seen = { port: 0, sockets: [] as number[], closeHeaders: [] as string[] }
  const server = http.createServer((req, res) => {
    seen.sockets.push(req.socket.remotePort ?? 0)
    seen.closeHeaders.push(req.headers.connection ?? '')
    res.end('ok')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  seen.port = (server.address() as AddressInfo).port
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return seen
}

async function h2cUpstream(t: Test): Promise<{ port: number; sessions: number[] }> {
  const seen = { port: 0, sessions: [] as number[] }
  const server = http2.createServer()
  const ids = new WeakMap<http2.ServerHttp2Session, number>()
  let next = 0
  server.on('stream', (stream) => {
    const session = stream.session as http2.ServerHttp2Session
    let id = ids.get(session)
    if (id === undefined) ids.set(session, id = ++next)
    seen.sessions.push(id)
    stream.respond({ ':status': 200 })
    stream.end('ok')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  seen.port = (server.address() as AddressInfo).port
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return seen
}

function limited(id: string, port: number, max: number | null, over: Partial<Cluster> = {}): Cluster {
  return cluster(id, port, { circuitBreaker: { ...NO_LIMITS, maxRequestsPerConnection: max }, ...over })
}

t.test('HTTP/1.1: a connection carries maxRequestsPerConnection requests, the last one says Connection: close', async (t) => {
  const u = await h1Upstream(t)
  const port = await freePort()
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'a' }] }] }] } }, [limited('a', u.port, 3)]))
  for (let i = 0; i < 7; i++) t.equal((await ask(gw.port)).status, 200)
  t.same(runs(u.sockets), [3, 3, 1], 'a new upstream connection every 3 requests')
  t.same(u.closeHeaders.map((h) => h === 'close'), [false, false, true, false, false, true, false])
})

t.test('HTTP/1.1: without the field (or 0) one connection carries every request', async (t) => {
  for (const max of [null, 0]) {
    const u = await h1Upstream(t)
    const port = await freePort()
    const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'a' }] }] }] } }, [limited('a', u.port, max)]))
    for (let i = 0; i < 5; i++) t.equal((await ask(gw.port)).status, 200)
    t.same(runs(u.sockets), [5], `maxRequestsPerConnection ${String(max)}`)
  }
})

t.test('HTTP/2 (h2c): a session carries maxRequestsPerConnection streams, then a new session opens', async (t) => {
  const u = await h2cUpstream(t)
  const port = await freePort()
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'a' }] }] }] } }, [limited('a', u.port, 2, { protocol: 'H2C' })]))
  for (let i = 0; i < 5; i++) t.equal((await ask(gw.port)).status, 200)
  t.same(u.sessions, [1, 1, 2, 2, 3], 'a new session every 2 streams')
  // Concurrent requests beyond the limit never share a retired session.
  const many = await Promise.all(Array.from({ length: 6 }, () => ask(gw.port)))
  t.same(many.map((r) => r.status), [200, 200, 200, 200, 200, 200])
  const counts = new Map<number, number>()
  for (const s of u.sessions) counts.set(s, (counts.get(s) ?? 0) + 1)
  t.ok([...counts.values()].every((n) => n <= 2), 'no session carried more than 2 streams')
})
