// MCP session affinity through the real CLI (`serve --workers 2`): a Backend
// with protocol MCP and two endpoints, each a Streamable HTTP server keeping
// its sessions in memory (404 for a session it did not issue). The gateway
// tags the session id it hands the client with the endpoint that issued it,
// so follow-ups (POST, the GET event stream, DELETE) over HTTP/1.1 and HTTP/2
// reach that endpoint on any worker, and the upstream sees its own id.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import path from 'node:path'
import { randomUUID } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { eventually, freePort, gatewayYaml, request, routeYaml, settleLogs, startCli, tempDir } from './harness.ts'

const HOST = 'mcp.example.test'

interface McpServer {
  readonly name: string
  /** Session ids this server issued and has not deleted. */
  readonly sessions: Set<string>
  /** The Mcp-Session-Id of every request it got (undefined: none). */
  readonly seen: Array<string | undefined>
}

/**
 * A minimal MCP Streamable HTTP server on `host:port` (0: any): initialize
 * creates a session (Mcp-Session-Id in the answer), anything else needs a
 * session of its own (400 without one, 404 for one it does not know); every
 * answer names the server and repeats the session id, as MCP SDKs do.
 */
async function mcpServer(t: Test, name: string, host: string, port: number): Promise<{ server: McpServer; port: number }> {
  const state: McpServer = { name, sessions: new Set(), seen: [] }
  const server = http.createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (s: string) => { body += s })
    req.on('end', () => {
      const sid = req.headers['mcp-session-id'] as string | undefined
      state.seen.push(sid)
      const message = req.method === 'POST' && body !== '' ? JSON.parse(body) as { id?: number; method?: string } : {}
      if (req.method === 'POST' && message.method === 'initialize') {
        const issued = randomUUID()
        state.sessions.add(issued)
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': issued })
        res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result: { protocolVersion: '2025-06-18', capabilities: {}, serverInfo: { name, version: '1' } } }))
        return
      }
      if (sid === undefined) { res.writeHead(400, { 'content-type': 'application/json' }); res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'no session' } })); return }
      if (!state.sessions.has(sid)) { res.writeHead(404, { 'content-type': 'application/json' }); res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'unknown session' }, server: name })); return }
      if (req.method === 'GET') {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'mcp-session-id': sid })
        res.end(`event: message\ndata: ${JSON.stringify({ server: name, session: sid })}\n\n`)
        return
      }
      if (req.method === 'DELETE') state.sessions.delete(sid)
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': sid })
      res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id ?? null, result: { server: name, session: sid } }))
    })
  })
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(port, host, () => { server.off('error', reject); resolve() }) })
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return { server: state, port: (server.address() as AddressInfo).port }
}

/** Two servers on one port, at 127.0.0.1 and 127.0.0.2 (a Backend's Ip destination has one port for all its addresses). */
async function twoServers(t: Test): Promise<{ a: McpServer; b: McpServer; port: number }> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const a = await mcpServer(t, 'a', '127.0.0.1', 0)
    try {
      const b = await mcpServer(t, 'b', '127.0.0.2', a.port)
      return { a: a.server, b: b.server, port: a.port }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err
    }
  }
  throw new Error('no port free on both 127.0.0.1 and 127.0.0.2')
}

function backendYaml(port: number, addresses: readonly string[]): string {
  return `apiVersion: gateway.networking.k8s.io/v1alpha1
kind: Backend
metadata:
  name: tools
  namespace: default
spec:
  destination:
    type: Ip
    ip:
      addresses: [${addresses.join(', ')}]
    ports:
      - number: ${port}
        protocol: MCP
        protocolOptions:
          mcp: { version: "2025-06-18", path: /mcp }
`
}

interface Answer { status: number; headers: Record<string, string | string[] | undefined>; body: string }

const INIT = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } } })
const LIST = JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' })

/** One MCP request over HTTP/1.1 on a fresh connection (so either worker may take it). */
function h1(port: number, method: string, sid: string | null, body: string | null): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { host: HOST, accept: 'application/json, text/event-stream' }
    if (body !== null) headers['content-type'] = 'application/json'
    if (sid !== null) headers['mcp-session-id'] = sid
    const req = http.request({ host: '127.0.0.1', port, method, path: '/mcp', headers, agent: false }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (s: string) => { text += s })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }))
      res.on('error', reject)
    })
    req.setTimeout(10000, () => req.destroy(new Error('MCP request timed out')))
    req.on('error', reject)
    req.end(body ?? undefined)
  })
}

/** One MCP request as a stream of an HTTP/2 (h2c) session. */
function h2(session: http2.ClientHttp2Session, method: string, sid: string | null, body: string | null): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: http2.OutgoingHttpHeaders = { ':method': method, ':path': '/mcp', ':authority': HOST, accept: 'application/json, text/event-stream' }
    if (body !== null) headers['content-type'] = 'application/json'
    if (sid !== null) headers['mcp-session-id'] = sid
    const stream = session.request(headers)
    const timer = setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), 10000)
    let head: http2.IncomingHttpHeaders = {}
    let text = ''
    stream.setEncoding('utf8')
    stream.on('response', (h) => { head = h })
    stream.on('data', (s: string) => { text += s })
    stream.on('end', () => { clearTimeout(timer); resolve({ status: Number(head[':status']), headers: head, body: text }) })
    stream.on('error', (err) => { clearTimeout(timer); reject(err) })
    stream.end(body ?? undefined)
  })
}

function sessionOf(a: Answer): string {
  const v = a.headers['mcp-session-id']
  if (typeof v !== 'string') throw new Error(`no Mcp-Session-Id in ${JSON.stringify(a.headers)}`)
  return v
}

/** The upstream's own id behind a client's (tagged) session id, and the server that issued it. */
function issuerOf(clientId: string, servers: readonly McpServer[]): { server: McpServer; id: string } {
  for (const server of servers) {
    for (const id of server.sessions) if (clientId === id || clientId.endsWith('.' + id)) return { server, id }
  }
  throw new Error(`${clientId} names no session of the upstreams`)
}

t.test('CLI: MCP sessions stay on the endpoint that issued them, on every worker, over HTTP/1.1 and HTTP/2', async (t) => {
  const { a, b, port: upPort } = await twoServers(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), routeYaml('tools', HOST, 'tools', upPort).replace('group: gateway.envoyproxy.io', 'group: gateway.networking.k8s.io'))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml(upPort, ['127.0.0.1', '127.0.0.2']))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--workers', '2'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 30000, 'all workers ready')

  // Sessions over HTTP/1.1, each request on its own connection: initialize several
  // times, so that both endpoints issue sessions.
  const h1Sessions: string[] = []
  for (let i = 0; i < 6; i++) {
    const init = await h1(port, 'POST', null, INIT)
    t.equal(init.status, 200, 'initialize')
    h1Sessions.push(sessionOf(init))
  }
  const tags = new Map<McpServer, Set<string>>([[a, new Set()], [b, new Set()]])
  for (const clientId of h1Sessions) {
    const { server, id } = issuerOf(clientId, [a, b])
    t.not(clientId, id, 'the client does not get the upstream id as it is')
    t.match(clientId, /^[A-Za-z0-9_-]{12}\./, 'the client id is a tag, a dot and the upstream id')
    t.notMatch(clientId.slice(0, 12), /127|0\.0\.|:/, 'the tag does not spell the endpoint out')
    tags.get(server)?.add(clientId.slice(0, 13))
  }
  t.ok(a.sessions.size > 0 && b.sessions.size > 0, 'both endpoints issued sessions')
  t.equal(tags.get(a)?.size, 1, 'every worker tags endpoint a alike')
  t.equal(tags.get(b)?.size, 1, 'every worker tags endpoint b alike')
  t.not([...tags.get(a) ?? []][0], [...tags.get(b) ?? []][0], 'the endpoints have different tags')

  for (const clientId of h1Sessions) {
    const { server, id } = issuerOf(clientId, [a, b])
    server.seen.length = 0
    for (let i = 0; i < 20; i++) {
      const r = await h1(port, 'POST', clientId, LIST)
      t.equal(r.status, 200, `follow-up ${i} of a session of ${server.name} over HTTP/1.1`)
      t.equal(r.headers['mcp-session-id'], clientId, 'the answer carries the id the client knows')
      t.equal((JSON.parse(r.body) as { result?: { server: string } }).result?.server, server.name)
    }
    const events = await h1(port, 'GET', clientId, null)
    t.equal(events.status, 200, 'the GET event stream of the session')
    t.match(events.body, new RegExp(`"server":"${server.name}"`))
    t.same(new Set(server.seen), new Set([id]), 'the upstream saw its own id, untagged')
  }

  // HTTP/2: one connection, many streams (each a request the worker balances by itself).
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  const h2Sessions: string[] = []
  for (let i = 0; i < 4; i++) {
    const init = await h2(session, 'POST', null, INIT)
    t.equal(init.status, 200, 'initialize over HTTP/2')
    h2Sessions.push(sessionOf(init))
  }
  for (const clientId of h2Sessions) {
    const { server } = issuerOf(clientId, [a, b])
    const answers = await Promise.all(Array.from({ length: 20 }, () => h2(session, 'POST', clientId, LIST)))
    t.same(answers.map((r) => r.status), answers.map(() => 200), `20 follow-ups of a session of ${server.name} over HTTP/2`)
    t.ok(answers.every((r) => r.headers['mcp-session-id'] === clientId))
    const events = await h2(session, 'GET', clientId, null)
    t.equal(events.status, 200)
    t.match(events.body, new RegExp(`"server":"${server.name}"`))
  }
  // DELETE ends a session where it lives.
  const ended = h2Sessions[0]
  const { server: endedAt, id: endedId } = issuerOf(ended, [a, b])
  t.equal((await h2(session, 'DELETE', ended, null)).status, 200, 'DELETE reaches the session')
  t.notOk(endedAt.sessions.has(endedId), 'the issuing endpoint ended it')
  t.equal((await h1(port, 'POST', ended, LIST)).status, 404, 'a deleted session is unknown')

  // Ids the gateway did not tag, or whose tag is garbled or forged, are handled safely.
  const ofA = h1Sessions.find((s) => issuerOf(s, [a, b]).server === a) as string
  const ofB = h1Sessions.find((s) => issuerOf(s, [a, b]).server === b) as string
  const idA = issuerOf(ofA, [a, b]).id
  const idB = issuerOf(ofB, [a, b]).id
  a.seen.length = 0
  b.seen.length = 0
  for (const garbled of ['not-a-tagged-id', `${ofA.slice(0, 11)}.${idA}`, `%%%%%%%%%%%%.${idA}`, `${ofA.slice(0, 13)}`]) {
    const r = await h1(port, 'POST', garbled, LIST)
    t.equal(r.status, 404, `${garbled}: forwarded as it came, unknown upstream`)
  }
  t.same([...a.seen, ...b.seen].sort(), ['not-a-tagged-id', `${ofA.slice(0, 11)}.${idA}`, `%%%%%%%%%%%%.${idA}`, `${ofA.slice(0, 13)}`].sort(), 'untagged ids reach the upstream as sent')
  // A well-formed tag that names no endpoint: the id goes without it, balanced as usual.
  a.seen.length = 0
  b.seen.length = 0
  for (let i = 0; i < 4; i++) {
    const r = await h1(port, 'POST', `AAAAAAAAAAAA.${idA}`, LIST)
    t.ok(r.status === 200 || r.status === 404, 'answered by whichever endpoint the balancer picked')
  }
  t.same(new Set([...a.seen, ...b.seen]), new Set([idA]), 'the upstreams saw the id without the tag')
  // One endpoint's tag on another's session: the tag decides where it goes.
  b.seen.length = 0
  const crossed = await h1(port, 'POST', `${ofB.slice(0, 13)}${idA}`, LIST)
  t.equal(crossed.status, 404, 'endpoint b does not know a session of a')
  t.same(b.seen, [idA])

  // Endpoint b leaves the configuration: its sessions are balanced as usual (to a, which answers 404).
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml(upPort, ['127.0.0.1']))
  await eventually(async () => {
    const codes = []
    for (let i = 0; i < 6; i++) codes.push((await h1(port, 'POST', ofB, LIST)).status)
    return codes
  }, (codes) => codes.every((c) => c === 404), 15000, 'b gone from every worker')
  a.seen.length = 0
  const gone = await h1(port, 'POST', ofB, LIST)
  t.equal(gone.status, 404, 'the session of a removed endpoint is unknown where it lands')
  t.same(a.seen, [idB], 'the remaining endpoint saw the id without the tag')
  t.equal((await h1(port, 'POST', ofA, LIST)).status, 200, 'sessions of the remaining endpoint go on')

  // The access line names the endpoint each request went to.
  await settleLogs()
  t.match(cli.stdout(), /"upstream":"127\.0\.0\.2:\d+"/)
})

t.test('CLI: a rule splitting traffic between two MCP Backends sends a session back to the Backend that issued it', async (t) => {
  const a = await mcpServer(t, 'a', '127.0.0.1', 0)
  const b = await mcpServer(t, 'b', '127.0.0.1', 0)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const backend = (name: string, upPort: number): string => backendYaml(upPort, ['127.0.0.1']).replace('name: tools', `name: ${name}`)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), `${backend('tools-a', a.port)}---\n${backend('tools-b', b.port)}`)
  // A canary: half the new sessions to each Backend.
  fs.writeFileSync(path.join(dir, 'route.yaml'), `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: tools, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [${HOST}]
  rules:
    - backendRefs:
        - { group: gateway.networking.k8s.io, kind: Backend, name: tools-a, port: ${a.port}, weight: 50 }
        - { group: gateway.networking.k8s.io, kind: Backend, name: tools-b, port: ${b.port}, weight: 50 }
`)
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  const sessions: string[] = []
  const issuers = new Set<string>()
  // Enough sessions that both Backends issue some (a 50/50 split; bounded).
  for (let i = 0; i < 40 && issuers.size < 2; i++) {
    const init = await h1(port, 'POST', null, INIT)
    t.equal(init.status, 200)
    const sid = sessionOf(init)
    sessions.push(sid)
    issuers.add(issuerOf(sid, [a.server, b.server]).server.name)
  }
  t.same([...issuers].sort(), ['a', 'b'], 'both Backends issued sessions')
  let wrong = 0
  for (const sid of sessions) {
    const issuer = issuerOf(sid, [a.server, b.server])
    for (let k = 0; k < 4; k++) {
      const r = await h1(port, 'POST', sid, LIST)
      if (r.status !== 200 || JSON.parse(r.body).result?.server !== issuer.server.name) wrong++
    }
  }
  t.equal(wrong, 0, 'every follow-up reached the Backend (and endpoint) that issued its session')
})
