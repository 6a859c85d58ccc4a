// WebSocket from an HTTP/1.1 client to an HTTP/2-only upstream: the pool opens
// an RFC 8441 extended CONNECT; the client gets its 101 with the
// Sec-WebSocket-Accept of its own key (RFC 6455 §4.2.2), then bytes both ways.

import t from 'tap'
import http2 from 'node:http2'
import net from 'node:net'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { listen, startPlane } from './fixtures.ts'

configureLogger({ level: 'silent' })

t.test('HTTP/1.1 WebSocket upgrade → h2c upstream via extended CONNECT', async (t) => {
  const seen: Array<Record<string, unknown>> = []
  const up = http2.createServer({ settings: { enableConnectProtocol: true } })
  up.on('stream', (stream, headers) => {
    seen.push({ ...headers })
    if (headers[':method'] !== 'CONNECT' || headers[':protocol'] !== 'websocket') {
      stream.respond({ ':status': 400 })
      stream.end()
      return
    }
    stream.respond({ ':status': 200 })
    stream.pipe(stream)
  })
  const upPort = await listen(up)
  t.teardown(() => up.close())
  const port = await freePort()
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ backends: [{ cluster: 'ws' }] }] }] } }, [cluster('ws', upPort, { protocol: 'H2C' })]))

  const socket = net.connect(port, '127.0.0.1')
  t.teardown(() => socket.destroy())
  socket.write('GET /chat HTTP/1.1\r\nhost: example.com\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n')
  let got = ''
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer: ${got}`)), 10_000)
    socket.on('data', (c: Buffer) => {
      got += c.toString('latin1')
      if (got.includes('\r\n\r\n') && !got.includes('ping')) socket.write('ping')
      if (got.endsWith('ping') || !got.startsWith('HTTP/1.1 101')) { clearTimeout(timer); resolve() }
    })
    socket.on('error', reject)
  })
  t.match(got, /^HTTP\/1\.1 101 /)
  t.match(got.toLowerCase(), /\r\nsec-websocket-accept: s3pplmbitxaq9kygzzhzrbk\+xoo=\r\n/, 'accept of the client key (RFC 6455 example)')
  t.match(got.toLowerCase(), /\r\nupgrade: websocket\r\n/)
  t.ok(got.endsWith('ping'), 'echoed through the tunnel')
  t.equal(seen[0]?.[':method'], 'CONNECT')
  t.equal(seen[0]?.[':protocol'], 'websocket')
  t.equal(seen[0]?.[':path'], '/chat')
})
