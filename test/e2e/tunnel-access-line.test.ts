// A tunnel's access line and request metrics say what the client got and
// sent: `status` 101 for an HTTP/1.1 client, 200 for an HTTP/2 client,
// whatever the upstream's protocol (before, the upstream's status was
// recorded: an HTTP/1.1 client that got 101 was logged 200 when the upstream
// spoke HTTP/2, and an HTTP/2 client that got 200 was logged 101), and
// `bytesIn` the bytes the client sent through the tunnel on both protocols
// (before, always 0 for an HTTP/2 client: only a request body was counted).
import t from 'tap'
import { metricSum, request } from './harness.ts'
import { h1Tunnel, h2Tunnel, tunnelGateway, until, type TunnelClient, type TunnelHandler } from './tunnel-helpers.ts'

/** /<id>/<up>/<down>: reads the client's `up` bytes to its end, then sends `down` bytes and ends. */
const sized: TunnelHandler = (p, end) => {
  const down = Number(p.split('/')[3])
  end.onEvent((e) => {
    if (e !== '<FIN>') return
    for (let left = down; left > 0; left -= 65536) end.write('d'.repeat(Math.min(left, 65536)))
    end.end()
  })
}

t.test('CLI: a tunnel\'s access line has the status the client got and the bytes it sent', async (t) => {
  const { port, adminPort, cli, session } = await tunnelGateway(t, sized)

  const cases = [
    { client: 'h1', upstream: 'h1', up: 5, down: 7 },
    { client: 'h1', upstream: 'h2', up: 11, down: 13 },
    { client: 'h2', upstream: 'h1', up: 17, down: 19 },
    { client: 'h2', upstream: 'h2', up: 23, down: 29 },
    // Past the 1 MiB after which the relay between two TCP sockets stops emitting 'data' (upstream/relay.ts).
    { client: 'h1', upstream: 'h1', up: 3 * 1024 * 1024, down: 2 * 1024 * 1024 },
  ] as const
  for (const c of cases) {
    const p = `/${c.client}-${c.upstream}/${c.up}/${c.down}`
    const tunnel: TunnelClient = c.client === 'h1' ? await h1Tunnel(t, port, `${c.upstream}.test`, p) : await h2Tunnel(session, `${c.upstream}.test`, p)
    for (let left: number = c.up; left > 0; left -= 65536) tunnel.write('u'.repeat(Math.min(left, 65536)))
    tunnel.end()
    await until(() => tunnel.closed, `${p}: the tunnel to close`, 10000)
    t.equal(tunnel.got.length, c.down, `${p}: the client got the upstream's ${c.down} bytes`)
    const line = JSON.parse(await cli.waitFor(new RegExp(`\\{[^\\n]*"component":"access"[^\\n]*"path":"${p}"[^\\n]*\\}`), 5000)) as Record<string, unknown>
    const status = c.client === 'h1' ? 101 : 200
    t.equal(line.status, status, `${c.client} client, ${c.upstream} upstream: status ${status}, what the client got`)
    t.equal(line.bytesIn, c.up, `${p}: bytesIn, the client's bytes through the tunnel`)
    t.equal(line.bytesOut, c.down, `${p}: bytesOut, the bytes the client got through the tunnel`)
  }

  const metrics = (await request(`http://127.0.0.1:${adminPort}/metrics`)).body
  const requests = (route: string, code: string): number => metricSum(metrics, 'sallyport_downstream_requests_total', { route: `default/${route}`, code })
  t.same([requests('to-h1', '101'), requests('to-h1', '200')], [2, 1], 'sallyport_downstream_requests_total to the HTTP/1.1 upstream: two HTTP/1.1 clients under code 101, one HTTP/2 client under 200')
  t.same([requests('to-h2', '101'), requests('to-h2', '200')], [1, 1], '...to the HTTP/2 upstream: one of each')
  t.equal(metricSum(metrics, 'sallyport_downstream_bytes_received_total'), cases.reduce((n, c) => n + c.up, 0), 'sallyport_downstream_bytes_received_total: every tunnel\'s bytes from its client')
})
