// `serve --http1-client sallyport|undici` through the real CLI: both HTTP/1.1
// upstream clients carry the same traffic the same way — kept-alive
// connections reused, request bodies streamed both framed ways, large and
// chunked responses, an upstream that fails mid-body, backendRequest timeouts —
// and a value that is neither is a usage error.

import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { createHash } from 'node:crypto'
import { listenLoopback } from '../helpers/ports.ts'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, runCli, startCli, tempDir } from './harness.ts'

const BIG = 4 * 1024 * 1024

function post(url: string, host: string, body: Buffer, chunked: boolean): Promise<{ status: number, body: string }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { host }
    if (!chunked) headers['content-length'] = String(body.length)
    const req = http.request(url, { method: 'POST', headers, agent: false }, (res) => {
      let text = ''
      res.setEncoding('utf8').on('data', (d: string) => { text += d }).on('end', () => resolve({ status: res.statusCode ?? 0, body: text }))
    })
    req.on('error', reject)
    // Two writes: a chunked request really arrives in chunks.
    req.write(body.subarray(0, body.length >> 1))
    req.end(body.subarray(body.length >> 1))
  })
}

function getRaw(url: string, host: string): Promise<{ status: number, bytes: number, sha: string, error: string | null }> {
  return new Promise((resolve) => {
    const hash = createHash('sha256')
    let bytes = 0
    let status = 0
    let settled = false
    const done = (error: string | null): void => {
      if (settled) return
      settled = true
      resolve({ status, bytes, sha: hash.digest('hex'), error })
    }
    http.get(url, { headers: { host }, agent: false }, (res) => {
      status = res.statusCode ?? 0
      res.on('data', (c: Buffer) => { bytes += c.length; hash.update(c) })
      res.on('end', () => done(null))
      res.on('error', (err) => done(err.message))
      res.on('aborted', () => done('aborted'))
    }).on('error', (err) => done(err.message))
  })
}

for (const client of ['sallyport', 'undici'] as const) {
  t.test(`--http1-client ${client}`, async (t) => {
    let connections = 0
    const big = Buffer.alloc(BIG, 0x5a)
    const upstream = http.createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x')
      if (req.method === 'POST') {
        const hash = createHash('sha256')
        let bytes = 0
        req.on('data', (c: Buffer) => { bytes += c.length; hash.update(c) })
        req.on('end', () => res.end(`${bytes} ${hash.digest('hex')} ${req.headers['transfer-encoding'] ?? 'length'}`))
        return
      }
      if (url.pathname === '/big') {
        // No Content-Length: chunked, in pieces.
        for (let at = 0; at < BIG; at += 256 * 1024) res.write(big.subarray(at, at + 256 * 1024))
        res.end()
        return
      }
      if (url.pathname === '/broken') {
        res.writeHead(200, { 'content-length': String(BIG) })
        res.write(big.subarray(0, 1024), () => setTimeout(() => res.socket?.destroy(), 50))
        return
      }
      if (url.pathname === '/hang') return
      res.end(`hello ${req.headers.host}`)
    })
    upstream.on('connection', () => { connections++ })
    const upPort = await listenLoopback(upstream)
    t.teardown(() => { upstream.closeAllConnections(); upstream.close() })

    const [port, adminPort] = [await freePort(), await freePort()]
    const dir = tempDir(t)
    fs.writeFileSync(path.join(dir, 'config.yaml'), [
      gatewayYaml(port), backendYaml('up', upPort),
      routeYaml('api', 'api.example.test', 'up', upPort, '', 'backendRequest: 500ms'),
    ].join('---\n'))
    startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--drain-seconds', '1', '--http1-client', client])
    await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 30000, 'ready')
    const base = `http://127.0.0.1:${port}`
    const host = 'api.example.test'

    const before = connections
    for (let i = 0; i < 5; i++) {
      const r = await request(`${base}/small`, { host })
      t.equal(r.status, 200)
      t.equal(r.body, `hello ${host}`, 'Host is the request authority')
    }
    t.equal(connections - before, 1, 'five requests in a row on one kept-alive upstream connection')

    const body = Buffer.alloc(1024 * 1024 + 7, 0x33)
    const sha = createHash('sha256').update(body).digest('hex')
    const sized = await post(`${base}/upload`, host, body, false)
    t.equal(sized.body, `${body.length} ${sha} length`, 'a request body with Content-Length arrives whole, with its length')
    const chunked = await post(`${base}/upload`, host, body, true)
    t.equal(chunked.body, `${body.length} ${sha} chunked`, 'a chunked request body arrives whole, chunked')

    const down = await getRaw(`${base}/big`, host)
    t.same([down.status, down.bytes, down.sha, down.error], [200, BIG, createHash('sha256').update(big).digest('hex'), null], 'a 4 MiB chunked response arrives whole')

    const broken = await getRaw(`${base}/broken`, host)
    t.equal(broken.status, 200)
    t.ok(broken.error !== null && broken.bytes < BIG, `an upstream that dies mid-body cuts the client's response (${broken.bytes} bytes, ${broken.error ?? ''})`)

    const slow = await request(`${base}/hang`, { host })
    t.equal(slow.status, 504, 'backendRequest timeout: 504')
    const after = await request(`${base}/small`, { host })
    t.equal(after.status, 200, 'the pool serves on after all that')
  })
}

t.test('--http1-client takes sallyport or undici', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), gatewayYaml(await freePort()))
  const r = await runCli(t, ['serve', '--config', dir, '--http1-client', 'curl'])
  t.equal(r.code, 2, 'usage error')
  t.match(r.stderr, /--http1-client must be sallyport or undici/)
})
