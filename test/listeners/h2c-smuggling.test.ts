// h2c smuggling: a client must not reach an upstream's own HTTP/2 through the
// gateway. An upstream that takes `Upgrade: h2c` and answers 101 would get a
// raw tunnel in which the client sends any request to any path, past the
// route's matches, filters and extensions. The gateway upgrades to h2c itself
// (plain listeners, exact `h2c`) and tunnels no other h2c upgrade.

import t, { type Test } from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { listen, startPlane } from './fixtures.ts'

configureLogger({ level: 'silent' })

const H2_PREFACE = 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'

/** An HTTP/1.1 upstream that takes any Upgrade (h2c included) with a 101 and records what then comes through. */
async function upgradingUpstream(t: Test): Promise<{ port: number; seen: string[] }> {
  const seen: string[] = []
  const server = http.createServer((req, res) => {
    seen.push(`plain ${req.url ?? ''} upgrade=${req.headers.upgrade ?? '-'}`)
    res.end('plain')
  })
  server.on('upgrade', (req: http.IncomingMessage, socket: net.Socket) => {
    seen.push(`upgrade ${req.url ?? ''} ${req.headers.upgrade ?? ''}`)
    socket.on('error', () => {})
    socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n')
    socket.on('data', (c: Buffer) => { seen.push(`tunnelled ${JSON.stringify(c.toString('latin1'))}`) })
  })
  const port = await listen(server)
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { port, seen }
}

/** One raw HTTP/1.1 request; the status line of the answer, then (if it switched) the preface sent on. */
function rawRequest(port: number, head: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(head))
    let out = ''
    socket.on('data', (c: Buffer) => {
      const first = out === ''
      out += c.toString('latin1')
      if (first && out.startsWith('HTTP/1.1 101')) socket.write(H2_PREFACE)
    })
    socket.on('error', () => {})
    setTimeout(() => { socket.destroy(); resolve(out.split('\r\n')[0] ?? '') }, 400)
  })
}

t.test('an Upgrade naming h2c among other protocols is never tunnelled to an upstream', async (t) => {
  const up = await upgradingUpstream(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  for (const upgrade of ['h2c, foo', 'websocket, h2c', 'h2c/1.0', 'H2C , x']) {
    up.seen.length = 0
    const status = await rawRequest(port, `GET /admin HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade\r\nUpgrade: ${upgrade}\r\n\r\n`)
    t.equal(status, 'HTTP/1.1 200 OK', `Upgrade: ${upgrade}: served as a plain request`)
    t.same(up.seen, ['plain /admin upgrade=-'], `Upgrade: ${upgrade}: the upstream got no upgrade and no tunnel`)
  }
})

t.test('an HTTP/2 extended CONNECT with :protocol h2c is refused, never tunnelled', async (t) => {
  const up = await upgradingUpstream(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  await new Promise((resolve) => session.once('remoteSettings', resolve))
  for (const protocol of ['h2c', 'H2C']) {
    up.seen.length = 0
    const stream = session.request({ ':method': 'CONNECT', ':protocol': protocol, ':scheme': 'http', ':path': '/admin', ':authority': 'example.com' }, { endStream: false })
    stream.on('error', () => {})
    const status = await new Promise<number>((resolve) => {
      stream.once('response', (h) => { resolve(Number(h[':status'])); stream.write(H2_PREFACE) })
      stream.once('close', () => resolve(0))
    })
    await new Promise((resolve) => setTimeout(resolve, 200))
    stream.destroy()
    t.equal(status, 501, `:protocol ${protocol}: 501`)
    t.same(up.seen, [], `:protocol ${protocol}: nothing reached the upstream`)
  }
})

t.test('a 101 switching to h2c is no tunnel, whatever the client asked for', async (t) => {
  const up = await upgradingUpstream(t)
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  const status = await rawRequest(port, 'GET /ws HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n')
  t.equal(status, 'HTTP/1.1 502 Bad Gateway', 'a 502')
  t.notOk(up.seen.some((s) => s.startsWith('tunnelled')), 'nothing the client sent after went through')
})
