// A tiny HTTP upstream for the quickstart (and the end-to-end tests): it answers
// every request with JSON describing what it received, so one can see what the
// gateway changed on the way (Host, added headers, rewritten path).
//
//   /status/NNN      answer with that status
//   ?delay=MS        wait before answering (at most 60 s), to watch draining
//   ?name=X          include `name` in the answer (tests tell two upstreams apart)

import http from 'node:http'
import type { AddressInfo } from 'node:net'

export interface DemoUpstream {
  readonly address: AddressInfo
  /** Requests received so far. */
  readonly requests: () => number
  close(): Promise<void>
}

export async function startDemoUpstream(options: { host: string; port: number; name?: string }): Promise<DemoUpstream> {
  let count = 0
  const server = http.createServer((req, res) => {
    count++
    const url = new URL(req.url ?? '/', 'http://demo.invalid')
    let bytes = 0
    req.on('data', (chunk: Buffer) => { bytes += chunk.length })
    req.on('end', () => {
      const statusMatch = /^\/status\/(\d{3})$/.exec(url.pathname)
      const status = statusMatch === null ? 200 : Number(statusMatch[1])
      const delay = Math.min(Number(url.searchParams.get('delay') ?? 0) || 0, 60_000)
      const body = JSON.stringify({
        upstream: options.name ?? 'demo',
        method: req.method,
        path: req.url,
        headers: req.headers,
        bodyBytes: bytes,
      }, null, 2) + '\n'
      const answer = (): void => {
        if (res.destroyed) return
        res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
        res.end(body)
      }
      if (delay > 0) setTimeout(answer, delay)
      else answer()
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port, options.host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  return {
    address: server.address() as AddressInfo,
    requests: () => count,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve())
      server.closeAllConnections()
    }),
  }
}
