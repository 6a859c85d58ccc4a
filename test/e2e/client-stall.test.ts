// The real CLI, a route with `timeouts.backendRequest` and passive health
// checking, and clients that stop sending their request body half way. The
// upstream was only waiting for the rest: the timeout was logged as the
// upstream's (504 SP_ERR_UPSTREAM_TIMEOUT) and counted against the endpoint,
// so two stalled clients had a healthy endpoint ejected for 30 s. A stall
// while the request body is awaited from the client is the client's: 408
// SP_ERR_CLIENT_TIMEOUT, counted against nobody. An upstream that stops
// reading the body (the gateway held back, its writes unflushed) is still the
// upstream's timeout, and counts.
import t from 'tap'
import fs from 'node:fs'
import { once } from 'node:events'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, routeYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

/** A route with backendRequest 500ms and a BackendTrafficPolicy ejecting after two 5xx. */
function route(name: string, host: string, upPort: number): string {
  return `${routeYaml(name, host, name, upPort, '', 'backendRequest: 500ms')}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: ${name}
  namespace: default
spec:
  targetRefs:
    - group: gateway.networking.k8s.io
      kind: HTTPRoute
      name: ${name}
  healthCheck:
    passive:
      consecutive5XxErrors: 2
      interval: 10s
      baseEjectionTime: 30s
      maxEjectionPercent: 100
`
}

/** Sends `head` and `body`, then nothing more; resolves with the status line (bounded: 5 s). */
function stalled(port: number, head: string, body: Buffer): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    let data = ''
    const timer = setTimeout(() => socket.destroy(), 5000)
    socket.setEncoding('latin1')
    socket.on('data', (c: string) => {
      data += c
      if (data.includes('\r\n')) { clearTimeout(timer); socket.destroy() }
    })
    socket.on('error', () => {})
    socket.on('close', () => resolve(data.split('\r\n')[0] ?? ''))
    socket.write(head)
    socket.write(body)
  })
}

async function ejections(adminPort: number): Promise<number> {
  const metrics = (await get(`http://127.0.0.1:${adminPort}/metrics`, 'x')).body
  let n = 0
  for (const m of metrics.matchAll(/^sallyport_upstream_ejections_total\{[^}]*\} (\d+)/gm)) n += Number(m[1])
  return n
}

for (const client of ['sallyport', 'undici']) {
t.test(`CLI (--http1-client ${client}): a client that stalls mid-upload is timed out as the client, never against the endpoint`, async (t) => {
  const healthy = http.createServer((req, res) => { req.resume(); req.on('end', () => res.end('ok')) })
  const healthyPort = await listenLoopback(healthy)
  // Reads nothing at all: the gateway's writes back up and its body is held back.
  const deaf = net.createServer((socket) => { socket.pause(); socket.on('error', () => {}) })
  const deafPort = await listenLoopback(deaf)
  t.teardown(() => { healthy.closeAllConnections(); healthy.close(); deaf.close() })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), `${backendYaml('api', healthyPort)}\n---\n${backendYaml('deaf', deafPort)}`)
  fs.writeFileSync(path.join(dir, 'routes.yaml'), `${route('api', 'api.example.test', healthyPort)}---\n${route('deaf', 'deaf.example.test', deafPort)}`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--http1-client', client])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const half = (host: string, length: number): string => `POST /upload HTTP/1.1\r\nHost: ${host}\r\nContent-Length: ${length}\r\n\r\n`
  for (let i = 0; i < 2; i++) {
    t.equal(await stalled(port, half('api.example.test', 10), Buffer.from('hello')), 'HTTP/1.1 408 Request Timeout', `stalled client ${i + 1}: 408`)
  }
  // An HTTP/2 client, the same.
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  const stream = session.request({ ':method': 'POST', ':path': '/upload-h2', ':authority': 'api.example.test', 'content-length': '10' })
  stream.on('error', () => {})
  stream.write('hello')
  const [h2status] = await once(stream, 'response') as [http2.IncomingHttpHeaders]
  session.destroy()
  t.equal(h2status[':status'], 408, 'stalled HTTP/2 client: 408')
  await cli.waitFor(/"path":"\/upload","status":408[^\n]*"code":"SP_ERR_CLIENT_TIMEOUT"/, 5000)
  await cli.waitFor(/"path":"\/upload-h2","status":408[^\n]*"code":"SP_ERR_CLIENT_TIMEOUT"/, 5000)
  t.pass('logged as the client\'s timeout')
  t.equal(await ejections(adminPort), 0, 'the endpoint is not ejected')
  t.equal((await get(`http://127.0.0.1:${port}/after`, 'api.example.test')).status, 200, 'and still serves')

  // 16 MiB the deaf upstream never reads: what the gateway waits on is the upstream.
  const big = 16 << 20
  for (let i = 0; i < 2; i++) {
    t.equal(await stalled(port, half('deaf.example.test', big + 1), Buffer.alloc(big, 97)), 'HTTP/1.1 504 Gateway Timeout', `upstream not reading ${i + 1}: 504`)
  }
  await cli.waitFor(/"path":"\/upload","status":504[^\n]*"code":"SP_ERR_UPSTREAM_TIMEOUT"/, 5000)
  await eventually(() => ejections(adminPort), (n) => n === 1, 5000, 'the deaf endpoint is ejected')
})
}
