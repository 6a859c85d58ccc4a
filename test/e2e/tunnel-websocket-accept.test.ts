// An HTTP/2 client's WebSocket (RFC 8441 extended CONNECT) to an HTTP/1.1
// upstream is an HTTP/1.1 Upgrade there, with a Sec-WebSocket-Key the gateway
// makes: the gateway is that handshake's WebSocket client, and RFC 6455 §4.1
// has it fail the connection when the 101's Sec-WebSocket-Accept is wrong or
// missing, or its Upgrade names another protocol than websocket (or none). The HTTP/2 client never sees that field (RFC 8441 §5), so nobody
// else can: a 502 `SP_ERR_UPSTREAM_PROTOCOL`, logged, and the upstream's
// connection closed. Before, the tunnel opened whatever the 101 said. An
// HTTP/1.1 client's upgrade carries its own key and gets the upstream's accept
// as it came, for it to check.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir } from './harness.ts'
import { CLIENT_KEY, h1Tunnel, h1Upstream, h2Session, h2Tunnel, until, websocketAccept, type TunnelHandler } from './tunnel-helpers.ts'

/** How each path's upstream connection ended, once it has. */
const ended = new Map<string, string>()

const echo: TunnelHandler = (p, end) => {
  end.onEvent((e) => {
    if (e === '<FIN>' || e === '<RST>') { ended.set(p, e); if (e === '<FIN>') end.end(); return }
    end.write(e)
  })
}

const WRONG = 'AAAAAAAAAAAAAAAAAAAAAAAAAAA='

t.test('CLI: an HTTP/2 WebSocket to an HTTP/1.1 upstream needs the 101\'s Sec-WebSocket-Accept right', async (t) => {
  const up = await h1Upstream(t, echo, (p, key) => {
    const accept = p === '/wrong' ? `Sec-WebSocket-Accept: ${WRONG}\r\n` : p === '/missing' ? '' : `Sec-WebSocket-Accept: ${websocketAccept(key)}\r\n`
    // RFC 6455 §4.1 (4, 5): a 101 that switches to another protocol, or names none, fails too.
    const upgrade = p === '/other' ? 'Upgrade: h2c\r\n' : p === '/unnamed' ? '' : 'Upgrade: websocket\r\n'
    return `HTTP/1.1 101 Switching Protocols\r\n${upgrade}Connection: Upgrade\r\n${accept}\r\n`
  })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(port), backendYaml('ws', up), routeYaml('ws', 'ws.test', 'ws', up)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')
  const session = await h2Session(t, port)

  // The right accept: the tunnel opens.
  const good = await h2Tunnel(session, 'ws.test', '/good')
  t.equal(good.status, 200, 'the right accept: 200')
  good.write('ping')
  await until(() => good.got === 'ping', 'the echo').catch((err: Error) => t.fail(err.message))
  good.end()
  await until(() => good.closed, 'the tunnel to close').catch((err: Error) => t.fail(err.message))

  for (const p of ['/wrong', '/missing', '/other', '/unnamed']) {
    const bad = await h2Tunnel(session, 'ws.test', p)
    t.equal(bad.status, 502, `${p}: 502`)
    await until(() => bad.closed, `${p}: the stream to close`).catch((err: Error) => t.fail(err.message))
    // (A 101 with no Upgrade at all is no upgrade: the upstream client refuses it before the check.)
    const why = p === '/unnamed' ? /^upstream protocol error/ : p === '/other' ? /^upstream protocol error: .*Upgrade is "h2c"/ : /^upstream protocol error: .*Sec-WebSocket-Accept/
    t.match(bad.got, why, `${p}: the body says why`)
    await until(() => ended.has(p), `${p}: the upstream's connection to be closed`).catch((err: Error) => t.fail(err.message))
    const text = await cli.waitFor(new RegExp(`\\{[^\\n]*"component":"access"[^\\n]*"path":"${p}"[^\\n]*\\}`), 5000)
    t.match(JSON.parse(text), { status: 502, code: 'SP_ERR_UPSTREAM_PROTOCOL', protocol: 'h2' }, `${p}: the access line`)
  }

  // An HTTP/1.1 client checks its own key's accept: passed through as the upstream sent it.
  const h1 = await h1Tunnel(t, port, 'ws.test', '/wrong')
  t.equal(h1.status, 101, 'HTTP/1.1 client: the 101, for it to judge')
  t.match(h1.head, `\r\nsec-websocket-accept: ${WRONG}\r\n`, '...with the upstream\'s accept unchanged')
  const right = await h1Tunnel(t, port, 'ws.test', '/good')
  t.match(right.head, `\r\nsec-websocket-accept: ${websocketAccept(CLIENT_KEY)}\r\n`, 'and the right one for the right key')
})
