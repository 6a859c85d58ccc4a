// The real CLI and an HTTP/2 client that resets its streams as soon as it has
// opened them (CVE-2023-44487 "rapid reset"): every stream the gateway saw is
// an access line naming the client, however early the reset came; past 500
// streams, a connection most of whose streams were reset before an answer is
// closed with GOAWAY ENHANCE_YOUR_CALM, said in one warning line and counted.
// A client that cancels what it has in flight keeps its connection.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir, type Cli } from './harness.ts'

async function start(t: Test): Promise<{ cli: Cli; httpPort: number; adminPort: number; upstreamRequests: () => number }> {
  let upstreamRequests = 0
  const up = http.createServer((req, res) => {
    upstreamRequests++
    // /slow answers after 5 s: a client with a shorter timeout gives up on it first.
    const t = setTimeout(() => res.end('ok'), req.url === '/slow' ? 5000 : 5)
    res.on('close', () => clearTimeout(t))
  })
  await new Promise<void>((r) => up.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => { up.closeAllConnections(); up.close(() => r()) }))
  const upPort = (up.address() as AddressInfo).port
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(httpPort), backendYaml('api', upPort), routeYaml('api', 'api.example.test', 'api', upPort)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '0'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')
  return { cli, httpPort, adminPort, upstreamRequests: () => upstreamRequests }
}

/** Opens up to `count` streams on one h2c connection, resetting each at once; resolves when the connection is gone. */
async function rapidReset(port: number, count: number): Promise<{ opened: number; goaway: number | null }> {
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  let goaway: number | null = null
  session.on('goaway', (code) => { goaway ??= code })
  await new Promise<void>((r) => session.once('connect', () => r()))
  let opened = 0
  for (let i = 0; i < count && !session.closed && !session.destroyed; i++) {
    try {
      const s = session.request({ ':path': '/', ':authority': 'api.example.test' })
      s.on('error', () => {})
      opened++
      s.close(http2.constants.NGHTTP2_CANCEL)
    } catch {
      break
    }
    // Paced (about 5,000 a second): below what nghttp2's own reset rate limit stops at once.
    if (i % 25 === 24) await new Promise((r) => setTimeout(r, 5))
  }
  await new Promise((r) => setTimeout(r, 300))
  session.destroy()
  return { opened, goaway }
}

/** One request on `session`: the status it was answered with, 0 when its stream failed. */
function status(session: http2.ClientHttp2Session): Promise<number> {
  return new Promise((resolve) => {
    const s = session.request({ ':path': '/', ':authority': 'api.example.test' })
    s.on('response', (h) => resolve(Number(h[':status'])))
    s.on('error', () => resolve(0))
    s.resume()
  })
}

function accessLines(cli: Cli): Array<Record<string, unknown>> {
  return cli.stdout().split('\n').filter((l) => l.includes('"component":"access"')).map((l) => JSON.parse(l) as Record<string, unknown>)
}

t.test('serve: streams reset as soon as opened are each an access line naming the client', async (t) => {
  const { cli, httpPort } = await start(t)
  let opened = 0
  for (let round = 0; round < 3; round++) opened += (await rapidReset(httpPort, 300)).opened
  const lines = await eventually(async () => accessLines(cli), (l) => l.length > 0 && l.length === accessLines(cli).length, 5000, 'the access log settled')
  t.ok(lines.length > 0 && lines.length <= opened, `${lines.length} access lines for ${opened} streams opened`)
  const unnamed = lines.filter((l) => l.client !== '127.0.0.1')
  t.equal(unnamed.length, 0, 'every line names the client address')
})

t.test('serve: a connection whose streams are mostly reset before an answer is closed with ENHANCE_YOUR_CALM, said once', async (t) => {
  const { cli, httpPort, adminPort } = await start(t)
  const { opened, goaway } = await rapidReset(httpPort, 3000)
  t.equal(goaway, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, 'GOAWAY ENHANCE_YOUR_CALM')
  t.ok(opened >= 500, `after at least 500 streams (${opened})`)
  const lines = await eventually(async () => accessLines(cli), (l) => l.length > 0 && l.length === accessLines(cli).length, 5000, 'the access log settled')
  t.ok(lines.length <= 520, `at most about 500 access lines for the connection (${lines.length})`)
  const warned = await eventually(async () => cli.stdout().split('\n').filter((l) => l.includes('rapid reset')), (w) => w.length > 0, 5000, 'the warning')
  t.equal(warned.length, 1, 'one warning line for the connection')
  t.match(JSON.parse(warned[0] as string), { level: 40, client: '127.0.0.1', port: httpPort }, 'naming the client and port')
  const metrics = await request(`http://127.0.0.1:${adminPort}/metrics`)
  t.match(metrics.body, new RegExp(`sallyport_downstream_connections_closed_total\\{port="${httpPort}",reason="premature_resets"\\} 1`), 'counted')

  // A client whose streams are answered is not affected, however many it opens.
  const session = http2.connect(`http://127.0.0.1:${httpPort}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  let ok = 0
  for (let batch = 0; batch < 12; batch++) {
    const answers = await Promise.all(Array.from({ length: 50 }, () => status(session)))
    ok += answers.filter((s) => s === 200).length
  }
  t.equal(ok, 600, '600 requests on one connection answered')
})

t.test('serve: a client cancelling a burst of its in-flight streams keeps its connection', async (t) => {
  const { httpPort } = await start(t)
  const session = http2.connect(`http://127.0.0.1:${httpPort}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  let goaway: number | null = null
  session.on('goaway', (code) => { goaway = code })
  // 200 requests answered, then 200 cancelled at once (the client gave up on them).
  const answered = await Promise.all(Array.from({ length: 200 }, () => status(session)))
  t.equal(answered.filter((s) => s === 200).length, 200)
  for (let i = 0; i < 200; i++) {
    const s = session.request({ ':path': '/', ':authority': 'api.example.test' })
    s.on('error', () => {})
    s.close(http2.constants.NGHTTP2_CANCEL)
  }
  await new Promise((r) => setTimeout(r, 300))
  const after = await status(session)
  t.equal(after, 200, 'the next request on the connection is answered')
  t.equal(goaway, null, 'no GOAWAY')
})

t.test('serve: a client whose own timeout gives up on a slow upstream (after 1 s) keeps its connection, however many streams', async (t) => {
  const { httpPort } = await start(t)
  const session = http2.connect(`http://127.0.0.1:${httpPort}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  let goaway: number | null = null
  session.on('goaway', (code) => { goaway = code })
  await new Promise<void>((r) => session.once('connect', () => r()))
  // Three waves of 240 requests to the slow path, each given up after 1.1 s: 720 streams reset before an answer.
  for (let wave = 0; wave < 3; wave++) {
    const streams = Array.from({ length: 240 }, () => {
      const s = session.request({ ':path': '/slow', ':authority': 'api.example.test' })
      s.on('error', () => {})
      return s
    })
    await new Promise((r) => setTimeout(r, 1100))
    for (const s of streams) s.close(http2.constants.NGHTTP2_CANCEL)
    await new Promise((r) => setTimeout(r, 50))
  }
  const after = await status(session)
  t.equal(after, 200, 'the next request on the connection is answered')
  t.equal(goaway, null, 'no GOAWAY: resets after a second are not premature')
})
