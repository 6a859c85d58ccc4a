// A tunnel request (an HTTP/1.1 Upgrade, an RFC 8441 extended CONNECT) runs
// its Backend's extension chain like any other request: an Authorization that
// refuses the client refuses its WebSocket too, and a CredentialInjector puts
// the credential on the upgrade request. Before, any request carrying
// `Upgrade` skipped the whole chain: a client that added `Connection:
// Upgrade, Upgrade: anything` to a request it was refused got the upstream's
// answer, without the credential the chain would have added.
import t, { type Test } from 'tap'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, rawExchange, routeYaml, startCli, tempDir } from './harness.ts'
import { egressBackend, get, pod } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

/** An upstream that answers ordinary requests with "SECRET" and switches /ws to a WebSocket; records what it saw. */
async function upstream(t: Test): Promise<{ port: number; seen: string[] }> {
  const seen: string[] = []
  const server = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization ?? '-'}`)
    res.end('SECRET')
  })
  server.on('upgrade', (req, socket: net.Socket) => {
    seen.push(`UPGRADE ${req.url} ${req.headers.authorization ?? '-'}`)
    socket.on('error', () => {})
    // The accept of the key sent: an HTTP/2 client's handshake is checked by the gateway.
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64')
    socket.end(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\ntunnelled`)
  })
  const port = await listenLoopback(server)
  t.teardown(() => { server.closeAllConnections(); return new Promise<void>((resolve) => server.close(() => resolve())) })
  return { port, seen }
}

/** An RFC 8441 extended CONNECT from `from`: its status. */
function h2Connect(port: number, from: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`, { localAddress: from } as http2.SecureClientSessionOptions)
    session.on('error', reject)
    session.once('remoteSettings', () => {
      const s = session.request({ ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'http', ':path': '/ws', ':authority': 'api.example.test' })
      s.on('error', () => {})
      s.on('response', (h) => { resolve(Number(h[':status'])); session.destroy() })
    })
  })
}

const UPGRADE = (p: string, token: string): string =>
  `GET ${p} HTTP/1.1\r\nHost: api.example.test\r\nConnection: Upgrade\r\nUpgrade: ${token}\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`

t.test('CLI: tunnel requests run the Backend\'s extension chain', async (t) => {
  const up = await upstream(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'pods.yaml'), [pod('team-a', 'a-1', 'app', '127.0.0.2'), pod('team-b', 'b-1', 'app', '127.0.0.3')].join('---\n'))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), egressBackend('api', up.port, `    - name: who-may-call
      type: Authorization
      config: { allow: [{ namespace: team-a }] }
    - name: inject
      type: CredentialInjector
      config: { secretRef: { name: api-key } }
---
apiVersion: v1
kind: Secret
metadata: { name: api-key, namespace: default }
stringData: { token: sk-live-123 }
`))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', up.port))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  // team-b (127.0.0.3) is refused, whatever it asks for.
  t.match(await rawExchange(port, 'GET /api HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n', { from: '127.0.0.3' }), /^HTTP\/1\.1 403 /, 'a plain request: 403')
  const sneaky = await rawExchange(port, UPGRADE('/api', 'anything'), { from: '127.0.0.3' })
  t.match(sneaky, /^HTTP\/1\.1 403 /, 'the same request with Upgrade: anything: 403 too')
  t.notMatch(sneaky, /SECRET/, 'nothing of the upstream\'s answer')
  t.match(await rawExchange(port, UPGRADE('/ws', 'websocket'), { from: '127.0.0.3' }), /^HTTP\/1\.1 403 /, 'a WebSocket upgrade: 403')
  t.equal(await h2Connect(port, '127.0.0.3'), 403, 'an HTTP/2 extended CONNECT: 403')
  t.same(up.seen, [], 'none of them reached the upstream')

  // team-a (127.0.0.2) gets its tunnel, with the credential the chain injects.
  const ws = await rawExchange(port, UPGRADE('/ws', 'websocket'), { from: '127.0.0.2' })
  t.match(ws, /^HTTP\/1\.1 101 [^]*\r\n\r\ntunnelled$/, 'team-a: 101 and the tunnel')
  t.equal(await h2Connect(port, '127.0.0.2'), 200, 'team-a over HTTP/2: 200')
  t.same(up.seen, ['UPGRADE /ws Bearer sk-live-123', 'UPGRADE /ws Bearer sk-live-123'], 'each upgrade request carried the injected credential')
})
