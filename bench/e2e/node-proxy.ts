// The floor for a Node data path: a minimal reverse proxy (node:http server,
// one undici Pool, no routing, no logging, no metrics), run as its own process:
//   node bench/e2e/node-proxy.ts <listenPort> <upstreamPort>
// sallyport's CPU per request is compared with it to separate what Node itself
// costs from what sallyport adds on top.

import http from 'node:http'
import { Pool } from 'undici'

const listenPort = Number(process.argv[2])
const upstream = new Pool(`http://127.0.0.1:${Number(process.argv[3])}`, { connections: 128, pipelining: 1 })
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection', 'te', 'trailer'])

const server = http.createServer((req, res) => {
  const headers: Record<string, string | string[]> = {}
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !HOP.has(k)) headers[k] = v
  const hasBody = req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined
  upstream.request({ method: req.method as 'GET', path: req.url ?? '/', headers, body: hasBody ? req : null }).then((up) => {
    const out: Record<string, string | string[]> = {}
    for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !HOP.has(k)) out[k] = v
    res.writeHead(up.statusCode, out)
    up.body.pipe(res)
  }, () => {
    if (!res.headersSent) res.writeHead(502).end()
    else res.destroy()
  })
})
server.keepAliveTimeout = 120_000
server.listen(listenPort, '127.0.0.1')
process.on('SIGTERM', () => { server.close(); server.closeAllConnections(); void upstream.close(); process.exit(0) })
