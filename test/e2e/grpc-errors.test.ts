// What a gRPC client gets when the gateway answers for the upstream: a
// trailers-only gRPC answer (HTTP 200, grpc-status and grpc-message), as Envoy
// gives for its local replies, whatever answered — the router (no route, a
// refused connect, a reset, a timeout, a destination policy) or an extension
// (RateLimit, Authorization). An extension's refusal reached the client as a
// bare 429 / 403 with a text body, which gRPC clients read as a broken
// response, and a destination policy's 403 was UNAVAILABLE (which clients
// retry) rather than PERMISSION_DENIED.
import t, { type Test } from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'
import { closedPort, listenLoopback } from '../helpers/ports.ts'
import { grpcCall as call } from './grpc-fixtures.ts'

/** An h2c upstream: /reset.Svc/* resets the stream, /slow.Svc/* never answers, the rest answer grpc-status 0. */
async function grpcUpstream(t: Test): Promise<number> {
  const server = http2.createServer()
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {})
    stream.resume()
    const p = String(headers[':path'])
    if (p.startsWith('/reset.')) return stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR)
    if (p.startsWith('/slow.')) return
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true })
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }))
    stream.end()
  })
  const port = await listenLoopback(server)
  t.teardown(() => { server.close() })
  return port
}

const backend = (name: string, port: number, extra = ''): string => `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: default }
spec:
  appProtocols: [gateway.envoyproxy.io/h2c]
  endpoints: [{ ip: { address: 127.0.0.1, port: ${port} } }]
${extra}---
`

const route = (name: string, service: string, backendName: string, port: number): string => `apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: { name: ${name}, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [grpc.example.test]
  rules:
    - matches: [{ method: { service: ${service} } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ${backendName}, port: ${port} }]
---
`

t.test('CLI: the gateway\'s own answers reach gRPC clients as gRPC statuses', async (t) => {
  const up = await grpcUpstream(t)
  const refused = await closedPort()
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port, '', { 'sallyport.io/allow-destination-cidrs': '127.0.0.0/8', 'sallyport.io/destination-denylist': 'blocked.example.test' }))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), [
    backend('up', up),
    backend('refused', refused),
    backend('limited', up, `  extensions:
    - { name: rl, type: RateLimit, config: { requests: 1, unit: Minute, key: [route] } }
`),
    backend('denied', up, `  extensions:
    - { name: az, type: Authorization, config: { allow: [{ namespace: nobody }] } }
`),
    `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: blocked, namespace: default }
spec:
  appProtocols: [gateway.envoyproxy.io/h2c]
  endpoints: [{ fqdn: { hostname: blocked.example.test, port: 443 } }]
---
`,
  ].join(''))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), [
    route('up', 'ok.Svc', 'up', up),
    route('reset', 'reset.Svc', 'up', up),
    route('slow', 'slow.Svc', 'up', up),
    route('refused', 'refused.Svc', 'refused', refused),
    route('limited', 'limited.Svc', 'limited', up),
    route('denied', 'denied.Svc', 'denied', up),
    route('blocked', 'blocked.Svc', 'blocked', 443),
    `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: slow, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: GRPCRoute, name: slow }]
  timeout: { http: { requestTimeout: 300ms } }
`,
  ].join(''))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => { session.close() })

  t.match(await call(session, '/ok.Svc/Call'), { status: 200, grpcStatus: '0' }, 'routed: the upstream\'s OK')
  t.match(await call(session, '/none.Svc/Call'), { status: 200, grpcStatus: '12', message: 'no route' }, 'no route: UNIMPLEMENTED')
  t.match(await call(session, '/reset.Svc/Call'), { status: 200, grpcStatus: '14' }, 'upstream reset: UNAVAILABLE')
  t.match(await call(session, '/refused.Svc/Call'), { status: 200, grpcStatus: '14', message: /^upstream connect failed/ }, 'connect refused: UNAVAILABLE')
  t.match(await call(session, '/slow.Svc/Call'), { status: 200, grpcStatus: '4' }, 'request timeout: DEADLINE_EXCEEDED')
  t.match(await call(session, '/blocked.Svc/Call'), { status: 200, grpcStatus: '7' }, 'a destination the Gateway denies: PERMISSION_DENIED')

  t.match(await call(session, '/limited.Svc/Call'), { status: 200, grpcStatus: '0' }, 'the first call within the limit')
  const limited = await call(session, '/limited.Svc/Call')
  t.match(limited, { status: 200, grpcStatus: '14', message: 'rate limit exceeded' }, 'rate limited: UNAVAILABLE, trailers-only')
  t.equal(limited.headers['content-type'], 'application/grpc')
  t.ok(limited.headers['retry-after'] !== undefined, 'the limit\'s Retry-After is kept')
  t.match(await call(session, '/denied.Svc/Call'), { status: 200, grpcStatus: '7', message: 'client identity unknown' }, 'an Authorization refusal: PERMISSION_DENIED')
})
