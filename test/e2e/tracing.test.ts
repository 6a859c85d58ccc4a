// Tracing through the real CLI (issue 10): `serve --otlp-endpoint` against an
// OTLP receiver started here that decodes what arrives (JSON and protobuf).
// Parent/child links across client → server span → client span → upstream,
// OpenTelemetry HTTP attributes, a retry as two client spans, B3 in, invalid
// traceparent → new trace, parent-based sampling at ratio 0, and drops
// counted when the collector is down or stuck.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { backendYaml, eventually, freePort, gatewayYaml, metricSum, request, routeYaml, settleLogs, startCli, tempDir, type Cli } from './harness.ts'
import { startOtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.ts'

const SERVER = 2
const CLIENT = 3

interface Upstream { port: number; seen: http.IncomingHttpHeaders[]; failFirst: number }

async function upstream(t: Test, failFirst = 0): Promise<Upstream> {
  const u: Upstream = { port: 0, seen: [], failFirst }
  const server = http.createServer((req, res) => {
    u.seen.push(req.headers)
    if (u.failFirst > 0) { u.failFirst--; res.writeHead(503).end('busy'); return }
    res.end('ok')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  u.port = (server.address() as AddressInfo).port
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return u
}

/** One request with extra headers (no agent), bounded. */
function get(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { headers, agent: false }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode ?? 0)) })
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')))
    req.on('error', reject)
    req.end()
  })
}

interface Setup { port: number; adminPort: number; ok: Upstream; flaky: Upstream; cli: Cli }

async function gateway(t: Test, extraArgs: string[], env: Record<string, string> = {}): Promise<Setup> {
  const ok = await upstream(t)
  const flaky = await upstream(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), `${backendYaml('ok', ok.port)}---\n${backendYaml('flaky', flaky.port)}`)
  fs.writeFileSync(path.join(dir, 'routes.yaml'), `${routeYaml('api', 'api.example.test', 'ok', ok.port)}---
${routeYaml('retry', 'retry.example.test', 'flaky', flaky.port)}---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: retry-503
  namespace: default
spec:
  targetRefs:
    - { group: gateway.networking.k8s.io, kind: HTTPRoute, name: retry }
  retry:
    numRetries: 1
    perRetry:
      backOff: { baseInterval: 10ms, maxInterval: 20ms }
    retryOn:
      triggers: [retriable-status-codes]
      httpStatusCodes: [503]
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--log-level', 'warn', '--access-log', 'off', ...extraArgs], {
    env: { OTEL_BSP_SCHEDULE_DELAY: '50', ...env },
  })
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20_000, 'readyz')
  await eventually(() => request(`http://127.0.0.1:${port}/`, { host: 'api.example.test' }), (r) => r.status === 200, 20_000, 'route served')
  return { port, adminPort, ok, flaky, cli }
}

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736'
const PARENT = '00f067aa0ba902b7'

/** `traceparent` header → its parent (span) id. */
const parentOf = (tp: unknown): string => String(tp).split('-')[2]

const byTrace = (spans: ReceivedSpan[], traceId: string): ReceivedSpan[] => spans.filter((s) => s.traceId === traceId)

for (const protocol of ['http/json', 'http/protobuf'] as const) {
  t.test(`${protocol}: client traceparent → server span → client span → upstream traceparent, with attributes`, async (t) => {
    const receiver = await startOtlpReceiver(t)
    const g = await gateway(t, ['--otlp-endpoint', receiver.url, '--otlp-protocol', protocol])
    const seenBefore = g.ok.seen.length
    t.equal(await get(`http://127.0.0.1:${g.port}/v1/items?secret=x`, { host: 'api.example.test:' + g.port, traceparent: `00-${TRACE}-${PARENT}-01`, tracestate: 'vendor=abc,other=1', 'user-agent': 'tracing-test' }), 200)
    const spans = byTrace(await receiver.waitFor((s) => byTrace(s, TRACE).length >= 2, 15000, 'server + client span'), TRACE)
    const server = spans.find((s) => s.kind === SERVER) as ReceivedSpan
    const client = spans.find((s) => s.kind === CLIENT) as ReceivedSpan
    t.ok(server !== undefined && client !== undefined, 'one server and one client span')
    t.equal(server.encoding, protocol === 'http/json' ? 'json' : 'protobuf')
    t.equal(server.parentSpanId, PARENT, 'server span is the child of the client-supplied parent')
    t.equal(server.flags & 0x301, 0x301, 'flags: sampled, parent is remote')
    t.equal(server.traceState, 'vendor=abc,other=1')
    t.equal(client.parentSpanId, server.spanId, 'client span is the child of the server span')
    const upstreamHeaders = g.ok.seen[g.ok.seen.length - 1]
    t.equal(g.ok.seen.length, seenBefore + 1)
    t.equal(String(upstreamHeaders.traceparent), `00-${TRACE}-${client.spanId}-01`, 'upstream got a traceparent whose parent is the client span')
    t.equal(upstreamHeaders.tracestate, 'vendor=abc,other=1', 'tracestate passed through')
    t.ok(server.startNs <= client.startNs && client.endNs <= server.endNs, 'client span inside the server span')
    t.match(server.attributes, {
      'http.request.method': 'GET', 'url.path': '/v1/items', 'url.scheme': 'http', 'server.address': 'api.example.test', 'server.port': g.port,
      'http.response.status_code': 200, 'network.protocol.version': '1.1', 'client.address': '127.0.0.1', 'user_agent.original': 'tracing-test',
      'sallyport.gateway': 'default/egress', 'sallyport.route': 'default/api',
    })
    t.match(String(server.attributes['sallyport.backend']), /ok/)
    t.equal(server.status.code, 0, 'a 200 leaves the status unset')
    t.match(client.attributes, {
      'http.request.method': 'GET', 'server.address': '127.0.0.1', 'server.port': g.ok.port, 'http.response.status_code': 200,
      'network.protocol.version': '1.1', 'sallyport.attempt': 1, 'url.full': `http://api.example.test:${g.port}/v1/items`,
    })
    t.notOk('http.request.resend_count' in client.attributes)
    t.equal(server.resource['service.name'], 'sallyport')
    t.equal(server.scope, 'sallyport')
    t.equal(server.name, 'GET')
  })
}

t.test('a retry on 503 is two client spans; B3 single and multi accepted; invalid traceparent starts a new trace', async (t) => {
  const receiver = await startOtlpReceiver(t)
  const g = await gateway(t, ['--otlp-endpoint', receiver.url, '--otlp-protocol', 'http/json'])
  const base = `http://127.0.0.1:${g.port}/`

  // Retry: the flaky upstream answers 503 once.
  g.flaky.failFirst = 1
  const retryTrace = '11111111111111111111111111111111'
  t.equal(await get(base, { host: 'retry.example.test', traceparent: `00-${retryTrace}-${PARENT}-01` }), 200)
  const retry = byTrace(await receiver.waitFor((s) => byTrace(s, retryTrace).length >= 3, 15000, 'retry spans'), retryTrace)
  const server = retry.find((s) => s.kind === SERVER) as ReceivedSpan
  const clients = retry.filter((s) => s.kind === CLIENT).sort((a, b) => Number(a.attributes['sallyport.attempt']) - Number(b.attributes['sallyport.attempt']))
  t.equal(clients.length, 2, 'two client spans')
  t.same(clients.map((c) => c.parentSpanId), [server.spanId, server.spanId], 'both children of the server span')
  t.same(clients.map((c) => c.attributes['http.response.status_code']), [503, 200])
  t.same(clients.map((c) => c.attributes['sallyport.attempt']), [1, 2])
  t.equal(clients[1].attributes['http.request.resend_count'], 1)
  t.equal(clients[0].status.code, 2, 'the 503 attempt is an error')
  t.equal(clients[0].attributes['error.type'], '503')
  t.equal(clients[1].status.code, 0)
  t.match(String(clients[0].attributes['sallyport.backend']), /flaky/)
  t.equal(server.attributes['http.response.status_code'], 200)
  t.equal(server.attributes['sallyport.attempts'], 2)
  t.same(g.flaky.seen.slice(-2).map((h) => parentOf(h.traceparent)), clients.map((c) => c.spanId), 'each attempt carried its own client span id')

  // B3 single: trace and parent taken; the b3 header toward the upstream is rewritten to our ids.
  const b3Trace = '22222222222222222222222222222222'
  const b3Span = 'aaaaaaaaaaaaaaaa'
  t.equal(await get(base, { host: 'api.example.test', b3: `${b3Trace}-${b3Span}-1` }), 200)
  const b3 = byTrace(await receiver.waitFor((s) => byTrace(s, b3Trace).length >= 2, 15000, 'b3 spans'), b3Trace)
  const b3Server = b3.find((s) => s.kind === SERVER) as ReceivedSpan
  const b3Client = b3.find((s) => s.kind === CLIENT) as ReceivedSpan
  t.equal(b3Server.parentSpanId, b3Span, 'B3 single: server span child of the B3 span')
  const b3Seen = g.ok.seen[g.ok.seen.length - 1]
  t.equal(b3Seen.b3, `${b3Trace}-${b3Client.spanId}-1-${b3Server.spanId}`, 'b3 rewritten consistently')
  t.equal(parentOf(b3Seen.traceparent), b3Client.spanId)

  // B3 multi with a 64-bit trace id (left-padded to 128 bits).
  const multiTrace64 = '3333333333333333'
  t.equal(await get(base, { host: 'api.example.test', 'x-b3-traceid': multiTrace64, 'x-b3-spanid': 'bbbbbbbbbbbbbbbb', 'x-b3-sampled': '1' }), 200)
  const multiTrace = '0000000000000000' + multiTrace64
  const multi = byTrace(await receiver.waitFor((s) => byTrace(s, multiTrace).length >= 2, 15000, 'b3 multi spans'), multiTrace)
  const multiClient = multi.find((s) => s.kind === CLIENT) as ReceivedSpan
  t.equal((multi.find((s) => s.kind === SERVER) as ReceivedSpan).parentSpanId, 'bbbbbbbbbbbbbbbb')
  const multiSeen = g.ok.seen[g.ok.seen.length - 1]
  t.same([multiSeen['x-b3-traceid'], multiSeen['x-b3-spanid'], multiSeen['x-b3-sampled']], [multiTrace, multiClient.spanId, '1'])

  // An invalid traceparent (uppercase hex) is ignored: a new root trace, and the upstream gets a valid one.
  const before = receiver.spans.length
  t.equal(await get(base, { host: 'api.example.test', traceparent: `00-${TRACE.toUpperCase()}-${PARENT}-01`, tracestate: 'a=b' }), 200)
  const fresh = await receiver.waitFor((s) => s.slice(before).some((x) => x.kind === SERVER), 15000, 'new root trace')
  const root = fresh.slice(before).find((s) => s.kind === SERVER) as ReceivedSpan
  t.equal(root.parentSpanId, '', 'a root span')
  t.not(root.traceId, TRACE.toLowerCase())
  const rootSeen = g.ok.seen[g.ok.seen.length - 1]
  t.match(String(rootSeen.traceparent), new RegExp(`^00-${root.traceId}-[0-9a-f]{16}-01$`))
  t.equal(rootSeen.tracestate, undefined, 'the tracestate of an invalid traceparent is not passed on')

  const metrics = (await request(`http://127.0.0.1:${g.adminPort}/metrics`)).body
  t.ok(metricSum(metrics, 'sallyport_tracing_spans_exported_total') >= 1, 'exported spans counted')
  t.equal(metricSum(metrics, 'sallyport_tracing_spans_dropped_total'), 0, 'nothing dropped')
})

t.test('--trace-sampling 0: new traces are not recorded (the upstream is told sampled=0); a sampled parent still is', async (t) => {
  const receiver = await startOtlpReceiver(t)
  const g = await gateway(t, ['--otlp-endpoint', receiver.url, '--otlp-protocol', 'http/protobuf', '--trace-sampling', '0'])
  for (let i = 0; i < 5; i++) t.equal(await get(`http://127.0.0.1:${g.port}/`, { host: 'api.example.test' }), 200)
  t.match(String(g.ok.seen[g.ok.seen.length - 1].traceparent), /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/, 'unsampled root propagated with flags 00')
  // Parent-based: a sampled parent is recorded whatever the ratio.
  t.equal(await get(`http://127.0.0.1:${g.port}/`, { host: 'api.example.test', traceparent: `00-${TRACE}-${PARENT}-01` }), 200)
  // An unsampled parent passes through untouched.
  const unsampled = `00-${'5'.repeat(32)}-${PARENT}-00`
  t.equal(await get(`http://127.0.0.1:${g.port}/`, { host: 'api.example.test', traceparent: unsampled }), 200)
  t.equal(g.ok.seen[g.ok.seen.length - 1].traceparent, unsampled)
  // An invalid traceparent starts a new (here unrecorded) trace: neither it nor its tracestate goes on.
  t.equal(await get(`http://127.0.0.1:${g.port}/`, { host: 'api.example.test', traceparent: `00-${TRACE.toUpperCase()}-${PARENT}-01`, tracestate: 'vendor=abc' }), 200)
  const fresh = g.ok.seen[g.ok.seen.length - 1]
  t.match(String(fresh.traceparent), /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/, 'a new unsampled traceparent')
  t.not(String(fresh.traceparent).split('-')[1], TRACE.toLowerCase())
  t.equal(fresh.tracestate, undefined, 'the tracestate of the invalid traceparent is not passed on')
  await receiver.waitFor((s) => byTrace(s, TRACE).length >= 2, 15000, 'the sampled parent\'s spans')
  await new Promise((r) => setTimeout(r, 300)) // a batch delay (50 ms) several times over
  t.same(receiver.spans.filter((s) => s.traceId !== TRACE).map((s) => s.traceId), [], 'no other spans recorded')
})

t.test('spans are dropped and counted, never blocking requests, when the collector is down or stuck', async (t) => {
  // Down: nothing listens on the port.
  const down = await freePort()
  const a = await gateway(t, ['--otlp-endpoint', `http://127.0.0.1:${down}/v1/traces`], { OTEL_BSP_MAX_QUEUE_SIZE: '8', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4' })
  for (let i = 0; i < 10; i++) t.equal(await get(`http://127.0.0.1:${a.port}/`, { host: 'api.example.test' }), 200)
  await eventually(() => request(`http://127.0.0.1:${a.adminPort}/metrics`), (r) => metricSum(r.body, 'sallyport_tracing_spans_dropped_total', { reason: 'export_failed' }) >= 10, 10_000, 'export_failed drops')

  // Stuck: accepts connections, never answers; two exports hang, the queue (8) fills, the rest is dropped.
  const sockets = new Set<net.Socket>()
  const stuck = net.createServer((s) => { sockets.add(s); s.on('error', () => {}) })
  await new Promise<void>((resolve) => stuck.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); stuck.close() })
  const stuckUrl = `http://127.0.0.1:${(stuck.address() as AddressInfo).port}/v1/traces`
  const b = await gateway(t, ['--otlp-endpoint', stuckUrl], { OTEL_BSP_MAX_QUEUE_SIZE: '8', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4', OTEL_EXPORTER_OTLP_TIMEOUT: '60000' })
  const started = Date.now()
  const statuses = await Promise.all(Array.from({ length: 30 }, () => get(`http://127.0.0.1:${b.port}/`, { host: 'api.example.test' })))
  t.ok(statuses.every((s) => s === 200), 'every request answered')
  t.ok(Date.now() - started < 10_000, 'requests were not held by the stuck collector')
  const metrics = await eventually(() => request(`http://127.0.0.1:${b.adminPort}/metrics`), (r) => metricSum(r.body, 'sallyport_tracing_spans_dropped_total', { reason: 'queue_full' }) > 0, 10_000, 'queue_full drops')
  const dropped = metricSum(metrics.body, 'sallyport_tracing_spans_dropped_total', { reason: 'queue_full' })
  // 30 requests = 60 spans (plus the readiness probes); at most 8 wait in the queue and 2 × 4 are in flight.
  t.ok(dropped >= 2 * 30 - 16, `dropped ${dropped} spans at a full queue`)
  // The collector neither fails nor answers (its timeout is a minute away): the full queue says so, once.
  await settleLogs()
  const warnings = b.cli.stdout().split('\n').filter((l) => l.includes('span export queue full'))
  t.equal(warnings.length, 1, 'one warning for the full queue')
  t.match(JSON.parse(warnings[0] ?? '{}'), { level: 40, component: 'tracing', maxQueue: 8 })
})
