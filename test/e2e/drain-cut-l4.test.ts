// TCPRoute connections still open when a drain's grace period (--drain-seconds)
// runs out are cut by the gateway, and both sides must see a cut (a TCP RST),
// never an orderly end: a FIN to the client said the upstream had finished
// sending (a close-delimited download taken for whole), and a FIN to the
// upstream said the client had finished its upload. The splice destroyed both
// sockets, which node closes with a FIN. Until then the connection keeps
// working: the drain closes it at the end of the grace period, not at its start.
import t from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'

const config = (upstreamPort: number): string => `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: echo, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${upstreamPort} } }]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: { name: echo, namespace: default }
spec:
  parentRefs: [{ name: egress, sectionName: tcp }]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: echo, port: ${upstreamPort} }] }]
`

/** Records how a socket's connection ended: '<FIN>' for an orderly end, '<RST>' for a reset. */
function watch(socket: net.Socket): { saw: () => string; data: () => string; closed: Promise<void> } {
  let saw = ''
  let data = ''
  socket.on('data', (c: Buffer) => { data += c.toString('latin1') })
  socket.on('end', () => { saw += '<FIN>'; socket.end() })
  socket.on('error', (e: NodeJS.ErrnoException) => { saw += e.code === 'ECONNRESET' ? '<RST>' : `<${String(e.code)}>` })
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
  return { saw: () => saw, data: () => data, closed }
}

t.test('CLI: a TCPRoute connection cut when the drain period runs out is reset on both sides and logged shutdown', async (t) => {
  let upstream: ReturnType<typeof watch> | null = null
  const sockets = new Set<net.Socket>()
  const echo = net.createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s)
    upstream = watch(s)
    s.on('data', (c: Buffer) => s.write(c))
    s.write('READY')
  })
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); echo.close() })
  const echoPort = (echo.address() as net.AddressInfo).port

  const [httpPort, tcpPort, adminPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, `    - { name: tcp, protocol: TCP, port: ${tcpPort} }\n`))
  fs.writeFileSync(path.join(dir, 'route.yaml'), config(echoPort))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '2'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  const client = net.connect({ host: '127.0.0.1', port: tcpPort, allowHalfOpen: true })
  t.teardown(() => { client.destroy() })
  const mine = watch(client)
  await eventually(async () => mine.data(), (d) => d === 'READY', 5000, 'the upstream\'s READY')

  cli.child.kill('SIGTERM')
  await cli.waitFor(/shutting down: draining/, 5000)
  client.write('still there?')
  await eventually(async () => mine.data(), (d) => d === 'READYstill there?', 5000, 'an echo during the drain')
  t.pass('the connection keeps working while the drain runs')
  const refused = (): Promise<string> => new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port: tcpPort }, () => { s.destroy(); resolve('accepted') })
    s.on('error', (e: NodeJS.ErrnoException) => resolve(String(e.code)))
  })
  await eventually(refused, (code) => code === 'ECONNREFUSED', 5000, 'new connections refused')
  t.pass('new connections are refused during the drain')

  t.equal(await cli.exited, 0, 'exits 0 after the grace period')
  await mine.closed
  t.equal(mine.saw(), '<RST>', 'the client\'s connection is reset, not ended in order')
  const up = upstream as ReturnType<typeof watch> | null
  if (up === null) throw new Error('no upstream connection')
  await up.closed
  t.equal(up.saw(), '<RST>', 'the upstream\'s connection is reset, not ended in order')
  const line = /\{[^\n]*"component":"access"[^\n]*"msg":"connection"[^\n]*\}/.exec(cli.stdout())
  t.match(line === null ? {} : JSON.parse(line[0]), { protocol: 'tcp', route: 'default/echo', reason: 'shutdown' }, 'logged as the gateway\'s cut')
})
