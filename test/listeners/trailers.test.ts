// Response trailers to HTTP/1.1 clients: relayed in a chunked body when the
// client sent `TE: trailers` (RFC 9110 §6.5, §10.1.4), from HTTP/1.1 and h2c upstreams.

import t from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { listen, startPlane } from './fixtures.ts'

configureLogger({ level: 'silent' })

interface Answer { readonly body: string; readonly trailers: NodeJS.Dict<string>; readonly chunked: boolean }

function get(port: number, host: string, te: boolean): Promise<Answer> {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/t', agent: false, headers: { host, ...(te ? { te: 'trailers' } : {}) }, timeout: 10_000 }, (res) => {
      let body = ''
      res.on('data', (c: Buffer) => { body += c.toString() })
      res.on('end', () => resolve({ body, trailers: res.trailers, chunked: res.headers['transfer-encoding'] === 'chunked' }))
      res.on('error', reject)
    }).on('error', reject)
  })
}

t.test('trailers from HTTP/1.1 and h2c upstreams reach HTTP/1.1 clients that asked for them', async (t) => {
  const h1 = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', trailer: 'x-checksum' })
    res.write('hello ')
    res.addTrailers({ 'x-checksum': 'h1-sum' })
    res.end('world')
  })
  const h1Port = await listen(h1)
  t.teardown(() => { h1.closeAllConnections(); h1.close() })
  const h2 = http2.createServer()
  h2.on('stream', (stream) => {
    stream.respond({ ':status': 200, 'content-type': 'text/plain', 'content-length': '11' }, { waitForTrailers: true })
    stream.on('wantTrailers', () => stream.sendTrailers({ 'x-checksum': 'h2-sum' }))
    stream.end('hello world')
  })
  const h2Port = await listen(h2)
  t.teardown(() => h2.close())

  const port = await freePort()
  await startPlane(t, buildTable({
    [port]: {
      routes: [
        { name: 'one', hostnames: ['h1.example'], rules: [{ backends: [{ cluster: 'h1' }] }] },
        { name: 'two', hostnames: ['h2.example'], rules: [{ backends: [{ cluster: 'h2' }] }] },
      ],
    },
  }, [cluster('h1', h1Port), cluster('h2', h2Port, { protocol: 'H2C' })]))

  for (const [host, sum] of [['h1.example', 'h1-sum'], ['h2.example', 'h2-sum']] as const) {
    const asked = await get(port, host, true)
    t.equal(asked.body, 'hello world', `${host}: body`)
    t.ok(asked.chunked, `${host}: chunked so trailers can follow`)
    t.equal(asked.trailers['x-checksum'], sum, `${host}: trailer relayed`)
    const plain = await get(port, host, false)
    t.equal(plain.body, 'hello world')
    t.equal(plain.trailers['x-checksum'], undefined, `${host}: no TE, no trailers`)
  }
})
