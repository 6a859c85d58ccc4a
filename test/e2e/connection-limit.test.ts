// `sallyport serve --max-connections N`: a listening port holds at most N open
// client connections; the next is closed at accept, on an HTTP port and a TCP
// port alike, counted in sallyport_downstream_connections_rejected_total{port}
// and warned about. A slot freed is taken again.

import t, { type Test } from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, metricSum, request, routeYaml, startCli, tempDir } from './harness.ts'
import { listenLoopback } from '../helpers/ports.ts'

/** A connection to the gateway, kept open by the test until it closes it. */
function connect(t: Test, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => resolve(socket))
    socket.on('error', reject)
    t.teardown(() => { socket.destroy() })
  })
}

/** Writes `message` and collects what comes back until the gateway closes the connection or 3 s pass. */
function exchange(socket: net.Socket, message: string, untilBytes = Infinity): Promise<{ data: string; closed: boolean }> {
  return new Promise((resolve) => {
    let data = ''
    const done = (closed: boolean): void => { clearTimeout(timer); socket.removeAllListeners('data'); resolve({ data, closed }) }
    const timer = setTimeout(() => done(false), 3000)
    socket.setEncoding('utf8')
    socket.on('data', (s: string) => { data += s; if (data.length >= untilBytes) done(false) })
    socket.once('close', () => done(true))
    socket.on('error', () => {})
    socket.write(message)
  })
}

const GET = 'GET /kept HTTP/1.1\r\nHost: api.example.test\r\n\r\n'

t.test('CLI: --max-connections closes connections past the limit at accept, on HTTP and TCP ports', async (t) => {
  const up = http.createServer((_req, res) => { res.end('ok') })
  const upPort = await listenLoopback(up)
  t.teardown(() => { up.closeAllConnections(); up.close() })
  const echo = net.createServer((s) => { s.on('error', () => {}); s.pipe(s) })
  const echoPort = await listenLoopback(echo)
  const echoed = new Set<net.Socket>()
  echo.on('connection', (s: net.Socket) => { echoed.add(s) })
  t.teardown(() => { for (const s of echoed) s.destroy(); echo.close() })

  const [port, tcpPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port, `    - name: tcp
      protocol: TCP
      port: ${tcpPort}
`))
  fs.writeFileSync(path.join(dir, 'backend.yaml'), backendYaml('api', upPort) + '---\n' + backendYaml('echo', echoPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', upPort) + `---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata:
  name: echo
  namespace: default
spec:
  parentRefs:
    - name: egress
      sectionName: tcp
  rules:
    - backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: echo
          port: ${echoPort}
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--max-connections', '2'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const metrics = async (): Promise<string> => (await request(`http://127.0.0.1:${adminPort}/metrics`)).body

  // HTTP: two keep-alive connections are served and stay open.
  const kept = [await connect(t, port), await connect(t, port)]
  for (const socket of kept) {
    const r = await exchange(socket, GET, 'HTTP/1.1 200'.length)
    t.match(r.data, /^HTTP\/1\.1 200/, 'a connection within the limit is served')
  }
  // The third is closed without an answer, whatever it sends.
  const third = await exchange(await connect(t, port).catch(() => new net.Socket()), GET)
  t.ok(third.closed, 'the connection past the limit is closed')
  t.equal(third.data, '', 'without a response')
  await cli.waitFor(new RegExp(`"port":${port},"maxConnections":2,"msg":"connection limit reached: new connections are closed at accept"`))
  t.pass('a warning names the port and the limit')
  t.equal(metricSum(await metrics(), 'sallyport_downstream_connections_rejected_total', { port: String(port) }), 1, 'counted for the port')

  // A slot freed is taken again.
  kept[0]?.destroy()
  const again = await eventually(async () => exchange(await connect(t, port), GET, 'HTTP/1.1 200'.length), (r) => r.data.startsWith('HTTP/1.1 200'), 10000, 'served again')
  t.match(again.data, /^HTTP\/1\.1 200/, 'once a connection closed, a new one is served')

  // TCP: the same limit, the same counter, and the L4 error reason.
  const tcpKept = [await connect(t, tcpPort), await connect(t, tcpPort)]
  for (const socket of tcpKept) t.equal((await exchange(socket, 'ping', 4)).data, 'ping', 'a TCP connection within the limit is spliced')
  const tcpThird = await exchange(await connect(t, tcpPort).catch(() => new net.Socket()), 'ping')
  t.ok(tcpThird.closed, 'the TCP connection past the limit is closed')
  t.equal(tcpThird.data, '', 'and nothing reached the backend and back')
  const text = await metrics()
  t.equal(metricSum(text, 'sallyport_downstream_connections_rejected_total', { port: String(tcpPort) }), 1, 'counted for the TCP port')
  t.equal(metricSum(text, 'sallyport_l4_errors_total', { listener: 'tcp', reason: 'max_connections' }), 1, 'and as the listener\'s max_connections')
  t.equal(cli.child.exitCode, null, 'the gateway keeps running')
})

t.test('CLI: --max-connections must be a whole number from 1', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(await freePort()))
  const cli = startCli(t, ['serve', '--config', dir, '--admin', 'off', '--max-connections', '0'])
  t.equal(await cli.exited, 2, 'a usage error')
  t.match(cli.stderr(), /--max-connections/, 'naming the flag')
})
