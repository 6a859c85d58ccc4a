// A TCPRoute (or TLSRoute passthrough) connection that one side resets is
// reset on the other side too, never ended with a FIN: a client reading a
// transfer the upstream cut would otherwise take the bytes it got for the
// whole of it (and an upstream would take a cut upload for a complete one).
// The splice destroyed the other socket, which node closes with a FIN.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'

async function listen(t: Test, server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const sockets = new Set<net.Socket>()
  server.on('connection', (s: net.Socket) => { sockets.add(s); s.once('close', () => sockets.delete(s)) })
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  return (server.address() as net.AddressInfo).port
}

/** How a connection ended for the side holding `socket`: a reset, or an orderly FIN; and the bytes it read. */
function ending(socket: net.Socket): Promise<{ how: 'reset' | 'fin' | 'timeout'; bytes: number }> {
  return new Promise((resolve) => {
    let bytes = 0
    let how: 'reset' | 'fin' | null = null
    const timer = setTimeout(() => { socket.destroy(); resolve({ how: 'timeout', bytes }) }, 10_000)
    socket.on('data', (c: Buffer) => { bytes += c.length })
    socket.on('end', () => { how ??= 'fin'; socket.end() })
    socket.on('error', (err: NodeJS.ErrnoException) => { if (err.code === 'ECONNRESET') how ??= 'reset' })
    socket.on('close', () => { clearTimeout(timer); resolve({ how: how ?? 'fin', bytes }) })
  })
}

const backend = (name: string, port: number): string => `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
  endpoints: [{ ip: { address: 127.0.0.1, port: ${port} } }]
---
`
const route = (name: string, section: string, backendName: string, port: number): string => `apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: { name: ${name}, namespace: default }
spec:
  parentRefs: [{ name: egress, sectionName: ${section} }]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${backendName}, port: ${port} }] }]
---
`

t.test('CLI: a reset on either side of a TCPRoute connection reaches the other side as a reset', async (t) => {
  // Sends 64 KiB, then resets its connection.
  const cutter = net.createServer((s) => {
    s.on('error', () => {})
    s.write(Buffer.alloc(65536, 97), () => setTimeout(() => s.resetAndDestroy(), 50))
  })
  const cutterPort = await listen(t, cutter)
  // Reports how each connection ended for it.
  const endings: Array<Promise<{ how: string; bytes: number }>> = []
  const watcher = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {})
    endings.push(ending(s))
    s.write('READY')
  })
  const watcherPort = await listen(t, watcher)

  const [httpPort, cutPort, watchPort, adminPort] = [await freePort(), await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort, `    - { name: cut, protocol: TCP, port: ${cutPort} }
    - { name: watch, protocol: TCP, port: ${watchPort} }
`))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), backend('cutter', cutterPort) + backend('watcher', watcherPort) +
    route('cut', 'cut', 'cutter', cutterPort) + route('watch', 'watch', 'watcher', watcherPort))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  const client = net.connect({ host: '127.0.0.1', port: cutPort, allowHalfOpen: true })
  client.on('error', () => {})
  const got = await ending(client)
  t.equal(got.bytes, 65536, 'the bytes sent before the reset arrived')
  t.equal(got.how, 'reset', 'the upstream\'s reset reached the client as a reset, not a FIN')
  await cli.waitFor(/"reason":"upstream_reset"/, 5000)

  const mine = net.connect({ host: '127.0.0.1', port: watchPort, allowHalfOpen: true })
  mine.on('error', () => {})
  await new Promise<void>((resolve) => mine.once('data', () => resolve()))
  mine.resetAndDestroy()
  await eventually(async () => endings.length, (n) => n === 1, 5000, 'the upstream connection')
  t.equal((await endings[0]).how, 'reset', 'the client\'s reset reached the upstream as a reset, not a FIN')
})
