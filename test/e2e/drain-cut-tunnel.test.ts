// Tunnels still open when a drain's grace period (--drain-seconds) runs out
// are cut by the gateway, and both sides must see a cut, never an orderly end:
// in a tunnel a FIN is a half-close (tunnel-ends.ts), so a FIN to the client
// said the upstream had finished sending. An HTTP/1.1 client's WebSocket got
// that FIN while an HTTP/2 client's got RST_STREAM, and its access line said
// 101 with no code, a tunnel that ended in order, where HTTP/2's said
// SP_ERR_SHUTTING_DOWN. A forward-proxy CONNECT tunnel got FINs both ways and
// no connection line: the process exited before its sockets' close was seen.
import t from 'tap'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'
import { h1Tunnel, h2Tunnel, tunnelGateway, until, type TunnelClient } from './tunnel-helpers.ts'

t.test('CLI: tunnels cut when the drain period runs out are reset on both sides and logged as the gateway\'s cut', async (t) => {
  const upstreamSaw = new Map<string, string>()
  const { port, cli, session } = await tunnelGateway(t, (p, end) => {
    upstreamSaw.set(p, '')
    end.onEvent((e) => upstreamSaw.set(p, (upstreamSaw.get(p) ?? '') + e))
    end.write('READY')
  }, ['--drain-seconds', '1'])
  const clients = new Map<string, TunnelClient>()
  for (const client of ['h1', 'h2'] as const) {
    for (const upstream of ['h1', 'h2'] as const) {
      const p = `/${client}-${upstream}`
      const c = client === 'h1' ? await h1Tunnel(t, port, `${upstream}.test`, p) : await h2Tunnel(session, `${upstream}.test`, p)
      await until(() => c.got === 'READY', `${p}: the upstream's READY`)
      clients.set(p, c)
    }
  }
  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0, 'exits 0 after the grace period')
  for (const [p, c] of clients) {
    await until(() => c.closed, `${p}: the client's end to close`).catch((err: Error) => t.fail(err.message))
    t.ok(c.reset && !c.ended, `${p}: the client's tunnel is reset, not ended in order`)
    t.match(upstreamSaw.get(p), /<RST>/, `${p}: the upstream's is reset`)
    t.notMatch(upstreamSaw.get(p), /<FIN>/, `${p}: the upstream never sees an orderly end`)
    const m = new RegExp(`\\{[^\\n]*"component":"access"[^\\n]*"path":"${p}"[^\\n]*\\}`).exec(cli.stdout())
    t.match(m === null ? {} : JSON.parse(m[0]), { status: p.startsWith('/h1') ? 101 : 200, code: 'SP_ERR_SHUTTING_DOWN' }, `${p}: logged as the gateway's cut`)
  }
})

t.test('CLI: a forward-proxy CONNECT tunnel cut when the drain period runs out is reset on both sides and logged', async (t) => {
  const destinationSaw: string[] = []
  const destination = net.createServer({ allowHalfOpen: true }, (s) => {
    s.write('READY')
    s.on('end', () => destinationSaw.push('<FIN>'))
    s.on('error', (e: NodeJS.ErrnoException) => destinationSaw.push(e.code === 'ECONNRESET' ? '<RST>' : String(e.code)))
  })
  const sockets = new Set<net.Socket>()
  destination.on('connection', (s: net.Socket) => { sockets.add(s) })
  await new Promise<void>((resolve) => destination.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); destination.close() })
  const destinationPort = (destination.address() as net.AddressInfo).port
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(port), backendYaml('dest', destinationPort), `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: dest, namespace: default, annotations: { sallyport.io/connect-ports: "443" } }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [dest.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: dest, port: ${destinationPort} }]
`].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')

  const client = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true })
  t.teardown(() => { client.destroy() })
  let got = ''
  let how = ''
  client.on('data', (d: Buffer) => { got += d.toString('latin1') })
  client.on('end', () => { how += '<FIN>' })
  client.on('error', (e: NodeJS.ErrnoException) => { how += e.code === 'ECONNRESET' ? '<RST>' : String(e.code) })
  client.write('CONNECT dest.test:443 HTTP/1.1\r\nHost: dest.test:443\r\n\r\n')
  await until(() => got.endsWith('READY'), 'the destination\'s READY through the tunnel')

  cli.child.kill('SIGTERM')
  t.equal(await cli.exited, 0, 'exits 0 after the grace period')
  await until(() => how !== '' && destinationSaw.length > 0, 'both ends to see the tunnel go').catch((err: Error) => t.fail(err.message))
  t.equal(how, '<RST>', 'the client\'s connection is reset, not ended in order')
  t.same(destinationSaw, ['<RST>'], 'so is the destination\'s')
  const m = /\{[^\n]*"component":"access"[^\n]*"protocol":"connect"[^\n]*\}/.exec(cli.stdout())
  t.match(m === null ? {} : JSON.parse(m[0]), { destination: 'dest.test:443', reason: 'shutdown' }, 'its connection line says the gateway\'s shutdown cut it')
})
