// BackendTrafficPolicy retryOn triggers for gRPC (Envoy Gateway's
// `unavailable`, `resource-exhausted`, `cancelled`, `deadline-exceeded`,
// `internal`) retry a call whose upstream answered trailers-only (HTTP 200,
// grpc-status in the only head) with that status, as Envoy's retry_on does.
// They passed validation and did nothing: the UNAVAILABLE went to the client.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, metricSum, request, startCli, tempDir } from './harness.ts'
import { listenLoopback } from '../helpers/ports.ts'
import { grpcCall } from './grpc-fixtures.ts'

/** The first call of each method is answered trailers-only with grpc-status `x-fail`; later ones OK. */
async function flakyUpstream(t: Test): Promise<{ port: number; calls: Map<string, number> }> {
  const calls = new Map<string, number>()
  const server = http2.createServer()
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {})
    stream.resume()
    const p = String(headers[':path'])
    const n = (calls.get(p) ?? 0) + 1
    calls.set(p, n)
    const fail = String(headers['x-fail'] ?? '')
    if (n === 1 && fail !== '') return stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': fail, 'grpc-message': 'try again' }, { endStream: true })
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true })
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }))
    stream.end()
  })
  const port = await listenLoopback(server)
  t.teardown(() => { server.close() })
  return { port, calls }
}

async function call(session: http2.ClientHttp2Session, p: string, fail: string): Promise<string> {
  return (await grpcCall(session, p, { 'x-fail': fail })).grpcStatus
}

t.test('CLI: gRPC retryOn triggers retry trailers-only answers with those statuses', async (t) => {
  const up = await flakyUpstream(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: up, namespace: default }
spec:
  appProtocols: [gateway.envoyproxy.io/h2c]
  endpoints: [{ ip: { address: 127.0.0.1, port: ${up.port} } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: g, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [grpc.example.test]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: up, port: ${up.port} }]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: retry, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: GRPCRoute, name: g }]
  retry:
    numRetries: 2
    perRetry: { backOff: { baseInterval: 10ms, maxInterval: 20ms } }
    retryOn: { triggers: [unavailable, resource-exhausted] }
`)
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => { session.close() })

  t.equal(await call(session, '/pkg.Svc/Unavailable', '14'), '0', 'UNAVAILABLE (14) retried: the second try\'s OK')
  t.equal(up.calls.get('/pkg.Svc/Unavailable'), 2)
  t.equal(await call(session, '/pkg.Svc/Exhausted', '8'), '0', 'RESOURCE_EXHAUSTED (8) retried')
  t.equal(up.calls.get('/pkg.Svc/Exhausted'), 2)
  t.equal(await call(session, '/pkg.Svc/NotFound', '5'), '5', 'NOT_FOUND (5) is not a trigger: passed on')
  t.equal(up.calls.get('/pkg.Svc/NotFound'), 1)
  const metrics = await request(`http://127.0.0.1:${adminPort}/metrics`)
  t.equal(metricSum(metrics.body, 'sallyport_upstream_retries_total', { reason: 'grpc_status' }), 2, 'counted as grpc_status retries')
})
