// A tunnel's access line says how it ended: `code` null for an orderly close
// (both sides ended), SP_ERR_CLIENT_ABORTED when the client reset it,
// SP_ERR_UPSTREAM_RESET when the upstream did; on every client × upstream
// protocol. It said null whatever happened.
import t from 'tap'
import { h1Tunnel, h2Tunnel, tunnelGateway, until, type TunnelClient, type TunnelHandler } from './tunnel-helpers.ts'

/** /<mode>/<id>: `end` ends in order once the client has; `cut` says CUT and resets; `wait` waits for the client's reset. */
const behave: TunnelHandler = (p, end) => {
  const mode = p.split('/')[1]
  if (mode === 'end') end.onEvent((e) => { if (e === '<FIN>') end.end() })
  if (mode === 'cut') { end.write('CUT'); setTimeout(() => end.abort(), 100) }
  if (mode === 'wait') end.write('READY')
}

t.test('CLI: a tunnel\'s access line says which side reset it', async (t) => {
  const { port, cli, session } = await tunnelGateway(t, behave)

  for (const client of ['h1', 'h2'] as const) {
    for (const upstream of ['h1', 'h2'] as const) {
      const open = (p: string): Promise<TunnelClient> => client === 'h1' ? h1Tunnel(t, port, `${upstream}.test`, p) : h2Tunnel(session, `${upstream}.test`, p)
      const id = `${client}-${upstream}`
      const line = async (p: string): Promise<Record<string, unknown>> =>
        JSON.parse(await cli.waitFor(new RegExp(`\\{[^\\n]*"component":"access"[^\\n]*"path":"${p}"[^\\n]*\\}`), 5000)) as Record<string, unknown>

      const clean = await open(`/end/${id}`)
      clean.end()
      await until(() => clean.closed, `${id}: the orderly tunnel to close`)
      t.match(await line(`/end/${id}`), { code: null, reason: null }, `${id}: an orderly close has no code`)

      const cut = await open(`/cut/${id}`)
      await until(() => cut.closed, `${id}: the tunnel the upstream reset to close`)
      t.match(await line(`/cut/${id}`), { code: 'SP_ERR_UPSTREAM_RESET' }, `${id}: the upstream's reset`)

      const gone = await open(`/wait/${id}`)
      await until(() => gone.got === 'READY', `${id}: the upstream's READY`)
      gone.abort()
      t.match(await line(`/wait/${id}`), { code: 'SP_ERR_CLIENT_ABORTED', status: client === 'h1' ? 101 : 200 }, `${id}: the client's reset (the status stays what it got)`)
    }
  }
})
