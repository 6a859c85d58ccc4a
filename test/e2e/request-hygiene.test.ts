// The real CLI and what a client can send to make the gateway and the upstream
// read one request two ways: dot segments and escaped dots past a PathPrefix
// route (normalized, so the route and the upstream see the same path), two Host
// lines and an HTTP/1.0 chunked body (400 and close), and an HTTP/2 Host field
// naming another host than :authority (400). Over curl and raw sockets.
import t from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, curl, eventually, freePort, gatewayYaml, startCli, tempDir } from './harness.ts'
import { get, recorder } from './extensions-helpers.ts'

/** Writes `text` on a fresh connection and returns all it reads until the server closes (bounded: 5 s). */
function rawExchange(port: number, text: string): Promise<{ data: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    let data = ''
    const timer = setTimeout(() => { socket.destroy(); resolve({ data, closed: false }) }, 5000)
    socket.setEncoding('latin1')
    socket.on('data', (c: string) => { data += c })
    socket.on('error', () => {})
    socket.on('close', () => { clearTimeout(timer); resolve({ data, closed: true }) })
    socket.write(text, 'latin1')
  })
}

t.test('CLI: requests that could be read two ways are normalized or refused', async (t) => {
  const up = await recorder(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', up.port))
  fs.writeFileSync(path.join(dir, 'route.yaml'), `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: public-only, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [api.example.test]
  rules:
    - matches: [{ path: { type: PathPrefix, value: /public } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: api, port: ${up.port} }]
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')
  const base = `http://127.0.0.1:${port}`
  const status = async (args: string[]): Promise<string> => (await curl(['-o', '/dev/null', '-w', '%{http_code}', '--path-as-is', '-H', 'Host: api.example.test', ...args])).stdout

  t.equal(await status([`${base}/public/a`]), '200', 'the route serves /public')
  t.equal(up.seen.at(-1)?.url, '/public/a')
  for (const escape of ['/public/../admin', '/public/%2e%2e/admin', '/public/%2E%2e/admin', '/public\\..\\admin']) {
    const before = up.seen.length
    t.equal(await status([`${base}${escape}`]), '404', `${escape} is /admin, which no route serves`)
    t.equal(up.seen.length, before, 'nothing forwarded')
  }
  t.equal(await status([`${base}/public/api/group%2fproject`]), '200', 'an escaped slash in a name is data')
  t.equal(up.seen.at(-1)?.url, '/public/api/group%2Fproject', 'kept escaped (hex upper-cased)')
  const ambiguous = await curl(['--path-as-is', '-H', 'Host: api.example.test', `${base}/public/x/..%2F../admin`])
  t.equal(ambiguous.stdout, 'bad request: an escaped slash next to a dot segment in the path\n', 'an escaped slash that would make a dot segment: 400')
  t.equal(await status(['--http2-prior-knowledge', `${base}/public/./b/../c`]), '200', 'over h2c too')
  t.equal(up.seen.at(-1)?.url, '/public/c', 'normalized before it is forwarded')
  t.equal(await status([`${base}/public/%zz`]), '400', 'a malformed escape is a 400')
  await cli.waitFor(/"path":"\/public\/%zz".*"code":"SP_ERR_BAD_REQUEST","reason":"bad request: malformed percent-encoding in the path"/, 5000)
  t.pass('the access line shows the path as it came, the code and the reason')

  const seenBefore = up.seen.length
  const twoHosts = await rawExchange(port, 'GET /public/a HTTP/1.1\r\nHost: api.example.test\r\nHost: other.example.test\r\n\r\n')
  t.match(twoHosts.data, /^HTTP\/1\.1 400 [^]*\r\n\r\nbad request: more than one Host field\n$/, 'two Host lines: 400 saying why')
  t.ok(twoHosts.closed, 'and the connection closes')
  const chunked10 = await rawExchange(port, 'POST /public/a HTTP/1.0\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n')
  t.match(chunked10.data, /^HTTP\/1\.1 400 [^]*bad request: Transfer-Encoding in an HTTP\/1\.0 request\n$/, 'HTTP/1.0 with Transfer-Encoding: 400')
  t.ok(chunked10.closed, 'and the connection closes')

  const session = http2.connect(base)
  session.on('error', () => {})
  t.teardown(() => session.close())
  const h2status = await new Promise<number>((resolve, reject) => {
    const s = session.request({ ':path': '/public/a', ':authority': 'api.example.test', host: 'other.example.test' })
    s.on('response', (h) => resolve(Number(h[':status'])))
    s.on('error', reject)
    s.resume()
    s.end()
  })
  t.equal(h2status, 400, 'HTTP/2 Host naming another host than :authority: 400')
  t.equal(up.seen.length, seenBefore, 'none of the refused requests reached the upstream')
})
