// An upstream's trailers are relayed without the fields trailers may not carry
// (RFC 9110 §6.5.1: framing, routing, content metadata), on both HTTP/1.1
// upstream clients, to HTTP/1.1 and HTTP/2 clients that asked for trailers. A
// trailer Content-Length reached the client, which may take it for the framing.
import t from 'tap'
import fs from 'node:fs'
import http2 from 'node:http2'
import net from 'node:net'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, rawExchange, routeYaml, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'
import { listenLoopback } from '../helpers/ports.ts'

const ANSWER = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nContent-Length: 99\r\nHost: evil.test\r\nX-Checksum: abc\r\n\r\n'

t.test('CLI: trailers lose the fields they may not carry', async (t) => {
  const server = net.createServer((socket) => {
    let buffered = ''
    socket.on('error', () => {})
    socket.setEncoding('latin1')
    socket.on('data', (c: string) => {
      buffered += c
      while (buffered.includes('\r\n\r\n')) {
        buffered = buffered.slice(buffered.indexOf('\r\n\r\n') + 4)
        socket.write(ANSWER, 'latin1')
      }
    })
  })
  const upPort = await listenLoopback(server)
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  for (const client of ['sallyport', 'undici']) {
    const [port, adminPort] = [await freePort(), await freePort()]
    const dir = tempDir(t)
    fs.writeFileSync(path.join(dir, 'config.yaml'), [gatewayYaml(port), backendYaml('api', upPort), routeYaml('api', 'api.example.test', 'api', upPort)].join('---\n'))
    const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--http1-client', client])
    await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

    const h1 = await rawExchange(port, 'GET / HTTP/1.1\r\nHost: api.example.test\r\nTE: trailers\r\nConnection: close\r\n\r\n', { until: /\r\n0\r\n[^]*\r\n\r\n$/ })
    const trailer = h1.slice(h1.indexOf('\r\n0\r\n') + 5)
    // undici's client hands over no trailers from a head like this one; sallyport's own relays them.
    if (client === 'sallyport') t.match(trailer, /x-checksum: abc\r\n/i, `${client}: HTTP/1.1 client: the trailer relayed`)
    t.notMatch(trailer, /content-length|host:/i, `${client}: without Content-Length or Host`)

    const session = http2.connect(`http://127.0.0.1:${port}`)
    session.on('error', () => {})
    const trailers = await new Promise<http2.IncomingHttpHeaders>((resolve) => {
      const s = session.request({ ':path': '/', ':authority': 'api.example.test', te: 'trailers' })
      let got: http2.IncomingHttpHeaders = {}
      s.on('trailers', (h) => { got = h })
      s.on('error', () => {})
      s.resume()
      s.on('close', () => resolve(got))
    })
    session.close()
    if (client === 'sallyport') t.equal(trailers['x-checksum'], 'abc', `${client}: HTTP/2 client: the trailer relayed`)
    t.same([trailers['content-length'], trailers.host], [undefined, undefined], `${client}: without Content-Length or Host`)
    cli.child.kill('SIGKILL')
    await cli.exited
  }
})
