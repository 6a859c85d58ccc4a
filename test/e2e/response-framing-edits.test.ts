// A route's ResponseHeaderModifier (and a Plugin's reply headers) cannot change
// how a response is framed: Content-Length stays the upstream's, no
// Transfer-Encoding is added. An edited Content-Length had the client read the
// body by another length than was sent, on a connection kept open, so the
// upstream's own bytes answered the client's next request (a response
// desync); a set Transfer-Encoding sent both framings.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, rawExchange, splitResponses as responses, routeYaml, runCli, startCli, tempDir } from './harness.ts'
import { egressBackend, get, recorder } from './extensions-helpers.ts'

// The body an upstream might use to forge a response on a desynced connection.
const BODY = 'HTTP/1.1 200 OK\r\nContent-Length: 6\r\nX-Forged: yes\r\n\r\nFORGED'


t.test('CLI: response edits never change the framing', async (t) => {
  const up = await recorder(t, (_s, res) => { res.setHeader('content-length', Buffer.byteLength(BODY)); res.end(BODY) })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'reply.mjs'), 'export default () => ({ requestHeaders() { return { responseHeaders: { "Content-Length": "3", "x-plugin": "yes" } } } })\n')
  // validate refuses a route's edit with CR LF in its value; a Plugin's reply header is not checked before it runs.
  fs.writeFileSync(path.join(dir, 'crlf.mjs'), 'export default () => ({ requestHeaders() { return { responseHeaders: { "x-r": "1\\r\\nSet-Cookie: injected=1" } } } })\n')
  fs.writeFileSync(path.join(dir, 'backends.yaml'), [
    egressBackend('api', up.port, '  []\n').replace('  extensions:\n  []\n', ''),
    egressBackend('plugged', up.port, `  - name: reply
    type: Plugin
    config: { path: ${JSON.stringify(path.join(dir, 'reply.mjs'))} }
`),
    egressBackend('crlf', up.port, `  - name: reply
    type: Plugin
    config: { path: ${JSON.stringify(path.join(dir, 'crlf.mjs'))} }
`),
  ].join('---\n'))
  const edits = (set: string, add = ''): string => `        - type: ResponseHeaderModifier
          responseHeaderModifier: { set: [${set}], add: [${add}] }`
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [
    routeYaml('short', 'short.example.test', 'api', up.port, edits('{ name: Content-Length, value: "5" }')),
    routeYaml('long', 'long.example.test', 'api', up.port, edits('{ name: Content-Length, value: "100" }')),
    routeYaml('chunked', 'chunked.example.test', 'api', up.port, edits('{ name: Transfer-Encoding, value: chunked }')),
    routeYaml('added', 'added.example.test', 'api', up.port, edits('', '{ name: Content-Length, value: "5" }')),
    routeYaml('plugged', 'plugged.example.test', 'plugged', up.port),
    routeYaml('crlf', 'crlf.example.test', 'crlf', up.port),
  ].join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  for (const host of ['short', 'long', 'chunked', 'added', 'plugged']) {
    // A POST (node's HTTP/1.1 server) and a GET (the fast path), then another request on the connection.
    for (const first of [`POST /a HTTP/1.1\r\nHost: ${host}.example.test\r\nContent-Length: 2\r\n\r\nhi`, `GET /a HTTP/1.1\r\nHost: ${host}.example.test\r\n\r\n`]) {
      const text = first + 'GET /next HTTP/1.1\r\nHost: other.example.test\r\nConnection: close\r\n\r\n'
      const got = responses(await rawExchange(port, text))
      const what = `${host}, ${first.slice(0, 4).trim()}`
      t.equal(got.length, 2, `${what}: two responses read by their lengths`)
      t.match(got[0]?.head ?? '', new RegExp(`\\r\\ncontent-length: ${Buffer.byteLength(BODY)}(?:\\r\\n|$)`, 'i'), `${what}: the upstream's Content-Length`)
      t.notMatch(got[0]?.head ?? '', /transfer-encoding/i, `${what}: no Transfer-Encoding`)
      t.equal(got[0]?.body, BODY, `${what}: the whole body`)
      t.match(got[1]?.head ?? '', /^HTTP\/1\.1 404 /, `${what}: the next request gets its own answer (no route for other.example.test), not the upstream's bytes`)
    }
  }
  // A field value no HTTP/1.1 head may carry: refused (502), on node's path (a POST) named as a 502, not
  // with the reason phrase of the 200 it could not write.
  const crlf = await rawExchange(port, 'POST / HTTP/1.1\r\nHost: crlf.example.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi')
  t.match(crlf, /^HTTP\/1\.1 502 Bad Gateway\r\n/, 'an edit with CR LF in its value: 502 Bad Gateway')
  t.notMatch(crlf, /injected/, 'nothing injected')
  const v = await runCli(t, ['validate', dir])
  t.match(v.stdout, /routes\.yaml:\d+: HTTPRoute default\/short: spec\.rules\[0\]\.filters\[0\]\.responseHeaderModifier\.set\[0\]: Content-Length frames the response and stays the upstream's; this edit is ignored/,
    'validate warns, naming the file, object and field')
  t.equal(v.code, 0, 'a warning, not an error: the route is served')
  const plugged = responses(await rawExchange(port, 'GET / HTTP/1.1\r\nHost: plugged.example.test\r\nConnection: close\r\n\r\n'))
  t.match(plugged[0]?.head ?? '', /\r\nx-plugin: yes(?:\r\n|$)/i, 'the Plugin\'s other reply header is kept')
})
