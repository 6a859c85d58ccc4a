// Half-close and resets through WebSocket / extended-CONNECT tunnels, for every
// client × upstream pairing (HTTP/1.1 Upgrade or HTTP/2 RFC 8441 on each side).
// RFC 9113 §8.5 and RFC 8441 map a TCP FIN to END_STREAM: a FIN from either
// side is passed on as a FIN (or END_STREAM), the other direction keeps
// flowing, and the tunnel closes once both have ended; a reset crosses as a
// reset. Before, the first end tore the whole tunnel down: a client that
// half-closed never got the upstream's answer, an HTTP/1.1 upstream's FIN made
// the client's later bytes vanish (an HTTP/2 client got RST_STREAM
// INTERNAL_ERROR after the END_STREAM), and a client's reset reached an
// HTTP/1.1 upstream as an orderly FIN.
import t from 'tap'
import { h1Tunnel, h2Tunnel, tunnelGateway, until, type TunnelClient, type TunnelHandler } from './tunnel-helpers.ts'

/** What each upstream tunnel saw, by id (the path's last segment). */
const seen = new Map<string, string>()

/**
 * The upstream's part, by the path's first segment:
 * A: answers once the client has ended its side; B: says BYE and ends its side at once;
 * C: says READY and waits (the client resets); U: says CUT and resets.
 */
const behave: TunnelHandler = (p, end) => {
  const [, mode = '', id = ''] = p.split('/')
  seen.set(id, '')
  end.onEvent((e) => {
    seen.set(id, (seen.get(id) ?? '') + e)
    if (mode === 'A' && e === '<FIN>') setTimeout(() => { end.write('AFTER-CLIENT-FIN'); end.end() }, 100)
  })
  if (mode === 'B') { end.write('BYE'); end.end() }
  if (mode === 'C') end.write('READY')
  if (mode === 'U') { end.write('CUT'); setTimeout(() => end.abort(), 100) }
  if (mode === 'E') {
    // Writes on after the client's FIN until the connection is gone (bounded: 2 s).
    let left = 40
    end.onEvent((e) => {
      if (e !== '<FIN>') return
      const timer = setInterval(() => { if (--left === 0 || /<RST>/.test(seen.get(id) ?? '')) clearInterval(timer); else end.write('MORE') }, 50)
    })
  }
}

t.test('CLI: tunnels pass half-closes on and resets as resets, every client × upstream protocol', async (t) => {
  const { port, session } = await tunnelGateway(t, behave, ['--access-log', 'off'])

  for (const client of ['h1', 'h2'] as const) {
    for (const upstream of ['h1', 'h2'] as const) {
      await t.test(`${client} client → ${upstream} upstream`, async (t) => {
        const open = (mode: string): Promise<TunnelClient> => {
          const p = `/${mode}/${client}-${upstream}-${mode}`
          return client === 'h1' ? h1Tunnel(t, port, `${upstream}.test`, p) : h2Tunnel(session, `${upstream}.test`, p)
        }
        const upstreamSaw = (mode: string): string => seen.get(`${client}-${upstream}-${mode}`) ?? ''
        const ok = client === 'h1' ? 101 : 200

        // A: the client half-closes first; the upstream's answer after that still arrives.
        const a = await open('A')
        t.equal(a.status, ok, 'A: tunnel open')
        a.write('PING')
        a.end()
        await until(() => a.closed, 'A: the tunnel to close').catch((err: Error) => t.fail(err.message))
        t.equal(upstreamSaw('A'), 'PING<FIN>', 'A: the upstream got the bytes, then the FIN')
        t.equal(a.got, 'AFTER-CLIENT-FIN', 'A: the client got the answer sent after its FIN')
        t.ok(a.ended && !a.reset, 'A: ...and then an orderly end, no reset')

        // B: the upstream half-closes first; the client's bytes after that still reach it.
        const b = await open('B')
        await until(() => b.ended || b.closed, 'B: the upstream\'s end to reach the client').catch((err: Error) => t.fail(err.message))
        t.equal(b.got, 'BYE', 'B: the client got the bytes before the end')
        t.ok(b.ended && !b.reset, 'B: the upstream\'s FIN arrived as an orderly end')
        if (!b.closed) {
          b.write('LATE')
          b.end()
        }
        await until(() => upstreamSaw('B').endsWith('<FIN>') && b.closed, 'B: the client\'s late bytes and end to reach the upstream').catch((err: Error) => t.fail(err.message))
        t.equal(upstreamSaw('B'), 'LATE<FIN>', 'B: the upstream got the client\'s bytes sent after its own FIN, then the client\'s FIN')
        t.notOk(b.reset, 'B: no reset')

        // C: the client resets: the upstream sees a reset, never an orderly end.
        const c = await open('C')
        await until(() => c.got === 'READY', 'C: READY').catch((err: Error) => t.fail(err.message))
        c.abort()
        await until(() => /<RST>|<FIN>/.test(upstreamSaw('C')), 'C: the upstream to see the tunnel end').catch((err: Error) => t.fail(err.message))
        t.equal(upstreamSaw('C'), '<RST>', 'C: the client\'s reset reached the upstream as a reset')

        // E: the client ends and resets at once. The FIN reaches the upstream first;
        // the reset then takes the connection down. (libuv refuses to reset a socket
        // whose FIN is still on its way, and node then kept its handle open for good:
        // the upstream's connection stayed open, read by nobody.)
        const e = await open('E')
        e.write('PING')
        await until(() => upstreamSaw('E') === 'PING', 'E: PING to reach the upstream').catch((err: Error) => t.fail(err.message))
        e.endAndAbort()
        await until(() => /<RST>/.test(upstreamSaw('E')), 'E: the upstream to see the connection reset').catch((err: Error) => t.fail(err.message))
        t.match(upstreamSaw('E'), /^PING(?:<FIN>)?<RST>$/, 'E: the upstream saw the bytes, the FIN, then a reset')

        // U: the upstream resets: the client sees a reset, never an orderly end.
        const u = await open('U')
        await until(() => u.closed, 'U: the tunnel to close').catch((err: Error) => t.fail(err.message))
        t.equal(u.got, 'CUT', 'U: the bytes before the reset')
        t.ok(u.reset && !u.ended, `U: the upstream's reset reached the client as a reset (reset ${u.reset}, ended ${u.ended})`)
      })
    }
  }
})
