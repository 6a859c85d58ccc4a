// On an HTTPS listener, requests and tunnels still running when a drain's
// grace period (--drain-seconds) runs out are the gateway's cut, as on a
// plain one (drain-cut.test.ts): the connections were marked cut below their
// TLS sockets, which the exchanges never saw, so HTTP/1.1 requests were logged
// 499 SP_ERR_CLIENT_ABORTED and WebSockets as tunnels that ended in order.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import tls from 'node:tls'
import path from 'node:path'
import { createCa, serverCert } from '../helpers/pki.ts'
import { listenLoopback } from '../helpers/ports.ts'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir, tlsSecretYaml } from './harness.ts'
import { CLIENT_KEY, h1Upstream } from './tunnel-helpers.ts'

const ca = createCa('drain CA')

t.test('CLI: on an HTTPS listener, what the drain period cuts is logged as the gateway\'s cut', async (t) => {
  let requests = 0
  const up = http.createServer(() => { requests++ }) // never answers
  const upPort = await listenLoopback(up)
  t.teardown(() => { up.closeAllConnections(); up.close() })
  let tunnels = 0
  const ws = await h1Upstream(t, () => { tunnels++ })
  const [port, httpsPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  const cert = serverCert(ca, ['api.example.test', 'ws.example.test'])
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(port, `    - name: https\n      protocol: HTTPS\n      port: ${httpsPort}\n      tls:\n        certificateRefs:\n          - name: cert\n`),
    tlsSecretYaml('cert', cert.certPem, cert.keyPem),
    backendYaml('api', upPort), routeYaml('api', 'api.example.test', 'api', upPort),
    backendYaml('ws', ws), routeYaml('ws', 'ws.example.test', 'ws', ws),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  const connect = (servername: string): tls.TLSSocket => {
    const s = tls.connect({ port: httpsPort, host: '127.0.0.1', servername, ca: ca.certPem, ALPNProtocols: ['http/1.1'] })
    s.on('error', () => {})
    t.teardown(() => { s.destroy() })
    return s
  }
  connect('api.example.test').write('GET /h1-slow HTTP/1.1\r\nHost: api.example.test\r\n\r\n')
  const wss = connect('ws.example.test')
  let wssGot = ''
  wss.on('data', (d: Buffer) => { wssGot += d.toString('latin1') })
  wss.write(`GET /wss HTTP/1.1\r\nHost: ws.example.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${CLIENT_KEY}\r\n\r\n`)
  const session = http2.connect(`https://127.0.0.1:${httpsPort}`, { servername: 'api.example.test', ca: ca.certPem })
  session.on('error', () => {})
  t.teardown(() => { session.destroy() })
  session.request({ ':path': '/h2-slow', ':authority': 'api.example.test' }).on('error', () => {})
  await eventually(async () => [requests, tunnels, wssGot], ([r, n, got]) => r === 2 && n === 1 && String(got).startsWith('HTTP/1.1 101'), 5000, 'both requests at the upstream, the tunnel open')

  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0, 'exits 0 after the grace period')
  const line = (p: string): Record<string, unknown> => {
    const m = new RegExp(`\\{[^\\n]*"component":"access"[^\\n]*"path":"${p}"[^\\n]*\\}`).exec(cli.stdout())
    return m === null ? {} : JSON.parse(m[0]) as Record<string, unknown>
  }
  t.match(line('/h1-slow'), { status: 503, code: 'SP_ERR_SHUTTING_DOWN' }, 'HTTP/1.1 over TLS: the gateway\'s cut, not a client abort')
  t.match(line('/h2-slow'), { status: 503, code: 'SP_ERR_SHUTTING_DOWN' }, 'HTTP/2 over TLS: the same')
  t.match(line('/wss'), { status: 101, code: 'SP_ERR_SHUTTING_DOWN' }, 'a WebSocket over TLS: the same, not a tunnel that ended in order')
})
