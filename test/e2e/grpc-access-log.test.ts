// A gRPC call's outcome is its grpc-status, not its HTTP status (200 for
// failures too): the access line carries it as `grpcStatus`, from the
// upstream's trailers, a trailers-only answer's head, or the gateway's own
// answer; null for anything that is not gRPC.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'
import { listenLoopback } from '../helpers/ports.ts'
import { grpcCall as call } from './grpc-fixtures.ts'

/** /trailers.Svc/* ends with trailers grpc-status 5, /only.Svc/* is trailers-only grpc-status 3, /bogus.Svc/* sends grpc-status "x". */
async function grpcUpstream(t: Test): Promise<number> {
  const server = http2.createServer()
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {})
    stream.resume()
    const p = String(headers[':path'])
    if (p.startsWith('/only.')) return stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '3', 'grpc-message': 'bad argument' }, { endStream: true })
    const code = p.startsWith('/trailers.') ? '5' : 'x'
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true })
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': code }))
    stream.end(Buffer.from([0, 0, 0, 0, 0]))
  })
  const port = await listenLoopback(server)
  t.teardown(() => { server.close() })
  return port
}

t.test('CLI: the access line says each gRPC call\'s grpc-status', async (t) => {
  const up = await grpcUpstream(t)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port, '', { 'sallyport.io/allow-destination-cidrs': '127.0.0.0/8' }) + `---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: up, namespace: default }
spec:
  appProtocols: [gateway.envoyproxy.io/h2c]
  endpoints: [{ ip: { address: 127.0.0.1, port: ${up} } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: grpc, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [grpc.example.test]
  rules:
    - matches: [{ method: { service: trailers.Svc } }, { method: { service: only.Svc } }, { method: { service: bogus.Svc } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: up, port: ${up} }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: web, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [web.example.test]
  rules: [{ backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: up, port: ${up} }] }]
`)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'on'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => { session.close() })
  const line = async (p: string): Promise<Record<string, unknown>> =>
    JSON.parse(await cli.waitFor(new RegExp(`\\{[^\\n]*"path":"${p.replace(/\./g, '\\.')}"[^\\n]*"msg":"request"\\}`), 10_000)) as Record<string, unknown>

  await call(session, '/trailers.Svc/Get')
  t.match(await line('/trailers.Svc/Get'), { status: 200, grpcStatus: 5, code: null }, 'from the upstream\'s trailers')
  await call(session, '/only.Svc/Get')
  t.match(await line('/only.Svc/Get'), { status: 200, grpcStatus: 3 }, 'from a trailers-only answer')
  await call(session, '/nothing.Svc/Get')
  t.match(await line('/nothing.Svc/Get'), { grpcStatus: 12, code: 'SP_ERR_NO_ROUTE' }, 'the gateway\'s own answer: UNIMPLEMENTED')
  await call(session, '/bogus.Svc/Get')
  t.match(await line('/bogus.Svc/Get'), { status: 200, grpcStatus: null }, 'a grpc-status that is no number is not made one')
  t.equal((await request(`http://127.0.0.1:${port}/plain`, { host: 'web.example.test' })).status, 200)
  t.match(await line('/plain'), { status: 200, grpcStatus: null }, 'not gRPC: null')
})
