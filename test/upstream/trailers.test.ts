// Response trailers (gRPC's grpc-status travels there) reach the request path,
// and headers an upstream names in Connection never leave the upstream layer.
import t from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { cluster, endpoint, expectResponse, forward, listen, readBody, request, table } from './fixtures.ts'

t.test('h2c upstream trailers are handed on after the body', async (t) => {
  const server = http2.createServer()
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true })
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', 'grpc-message': 'ok' }))
    stream.end(Buffer.from([0, 0, 0, 0, 0]))
  })
  const port = await listen(server)
  t.teardown(() => server.close())
  const up = createUpstreams()
  t.teardown(() => up.close())
  const c = cluster({ protocol: 'H2C', endpoints: [endpoint(port)] })
  up.retain(table([c]))
  const res = expectResponse(await forward(up, request(c, { method: 'POST', headers: { te: 'trailers' } })))
  t.equal(res.status, 200)
  t.type(res.trailers, 'function')
  await readBody(res.body)
  t.same(res.trailers?.(), { 'grpc-status': '0', 'grpc-message': 'ok' })
})

t.test('HTTP/1.1 chunked trailers are handed on after the body', async (t) => {
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', trailer: 'x-checksum' })
    res.write('hello')
    res.addTrailers({ 'x-checksum': 'abc123' })
    res.end()
  })
  const port = await listen(server)
  t.teardown(() => server.close())
  const up = createUpstreams()
  t.teardown(() => up.close())
  const c = cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)] })
  up.retain(table([c]))
  const res = expectResponse(await forward(up, request(c)))
  t.equal(await readBody(res.body), 'hello')
  t.same(res.trailers?.(), { 'x-checksum': 'abc123' })
  t.equal(res.headers.trailer, undefined, 'Trailer is hop-by-hop')
})

t.test('headers named in the upstream response Connection header are removed', async (t) => {
  const server = http.createServer((req, res) => {
    res.writeHead(200, { connection: 'x-internal-hop, keep-alive', 'x-internal-hop': 'secret-route', 'x-end-to-end': 'kept' })
    res.end('ok')
  })
  const port = await listen(server)
  t.teardown(() => server.close())
  const up = createUpstreams()
  t.teardown(() => up.close())
  const c = cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)] })
  up.retain(table([c]))
  const res = expectResponse(await forward(up, request(c)))
  await readBody(res.body)
  t.equal(res.headers['x-internal-hop'], undefined)
  t.equal(res.headers['x-end-to-end'], 'kept')
})
