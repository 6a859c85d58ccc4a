// Retries of a request pinned to an MCP session's endpoint (lib/router/attempts.ts,
// lib/upstream/mcp-session.ts): a retried answer (503) is retried at the
// session's endpoint, the only one that knows the session; after that endpoint
// refused the connection, the retry is balanced as usual (the session id still
// without its tag). The real data plane and registry, real upstreams.
import t, { type Test } from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { configureLogger } from '../../lib/observe/log.ts'
import { sessionTag } from '../../lib/upstream/mcp-session.ts'
import { closedPort } from '../helpers/ports.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { ep, gateway } from './fixtures.ts'

configureLogger({ level: 'silent' })

interface Upstream { readonly name: string; port: number; status: number[]; readonly seen: Array<string | undefined> }

/** Answers the statuses in `status` in turn (200 once they run out), with its name. */
async function upstream(t: Test, name: string, status: number[] = []): Promise<Upstream> {
  const u: Upstream = { name, port: 0, status, seen: [] }
  const server = http.createServer((req, res) => {
    req.resume()
    u.seen.push(req.headers['mcp-session-id'] as string | undefined)
    res.writeHead(u.status.shift() ?? 200).end(name)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  u.port = (server.address() as AddressInfo).port
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return u
}

function post(port: number, sid: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/mcp', agent: false, headers: { host: 'x', 'mcp-session-id': sid } }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (s: string) => { body += s }).on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.setTimeout(5000, () => req.destroy(new Error('timeout')))
    req.on('error', reject)
    req.end('{}')
  })
}

const retry = { attempts: 2, codes: [503], backoffMs: 1, policy: null }

async function mcpGateway(t: Test, ports: readonly number[]): Promise<{ port: number; tagOf: (p: number) => string }> {
  const c = cluster('tools', ports[0], { protocol: 'MCP', endpoints: ports.map((port) => ep(port)) })
  const port = await freePort()
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry, backends: [{ cluster: 'tools' }] }] }] } }, [c]))
  return { port: gw.port, tagOf: (p) => sessionTag(c.id, `127.0.0.1:${p}`) }
}

t.test('a retried answer of a pinned request is retried at the session\'s endpoint', async (t) => {
  const a = await upstream(t, 'a')
  const b = await upstream(t, 'b', [503])
  const gw = await mcpGateway(t, [a.port, b.port])
  const r = await post(gw.port, `${gw.tagOf(b.port)}.S`)
  t.equal(r.status, 200)
  t.equal(r.body, 'b', 'the retry went where the session is')
  t.same(b.seen, ['S', 'S'], 'both tries at b, the id without its tag')
  t.same(a.seen, [])
})

t.test('after the session\'s endpoint refused the connection, the retry is balanced', async (t) => {
  const a = await upstream(t, 'a')
  const dead = await closedPort()
  const gw = await mcpGateway(t, [dead, a.port])
  const r = await post(gw.port, `${gw.tagOf(dead)}.S`)
  t.equal(r.status, 200, 'not three connect failures at the same endpoint')
  t.equal(r.body, 'a')
  t.same(a.seen, ['S'], 'the id without its tag')
})
