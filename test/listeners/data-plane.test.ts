// The HTTP data plane end to end on loopback: real listeners, the real
// upstream registry, real upstream servers.

import t from 'tap'
import { execFile } from 'node:child_process'
import http2 from 'node:http2'
import { promisify } from 'node:util'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { echoH1, echoH2c, h1, h2, h2On, startPlane } from './fixtures.ts'

configureLogger({ level: 'silent' })
const run = promisify(execFile)

t.test('HTTP port: HTTP/1.1, h2c prior knowledge and h2c Upgrade on one port', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  const table = buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)])
  await startPlane(t, table)

  const a = await h1(port, { path: '/one?x=1' })
  t.equal(a.status, 200)
  t.equal(JSON.parse(a.body).url, '/one?x=1')

  const b = await h2(port, { path: '/two' })
  t.equal(b.status, 200)
  t.equal(JSON.parse(b.body).url, '/two')

  const c = await run('curl', ['-s', '--http2', '-o', '-', '-w', '\\n%{http_version} %{http_code}', '-H', 'Host: example.com', `http://127.0.0.1:${port}/three`], { timeout: 10_000 })
  const lines = c.stdout.trim().split('\n')
  t.equal(lines[1], '2 200', 'curl --http2 upgraded to h2c')
  t.equal(JSON.parse(lines[0]).url, '/three')
})

t.test('error answers: 404 no route, 500 unresolved backend, 503 no endpoint', async (t) => {
  const port = await freePort()
  const table = buildTable({
    [port]: {
      routes: [{
        name: 'r', hostnames: ['example.com'], rules: [
          { matches: [{ path: { type: 'PathPrefix', value: '/unresolved' } }], backends: [{ cluster: null }] },
          { matches: [{ path: { type: 'PathPrefix', value: '/missing' } }], backends: [{ cluster: 'nope' }] },
          { matches: [{ path: { type: 'PathPrefix', value: '/empty' } }], backends: [{ cluster: 'empty' }] },
        ],
      }],
    },
  }, [cluster('empty', 1, { endpoints: [] })])
  await startPlane(t, table)
  const r404 = await h1(port, { host: 'other.org' })
  t.equal(r404.status, 404)
  t.match(r404.body, /no route/)
  t.equal((await h1(port, { path: '/nothing' })).status, 404)
  const r500 = await h1(port, { path: '/unresolved' })
  t.equal(r500.status, 500)
  t.match(r500.body, /backend unresolved/)
  t.equal((await h1(port, { path: '/missing' })).status, 500)
  const r503 = await h1(port, { path: '/empty' })
  t.equal(r503.status, 503)
  t.match(r503.body, /no endpoint available/)
  const h2r = await h2(port, { path: '/empty' })
  t.equal(h2r.status, 503)
})

t.test('paths are normalized before routing: the route matches what the upstream is sent (RFC 3986)', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({
    [port]: {
      routes: [{
        name: 'r', hostnames: ['example.com'], rules: [
          { matches: [{ path: { type: 'PathPrefix', value: '/public' } }], backends: [{ cluster: 'c' }] },
        ],
      }],
    },
  }, [cluster('c', up.port)]))
  const seen = (): string | undefined => up.seen.at(-1)?.url
  for (const escape of ['/public/../admin', '/public/%2e%2e/admin', '/public/.%2E/admin', '/public\\..\\admin', '/public/x/../../admin']) {
    const before = up.seen.length
    t.equal((await h1(port, { path: escape })).status, 404, `HTTP/1.1 ${escape}: resolves to /admin, which no route serves`)
    t.equal((await h2(port, { path: escape })).status, 404, `HTTP/2 ${escape}`)
    t.equal(up.seen.length, before, 'nothing forwarded')
  }
  t.equal((await h1(port, { path: '/public/./a/../b?x=/../y' })).status, 200)
  t.equal(seen(), '/public/b?x=/../y', 'the upstream gets the normalized path; the query is left as it is')
  t.equal((await h2(port, { path: '/public/%7euser/a%2fb' })).status, 200)
  t.equal(seen(), '/public/~user/a%2Fb', 'unreserved escapes decoded, an escaped slash kept (upper-cased)')
  t.equal((await h1(port, { path: '/public//x' })).status, 200)
  t.equal(seen(), '/public//x', 'repeated slashes kept')
  const bad = await h1(port, { path: '/public/%zz' })
  t.equal(bad.status, 400)
  t.equal(bad.body, 'bad request: malformed percent-encoding in the path\n')
})

t.test('a fragment in the request target and a Host that is no host and port are 400s', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', hostnames: ['example.com'], rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const fragment = await h1(port, { path: '/a#b' })
  t.equal(fragment.status, 400)
  t.equal(fragment.body, 'bad request: a fragment in the request target\n')
  t.equal((await h2(port, { path: '/a?x=1#b' })).status, 400, 'HTTP/2 too, in the query part as well')
  const badPort = await h1(port, { host: 'example.com:abc' })
  t.equal(badPort.status, 400)
  t.equal(badPort.body, 'bad request: the authority\'s port is not a number\n')
  t.equal((await h2(port, { host: 'example.com:8x' })).status, 400, 'HTTP/2 :authority too')
  // Userinfo (RFC 9110 §4.2.4: never sent in an http(s) URI) says so; `user:pw@` read as a bad port.
  for (const host of ['user@example.com', 'user:pw@example.com', 'user:pw@example.com:80']) {
    const r = await h1(port, { host })
    t.equal(r.status, 400, `Host ${host}`)
    t.equal(r.body, 'bad request: the authority has userinfo (user@), which http and https URIs never carry\n')
  }
  for (const host of ['example.com x', 'exa/mple.com', '[::1', '[::1]x', '[fe80::1%25eth0]']) {
    const r = await h1(port, { host })
    t.equal(r.status, 400, `Host ${host}`)
    t.equal(r.body, "bad request: the authority's host has a character no host has\n")
  }
  t.equal(up.seen.length, 0, 'nothing forwarded')
  for (const host of ['example.com', 'EXAMPLE.com:80', 'example.com:']) t.equal((await h1(port, { host })).status, 200, `Host ${host}`)
  t.equal((await h1(port, { host: '[::1]:80' })).status, 404, 'an IP literal is a host (no route names it)')
  t.equal((await h1(port, { host: 'a_b-c.example~!$&()*+,;=%41' })).status, 404, 'every reg-name character is a host character')
})

t.test('a request target neither origin-form nor absolute-form is a 400 (asterisk-form only with OPTIONS)', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  // RFC 9112 §3.2: GET * or GET some/path reached the upstream as it was, an upstream's parser left to read it.
  const star = await h1(port, { path: '*' })
  t.equal(star.status, 400, 'GET *')
  t.equal(star.body, 'bad request: the request target is neither a path (/...) nor an absolute URI\n')
  // Node's parser refuses these itself.
  for (const path of ['some/path', 'example.com:80']) t.equal((await h1(port, { path })).status, 400, `GET ${path}`)
  t.equal((await h2(port, { path: '*', method: 'GET' }).catch(() => ({ status: -1 }))).status !== 200, true, 'HTTP/2 :path * with GET is not forwarded')
  // An absolute URI starts with its scheme (http or https, RFC 9112 §3.2.2): `://` further in is not one.
  // (Node's parser refuses some of these itself, with its own body.)
  for (const path of ['x?u=http://evil.example/', 'ftp://evil.example/', '1http://evil.example/', 'xhttp://evil.example/']) {
    t.equal((await h1(port, { path })).status, 400, `GET ${path}`)
  }
  t.equal((await h1(port, { path: 'ftp://evil.example/' })).body, 'bad request: the request target is neither a path (/...) nor an absolute URI\n')
  t.equal(up.seen.length, 0, 'nothing forwarded')
  t.equal((await h1(port, { path: 'HTTP://any.example/a' })).status, 200, 'the scheme in any case')
  const options = await h1(port, { path: '*', method: 'OPTIONS' })
  t.equal(options.status, 200, 'OPTIONS * (RFC 9112 §3.2.4) is forwarded')
  t.equal(up.seen.at(-1)?.url, '*')
})

t.test('limits: oversized request headers → 431 on HTTP/1.1 and HTTP/2', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]), { limits: { maxHeaderSize: 4096 } })
  const big = 'x'.repeat(6000)
  const r = await h1(port, { headers: { 'x-big': big } }).catch((err: Error) => ({ status: -1, body: err.message, headers: {} }))
  t.equal(r.status, 431)
  t.equal((await h2(port, { headers: { 'x-big': big } })).status, 431, 'HTTP/2 header list over the limit')
  // RFC 9113 §6.5.2 counts every field (name + value + 32), repeated names
  // each time: 90 fields of 30 bytes are 5,760 bytes on that count, though
  // node's header object joins them into one value of 2,878 bytes.
  const many = Array.from({ length: 90 }, () => 'v'.repeat(30))
  t.equal((await h2(port, { headers: { 'x-many': many as unknown as string } })).status, 431, 'HTTP/2: a repeated field counts once per field')
  t.equal((await h1(port)).status, 200, 'normal requests still pass')
})

t.test('HTTP/2 limits hold on every request of a connection: 431 over the size, a reset over 100 fields', async (t) => {
  // Over the size, only a connection's first requests got the 431: once the client had
  // acknowledged our SETTINGS, nghttp2 enforced the SETTINGS_MAX_HEADER_LIST_SIZE we
  // announced and reset the stream (ENHANCE_YOUR_CALM) before sallyport saw it. And
  // node's field-count limit had room for the pseudo-headers, so 101-104 fields passed.
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  await new Promise<void>((resolve) => session.once('remoteSettings', () => resolve()))
  t.equal((await h2On(session)).status, 200, 'a first request, so our SETTINGS are acknowledged')
  const big = 'x'.repeat(16_300)
  for (const n of [1, 2]) t.equal((await h2On(session, { headers: { 'x-big': big } })).status, 431, `over the size, request ${n}: 431`)
  const fields = (n: number): Record<string, string> => Object.fromEntries(Array.from({ length: n }, (_, i) => [`x-f${i}`, 'v']))
  t.equal((await h2On(session, { headers: fields(100) })).status, 200, '100 fields pass')
  const over = await h2On(session, { headers: fields(101) }).then(() => -1, (err: { code?: string; message: string }) => err.message)
  t.match(over, /NGHTTP2_ENHANCE_YOUR_CALM/, '101 fields: the stream is reset')
  t.equal((await h2On(session)).status, 200, 'and the connection serves on')
})

t.test('HTTP/2: a Host field that names another host than :authority is a 400 (RFC 9113 §8.3.1)', async (t) => {
  const up = await echoH1(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const differs = await h2(port, { host: 'example.com', headers: { host: 'other.example' } })
  t.equal(differs.status, 400)
  t.equal(differs.body, 'bad request: Host differs from :authority\n', 'the body says why')
  t.equal(up.seen.length, 0, 'nothing was forwarded')
  t.equal((await h2(port, { host: 'example.com', headers: { host: 'EXAMPLE.com' } })).status, 200, 'the same host in another case passes')
  t.equal((await h2(port, { host: 'example.com', headers: { host: 'example.com:80' } })).status, 200, 'the same host with a port passes (routes match hosts)')
  t.equal((await h2(port, { host: 'example.com:8080', headers: { host: 'other.example:8080' } })).status, 400, 'another host with the same port does not')
  t.equal((await h2(port, { host: 'example.com' })).status, 200, 'no Host field passes')
})
