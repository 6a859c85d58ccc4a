// The real CLI and HTTP/1.1 clients whose bytes node's parser cannot read while a
// request of theirs is in flight (requests with a body go through node's server):
// - a malformed request pipelined behind a whole one: the refusal (400) used to be
//   written the moment the parser failed, into the middle of the in-flight
//   response's body ("01234HTTP/1.1 400 ..." read as a 200's body) or in place of
//   its answer (the upstream had the request; the client was told 400). The
//   response goes out whole first, then the refusal, then the connection closes;
// - a malformed chunk in the request's own body: the request is the client's
//   fault, not a client gone away (it was logged 499): a 400 saying so, the
//   upstream request aborted, the connection closed; a response already started
//   is cut (never passed on as whole), logged with the same code.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, routeYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

// One request per upstream connection (the raw upstream reads one).
const HEAD = 'HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 10\r\n\r\n'

/** What the upstream made of each request, by path: "complete" or "aborted" (its connection closed mid-body). */
async function upstream(t: Test): Promise<{ port: number; seen: Map<string, string> }> {
  const seen = new Map<string, string>()
  const server = net.createServer((socket) => {
    socket.setEncoding('latin1')
    socket.on('error', () => {})
    let data = ''
    let target = ''
    socket.on('data', (chunk: string) => {
      data += chunk
      if (target === '') {
        const end = data.indexOf('\r\n\r\n')
        if (end === -1) return
        target = data.split(' ')[1] ?? ''
        seen.set(target, 'head')
        // /slow-body: the head and half the body now, the rest later; /late: all of it later;
        // /early: the head and half now, the rest after the client has had time to break its body.
        if (target === '/slow-body' || target.startsWith('/early')) socket.write(HEAD + '01234')
        if (target === '/slow-body') setTimeout(() => { if (socket.writable) socket.write('56789') }, 300)
        if (target.startsWith('/early')) setTimeout(() => { if (socket.writable) socket.write('56789') }, 1500)
        if (target === '/late') setTimeout(() => { if (socket.writable) socket.write(HEAD + '0123456789') }, 300)
      }
      if (data.endsWith('\r\n\r\nabc') || data.endsWith('\r\n0\r\n\r\n')) seen.set(target, 'complete')
    })
    socket.on('close', () => { if (seen.get(target) === 'head') seen.set(target, 'aborted') })
  })
  const port = await listenLoopback(server)
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { port, seen }
}

/**
 * Writes `first`, then (after `gap` ms, or once `after` matches what came back) `then`,
 * or half-closes when `then` is null; collects until close (bounded: 5 s).
 */
function client(port: number, first: string, then: string | null, after: RegExp | null, gap = 100): Promise<{ data: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    let data = ''
    let sent = false
    const send = (): void => {
      if (sent) return
      sent = true
      if (then === null) socket.end()
      else socket.write(then, 'latin1')
    }
    const timer = setTimeout(() => { socket.destroy(); resolve({ data, closed: false }) }, 5000)
    socket.setEncoding('latin1')
    socket.on('data', (c: string) => {
      data += c
      if (after !== null && after.test(data)) send()
    })
    socket.on('error', () => {})
    socket.on('close', () => { clearTimeout(timer); resolve({ data, closed: true }) })
    socket.write(first, 'latin1')
    if (after === null) setTimeout(send, gap)
  })
}

t.test('CLI: a client parse error never corrupts, replaces or outlives the response in flight', async (t) => {
  const up = await upstream(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', up.port))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', up.port))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const post = (p: string): string => `POST ${p} HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 3\r\n\r\nabc`
  const garbage = '\x01\x02 not http\r\n\r\n'
  for (const p of ['/slow-body', '/late']) {
    const { data, closed } = await client(port, post(p), garbage, null)
    const at = data.indexOf('\r\n\r\n')
    const [head, rest] = [data.slice(0, at), data.slice(at + 4)]
    t.match(head, /^HTTP\/1\.1 200 OK\r\n/, `${p}: the in-flight request gets its own answer`)
    t.ok(rest.startsWith('0123456789HTTP/1.1 400 Bad Request\r\n'), `${p}: its body whole, then the refusal of the malformed request: ${JSON.stringify(rest.slice(0, 40))}`)
    t.ok(closed, `${p}: then the connection closes`)
    t.equal(up.seen.get(p), 'complete', `${p}: the upstream had the whole request`)
    await cli.waitFor(new RegExp(`"path":"${p}","status":200[^\\n]*"bytesOut":10,`), 5000)
    t.pass(`${p}: logged as answered in full`)
  }

  const chunked = (p: string): string => `POST ${p} HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n`
  const never = await client(port, chunked('/never'), 'zz\r\nnot a chunk\r\n', null, 200)
  t.match(never.data, /^HTTP\/1\.1 400 Bad Request\r\n[^]*\r\n\r\nbad request: malformed request body\n$/, 'a malformed chunk: 400, saying why')
  t.match(never.data.toLowerCase(), /connection: close/, 'and the connection closes')
  t.ok(never.closed)
  await eventually(async () => up.seen.get('/never'), (s) => s === 'aborted', 5000, 'the upstream request is aborted')
  await cli.waitFor(/"path":"\/never","status":400[^\n]*"code":"SP_ERR_BAD_REQUEST"/, 5000)
  t.pass('logged as the client\'s bad request, not as a client gone away')

  const early = await client(port, chunked('/early'), 'zz\r\nnot a chunk\r\n', /01234$/)
  t.ok(early.closed, 'a response already started: the connection is cut')
  t.match(early.data, /^HTTP\/1\.1 200 OK\r\n/)
  t.notMatch(early.data, /56789|400 Bad Request/, 'never completed, nothing written into it')
  await eventually(async () => up.seen.get('/early'), (s) => s === 'aborted', 5000, 'the upstream request is aborted')
  await cli.waitFor(/"path":"\/early","status":200[^\n]*"code":"SP_ERR_BAD_REQUEST"/, 5000)
  t.pass('logged with the client\'s bad request as the reason')

  // Not malformed, gone: a client that ends its side mid-body, its response started.
  const gone = await client(port, chunked('/early-fin'), null, /01234$/)
  t.ok(gone.closed, 'a client that half-closes mid-body: the connection closes')
  t.notMatch(gone.data, /56789|400 Bad Request/, 'its response cut, nothing written into it')
  await cli.waitFor(/"path":"\/early-fin","status":200[^\n]*"code":"SP_ERR_CLIENT_ABORTED"/, 5000)
  t.pass('logged as a client gone away')
})
