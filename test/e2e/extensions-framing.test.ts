// Extensions cannot reframe a message or set connection fields, through the
// real CLI. The gateway owns Content-Length and Transfer-Encoding (the
// message's framing), Host (the Backend's) and the hop-by-hop fields with
// those Connection names. An ExternalProcessor answer that sets or removes one
// fails its callout (failOpen decides; nothing of that answer is applied). A
// Plugin's own edits of them are not applied, its deny naming one is a failure,
// its reply headers naming one are dropped. Before: a response-headers callout
// setting content-length 2 on a 10-byte body cut the client's connection (the
// access line said 200 client aborted); a request-headers one setting
// content-length 3 on a 38-byte POST cut the request's body upstream (502
// blamed on the upstream); `connection: close, x-foo` still sent x-foo upstream.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, rawExchange, splitResponses as responses, startCli, tempDir } from './harness.ts'
import { egressBackend, get, recorder, route } from './extensions-helpers.ts'

const UPSTREAM_BODY = '0123456789'
const POST_BODY = 'abcGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n'


/** The answers to a request on `host` (a POST, or a GET) and to a next one on the same connection. */
async function exchange(port: number, host: string, method: 'GET' | 'POST'): Promise<Array<{ head: string; body: string }>> {
  const first = method === 'POST'
    ? `POST /x HTTP/1.1\r\nHost: ${host}\r\nContent-Type: text/plain\r\nContent-Length: ${POST_BODY.length}\r\n\r\n${POST_BODY}`
    : `GET /x HTTP/1.1\r\nHost: ${host}\r\n\r\n`
  return responses(await rawExchange(port, first + 'GET /next HTTP/1.1\r\nHost: other.example.test\r\nConnection: close\r\n\r\n'))
}

const CALLOUTS: Record<string, object> = {
  '/resp-length': { setHeaders: { 'content-length': '2' } },
  '/resp-chunked': { setHeaders: { 'Transfer-Encoding': 'chunked' } },
  '/resp-length-and-more': { setHeaders: { 'content-length': '2', 'x-other': '1' } },
  '/req-length': { setHeaders: { 'content-length': '3' } },
  '/req-host': { setHeaders: { host: 'evil.example.test' } },
  '/req-connection': { setHeaders: { connection: 'close, x-foo', 'x-foo': '1' } },
  '/req-remove-length': { removeHeaders: ['Content-Length'] },
}

t.test('CLI: extensions never change a message\'s framing or connection fields', async (t) => {
  const up = await recorder(t, (_s, res) => { res.writeHead(200, { 'content-type': 'text/plain', 'content-length': UPSTREAM_BODY.length }); res.end(UPSTREAM_BODY) })
  const callout = await recorder(t, (s, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(CALLOUTS[s.url] ?? {}))
  })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const w = (file: string, text: string): void => fs.writeFileSync(path.join(dir, file), text)
  w('gateway.yaml', gatewayYaml(port))
  w('edits.mjs', `export default () => ({
  requestHeaders(req) {
    Object.assign(req.headers, { 'content-length': '3', 'transfer-encoding': 'chunked', host: 'evil.example.test', connection: 'close, x-foo', 'x-foo': '1', 'x-plugin': 'req' })
  },
  responseHeaders(req, res) {
    Object.assign(res.headers, { 'content-length': '2', 'transfer-encoding': 'chunked', connection: 'content-length, x-bar', 'x-bar': '1', 'x-plugin': 'res' })
  },
})
`)
  w('deny.mjs', `export default () => ({ requestHeaders() { return { deny: { status: 403, reason: 'no', headers: { 'transfer-encoding': 'chunked' } } } } })\n`)
  w('reply.mjs', `export default () => ({ requestHeaders() { return { responseHeaders: { connection: 'close', upgrade: 'h2c', 'keep-alive': 'timeout=1', 'x-reply': 'yes' } } } })\n`)
  const processor = (name: string, url: string, phase: string, failOpen = false): string => egressBackend(name, up.port, `  - name: xp
    type: ExternalProcessor
    failOpen: ${failOpen}
    config: { url: "http://127.0.0.1:${callout.port}${url}", phases: [${phase}] }
`)
  const plugin = (name: string, file: string): string => egressBackend(name, up.port, `  - name: ${name}
    type: Plugin
    config: { path: ${JSON.stringify(path.join(dir, file))} }
`)
  const backends: Record<string, string> = {
    'resp-length': processor('resp-length', '/resp-length', 'response-headers'),
    'resp-chunked': processor('resp-chunked', '/resp-chunked', 'response-headers'),
    'resp-open': processor('resp-open', '/resp-length-and-more', 'response-headers', true),
    'req-length': processor('req-length', '/req-length', 'request-headers'),
    'req-host': processor('req-host', '/req-host', 'request-headers'),
    'req-connection': processor('req-connection', '/req-connection', 'request-headers'),
    'req-remove-length': processor('req-remove-length', '/req-remove-length', 'request-headers'),
    'plugin-edits': plugin('plugin-edits', 'edits.mjs'),
    'plugin-deny': plugin('plugin-deny', 'deny.mjs'),
    'plugin-reply': plugin('plugin-reply', 'reply.mjs'),
  }
  w('backends.yaml', Object.values(backends).join('---\n'))
  w('routes.yaml', Object.keys(backends).map((name) => route(name, `${name}.example.test`, name, up.port)).join('---\n'))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'error'])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  // An ExternalProcessor naming such a field fails: 500, the upstream never asked, the connection intact.
  for (const name of ['resp-length', 'resp-chunked', 'req-length', 'req-host', 'req-connection', 'req-remove-length']) {
    for (const method of ['POST', 'GET'] as const) {
      const before = up.seen.length
      const got = await exchange(port, `${name}.example.test`, method)
      const what = `${name}, ${method}`
      t.match(got[0]?.head ?? '', /^HTTP\/1\.1 500 /, `${what}: the callout failed`)
      t.match(got[0]?.body ?? '', /SP_ERR_EXTENSION_FAILED/, `${what}: as an extension failure`)
      t.match(got[1]?.head ?? '', /^HTTP\/1\.1 404 /, `${what}: the next request on the connection gets its own answer`)
      if (name.startsWith('req-')) t.equal(up.seen.length, before, `${what}: nothing went upstream`)
    }
  }

  // failOpen: the request continues as if the callout had not answered (its x-other is not applied either).
  for (const method of ['POST', 'GET'] as const) {
    const got = await exchange(port, 'resp-open.example.test', method)
    t.match(got[0]?.head ?? '', /^HTTP\/1\.1 200 /, `failOpen, ${method}: 200`)
    t.match(got[0]?.head ?? '', /\r\ncontent-length: 10(?:\r\n|$)/i, `failOpen, ${method}: the upstream's length`)
    t.notMatch(got[0]?.head ?? '', /x-other/i, `failOpen, ${method}: nothing of the failed answer`)
    t.equal(got[0]?.body, UPSTREAM_BODY)
    t.match(got[1]?.head ?? '', /^HTTP\/1\.1 404 /)
  }

  // A Plugin's in-place edits of those fields are not applied; its other edits are.
  for (const method of ['POST', 'GET'] as const) {
    const before = up.seen.length
    const got = await exchange(port, 'plugin-edits.example.test', method)
    const what = `plugin edits, ${method}`
    t.equal(up.seen.length, before + 1, `${what}: one request upstream`)
    const sent = up.seen.at(-1)
    t.equal(sent?.body, method === 'POST' ? POST_BODY : '', `${what}: the whole body went upstream`)
    t.equal(sent?.headers['content-length'], method === 'POST' ? String(POST_BODY.length) : undefined, `${what}: with its own length`)
    t.equal(sent?.headers['transfer-encoding'], undefined, `${what}: not chunked`)
    t.not(sent?.headers.host, 'evil.example.test', `${what}: the gateway's Host`)
    t.equal(sent?.headers['x-foo'], undefined, `${what}: a field its Connection named is not sent`)
    t.equal(sent?.headers['x-plugin'], 'req', `${what}: its other field is`)
    t.match(got[0]?.head ?? '', /^HTTP\/1\.1 200 /, `${what}: 200`)
    t.match(got[0]?.head ?? '', /\r\ncontent-length: 10(?:\r\n|$)/i, `${what}: the upstream's length`)
    t.notMatch(got[0]?.head ?? '', /transfer-encoding|x-bar/i, `${what}: no Transfer-Encoding, nor a field its Connection named`)
    t.match(got[0]?.head ?? '', /\r\nx-plugin: res(?:\r\n|$)/i, `${what}: its other field`)
    t.equal(got[0]?.body, UPSTREAM_BODY, `${what}: the whole body`)
    t.match(got[1]?.head ?? '', /^HTTP\/1\.1 404 /, `${what}: the next request gets its own answer`)
  }

  // A Plugin's deny naming one cannot be sent as given: an extension failure, as any unsendable deny.
  const denied = await exchange(port, 'plugin-deny.example.test', 'GET')
  t.match(denied[0]?.head ?? '', /^HTTP\/1\.1 500 /, 'a deny with Transfer-Encoding: the extension failed')
  t.notMatch(denied[0]?.head ?? '', /transfer-encoding/i)
  t.match(denied[1]?.head ?? '', /^HTTP\/1\.1 404 /)

  // Its reply headers naming them are dropped (as Content-Length always was); the others are added.
  for (const method of ['POST', 'GET'] as const) {
    const got = await exchange(port, 'plugin-reply.example.test', method)
    t.match(got[0]?.head ?? '', /\r\nx-reply: yes(?:\r\n|$)/i, `reply, ${method}: its own field`)
    t.notMatch(got[0]?.head ?? '', /\r\n(?:upgrade: h2c|keep-alive: timeout=1|connection: close)\r\n/i, `reply, ${method}: no connection fields`)
    t.equal(got[0]?.body, UPSTREAM_BODY)
    t.match(got[1]?.head ?? '', /^HTTP\/1\.1 404 /, `reply, ${method}: the connection stays open for the next request`)
  }
})
