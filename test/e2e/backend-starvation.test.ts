// One client must not leave everyone else unanswered by holding a Backend's
// upstream connections with requests it never finishes (a probe: one h2c
// connection with 200 POST streams that never sent a body byte held all 128
// connections of the endpoint, and every other request waited without an
// answer). Through the real CLI: with the defaults, the most streams one
// HTTP/2 client may open do not fill an endpoint's connections; with a
// connection cap, a request that cannot get a connection within the connect
// timeout is answered 503 (overloaded, queue_timeout) instead of waiting.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { backendYaml, eventually, freePort, gatewayYaml, metricSum, request, routeYaml, startCli, tempDir, type Reply } from './harness.ts'

/** An upstream answering GETs at once and POSTs once their body has ended; counts requests in progress. */
async function upstream(t: Test): Promise<{ port: number; active: () => number }> {
  let active = 0
  const server = http.createServer((req, res) => {
    active++
    res.on('close', () => { active-- })
    req.on('error', () => {})
    req.resume()
    req.on('end', () => { res.end('ok') })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return { port: (server.address() as AddressInfo).port, active: () => active }
}

async function serve(t: Test, dir: string): Promise<{ port: number; admin: number }> {
  const [port, admin] = [await freePort(), await freePort()]
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${admin}`, '--drain-seconds', '1', '--log-level', 'warn'])
  await eventually(() => request(`http://127.0.0.1:${admin}/readyz`), (r) => r.status === 200, 20_000, 'readyz')
  return { port, admin }
}

t.test('one HTTP/2 client with 250 stalled uploads (its most streams) leaves the backend to the others', async (t) => {
  const u = await upstream(t)
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'backends.yaml'), backendYaml('api', u.port))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('api', 'api.example.test', 'api', u.port))
  const gw = await serve(t, dir)
  const url = `http://127.0.0.1:${gw.port}/`
  await eventually(() => request(url, { host: 'api.example.test' }), (r) => r.status === 200, 20_000, 'route served')

  // The attacker: one h2c session, POST streams whose body never comes.
  const session = http2.connect(`http://127.0.0.1:${gw.port}`)
  session.on('error', () => {})
  t.teardown(() => { session.destroy() })
  for (let i = 0; i < 250; i++) {
    const stream = session.request({ ':method': 'POST', ':path': `/upload/${i}`, ':authority': 'api.example.test' }, { endStream: false })
    stream.on('error', () => {})
  }
  t.ok(await eventually(async () => u.active(), (n) => n === 250, 10_000, 'every stalled upload at the upstream').then(() => true, () => false),
    'each stalled upload has a connection of its own')

  // Everyone else is still served, at once.
  const r = await request(url, { host: 'api.example.test', timeoutMs: 5000 }).then((x) => x.status, (e: Error) => e.message)
  t.equal(r, 200, 'a well-behaved request is answered')
})

t.test('with a connection cap, a request waiting longer than the connect timeout gets a 503 (overloaded, queue_timeout)', async (t) => {
  const u = await upstream(t)
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'backends.yaml'), backendYaml('tight', u.port))
  fs.writeFileSync(path.join(dir, 'route.yaml'), `${routeYaml('tight', 'tight.example.test', 'tight', u.port)}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: tight, namespace: default }
spec:
  targetRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: tight }]
  circuitBreaker: { maxConnections: 1 }
  timeout: { tcp: { connectTimeout: 300ms } }
`)
  const gw = await serve(t, dir)
  const url = `http://127.0.0.1:${gw.port}/`
  await eventually(() => request(url, { host: 'tight.example.test' }), (r) => r.status === 200, 20_000, 'route served')

  // An upload whose body never comes holds the one connection.
  const stalled = net.connect(gw.port, '127.0.0.1')
  stalled.on('error', () => {})
  t.teardown(() => { stalled.destroy() })
  stalled.write('POST /upload HTTP/1.1\r\nHost: tight.example.test\r\nContent-Length: 100\r\n\r\n')
  await eventually(async () => u.active(), (n) => n === 1, 10_000, 'the stalled upload at the upstream')

  const r = await request(url, { host: 'tight.example.test', timeoutMs: 5000 }).catch((e: Error): Reply => ({ status: 0, headers: {}, body: e.message }))
  t.equal(r.status, 503, 'answered, not left waiting')
  t.equal(r.headers['x-sallyport-overloaded'], 'true')
  t.equal(r.body, 'overloaded: queue_timeout\n')
  t.equal(u.active(), 1, 'it never reached the upstream')
  const metrics = (await request(`http://127.0.0.1:${gw.admin}/metrics`)).body
  t.equal(metricSum(metrics, 'sallyport_upstream_overload_total', { limit: 'queue_timeout' }), 1, 'counted')
})
