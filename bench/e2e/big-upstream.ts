// A Node upstream for the 1 GiB body test, run as its own process:
//   node bench/e2e/big-upstream.ts <port>
// GET  /big/download?bytes=N  streams N bytes (one reused 64 KiB chunk, with backpressure)
// POST /big/upload            reads the body to the end, answers {"bytes": N}
// GET  /1m                    1 MiB; POST /upload: read to the end, 200
// GET  anything else          a small 200 (/small, /healthz)
// The /1m, /upload and /small answers make it the origin fallback when nginx is missing.
// It keeps nothing: its own RSS stays flat however many bytes pass.

import http from 'node:http'

const CHUNK = Buffer.alloc(64 * 1024, 0x62)
const ONE_MIB = Buffer.alloc(1024 * 1024, 0x61)
const SMALL = Buffer.from('hello from the bench origin\n')
const port = Number(process.argv[2] ?? '0')

function download(res: http.ServerResponse, total: number): void {
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(total) })
  let left = total
  const pump = (): void => {
    while (left > 0) {
      const n = Math.min(left, CHUNK.length)
      left -= n
      const more = res.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))
      if (!more) { res.once('drain', pump); return }
    }
    res.end()
  }
  pump()
}

const server = http.createServer((req, res) => {
  const url = req.url ?? '/'
  if (req.method === 'POST' && (url.startsWith('/big/upload') || url === '/upload')) {
    let bytes = 0
    req.on('data', (c: Buffer) => { bytes += c.length })
    req.on('end', () => {
      const body = JSON.stringify({ bytes })
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) })
      res.end(body)
    })
    return
  }
  if (url.startsWith('/big/download')) {
    const m = /bytes=(\d+)/.exec(url)
    download(res, m === null ? 0 : Number(m[1]))
    return
  }
  const body = url === '/1m' ? ONE_MIB : SMALL
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(body.length) })
  res.end(body)
})
server.keepAliveTimeout = 120_000
server.requestTimeout = 0
server.listen(port, '127.0.0.1')
process.on('SIGTERM', () => { server.close(); server.closeAllConnections(); process.exit(0) })
