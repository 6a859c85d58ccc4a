// Endpoint health (issue 6): active HTTP and TCP checks take endpoints out of
// rotation and bring them back; passive outlier detection ejects with a
// growing ejection time, un-ejects after it, and respects maxEjectionPercent;
// the state shows in the registry's health dump (/config_dump) and in the
// sallyport_upstream_endpoint_healthy gauge. Real upstreams on 127.0.0.1.
import t from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import type { ActiveHealthCheck, Cluster } from '../../lib/compile/table.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { clusterTls } from '../upstream/fixtures.ts'
import { PASSIVE, ask, bodies, countOf, listenOnReleased, ep, gateway, metric, sleep, until, upstream, type Gateway } from './fixtures.ts'

configureLogger({ level: 'silent' })

interface EndpointDump { endpoint: string; healthy: boolean; ejected: boolean; ejectedForMs: number; ejections: number; activeCheckHealthy: boolean }

function endpoints(gw: Gateway, backend: string): EndpointDump[] {
  const entry = gw.upstreams.resilience?.health().find((h) => h.backend === backend)
  return (entry?.endpoints ?? []) as EndpointDump[]
}

function dumpOf(gw: Gateway, backend: string, port: number): EndpointDump {
  return endpoints(gw, backend).find((e) => e.endpoint === `127.0.0.1:${port}`) as EndpointDump
}

async function serve(t: Parameters<typeof gateway>[0], c: Cluster): Promise<Gateway> {
  const port = await freePort()
  return gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: c.id }] }] }] } }, [c]))
}

const HTTP_CHECK: ActiveHealthCheck = {
  type: 'HTTP', intervalMs: 50, timeoutMs: 500, unhealthyThreshold: 2, healthyThreshold: 1,
  http: { path: '/healthz', method: 'GET', expectedStatuses: [200], hostname: null, expectedResponse: null }, tcp: null,
}

t.test('active HTTP check: 500 on the health path takes the endpoint out, 200 brings it back', async (t) => {
  let sick = false
  let traffic = 0
  let checks = 0
  const a = await upstream(t, 'a', (req, res) => {
    if (req.url === '/healthz') { checks++; res.writeHead(sick ? 500 : 200).end(); return }
    traffic++
    res.end('a')
  })
  const b = await upstream(t, 'b')
  const gw = await serve(t, cluster('hc', a.port, { endpoints: [ep(a.port), ep(b.port)], healthCheck: { active: HTTP_CHECK, passive: null } }))
  t.ok(await until(() => checks >= 2), 'a is checked on /healthz')
  t.same(countOf(await bodies(gw.port, 10)), { a: 5, b: 5 }, 'both healthy: round robin')
  sick = true
  t.ok(await until(() => dumpOf(gw, 'hc', a.port)?.activeCheckHealthy === false), 'two failed checks: unhealthy')
  t.equal(await metric('sallyport_upstream_endpoint_healthy', { backend: 'hc', endpoint: `127.0.0.1:${a.port}` }), 0, 'gauge 0')
  traffic = 0
  t.same(countOf(await bodies(gw.port, 10)), { b: 10 }, 'no traffic to the unhealthy endpoint')
  t.equal(traffic, 0)
  sick = false
  t.ok(await until(() => dumpOf(gw, 'hc', a.port)?.activeCheckHealthy === true), 'one good check: healthy again')
  t.equal(await metric('sallyport_upstream_endpoint_healthy', { backend: 'hc', endpoint: `127.0.0.1:${a.port}` }), 1, 'gauge 1')
  t.ok((countOf(await bodies(gw.port, 10)).a ?? 0) >= 4, 'traffic returns')
})

t.test('active TCP check: a closed port is unhealthy until something listens there', async (t) => {
  const live = await upstream(t, 'live')
  // Below the ephemeral range (and in this process's slice of it): closed now, and no other
  // test's outgoing connection can take it as its local port before this one listens there
  // (a closedPort() released mid-run could be, and the listen then failed with EADDRINUSE).
  const deadPort = await freePort()
  const check: ActiveHealthCheck = { type: 'TCP', intervalMs: 50, timeoutMs: 500, unhealthyThreshold: 1, healthyThreshold: 1, http: null, tcp: null }
  const gw = await serve(t, cluster('tcp', live.port, { endpoints: [ep(deadPort), ep(live.port)], healthCheck: { active: check, passive: null } }))
  t.ok(await until(() => dumpOf(gw, 'tcp', deadPort)?.activeCheckHealthy === false), 'refused connect: unhealthy')
  t.equal(dumpOf(gw, 'tcp', deadPort).healthy, false)
  t.equal(dumpOf(gw, 'tcp', live.port).healthy, true)
  const before = await metric('sallyport_upstream_connect_errors_total', { backend: 'tcp' })
  t.same(countOf(await bodies(gw.port, 10)), { live: 10 })
  t.equal(await metric('sallyport_upstream_connect_errors_total', { backend: 'tcp' }), before, 'no request was tried on the dead port')
  // Something starts listening on the port: the check passes again.
  const revived = http.createServer((_req, res) => { res.end('revived') })
  await listenOnReleased(revived, deadPort)
  t.teardown(() => new Promise<void>((r) => { revived.closeAllConnections(); revived.close(() => r()) }))
  t.equal((revived.address() as AddressInfo).port, deadPort)
  t.ok(await until(() => dumpOf(gw, 'tcp', deadPort)?.activeCheckHealthy === true), 'listening: healthy')
  t.ok((countOf(await bodies(gw.port, 10)).revived ?? 0) >= 4, 'traffic returns')
})

t.test('active HTTP check with expectedResponse: the status and the body both decide', async (t) => {
  let state = 'up'
  const a = await upstream(t, 'a', (req, res) => {
    if (req.url !== '/healthz') { res.end('a'); return }
    // Chunked, the expected text split over two chunks: the check reads the body, not its framing.
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"status":"')
    setTimeout(() => res.end(`${state}"}`), 5)
  })
  const b = await upstream(t, 'b', (req, res) => { res.end(req.url === '/healthz' ? '{"status":"up"}' : 'b') })
  const check: ActiveHealthCheck = {
    ...HTTP_CHECK, unhealthyThreshold: 1,
    http: { ...HTTP_CHECK.http!, expectedResponse: { type: 'Text', text: '"status":"up"', binary: null } },
  }
  const gw = await serve(t, cluster('body', a.port, { endpoints: [ep(a.port), ep(b.port)], healthCheck: { active: check, passive: null } }))
  await sleep(200)
  t.equal(dumpOf(gw, 'body', a.port).activeCheckHealthy, true, 'a 200 carrying the text: healthy')
  state = 'down'
  t.ok(await until(() => dumpOf(gw, 'body', a.port)?.activeCheckHealthy === false), 'a 200 without it: unhealthy')
  t.same(countOf(await bodies(gw.port, 6)), { b: 6 }, 'no traffic to it')
  state = 'up'
  t.ok(await until(() => dumpOf(gw, 'body', a.port)?.activeCheckHealthy === true), 'the text again: healthy')
})

t.test('active HTTP/2 check with a Binary expectedResponse', async (t) => {
  let body = Buffer.from([0, 1, 2, 0xff, 9])
  const server = http2.createServer()
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200 })
    stream.end(body)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const port = (server.address() as AddressInfo).port
  const check: ActiveHealthCheck = {
    ...HTTP_CHECK, unhealthyThreshold: 1,
    http: { ...HTTP_CHECK.http!, expectedResponse: { type: 'Binary', text: null, binary: Buffer.from([2, 0xff]).toString('base64') } },
  }
  const gw = await serve(t, cluster('h2body', port, { protocol: 'H2C', healthCheck: { active: check, passive: null } }))
  await sleep(200)
  t.equal(dumpOf(gw, 'h2body', port).activeCheckHealthy, true, 'the bytes are in the body: healthy')
  body = Buffer.from([0, 1, 2, 0xfe, 9])
  t.ok(await until(() => dumpOf(gw, 'h2body', port)?.activeCheckHealthy === false), 'they are not: unhealthy')
})

t.test('active TCP check with send and receive: the answer decides, not the connect', async (t) => {
  let healthy = true
  const sockets = new Set<net.Socket>()
  const server = net.createServer((sock) => {
    sockets.add(sock)
    sock.on('close', () => sockets.delete(sock))
    sock.on('error', () => {})
    let got = ''
    sock.setEncoding('latin1')
    sock.on('data', (s: string) => {
      got += s
      // A redis-like PING, answered in two writes.
      if (got.includes('PING\r\n')) { sock.write(healthy ? '+PO' : '-ERR loading'); setTimeout(() => sock.write(healthy ? 'NG\r\n' : '\r\n'), 5) }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  const port = (server.address() as AddressInfo).port
  const check: ActiveHealthCheck = {
    type: 'TCP', intervalMs: 50, timeoutMs: 500, unhealthyThreshold: 1, healthyThreshold: 1, http: null,
    tcp: { send: { type: 'Binary', text: null, binary: Buffer.from('PING\r\n').toString('base64') }, receive: { type: 'Text', text: '+PONG', binary: null } },
  }
  const gw = await serve(t, cluster('tcpio', port, { healthCheck: { active: check, passive: null } }))
  await sleep(200)
  t.equal(dumpOf(gw, 'tcpio', port).activeCheckHealthy, true, '+PONG: healthy')
  healthy = false
  t.ok(await until(() => dumpOf(gw, 'tcpio', port)?.activeCheckHealthy === false), 'connects, answers -ERR: unhealthy')
  healthy = true
  t.ok(await until(() => dumpOf(gw, 'tcpio', port)?.activeCheckHealthy === true), '+PONG again: healthy')
  t.ok(await until(() => sockets.size === 0), 'each check closed its connection')
})

t.test('a backend removed while its active check is in a TLS handshake: the check\'s connection closes at once', async (t) => {
  // Accepts and never answers the ClientHello: the check waits in its handshake (timeout 30 s).
  const accepted: net.Socket[] = []
  const silent = net.createServer((sock) => {
    accepted.push(sock)
    sock.on('error', () => {})
    sock.resume()
  })
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of accepted) s.destroy(); silent.close() })
  const port = (silent.address() as AddressInfo).port
  const check: ActiveHealthCheck = { type: 'TCP', intervalMs: 20, timeoutMs: 30_000, unhealthyThreshold: 1, healthyThreshold: 1, http: null, tcp: null }
  const c = cluster('silent', port, { tls: clusterTls(), healthCheck: { active: check, passive: null } })
  const gw = await serve(t, c)
  t.ok(await until(() => accepted.length >= 1), 'the check connected')
  // The configuration drops the backend: its checker stops.
  gw.upstreams.retain(buildTable({}, []))
  const closed = await Promise.race([
    new Promise<boolean>((resolve) => accepted[0].once('close', () => resolve(true))),
    sleep(10_000).then(() => false),
  ])
  t.ok(closed, 'the stopped check closed its half-open connection')
  t.equal(accepted.length, 1, 'and opened no other')
})

t.test('passive: ejected for baseEjectionTime, back after it, ejected longer the second time', async (t) => {
  // A base of 1 s: each step below must fit inside an ejection even on a loaded machine.
  const bad = await upstream(t, 'bad', (_req, res) => { res.writeHead(500).end('bad') })
  const good = await upstream(t, 'good')
  const passive = { ...PASSIVE, consecutive5xxErrors: 2, baseEjectionTimeMs: 1000, maxEjectionPercent: 50 }
  const gw = await serve(t, cluster('pe', bad.port, { endpoints: [ep(bad.port), ep(good.port)], healthCheck: { active: null, passive } }))
  const before = await metric('sallyport_upstream_ejections_total', { backend: 'pe' })
  await bodies(gw.port, 4)
  let d = dumpOf(gw, 'pe', bad.port)
  t.equal(d.ejected, true, 'two 500s in a row: ejected')
  t.equal(d.ejections, 1)
  t.ok(d.ejectedForMs > 0 && d.ejectedForMs <= 1000, `first ejection ≤ baseEjectionTime (${d.ejectedForMs} ms)`)
  t.equal(await metric('sallyport_upstream_ejections_total', { backend: 'pe' }), before + 1)
  const hits = bad.hits
  await bodies(gw.port, 6)
  t.equal(bad.hits, hits, 'no traffic while ejected')
  await sleep(1050)
  t.ok((await bodies(gw.port, 6)).includes('bad'), 'back in rotation after baseEjectionTime')
  d = dumpOf(gw, 'pe', bad.port)
  t.equal(d.ejected, true, 'ejected again after two more 500s')
  t.equal(d.ejections, 2)
  t.ok(d.ejectedForMs > 1000 && d.ejectedForMs <= 2000, `second ejection is 2 × baseEjectionTime (${d.ejectedForMs} ms left)`)
  t.equal(await metric('sallyport_upstream_endpoint_healthy', { backend: 'pe', endpoint: `127.0.0.1:${bad.port}` }), 0)
})

t.test('passive: maxEjectionPercent caps the ejected share', async (t) => {
  const bads = [await upstream(t, 'bad1', (_q, res) => { res.writeHead(500).end('bad1') }), await upstream(t, 'bad2', (_q, res) => { res.writeHead(500).end('bad2') }),
    await upstream(t, 'bad3', (_q, res) => { res.writeHead(500).end('bad3') })]
  const good = await upstream(t, 'good')
  const passive = { ...PASSIVE, consecutive5xxErrors: 1, baseEjectionTimeMs: 60_000, maxEjectionPercent: 50 }
  const gw = await serve(t, cluster('cap', good.port, { endpoints: [...bads.map((u) => ep(u.port)), ep(good.port)], healthCheck: { active: null, passive } }))
  await bodies(gw.port, 40)
  const ejected = endpoints(gw, 'cap').filter((e) => e.ejected)
  t.equal(ejected.length, 2, '50 % of 4 endpoints: two ejected at most')
  const stillIn = bads.find((u) => !ejected.some((e) => e.endpoint === `127.0.0.1:${u.port}`))
  t.ok(stillIn !== undefined, 'the third failing endpoint keeps receiving traffic')
  const hits = stillIn?.hits ?? 0
  await bodies(gw.port, 10)
  t.ok((stillIn?.hits ?? 0) > hits, 'it is still picked')

  // 0 % still ejects one endpoint (Envoy): a single failing provider can be failed over.
  const one = await upstream(t, 'one', (_q, res) => { res.writeHead(500).end() })
  const gw2 = await serve(t, cluster('solo', one.port, { healthCheck: { active: null, passive: { ...passive, maxEjectionPercent: 0 } } }))
  await ask(gw2.port)
  t.equal(dumpOf(gw2, 'solo', one.port).ejected, true, 'at least one endpoint may be ejected')
})

t.test('active HTTP check over HTTP/2 (h2c backend): a 503 health answer takes the endpoint out', async (t) => {
  const http2 = await import('node:http2')
  let sick = true
  let checks = 0
  const server = http2.createServer()
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {})
    if (headers[':path'] === '/healthz') checks++
    stream.respond({ ':status': headers[':path'] === '/healthz' && sick ? 503 : 200 })
    stream.end('h2')
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const port = (server.address() as AddressInfo).port
  const gw = await serve(t, cluster('h2hc', port, { protocol: 'H2C', healthCheck: { active: { ...HTTP_CHECK, unhealthyThreshold: 1 }, passive: null } }))
  t.ok(await until(() => dumpOf(gw, 'h2hc', port)?.activeCheckHealthy === false), 'unhealthy after a 503 over h2')
  t.ok(checks >= 1, 'the check arrived as an HTTP/2 request')
  sick = false
  t.ok(await until(() => dumpOf(gw, 'h2hc', port)?.activeCheckHealthy === true), 'healthy again')
})

t.test('a new table that changes the backend (its hostname) but not the check: the checker probes the backend as it is now', async (t) => {
  // The upstream is healthy only for the Host it serves now; the check's config is unchanged.
  let hosts: string[] = []
  const a = await upstream(t, 'a', (req, res) => {
    if (req.url === '/healthz') { hosts.push(req.headers.host ?? ''); res.writeHead(req.headers.host === 'new.example' ? 200 : 404).end(); return }
    res.end('a')
  })
  const port = await freePort()
  const table = (hostname: string): ReturnType<typeof buildTable> => buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'hn' }] }] }] } },
    [cluster('hn', a.port, { hostname, healthCheck: { active: { ...HTTP_CHECK, unhealthyThreshold: 1 }, passive: null } })])
  const gw = await gateway(t, table('old.example'))
  t.ok(await until(() => dumpOf(gw, 'hn', a.port)?.activeCheckHealthy === false), 'checked as old.example: 404, unhealthy')
  gw.upstreams.retain(table('new.example'))
  hosts = []
  t.ok(await until(() => hosts.length >= 2), 'checks go on')
  t.ok(await until(() => dumpOf(gw, 'hn', a.port)?.activeCheckHealthy === true, 2000), `checked as the new hostname: healthy (Hosts asked for: ${[...new Set(hosts)].join(', ')})`)
})
