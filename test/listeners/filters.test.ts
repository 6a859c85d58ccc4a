// HTTPRoute filters and request shaping through the real data plane.

import t from 'tap'
import http from 'node:http'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { echoH1, h1, h2, startPlane } from './fixtures.ts'

configureLogger({ level: 'silent' })

const NONE = { set: [], add: [], remove: [] }

t.test('header modifiers: rule then backend, request and response; hop-by-hop stripped; X-Forwarded-*', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({
    [port]: {
      routes: [{
        name: 'r', rules: [{
          requestHeaders: { set: [['x-set', 'rule']], add: [['x-add', 'b']], remove: ['x-remove'] },
          responseHeaders: { set: [['x-resp', 'rule']], add: [], remove: ['x-upstream'] },
          backends: [{ cluster: 'c', requestHeaders: { ...NONE, set: [['x-backend', 'yes']] }, responseHeaders: { ...NONE, add: [['x-resp', 'backend']] } }],
        }],
      }],
    },
  }, [cluster('c', up.port)]), { gatewayId: 'gw-a' })
  const r = await h1(port, {
    headers: {
      'x-add': 'a', 'x-remove': 'gone', 'x-set': 'client', connection: 'keep-alive, x-private', 'x-private': 'secret',
      'keep-alive': 'timeout=5', te: 'trailers, deflate', 'x-forwarded-for': '10.1.1.1', 'proxy-connection': 'keep-alive',
    },
  })
  t.equal(r.status, 200)
  const seen = JSON.parse(r.body).headers as Record<string, string>
  t.equal(seen['x-set'], 'rule')
  t.equal(seen['x-add'], 'a,b')
  t.equal(seen['x-remove'], undefined)
  t.equal(seen['x-backend'], 'yes')
  t.equal(seen['x-private'], undefined, 'header named in Connection is dropped')
  t.equal(seen['keep-alive'], undefined)
  t.equal(seen['proxy-connection'], undefined)
  t.not(seen.te, 'trailers, deflate', 'te is hop-by-hop (only `trailers` may survive, and only toward HTTP/2)')
  t.equal(seen['x-forwarded-for'], '10.1.1.1, 127.0.0.1')
  t.equal(seen['x-forwarded-proto'], 'http')
  t.equal(seen['x-sallyport-hops'], 'gw-a')
  t.equal(seen.host, 'example.com', 'original host kept when nothing rewrites it')
  t.equal(r.headers['x-resp'], 'rule,backend')
  t.equal(r.headers['x-upstream'], undefined)
})

t.test('a RequestHeaderModifier removing X-Forwarded-For / -Proto keeps client addresses from the upstream', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({
    [port]: { routes: [{ name: 'r', rules: [{ requestHeaders: { ...NONE, remove: ['x-forwarded-for', 'x-forwarded-proto'] }, backends: [{ cluster: 'c' }] }] }] },
  }, [cluster('c', up.port)]))
  for (const send of [h1, h2]) {
    const r = await send(port, { headers: { 'x-forwarded-for': '10.1.1.1' } })
    t.equal(r.status, 200)
    const seen = JSON.parse(r.body).headers as Record<string, string>
    t.equal(seen['x-forwarded-for'], undefined, `${send.name}: neither the client's value nor the gateway's append`)
    t.equal(seen['x-forwarded-proto'], undefined, `${send.name}: no X-Forwarded-Proto`)
  }
})

t.test('a client\'s X-Forwarded-Client-Cert never reaches the upstream (Envoy\'s SANITIZE); a route may still set one', async (t) => {
  // It passed as any header: a client without a certificate could name any identity to an
  // upstream or a chained gateway that reads the header as the gateway's word.
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({
    [port]: {
      routes: [
        { name: 'r', hostnames: ['plain.example.com'], rules: [{ backends: [{ cluster: 'c' }] }] },
        { name: 's', hostnames: ['set.example.com'], rules: [{ requestHeaders: { ...NONE, set: [['x-forwarded-client-cert', 'By=admin']] }, backends: [{ cluster: 'c' }] }] },
      ],
    },
  }, [cluster('c', up.port)]))
  const spoof = { 'x-forwarded-client-cert': 'By=spiffe://td/ns/x/sa/y;URI=spiffe://td/ns/admin/sa/root' }
  for (const send of [h1, h2]) {
    const r = await send(port, { host: 'plain.example.com', headers: spoof })
    t.equal(r.status, 200)
    t.equal((JSON.parse(r.body).headers as Record<string, string>)['x-forwarded-client-cert'], undefined, `${send.name}: dropped`)
    const set = await send(port, { host: 'set.example.com', headers: spoof })
    t.equal((JSON.parse(set.body).headers as Record<string, string>)['x-forwarded-client-cert'], 'By=admin', `${send.name}: a route's RequestHeaderModifier sets it`)
  }
})

t.test('an HTTP/2 client gets the response fields as given, without those HTTP/2 forbids', async (t) => {
  const up = await echoH1(t, 'h1', (_req, res) => {
    res.setHeader('set-cookie', ['a=1', 'b=2'])
    res.setHeader('x-up', 'yes')
    res.setHeader('content-type', 'text/plain')
    res.end('body')
  })
  const port = await freePort()
  // A filter setting connection-specific fields (a table built by hand: compile would not say no to them either).
  const forbidden = [['keep-alive', 'timeout=5'], ['proxy-connection', 'keep-alive'], ['upgrade', 'h2c'], ['transfer-encoding', 'chunked'], ['connection', 'close']] as Array<[string, string]>
  await startPlane(t, buildTable({
    [port]: { routes: [{ name: 'r', rules: [{ responseHeaders: { set: [...forbidden, ['x-resp', 'rule']], add: [['x-resp', 'more']], remove: [] }, backends: [{ cluster: 'c' }] }] }] },
  }, [cluster('c', up.port)]))
  const r = await h2(port, { path: '/fields' })
  t.equal(r.status, 200)
  t.equal(r.body, 'body')
  t.same(r.headers['set-cookie'], ['a=1', 'b=2'], 'a repeated field stays repeated')
  t.equal(r.headers['x-up'], 'yes')
  t.equal(r.headers['x-resp'], 'rule,more')
  t.equal(r.headers['content-type'], 'text/plain')
  for (const [name] of forbidden) t.equal(r.headers[name], undefined, `${name} not sent over HTTP/2`)
  const again = await h2(port, { path: '/fields' })
  t.equal(again.headers['x-resp'], 'rule,more', 'the next response the same (nothing shared was changed)')
})

t.test('loop detection: our id already in x-sallyport-hops → 508', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]), { gatewayId: 'gw-b' })
  const loop = await h1(port, { headers: { 'x-sallyport-hops': 'gw-a, gw-b' } })
  t.equal(loop.status, 508)
  t.match(loop.body, /loop detected/)
  const ok = await h1(port, { headers: { 'x-sallyport-hops': 'gw-a, gw-bb' } })
  t.equal(ok.status, 200)
  t.equal(JSON.parse(ok.body).headers['x-sallyport-hops'], 'gw-a, gw-bb, gw-b')
  t.equal(up.seen.length, 1, 'the looping request never reached the upstream')
})

t.test('redirects: scheme, hostname, port, full path, prefix; default ports omitted', async (t) => {
  const port = await freePort()
  const redirect = (over: object) => ({ scheme: null, hostname: null, port: null, path: null, statusCode: 302, ...over })
  const prefix = (value: string) => [{ path: { type: 'PathPrefix' as const, value } }]
  await startPlane(t, buildTable({
    [port]: {
      routes: [{
        name: 'r', rules: [
          { matches: prefix('/https'), redirect: redirect({ scheme: 'https', statusCode: 301 }), backends: null },
          { matches: prefix('/host'), redirect: redirect({ hostname: 'other.org' }), backends: null },
          { matches: prefix('/port'), redirect: redirect({ port: 8443, scheme: 'https' }), backends: null },
          { matches: prefix('/http80'), redirect: redirect({ scheme: 'http', port: 80 }), backends: null },
          { matches: prefix('/full'), redirect: redirect({ path: { type: 'ReplaceFullPath', value: '/elsewhere' } }), backends: null },
          { matches: prefix('/old/'), redirect: redirect({ path: { type: 'ReplacePrefixMatch', value: '/new' } }), backends: null },
          { matches: prefix('/strip'), redirect: redirect({ path: { type: 'ReplacePrefixMatch', value: '/' } }), backends: null },
          {
            matches: prefix('/shaped'), redirect: redirect({ hostname: 'shaped.org' }), backends: null,
            responseHeaders: { set: [['cache-control', 'no-store']], add: [['x-moved', 'yes']], remove: [] },
          },
        ],
      }],
    },
  }, []))
  const loc = async (path: string): Promise<[number, string]> => {
    const r = await h1(port, { path })
    return [r.status, String(r.headers.location)]
  }
  t.same(await loc('/https/x?q=1'), [301, 'https://example.com/https/x?q=1'])
  t.same(await loc('/host/a'), [302, `http://other.org:${port}/host/a`], 'no scheme: the listener port stays')
  t.same(await loc('/port'), [302, 'https://example.com:8443/port'])
  t.same(await loc('/http80/z'), [302, 'http://example.com/http80/z'])
  t.same(await loc('/full/a/b'), [302, `http://example.com:${port}/elsewhere`])
  t.same(await loc('/old/a/b'), [302, `http://example.com:${port}/new/a/b`])
  t.same(await loc('/old'), [302, `http://example.com:${port}/new`])
  t.same(await loc('/strip/a'), [302, `http://example.com:${port}/a`])
  t.same(await loc('/strip'), [302, `http://example.com:${port}/`])
  const shaped = await h1(port, { path: '/shaped' })
  t.same([shaped.status, shaped.headers['cache-control'], shaped.headers['x-moved']], [302, 'no-store', 'yes'], 'the rule\'s ResponseHeaderModifier shapes its redirect too')
  const viaH2 = await h2(port, { path: '/https/h2' })
  t.equal(viaH2.status, 301)
  t.equal(viaH2.headers.location, 'https://example.com/https/h2')
})

// validate refuses such a configuration; the data path must still answer a
// table that carries one (a redirect went out as nothing at all: 302 in the
// access log, the client left waiting).
t.test('a redirect whose Location or fields cannot be written is a 500 with a body, on every protocol', async (t) => {
  const port = await freePort()
  const redirect = (over: object) => ({ scheme: null, hostname: null, port: null, path: null, statusCode: 302, ...over })
  const prefix = (value: string) => [{ path: { type: 'PathPrefix' as const, value } }]
  await startPlane(t, buildTable({
    [port]: {
      routes: [{
        name: 'r', rules: [
          { matches: prefix('/location'), redirect: redirect({ path: { type: 'ReplaceFullPath', value: '/new\r\nX-Injected: 1' } }), backends: null },
          {
            matches: prefix('/field'), redirect: redirect({ hostname: 'shaped.org' }), backends: null,
            responseHeaders: { set: [['x-moved', 'a\r\nX-Injected: 1']], add: [], remove: [] },
          },
        ],
      }],
    },
  }, []))
  for (const path of ['/location', '/field']) {
    const fast = await h1(port, { path })
    t.same([fast.status, fast.body, fast.headers['x-injected']], [500, 'internal error: response fields cannot be written\n', undefined], `${path}: HTTP/1.1`)
    const node = await h1(port, { path, method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' })
    t.same([node.status, node.body, node.headers['x-injected']], [500, 'internal error: response fields cannot be written\n', undefined], `${path}: HTTP/1.1 through node's server`)
    const viaH2 = await h2(port, { path })
    t.same([viaH2.status, viaH2.body], [500, 'internal error: response fields cannot be written\n'], `${path}: HTTP/2`)
  }
})

t.test('URLRewrite: hostname, full path, prefix (slashes); Backend hostname as authority', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  const prefix = (value: string) => [{ path: { type: 'PathPrefix' as const, value } }]
  await startPlane(t, buildTable({
    [port]: {
      routes: [{
        name: 'r', rules: [
          { matches: prefix('/host'), rewriteHost: 'rewritten.example', backends: [{ cluster: 'c' }] },
          { matches: prefix('/full'), rewritePath: { type: 'ReplaceFullPath', value: '/replaced' }, backends: [{ cluster: 'c' }] },
          { matches: prefix('/api/v1/'), rewritePath: { type: 'ReplacePrefixMatch', value: '/v2' }, backends: [{ cluster: 'c' }] },
          { matches: prefix('/root'), rewritePath: { type: 'ReplacePrefixMatch', value: '/' }, backends: [{ cluster: 'c' }] },
          { matches: prefix('/ext'), backends: [{ cluster: 'ext' }] },
        ],
      }],
    },
  }, [cluster('c', up.port), cluster('ext', up.port, { hostname: 'api.external.example' })]))
  const seen = async (path: string) => JSON.parse((await h1(port, { path })).body) as { url: string; headers: Record<string, string> }
  t.equal((await seen('/host/x')).headers.host, 'rewritten.example')
  t.equal((await seen('/full/a?q=2')).url, '/replaced?q=2')
  t.equal((await seen('/api/v1/users/7')).url, '/v2/users/7')
  t.equal((await seen('/api/v1')).url, '/v2')
  t.equal((await seen('/root/a/b')).url, '/a/b')
  t.equal((await seen('/root')).url, '/')
  t.equal((await seen('/ext/p')).headers.host, 'api.external.example')
})

t.test('direct responses and gRPC trailers-only errors', async (t) => {
  const port = await freePort()
  await startPlane(t, buildTable({
    [port]: {
      routes: [
        { name: 'd', hostnames: ['direct.example'], rules: [{ direct: { status: 500, code: 'SP_ERR_BACKEND_INVALID', body: 'invalid backend ref' }, backends: null }] },
        { name: 'g', hostnames: ['grpc.example'], grpc: true, rules: [{ backends: [{ cluster: 'empty' }] }] },
      ],
    },
  }, [cluster('empty', 1, { endpoints: [] })]))
  const d = await h1(port, { host: 'direct.example' })
  t.equal(d.status, 500)
  t.equal(d.body, 'invalid backend ref')
  const g = await h2(port, { host: 'grpc.example', method: 'POST', path: '/pkg.Svc/Call', headers: { 'content-type': 'application/grpc' }, body: Buffer.alloc(5) })
  t.equal(g.status, 200)
  t.equal(g.headers['grpc-status'], '14')
  const none = await h2(port, { host: 'nowhere.example', method: 'POST', path: '/pkg.Svc/Call', headers: { 'content-type': 'application/grpc' }, body: Buffer.alloc(5) })
  t.equal(none.headers['grpc-status'], '12', 'no route for a gRPC request: UNIMPLEMENTED')
})

t.test('weighted split is roughly honoured over 400 requests', async (t) => {
  const a = await echoH1(t, 'a')
  const b = await echoH1(t, 'b')
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'a', weight: 3 }, { cluster: 'b', weight: 1 }, { cluster: 'a', weight: 0 }] }] }] } },
    [cluster('a', a.port), cluster('b', b.port)]))
  const agent = new http.Agent({ keepAlive: true, maxSockets: 8 })
  t.teardown(() => agent.destroy())
  const counts = { a: 0, b: 0 }
  for (let i = 0; i < 400; i += 20) {
    const batch = await Promise.all(Array.from({ length: 20 }, () => h1(port, { agent })))
    for (const r of batch) counts[r.headers['x-upstream'] as 'a' | 'b']++
  }
  t.equal(counts.a + counts.b, 400)
  t.ok(counts.a > 240 && counts.a < 360, `a got ${counts.a}/400 for weight 3:1`)
})

t.test('mirror reaches a second upstream and does not change the answer; request timeout → 504', async (t) => {
  const main = await echoH1(t, 'main')
  let mirrored: http.IncomingMessage | null = null
  const mirror = await echoH1(t, 'mirror', (req, res) => { mirrored = req; req.resume(); res.writeHead(500).end('mirror says no') })
  const slow = await echoH1(t, 'slow', (req, res) => { req.resume(); setTimeout(() => { if (!res.destroyed) res.end('late') }, 3000) })
  const port = await freePort()
  await startPlane(t, buildTable({
    [port]: {
      routes: [{
        name: 'r', rules: [
          { matches: [{ path: { type: 'PathPrefix', value: '/slow' } }], timeouts: { requestMs: 200, backendRequestMs: null, connectMs: null, idleMs: null }, backends: [{ cluster: 'slow' }] },
          { mirrors: [{ cluster: 'mirror', percent: 100 }], backends: [{ cluster: 'main' }] },
        ],
      }],
    },
  }, [cluster('main', main.port), cluster('mirror', mirror.port), cluster('slow', slow.port)]))
  const r = await h1(port, { path: '/m', method: 'POST', body: 'payload' })
  t.equal(r.status, 200)
  t.equal(r.headers['x-upstream'], 'main')
  t.equal(JSON.parse(r.body).bytes, 7)
  for (let i = 0; i < 100 && mirrored === null; i++) await new Promise((resolve) => setTimeout(resolve, 20))
  t.ok(mirrored !== null, 'mirror received a copy')
  t.equal((mirrored as http.IncomingMessage | null)?.url, '/m')
  const started = Date.now()
  const late = await h1(port, { path: '/slow' })
  t.equal(late.status, 504)
  t.match(late.body, /request timeout/)
  t.ok(Date.now() - started < 2500, 'answered before the upstream did')
})
