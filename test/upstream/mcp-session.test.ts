// MCP session affinity in the upstream layer (lib/upstream/mcp-session.ts and
// the registry's pin): the tag's form, responses tagged with the endpoint that
// answered, tagged requests sent back to it without the tag, and balanced as
// usual when that endpoint is gone, ejected, or the attempt asks not to pin.
import t, { type Test } from 'tap'
import http from 'node:http'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { SESSION_HEADER, TAG_LENGTH, endpointsByTag, isTagged, sessionTag, tagSessionHeader } from '../../lib/upstream/mcp-session.ts'
import type { Cluster } from '../../lib/compile/table.ts'
import type { OutgoingHeaders, Upstreams } from '../../lib/upstream/types.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { cluster, endpoint, expectResponse, forward, listen, readBody, request } from './fixtures.ts'

configureLogger({ level: 'silent' })

t.test('tags: deterministic, base64url, one per cluster and endpoint', async (t) => {
  const tag = sessionTag('Backend/ai/tools:9000', '10.0.0.1:9000')
  t.match(tag, /^[A-Za-z0-9_-]{12}$/)
  t.equal(tag.length, TAG_LENGTH)
  t.equal(sessionTag('Backend/ai/tools:9000', '10.0.0.1:9000'), tag, 'the same inputs, the same tag')
  t.not(sessionTag('Backend/ai/tools:9000', '10.0.0.2:9000'), tag, 'another endpoint')
  t.not(sessionTag('Backend/ai/other:9000', '10.0.0.1:9000'), tag, 'another cluster')
  const byTag = endpointsByTag('Backend/ai/tools:9000', ['10.0.0.1:9000', '10.0.0.2:9000'])
  t.equal(byTag.get(tag), 0)
  t.equal(byTag.get(sessionTag('Backend/ai/tools:9000', '10.0.0.2:9000')), 1)
})

t.test('isTagged: the gateway form only', async (t) => {
  const tag = sessionTag('c', 'e')
  t.ok(isTagged(`${tag}.abc`))
  t.ok(isTagged(`${tag}.${tag}.abc`), 'a tag in front of a tagged id (gateways in a chain)')
  for (const v of ['', 'abc', `${tag}.`, `${tag}abc`, `${tag.slice(1)}.abc`, `%%%%%%%%%%%%.abc`, `${tag.slice(0, 11)}..abc`, '0f8b1c2e-5d7a-4c3b-9e1f-2a6b7c8d9e0f']) {
    t.notOk(isTagged(v), JSON.stringify(v))
  }
  // Several Mcp-Session-Id fields reach the gateway joined into one value (node joins
  // repeated fields with ", ", over HTTP/1.1 and HTTP/2); an MCP session id is visible
  // ASCII only (0x21-0x7E), so a value with a space, a tab or a control character is
  // not one id the gateway issued.
  for (const v of [`${tag}.X, ${tag}.Y`, `${tag}.X, Y`, `${tag}.a b`, `${tag}.a\tb`, `${tag}.a\u007fb`, `${tag}.caf\u00e9`]) {
    t.notOk(isTagged(v), JSON.stringify(v))
  }
})

t.test('tagSessionHeader: one non-empty id is tagged; anything else is left as sent', async (t) => {
  const h: OutgoingHeaders = { [SESSION_HEADER]: 'S1' }
  tagSessionHeader(h, 'c', 'e')
  t.equal(h[SESSION_HEADER], `${sessionTag('c', 'e')}.S1`)
  const two: OutgoingHeaders = { [SESSION_HEADER]: ['S1', 'S2'] }
  tagSessionHeader(two, 'c', 'e')
  t.same(two[SESSION_HEADER], ['S1', 'S2'])
  const empty: OutgoingHeaders = { [SESSION_HEADER]: '' }
  tagSessionHeader(empty, 'c', 'e')
  t.equal(empty[SESSION_HEADER], '')
  const none: OutgoingHeaders = {}
  tagSessionHeader(none, 'c', 'e')
  t.notOk(SESSION_HEADER in none)
})

interface Server { readonly name: string; readonly port: number; status: number; readonly seen: Array<string | undefined> }

/** An upstream that answers `status` with its name, issuing (or repeating) a session id. */
async function server(t: Test, name: string): Promise<Server> {
  const s: Server = { name, port: 0, status: 200, seen: [] }
  const srv = http.createServer((req, res) => {
    req.resume()
    const sid = req.headers[SESSION_HEADER] as string | undefined
    s.seen.push(sid)
    res.writeHead(s.status, { [SESSION_HEADER]: sid ?? `${name}-session` })
    res.end(name)
  })
  ;(s as { port: number }).port = await listen(srv)
  t.teardown(() => new Promise<void>((resolve) => { srv.closeAllConnections(); srv.close(() => resolve()) }))
  return s
}

async function ask(up: Upstreams, c: Cluster, sid: string | null, over: { pinSession?: boolean } = {}): Promise<{ status: number; body: string; sid: string | string[] | undefined; endpoint: string }> {
  const res = expectResponse(await forward(up, request(c, { headers: sid === null ? {} : { [SESSION_HEADER]: sid }, ...over })))
  return { status: res.status, body: await readBody(res.body), sid: res.headers[SESSION_HEADER], endpoint: res.endpoint }
}

t.test('registry: a tagged session goes back to its endpoint, untagged', async (t) => {
  const a = await server(t, 'a')
  const b = await server(t, 'b')
  const up = createUpstreams()
  t.teardown(() => up.close())
  const c = cluster({ protocol: 'MCP', endpoints: [endpoint(a.port), endpoint(b.port)] })
  const first = await ask(up, c, null)
  const second = await ask(up, c, null)
  t.same([first.body, second.body].sort(), ['a', 'b'], 'initializes are balanced')
  for (const init of [first, second]) {
    t.equal(init.sid, `${sessionTag(c.id, init.endpoint)}.${init.body}-session`, 'the id is tagged with the endpoint that answered')
    const home = init.body === 'a' ? a : b
    home.seen.length = 0
    for (let i = 0; i < 10; i++) {
      const r = await ask(up, c, init.sid as string)
      t.equal(r.body, init.body, 'pinned')
      t.equal(r.sid, init.sid, 'the repeated id is tagged again, the same')
    }
    t.same(new Set(home.seen), new Set([`${init.body}-session`]), 'the upstream sees its own id')
  }

  // pinSession false (a retry after a connect failure): stripped, balanced.
  a.seen.length = 0
  b.seen.length = 0
  const tagA = `${sessionTag(c.id, `127.0.0.1:${a.port}`)}.a-session`
  const spread = new Set<string>()
  for (let i = 0; i < 4; i++) spread.add((await ask(up, c, tagA, { pinSession: false })).body)
  t.same([...spread].sort(), ['a', 'b'], 'balanced as usual')
  t.same(new Set([...a.seen, ...b.seen]), new Set(['a-session']), 'without the tag')

  // A well-formed tag of no endpoint: stripped, balanced. A garbled one: as it came.
  a.seen.length = 0
  b.seen.length = 0
  await ask(up, c, 'AAAAAAAAAAAA.x')
  await ask(up, c, 'AAAAAAAAAAA.x')
  t.same([...a.seen, ...b.seen].sort(), ['AAAAAAAAAAA.x', 'x'])

  // Several fields (joined by the listener into one value): passed on as sent, not
  // pinned by the first tag with the rest left behind.
  a.seen.length = 0
  b.seen.length = 0
  const tagB = `${sessionTag(c.id, `127.0.0.1:${b.port}`)}.b-session`
  const spreadTwo = new Set<string>()
  for (let i = 0; i < 4; i++) spreadTwo.add((await ask(up, c, `${tagA}, ${tagB}`)).body)
  t.same([...spreadTwo].sort(), ['a', 'b'], 'balanced as usual')
  t.same(new Set([...a.seen, ...b.seen]), new Set([`${tagA}, ${tagB}`]), 'as sent')
})

t.test('registry: an ejected endpoint\'s sessions are balanced as usual', async (t) => {
  const a = await server(t, 'a')
  const b = await server(t, 'b')
  const up = createUpstreams()
  t.teardown(() => up.close())
  const passive = {
    consecutive5xxErrors: 1, consecutiveGatewayErrors: 0, consecutiveLocalOriginFailures: 5, splitExternalLocalOriginErrors: false,
    intervalMs: 1000, baseEjectionTimeMs: 600_000, maxEjectionPercent: 50,
  }
  const c = cluster({ protocol: 'MCP', endpoints: [endpoint(a.port), endpoint(b.port)], healthCheck: { active: null, passive } })
  const tagB = `${sessionTag(c.id, `127.0.0.1:${b.port}`)}.b-session`
  t.equal((await ask(up, c, tagB)).body, 'b')
  b.status = 500
  t.equal((await ask(up, c, tagB)).status, 500, 'one 500 ejects b')
  b.status = 200
  a.seen.length = 0
  for (let i = 0; i < 4; i++) t.equal((await ask(up, c, tagB)).body, 'a', 'b ejected: the session goes where the balancer sends it')
  t.same(new Set(a.seen), new Set(['b-session']), 'without the tag')
})

t.test('registry: other protocols leave Mcp-Session-Id alone', async (t) => {
  const a = await server(t, 'a')
  const up = createUpstreams()
  t.teardown(() => up.close())
  const c = cluster({ endpoints: [endpoint(a.port)] })
  const tagged = `${sessionTag(c.id, `127.0.0.1:${a.port}`)}.a-session`
  const r = await ask(up, c, tagged)
  t.equal(r.sid, tagged, 'not tagged again')
  t.same(a.seen, [tagged], 'not stripped')
})

t.test('registry: a hostname endpoint\'s sessions are pinned to the address that issued them', async (t) => {
  // Two servers on one port at 127.0.0.1 and 127.0.0.2: the name resolves to both.
  let pair: { a: http.Server; b: http.Server; port: number } | null = null
  const answer = (name: string) => (req: http.IncomingMessage, res: http.ServerResponse): void => {
    req.resume()
    res.writeHead(200, { [SESSION_HEADER]: (req.headers[SESSION_HEADER] as string | undefined) ?? `${name}-session` }).end(name)
  }
  for (let attempt = 0; attempt < 20 && pair === null; attempt++) {
    const a = http.createServer(answer('a'))
    const port = await listen(a)
    const b = http.createServer(answer('b'))
    const bound = await new Promise<boolean>((resolve) => {
      b.once('error', () => resolve(false))
      b.listen(port, '127.0.0.2', () => resolve(true))
    })
    if (bound) pair = { a, b, port }
    else a.close()
  }
  if (pair === null) throw new Error('no port free on both loopback addresses')
  const { a, b, port } = pair
  t.teardown(() => { a.closeAllConnections(); a.close(); b.closeAllConnections(); b.close() })
  const up = createUpstreams({ resolve: async () => ['127.0.0.1', '127.0.0.2'], guard: { allowCidrs: ['127.0.0.0/8'] } })
  t.teardown(() => up.close())
  const c = cluster({ protocol: 'MCP', hostname: 'tools.test', endpoints: [{ host: 'tools.test', port, kind: 'hostname', weight: 1, zone: null }] })
  const inits = [await ask(up, c, null), await ask(up, c, null)]
  t.same(inits.map((r) => r.body).sort(), ['a', 'b'], 'both addresses issue sessions')
  for (const init of inits) {
    t.equal(init.sid, `${sessionTag(c.id, `${init.body === 'a' ? '127.0.0.1' : '127.0.0.2'}:${port}`)}.${init.body}-session`, 'the tag names the address')
    for (let i = 0; i < 6; i++) t.equal((await ask(up, c, init.sid as string)).body, init.body)
  }
})
