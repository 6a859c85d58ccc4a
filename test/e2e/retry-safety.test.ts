// What retries must not do, through the real CLI: send twice a request the
// upstream may have acted on (an HTTP/2 stream reset with a code other than
// REFUSED_STREAM under the refused-stream trigger alone), or retry before the
// HTTPRoute's retry.backoff (Gateway API: the minimum wait).
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { eventually, freePort, gatewayYaml, metricSum, request, startCli, tempDir, type Reply } from './harness.ts'

function serve(t: Test, dir: string, adminPort: number): ReturnType<typeof startCli> {
  return startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--log-level', 'warn'])
}

async function ready(adminPort: number): Promise<void> {
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20_000, 'readyz')
}

/** One POST with a body on a fresh connection, bounded in time. */
function post(port: number, host: string, urlPath: string, body: string): Promise<Reply> {
  return new Promise<Reply>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: urlPath, method: 'POST', headers: { host }, agent: false }, (res) => {
      let text = ''
      res.setEncoding('utf8').on('data', (s: string) => { text += s }).on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }))
    })
    req.setTimeout(10_000, () => req.destroy(new Error('POST timed out')))
    req.on('error', reject)
    req.end(body)
  })
}

function backend(name: string, port: number, appProtocol: string | null = null): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
${appProtocol === null ? '' : `  appProtocols: [${appProtocol}]\n`}  endpoints:
    - ip: { address: 127.0.0.1, port: ${port} }
`
}

t.test('refused-stream: an h2c upstream that read the POST and reset the stream with INTERNAL_ERROR gets it once', async (t) => {
  const seen: string[] = []
  const server = http2.createServer()
  server.on('session', (s) => { s.on('error', () => {}); server.once('close', () => s.destroy()) })
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {})
    let body = ''
    stream.setEncoding('utf8').on('data', (s: string) => { body += s })
    stream.on('end', () => {
      seen.push(`${String(headers[':method'])} ${String(headers[':path'])} ${body}`)
      if (headers[':path'] === '/refuse-once' && seen.filter((s) => s.includes('/refuse-once')).length === 1) return void stream.close(http2.constants.NGHTTP2_REFUSED_STREAM)
      if (headers[':path'] === '/charge') return void stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR)
      stream.respond({ ':status': 200 })
      stream.end('ok')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const upPort = (server.address() as AddressInfo).port
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), backend('payments', upPort, 'gateway.envoyproxy.io/h2c'))
  fs.writeFileSync(path.join(dir, 'route.yaml'), `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: payments, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [pay.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: payments, port: ${upPort} }]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: payments-retry, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: payments }]
  retry:
    numRetries: 2
    retryOn: { triggers: [refused-stream] }
`)
  serve(t, dir, adminPort)
  await ready(adminPort)
  await eventually(() => post(port, 'pay.example.test', '/ping', 'x'), (r) => r.status === 200, 20_000, 'route served')
  const metrics = async (): Promise<string> => (await request(`http://127.0.0.1:${adminPort}/metrics`)).body

  seen.length = 0
  const charged = await post(port, 'pay.example.test', '/charge', 'amount=100')
  t.equal(charged.status, 502, 'the reset answers 502')
  t.same(seen, ['POST /charge amount=100'], 'the upstream received the POST once')
  t.equal(metricSum(await metrics(), 'sallyport_upstream_retries_total', { reason: 'refused_stream' }), 0, 'no refused_stream retry')

  // A real REFUSED_STREAM (not processed, RFC 9113 §8.7) is still retried.
  seen.length = 0
  const refused = await post(port, 'pay.example.test', '/refuse-once', 'amount=5')
  t.same([refused.status, refused.body], [200, 'ok'], 'the refused stream was retried')
  t.equal(seen.length, 2, 'refused, then the retry')
  t.equal(metricSum(await metrics(), 'sallyport_upstream_retries_total', { reason: 'refused_stream' }), 1)
})

t.test('HTTPRoute retry.backoff: no retry reaches the upstream before the configured minimum', async (t) => {
  const at: number[] = []
  const server = http.createServer((_req, res) => {
    at.push(performance.now())
    res.writeHead(at.length % 3 === 0 ? 200 : 503).end(at.length % 3 === 0 ? 'ok' : 'busy')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const upPort = (server.address() as AddressInfo).port
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), backend('busy', upPort))
  fs.writeFileSync(path.join(dir, 'route.yaml'), `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: busy, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [busy.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: busy, port: ${upPort} }]
      retry: { codes: [503], attempts: 2, backoff: 200ms }
`)
  serve(t, dir, adminPort)
  await ready(adminPort)
  const url = `http://127.0.0.1:${port}/`
  const host = 'busy.example.test'
  await eventually(() => request(url, { host }), (r) => r.status !== 404, 20_000, 'route served')
  // Line up on a fresh cycle of 503, 503, 200.
  while (at.length % 3 !== 0) await request(url, { host })
  for (let round = 0; round < 3; round++) {
    const from = at.length
    const r = await request(url, { host })
    t.same([r.status, r.body], [200, 'ok'], `round ${round}: two 503s retried, then 200`)
    t.equal(at.length - from, 3)
    // A gap also holds the 503's way back to the gateway: it can only exceed the backoff
    // (1 ms of slack for timers on libuv's millisecond clock).
    for (let i = from + 1; i < at.length; i++) t.ok(at[i] - at[i - 1] >= 199, `a retry came ${Math.round(at[i] - at[i - 1])} ms after the try before (backoff 200 ms)`)
  }
})
