// The admin server's bounds: one config dump built at a time and shared by the
// requests that ask for it, a connection limit, idle and stalled connections
// closed, and the dump kept to loopback clients unless told otherwise.
import t, { type Test } from 'tap'
import http from 'node:http'
import net from 'node:net'
import { isLoopback, startAdminServer, type AdminOptions, type AdminServer } from '../../lib/observe/admin.ts'

async function admin(t: Test, over: Partial<AdminOptions>): Promise<AdminServer> {
  const server = await startAdminServer({
    host: '127.0.0.1', port: 0, ready: () => true,
    metrics: async () => ({ contentType: 'text/plain', body: '' }),
    configDump: async () => '{}',
    ...over,
  })
  t.teardown(() => server.close())
  return server
}

function get(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (s: string) => { body += s })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.setTimeout(5000, () => req.destroy(new Error('timed out')))
    req.on('error', reject)
  })
}

/** Polls `ok` every 20 ms until it holds; fails after 10 s. */
async function until(ok: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await ok()) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  throw new Error('condition not reached in 10 s')
}

/** Resolves when the server closes `socket` (true), or after `ms` with it still open (false). */
function closedWithin(socket: net.Socket, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    if (socket.destroyed) { resolve(true); return }
    const timer = setTimeout(() => resolve(false), ms)
    socket.once('close', () => { clearTimeout(timer); resolve(true) })
  })
}

function connect(t: Test, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => resolve(socket))
    socket.on('error', reject)
    t.teardown(() => { socket.destroy() })
  })
}

t.test('one dump is built for the requests that ask at once, and shared while a client is still being sent it', async (t) => {
  let builds = 0
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  const big = 'x'.repeat(48 * 1024 * 1024)
  const server = await admin(t, {
    configDump: async () => { builds++; if (builds === 1) await gate; return JSON.stringify({ build: builds, big: builds === 2 ? big : '' }) },
  })
  const port = server.address.port
  const asked = Array.from({ length: 10 }, () => get(port, '/config_dump'))
  await new Promise((resolve) => setTimeout(resolve, 50))
  release()
  const answers = await Promise.all(asked)
  t.same(answers.map((a) => a.status), Array(10).fill(200))
  t.same(new Set(answers.map((a) => a.body)), new Set(['{"build":1,"big":""}\n']), 'ten requests at once, one dump')
  t.equal(builds, 1)
  // Every answer delivered: the next request gets a fresh one, a large one here.
  const reader = await connect(t, port)
  reader.pause()
  reader.write('GET /config_dump HTTP/1.1\r\nHost: x\r\n\r\n')
  // Bounded waits, not fixed sleeps: on a loaded machine the server may take a while to get there.
  await until(() => builds === 2)
  t.equal(builds, 2, 'a new dump once the earlier ones were delivered')
  let firstByte = false
  reader.once('readable', () => { firstByte = true })
  await until(() => firstByte)
  // While that client has not read it, others share its bytes instead of building more.
  const shared = await get(port, '/config_dump')
  t.equal(shared.body.slice(0, 10), '{"build":2', 'a request meanwhile gets the same dump')
  t.equal(builds, 2, 'and nothing was built for it')
  const closed = new Promise((resolve) => reader.once('close', resolve))
  reader.destroy()
  await closed
  // The server sees the reset when it next writes: until then it may still count the reader.
  let fresh = ''
  await until(async () => { fresh = (await get(port, '/config_dump')).body; return fresh.startsWith('{"build":3') })
  t.equal(fresh.slice(0, 40), '{"build":3,"big":""}\n', 'once nobody is being sent it, a fresh one again')
})

t.test('a failed dump is not kept: the next request builds again', async (t) => {
  let calls = 0
  const server = await admin(t, { configDump: async () => { if (++calls === 1) throw new Error('boom'); return '{"ok":true}' } })
  t.equal((await get(server.address.port, '/config_dump')).status, 500)
  t.same(await get(server.address.port, '/config_dump'), { status: 200, body: '{"ok":true}\n' })
})

t.test('the dump is for loopback clients by default; on serves anyone, off nobody', async (t) => {
  t.ok(isLoopback('127.0.0.1') && isLoopback('127.3.2.1') && isLoopback('::1') && isLoopback('::ffff:127.0.0.1'), 'loopback peers')
  t.notOk(isLoopback('10.0.0.7') || isLoopback('::ffff:10.0.0.7') || isLoopback('fd00::1') || isLoopback(undefined), 'others')
  const local = await admin(t, {})
  t.equal((await get(local.address.port, '/config_dump')).status, 200, 'a loopback client reads it')
  const off = await admin(t, { configDumpAccess: 'off' })
  t.same(await get(off.address.port, '/config_dump'), { status: 404, body: 'not found (--config-dump off)\n' })
  t.equal((await get(off.address.port, '/readyz')).status, 200, 'the rest is served')
})

t.test('connections past the limit are closed at accept; a freed slot is taken again', async (t) => {
  const server = await admin(t, { limits: { maxConnections: 3 } })
  const port = server.address.port
  const held = [await connect(t, port), await connect(t, port), await connect(t, port)]
  const extra = await connect(t, port)
  t.ok(await closedWithin(extra, 2000), 'the fourth is closed')
  held[0]?.destroy()
  const again = await (async () => {
    for (let i = 0; i < 50; i++) {
      const r = await get(port, '/healthz').catch(() => null)
      if (r !== null) return r
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    return null
  })()
  t.equal(again?.status, 200, 'once one closed, requests are served')
})

t.test('one client holding its share of the connections does not lock the others out (probes, scrapers)', async (t) => {
  const server = await admin(t, { limits: { maxConnections: 4, maxConnectionsPerClient: 2 } })
  const port = server.address.port
  // A slowloris from 127.0.0.1: connections that never finish a head, as many as the whole limit.
  const held = [await connect(t, port), await connect(t, port), await connect(t, port), await connect(t, port)]
  for (const s of held) s.write('GET /metrics HTTP/1.1\r\n')
  t.ok(await closedWithin(held[2] as net.Socket, 2000) && await closedWithin(held[3] as net.Socket, 2000), 'past its share, its connections are closed at accept')
  t.notOk(await closedWithin(held[0] as net.Socket, 200), 'the first ones stay (the idle bound handles those)')
  // kubelet or Prometheus, from another address.
  const other = await new Promise<{ status: number }>((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/healthz', localAddress: '127.0.0.2', agent: false }, (res) => { res.resume(); resolve({ status: res.statusCode ?? 0 }) })
    req.setTimeout(5000, () => req.destroy(new Error('timed out')))
    req.on('error', reject)
  })
  t.equal(other.status, 200, 'another client is served')
})

t.test('a connection that sends nothing, or stops reading its answer, is closed after the idle bound', async (t) => {
  const big = 'x'.repeat(48 * 1024 * 1024)
  const server = await admin(t, { limits: { idleMs: 300 }, configDump: async () => JSON.stringify({ big }) })
  const port = server.address.port
  const silent = await connect(t, port)
  t.ok(await closedWithin(silent, 3000), 'a connection that never sent a head')
  // A client that stops reading: the server gives up on it after the idle bound. Resumed later, the
  // client gets what the socket buffers held, then the end: never the whole answer.
  const stalled = await connect(t, port)
  stalled.pause()
  stalled.write('GET /config_dump HTTP/1.1\r\nHost: x\r\n\r\n')
  // The answer has begun (a paused socket still buffers what arrives), however long a busy machine took
  // to build the dump; then well past the idle bound.
  for (let i = 0; i < 200 && stalled.readableLength === 0; i++) await new Promise((resolve) => setTimeout(resolve, 50))
  await new Promise((resolve) => setTimeout(resolve, 1500))
  let received = 0
  stalled.on('data', (chunk: Buffer) => { received += chunk.length })
  stalled.resume()
  t.ok(await closedWithin(stalled, 5000), 'a client that stopped reading a 48 MiB answer is cut off')
  t.ok(received < big.length, `it got ${received >> 20} MiB of ${big.length >> 20}`)
})
