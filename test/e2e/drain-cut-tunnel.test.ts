// Tunnels still open when a drain's grace period (--drain-seconds) runs out
// are cut by the gateway, and both sides must see a cut, never an orderly end:
// in a tunnel a FIN is a half-close (tunnel-ends.ts), so a FIN to the client
// said the upstream had finished sending. An HTTP/1.1 client's WebSocket got
// that FIN while an HTTP/2 client's got RST_STREAM, and its access line said
// 101 with no code, a tunnel that ended in order, where HTTP/2's said
// SP_ERR_SHUTTING_DOWN.
import t from 'tap'
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
