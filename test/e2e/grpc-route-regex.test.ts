// GRPCRoute RegularExpression matches: the service pattern applies to the
// service and the method pattern to the method, each on its own. They were
// pasted into `/${service}/${method}` ungrouped, so an alternation split the
// whole path: method `Get|List` matched `/pkg.Svc/Get` and any path ending in
// `List`, service `pkg\.Alpha|pkg\.Beta` with method `Do` matched neither.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

/** An h2c gRPC-ish upstream answering every call with grpc-status 0 and its own name. */
async function grpcUpstream(t: Test, name: string): Promise<number> {
  const server = http2.createServer()
  server.on('stream', (stream) => {
    stream.on('error', () => {})
    stream.resume()
    stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'x-served-by': name }, { waitForTrailers: true })
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }))
    stream.end()
  })
  const port = await listenLoopback(server)
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return port
}

const backend = (name: string, port: number): string => `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
  appProtocols: [gateway.envoyproxy.io/h2c]
  endpoints: [{ ip: { address: 127.0.0.1, port: ${port} } }]
`

/** A unary call on a fresh session: who served it, or the grpc-status the gateway answered. */
function call(port: number, p: string): Promise<string> {
  return new Promise((resolve) => {
    const session = http2.connect(`http://127.0.0.1:${port}`)
    session.on('error', () => resolve('session error'))
    const s = session.request({ ':method': 'POST', ':path': p, ':authority': 'grpc.example.test', 'content-type': 'application/grpc', te: 'trailers' })
    let out = ''
    s.on('response', (h) => { out = typeof h['x-served-by'] === 'string' ? h['x-served-by'] : `grpc-status ${String(h['grpc-status'])}` })
    s.on('error', () => {})
    s.resume()
    s.on('close', () => { session.close(); resolve(out) })
    s.end()
  })
}

t.test('CLI: GRPCRoute regular expressions match the service and the method each on its own', async (t) => {
  const [a, b] = [await grpcUpstream(t, 'a'), await grpcUpstream(t, 'b')]
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), [backend('a', a), backend('b', b)].join('---\n'))
  fs.writeFileSync(path.join(dir, 'route.yaml'), `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: g, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [grpc.example.test]
  rules:
    - matches: [{ method: { type: RegularExpression, service: 'pkg\\.Svc', method: 'Get|List' } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: a, port: ${a} }]
    - matches: [{ method: { type: RegularExpression, service: 'pkg\\.Alpha|pkg\\.Beta', method: 'Do' } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: b, port: ${b} }]
`)
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  t.equal(await call(port, '/pkg.Svc/Get'), 'a', 'service pkg.Svc, method Get')
  t.equal(await call(port, '/pkg.Svc/List'), 'a', 'service pkg.Svc, method List (the alternation is the method\'s)')
  t.equal(await call(port, '/other.Svc/List'), 'grpc-status 12', 'another service with method List: UNIMPLEMENTED')
  t.equal(await call(port, '/pkg.Alpha/Do'), 'b', 'service pkg.Alpha, method Do')
  t.equal(await call(port, '/pkg.Beta/Do'), 'b', 'service pkg.Beta, method Do (the alternation is the service\'s)')
  t.equal(await call(port, '/pkg.Beta/Undo'), 'grpc-status 12', 'service pkg.Beta, another method: UNIMPLEMENTED')
})
