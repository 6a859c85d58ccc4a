// TCP listeners with a TCPRoute, end to end over loopback with node:net and
// node:tls clients: large transfers both ways with a checksum, half-close,
// refusing upstreams (prompt close; the next endpoint when there are two),
// weights, idle timeout, connection limits, TLS origination verified by the
// upstream (and mTLS), metrics.

import t from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import net from 'node:net'
import tls from 'node:tls'
import { configureLogger } from '../../lib/observe/log.ts'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { clientCert, createCa, serverCert } from '../helpers/pki.ts'
import {
  clusterTls, collect, connect, echoServer, freePort, halfCloseServer, l4Cluster, l4Route, listenOn, metricValue,
  silentProxy, startPlane, table, tcpPort, until, within,
} from './tcp-fixtures.ts'

configureLogger({ level: 'silent' })

/** A circuit breaker allowing one connection, nothing else limited. */
const oneConnection = { maxConnections: 1, maxPendingRequests: null, maxParallelRequests: null, maxParallelRetries: null, maxRequestsPerConnection: null }

t.test('64 MiB both ways through a TCP listener, byte-exact (sha256)', async (t) => {
  const echo = await echoServer(t)
  const port = await freePort()
  await startPlane(t, table([tcpPort(port, l4Route('big', [{ cluster: 'echo' }]))], [l4Cluster('echo', [echo.port])]))
  const client = await connect(port)
  const total = 64 * 1024 * 1024
  const chunk = randomBytes(1024 * 1024)
  const sent = createHash('sha256')
  const got = createHash('sha256')
  let received = 0
  const done = new Promise<void>((resolve, reject) => {
    client.on('data', (c: Buffer) => { got.update(c); received += c.length; if (received === total) client.end() })
    client.on('end', resolve)
    client.on('error', reject)
  })
  // Write with backpressure: wait for drain rather than queueing 64 MiB in memory.
  for (let i = 0; i < total / chunk.length; i++) {
    chunk[0] = i & 0xff
    sent.update(chunk)
    if (!client.write(Buffer.from(chunk))) await new Promise((r) => client.once('drain', r))
  }
  await within(done, 60_000, 'transfer')
  t.equal(received, total, 'every byte came back')
  t.equal(got.digest('hex'), sent.digest('hex'), 'checksum matches')
})

t.test('half-close: the client ends its write side and still receives the answer', async (t) => {
  const upstream = await halfCloseServer(t)
  const port = await freePort()
  await startPlane(t, table([tcpPort(port, l4Route('half', [{ cluster: 'h' }]))], [l4Cluster('h', [upstream])]))
  const client = await connect(port)
  const result = collect(client)
  client.end('x'.repeat(12345))
  const r = await result
  t.equal(r.data.toString(), 'answer:12345')
  t.equal(r.how, 'end', 'the upstream FIN reached the client')
})

t.test('half-close the other way: the upstream ends first, the client keeps sending', async (t) => {
  let receivedAfterEnd = ''
  let gotAll!: () => void
  const allReceived = new Promise<void>((resolve) => { gotAll = resolve })
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {})
    s.end('bye') // ends our write side at once
    s.on('data', (c: Buffer) => { receivedAfterEnd += c.toString() })
    s.on('end', () => { s.destroy(); gotAll() })
  })
  const upstreamPort = await listenOn(t, server)
  const port = await freePort()
  await startPlane(t, table([tcpPort(port, l4Route('half2', [{ cluster: 'h2' }]))], [l4Cluster('h2', [upstreamPort])]))
  const client = await connect(port)
  const chunks: Buffer[] = []
  client.on('data', (c: Buffer) => chunks.push(c))
  await new Promise<void>((resolve) => client.once('end', resolve))
  t.equal(Buffer.concat(chunks).toString(), 'bye')
  client.end('still talking')
  await within(allReceived, 5000, 'the rest of the client bytes')
  t.equal(receivedAfterEnd, 'still talking')
})

t.test('an upstream refusing: the connection is closed promptly; with two endpoints the next one is used', async (t) => {
  const dead = await freePort() // nothing listens there: ECONNREFUSED
  const echo = await echoServer(t, 'hello from live\n')
  const p1 = await freePort()
  const p2 = await freePort()
  await startPlane(t, table([
    tcpPort(p1, l4Route('refused', [{ cluster: 'dead' }])),
    tcpPort(p2, l4Route('fallback', [{ cluster: 'mixed' }])),
  ], [l4Cluster('dead', [dead]), l4Cluster('mixed', [dead, echo.port])]))

  const before = await metricValue('sallyport_l4_connections_total', { route: 'test/refused', code: 'connect_failed' })
  const c1 = await connect(p1)
  const r1 = await collect(c1, 5000)
  t.not(r1.how, 'timeout', `closed (${r1.how}) without waiting for anything`)
  t.equal(r1.data.length, 0)
  await until(async () => (await metricValue('sallyport_l4_connections_total', { route: 'test/refused', code: 'connect_failed' })) === before + 1, 2000, 'metric')

  // Round robin starts on either endpoint; every connection must land on the live one.
  for (let i = 0; i < 4; i++) {
    const c = await connect(p2)
    const r = collect(c, 5000)
    await until(() => c.bytesRead > 0 || c.destroyed, 5000, 'greeting')
    c.end()
    t.equal((await r).data.toString(), 'hello from live\n', `connection ${i} reached the live endpoint`)
  }
  t.equal(echo.connections(), 4)
})

t.test('weights split connections between backends (smooth weighted round robin)', async (t) => {
  const a = await echoServer(t, 'A')
  const b = await echoServer(t, 'B')
  const port = await freePort()
  await startPlane(t, table([tcpPort(port, l4Route('weighted', [{ cluster: 'a', weight: 1 }, { cluster: 'b', weight: 3 }, { cluster: 'zero', weight: 0 }]))],
    [l4Cluster('a', [a.port]), l4Cluster('b', [b.port]), l4Cluster('zero', [1])]))
  const seen: string[] = []
  for (let i = 0; i < 8; i++) {
    const c = await connect(port)
    const r = collect(c, 5000)
    await until(() => c.bytesRead > 0 || c.destroyed, 5000, 'greeting')
    c.end()
    seen.push((await r).data.toString())
  }
  t.equal(seen.filter((s) => s === 'A').length, 2)
  t.equal(seen.filter((s) => s === 'B').length, 6)
})

t.test('a backendRef that did not resolve rejects the connection; no route closes it too', async (t) => {
  const p1 = await freePort()
  const p2 = await freePort()
  await startPlane(t, table([tcpPort(p1, l4Route('invalid', [{ cluster: null }])), tcpPort(p2, null)], []))
  for (const p of [p1, p2]) {
    const r = await collect(await connect(p), 5000)
    t.not(r.how, 'timeout')
    t.equal(r.data.length, 0)
  }
  t.ok(await metricValue('sallyport_l4_errors_total', { reason: 'backend_invalid' }) >= 1)
  t.ok(await metricValue('sallyport_l4_errors_total', { reason: 'no_route' }) >= 1)
})

t.test('idle timeout: a silent connection is closed (route idleMs wins over the listener default)', async (t) => {
  const echo = await echoServer(t)
  const p1 = await freePort()
  await startPlane(t, table([tcpPort(p1, l4Route('idle', [{ cluster: 'e' }], { idleMs: 300 }))], [l4Cluster('e', [echo.port])]),
    { l4Limits: { idleTimeoutMs: 60_000 } })
  const c = await connect(p1)
  const r = collect(c, 10_000)
  c.write('ping')
  const got = await r
  t.equal(got.data.toString(), 'ping', 'bytes flowed before the silence')
  t.not(got.how, 'timeout', 'closed by the gateway, not by the test')
  await until(async () => (await metricValue('sallyport_l4_errors_total', { reason: 'idle_timeout' })) >= 1, 2000, 'idle metric')
})

t.test('listener maxConnections and the backend circuitBreaker.maxConnections', async (t) => {
  const echo = await echoServer(t)
  const p1 = await freePort()
  const p2 = await freePort()
  await startPlane(t, table([
    tcpPort(p1, l4Route('limited', [{ cluster: 'e1' }])),
    tcpPort(p2, l4Route('breaker', [{ cluster: 'e2' }])),
  ], [
    l4Cluster('e1', [echo.port]),
    l4Cluster('e2', [echo.port], { circuitBreaker: oneConnection }),
  ]), { l4Limits: { maxConnections: 2 } })

  const open: net.Socket[] = []
  for (let i = 0; i < 2; i++) {
    const c = await connect(p1)
    c.write('x')
    await until(() => c.bytesRead > 0, 5000, 'echo')
    open.push(c)
  }
  const third = await collect(await connect(p1), 5000)
  t.not(third.how, 'timeout', 'the third connection on the port was closed')
  await until(async () => (await metricValue('sallyport_l4_errors_total', { reason: 'max_connections' })) >= 1, 2000, 'drop metric')

  const first = await connect(p2)
  first.write('y')
  await until(() => first.bytesRead > 0, 5000, 'echo')
  const second = await collect(await connect(p2), 5000)
  t.not(second.how, 'timeout', 'the second connection to the backend was closed')
  t.equal(second.data.length, 0)
  t.ok(await metricValue('sallyport_l4_errors_total', { reason: 'overloaded' }) >= 1)
  first.destroy()
  for (const c of open) c.destroy()
  // Once the first closes, the backend takes a connection again.
  await until(async () => {
    const c = await connect(p2)
    c.write('z')
    const r = collect(c, 2000)
    await new Promise((res) => setTimeout(res, 100))
    c.end()
    return (await r).data.toString() === 'z'
  }, 5000, 'breaker release')
  t.pass('released')
})

t.test('TLS origination: the upstream requires TLS and, with mTLS, sees the gateway client certificate', async (t) => {
  const ca = createCa('l4 origin CA')
  const upstreamCert = serverCert(ca, ['upstream.test'])
  const gatewayCert = clientCert(ca, 'sallyport-gateway')
  const seen: string[] = []
  const server = tls.createServer({ cert: upstreamCert.certPem, key: upstreamCert.keyPem, ca: ca.certPem, requestCert: true, rejectUnauthorized: true, allowHalfOpen: true }, (s) => {
    seen.push(String(s.getPeerCertificate().subject?.CN ?? ''))
    s.on('error', () => {})
    s.on('data', (c: Buffer) => s.write(`tls:${c.toString()}`))
    s.on('end', () => s.end())
  })
  server.on('tlsClientError', () => {})
  const upstreamPort = await listenOn(t, server)
  const port = await freePort()
  const wrongCa = createCa('some other CA')
  await startPlane(t, table([
    tcpPort(port, l4Route('origin', [{ cluster: 'tls' }])),
  ], [
    l4Cluster('tls', [upstreamPort], { protocol: 'TLS', tls: clusterTls({ caPem: ca.certPem, certPem: gatewayCert.certPem, keyPem: gatewayCert.keyPem }) }),
  ]))
  const c = await connect(port)
  const r = collect(c)
  c.end('plain from client')
  const got = await r
  t.equal(got.data.toString(), 'tls:plain from client', 'the client spoke plain TCP, the upstream TLS')
  t.same(seen, ['sallyport-gateway'], 'the upstream verified the gateway client certificate')

  // A backend whose certificate the gateway cannot verify: the connection is refused, counted as tls_failed.
  const p2 = await freePort()
  await startPlane(t, table([tcpPort(p2, l4Route('badca', [{ cluster: 'bad' }]))], [
    l4Cluster('bad', [upstreamPort], { tls: clusterTls({ caPem: wrongCa.certPem, certPem: gatewayCert.certPem, keyPem: gatewayCert.keyPem }) }),
  ]))
  const bad = await collect(await connect(p2), 5000)
  t.equal(bad.data.length, 0)
  t.not(bad.how, 'timeout')
  await until(async () => (await metricValue('sallyport_l4_errors_total', { reason: 'tls_failed' })) >= 1, 2000, 'tls metric')
})

t.test('metrics and the access log line of a connection', async (t) => {
  const lines: string[] = []
  configureLogger({ level: 'info', destination: { write: (s: string) => { lines.push(s); return true } } as unknown as NodeJS.WritableStream })
  t.teardown(() => { configureLogger({ level: 'silent' }) })
  const upstream = await halfCloseServer(t)
  const port = await freePort()
  await startPlane(t, table([tcpPort(port, l4Route('logged', [{ cluster: 'log' }]))], [l4Cluster('log', [upstream])]), { accessLog: true })
  const before = await metricValue('sallyport_l4_bytes_total', { route: 'test/logged', direction: 'in' })
  const c = await connect(port)
  const r = collect(c)
  c.end('12345')
  await r
  await until(() => lines.some((l) => l.includes('"msg":"connection"')), 3000, 'access log')
  const rec = JSON.parse(lines.find((l) => l.includes('"msg":"connection"')) as string) as Record<string, unknown>
  t.match(rec, { component: 'access', protocol: 'tcp', route: 'test/logged', backend: 'log', bytesIn: 5, bytesOut: 'answer:5'.length, reason: 'ok', gateway: 'test/gw', listener: 'tcp' })
  t.match(String(rec.upstream), /^127\.0\.0\.1:\d+$/)
  t.type(rec.durationMs, 'number')
  t.equal(await metricValue('sallyport_l4_bytes_total', { route: 'test/logged', direction: 'in' }), before + 5)
  t.ok(await metricValue('sallyport_l4_connections_total', { route: 'test/logged', backend: 'log', code: 'ok', gateway: 'test/gw', listener: 'tcp' }) >= 1)
  t.ok(await metricValue('sallyport_l4_connection_duration_seconds_count', { route: 'test/logged' }) >= 0)
})

t.test('a table swap keeps open connections on their table; new connections follow the new route; drain closes the rest', async (t) => {
  const a = await echoServer(t, 'A')
  const b = await echoServer(t, 'B')
  const port = await freePort()
  const { plane } = await startPlane(t, table([tcpPort(port, l4Route('swap', [{ cluster: 'a' }]))], [l4Cluster('a', [a.port])]))
  const old = await connect(port)
  await until(() => old.bytesRead > 0, 5000, 'greeting A')
  await plane.apply(table([tcpPort(port, l4Route('swap', [{ cluster: 'b' }]))], [l4Cluster('b', [b.port])], 2))
  const fresh = await connect(port)
  const r = collect(fresh, 5000)
  await until(() => fresh.bytesRead > 0, 5000, 'greeting B')
  fresh.end()
  t.equal((await r).data.toString(), 'B', 'the new connection went to the new backend')
  const o = collect(old, 5000)
  old.write('still A?')
  await until(() => old.bytesRead > 1, 5000, 'echo on the old connection')
  await plane.drain(100)
  const got = await o
  t.equal(got.data.toString(), 'Astill A?', 'the old connection kept its upstream (greeting, then echo) until drained')
  t.not(got.how, 'timeout', 'drain closed it after the grace period')
})

t.test('a drain also ends the connections of a port a reload removed, within its own grace period', async (t) => {
  // A removed port's connections get 30 s; a SIGTERM in that window drained
  // the current ports only: the process exited under them (a FIN both ways, no
  // access line). The drain's grace period bounds them too.
  const a = await echoServer(t, 'A')
  const kept = await echoServer(t, 'K')
  const [removed, stays] = [await freePort(), await freePort()]
  const { plane } = await startPlane(t, table([tcpPort(removed, l4Route('gone', [{ cluster: 'a' }])), tcpPort(stays, l4Route('kept', [{ cluster: 'k' }]))],
    [l4Cluster('a', [a.port]), l4Cluster('k', [kept.port])]))
  const old = await connect(removed)
  await until(() => old.bytesRead > 0, 5000, 'greeting A')
  await plane.apply(table([tcpPort(stays, l4Route('kept', [{ cluster: 'k' }]))], [l4Cluster('k', [kept.port])], 2))
  const o = collect(old, 5000)
  old.write('still A?')
  await until(() => old.bytesRead > 1, 5000, 'the removed port\'s connection still flows')
  await plane.drain(100)
  t.equal(await metricValue('sallyport_l4_connections_total', { route: 'test/gone', code: 'shutdown' }), 1, 'cut and accounted by the time the drain is over')
  t.equal((await o).how, 'error:ECONNRESET', 'reset, as the drain\'s other cuts')
})

t.test('a client that resets while its backend is dialled stops the dial and frees its circuit-breaker slot', async (t) => {
  const proxy = await silentProxy(t)
  const port = await freePort()
  await startPlane(t, table([tcpPort(port, l4Route('stuck', [{ cluster: 'stuck' }]))], [
    l4Cluster('stuck', [443], { circuitBreaker: oneConnection, upstreamProxy: { host: '127.0.0.1', port: proxy.port, authorization: null } }),
  ]), { upstreams: createUpstreams({ connectTimeoutMs: 60_000 }) })

  const first = await connect(port)
  first.on('error', () => {})
  await until(() => proxy.accepted.length === 1, 5000, 'the dial through the proxy')
  const dialClosed = new Promise<void>((resolve) => proxy.accepted[0].once('close', () => resolve()))
  first.resetAndDestroy()
  await within(dialClosed, 10_000, 'the abandoned dial closing')
  t.pass('the dial stopped with the client that reset')
  await until(async () => (await metricValue('sallyport_l4_connections_total', { route: 'test/stuck', code: 'client_reset' })) === 1, 5000, 'client_reset counted')

  // The breaker allows one connection: the abandoned dial no longer holds it.
  const overloaded = await metricValue('sallyport_l4_errors_total', { reason: 'overloaded' })
  const second = await connect(port)
  second.on('error', () => {})
  await until(() => proxy.accepted.length === 2, 5000, 'the next client dialled, not turned away as overloaded')
  t.equal(await metricValue('sallyport_l4_errors_total', { reason: 'overloaded' }), overloaded, 'nothing refused by the breaker')
  second.destroy()
})

t.test('bytes and a FIN sent while a slow TLS dial is under way arrive once it completes', async (t) => {
  const ca = createCa('slow dial CA')
  const cert = serverCert(ca, ['upstream.test'])
  const server = tls.createServer({ cert: cert.certPem, key: cert.keyPem, allowHalfOpen: true }, (s) => {
    let bytes = ''
    s.on('error', () => {})
    s.on('data', (c: Buffer) => { bytes += c.toString() })
    s.on('end', () => { s.end(`got:${bytes}`) })
  })
  server.on('tlsClientError', () => {})
  const tlsPortNo = await listenOn(t, server)
  // Holds every connection 300 ms before joining it to the TLS server: the gateway's TLS handshake waits that long.
  const slow = net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {})
    s.pause()
    setTimeout(() => {
      const u = net.connect({ host: '127.0.0.1', port: tlsPortNo, allowHalfOpen: true }, () => { s.pipe(u); u.pipe(s); s.resume() })
      u.on('error', () => s.destroy())
    }, 300)
  })
  const slowPort = await listenOn(t, slow)
  const port = await freePort()
  await startPlane(t, table([tcpPort(port, l4Route('slow', [{ cluster: 'slow' }]))], [
    l4Cluster('slow', [slowPort], { protocol: 'TLS', tls: clusterTls({ caPem: ca.certPem }) }),
  ]))
  const c = await connect(port)
  const r = collect(c)
  c.write('first ')
  c.end('and last')
  const got = await r
  t.equal(got.data.toString(), 'got:first and last', 'what the client sent during the dial reached the upstream, then its FIN')
  t.equal(got.how, 'end', 'and the answer came back before the close')
})
