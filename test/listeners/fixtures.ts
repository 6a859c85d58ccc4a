// Shared scaffolding for the data-plane tests: upstream servers, clients that
// return status/headers/body, a data plane with the real upstream registry.
// Loopback only; every wait is bounded.

import http from 'node:http'
import http2 from 'node:http2'
import https from 'node:https'
import type { Test } from 'tap'
import type { RouteTable } from '../../lib/compile/table.ts'
import { createDataPlane, type DataPlane, type DataPlaneOptions } from '../../lib/listeners/data-plane.ts'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import type { Upstreams } from '../../lib/upstream/types.ts'
import { listenLoopback as listen } from '../helpers/ports.ts'

export interface Reply {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly body: string
}

/** An HTTP/1.1 upstream echoing method, url, headers and body length as JSON (plus `x-upstream: name`). */
export async function echoH1(t: Test, name = 'h1', handler?: http.RequestListener): Promise<{ port: number; server: http.Server; seen: http.IncomingMessage[] }> {
  const seen: http.IncomingMessage[] = []
  const server = http.createServer(handler ?? ((req, res) => {
    seen.push(req)
    let bytes = 0
    req.on('data', (c: Buffer) => { bytes += c.length })
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'x-upstream': name, connection: 'x-hop', 'x-hop': 'drop-me' })
      res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, bytes, httpVersion: req.httpVersion }))
    })
  }))
  const port = await listen(server)
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { port, server, seen }
}

/** An h2c upstream (prior knowledge) with the same echo. */
export async function echoH2c(t: Test, name = 'h2'): Promise<{ port: number }> {
  const server = http2.createServer()
  server.on('stream', (stream, headers) => {
    let bytes = 0
    stream.on('data', (c: Buffer) => { bytes += c.length })
    stream.on('end', () => {
      const plain: Record<string, unknown> = {}
      for (const k of Object.keys(headers)) if (!k.startsWith(':')) plain[k] = headers[k]
      stream.respond({ ':status': 200, 'content-type': 'application/json', 'x-upstream': name })
      stream.end(JSON.stringify({ method: headers[':method'], url: headers[':path'], authority: headers[':authority'], headers: plain, bytes, httpVersion: '2.0' }))
    })
    stream.on('error', () => {})
  })
  const port = await listen(server)
  t.teardown(() => server.close())
  return { port }
}

export { listen }

export async function startPlane(t: Test, table: RouteTable, over: Partial<DataPlaneOptions> = {}): Promise<{ plane: DataPlane; upstreams: Upstreams }> {
  const upstreams = over.upstreams ?? createUpstreams()
  const plane = createDataPlane({ bind: '127.0.0.1', upstreams, accessLog: false, ...over })
  const result = await plane.apply(table)
  if (result.failed.length > 0) throw result.failed[0].error
  t.teardown(async () => {
    try {
      await plane.drain(200)
      await upstreams.close()
    } catch (err) {
      console.error('teardown', err)
      throw err
    }
  })
  return { plane, upstreams }
}

export interface RequestOptions {
  readonly method?: string
  readonly path?: string
  readonly host?: string
  readonly headers?: Record<string, string>
  readonly body?: string | Buffer
  readonly agent?: http.Agent | false
}

export function h1(port: number, o: RequestOptions = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1', port, method: o.method ?? 'GET', path: o.path ?? '/', agent: o.agent ?? false,
      headers: { host: o.host ?? 'example.com', ...o.headers }, timeout: 10_000,
    }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.on('timeout', () => req.destroy(new Error('client timeout')))
    req.end(o.body)
  })
}

export function h1s(port: number, ca: string, servername: string, o: RequestOptions = {}, extra: https.RequestOptions = {}): Promise<Reply & { cn: string }> {
  return new Promise((resolve, reject) => {
    const options: https.RequestOptions & { ALPNProtocols?: string[] } = {
      host: '127.0.0.1', port, method: o.method ?? 'GET', path: o.path ?? '/', agent: false, ca, servername,
      headers: { host: o.host ?? servername, ...o.headers }, timeout: 10_000, ALPNProtocols: ['http/1.1'], ...extra,
    }
    const req = https.request(options, (res) => {
      const chunks: Buffer[] = []
      const cert = (res.socket as import('node:tls').TLSSocket).getPeerCertificate()
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), cn: String(cert.subject?.CN ?? '') }))
    })
    req.on('error', reject)
    req.on('timeout', () => req.destroy(new Error('client timeout')))
    req.end(o.body)
  })
}

/** One HTTP/2 request on a fresh session (h2c prior knowledge, or TLS h2 when `tls` is given). */
export async function h2(port: number, o: RequestOptions = {}, tls?: { ca: string; servername: string }): Promise<Reply> {
  const session = tls === undefined
    ? http2.connect(`http://127.0.0.1:${port}`)
    : http2.connect(`https://127.0.0.1:${port}`, { ca: tls.ca, servername: tls.servername })
  session.on('error', () => {})
  try {
    return await h2On(session, o)
  } finally {
    session.close()
  }
}

export function h2On(session: http2.ClientHttp2Session, o: RequestOptions = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ':method': o.method ?? 'GET', ':path': o.path ?? '/', ':authority': o.host ?? 'example.com', ...o.headers,
    }, { endStream: o.body === undefined })
    let status = 0
    let headers: Record<string, string | string[] | undefined> = {}
    const chunks: Buffer[] = []
    const timer = setTimeout(() => { stream.close(); reject(new Error('client timeout')) }, 10_000)
    stream.on('response', (h) => { status = Number(h[':status']); headers = h })
    stream.on('data', (c: Buffer) => chunks.push(c))
    stream.on('end', () => { clearTimeout(timer); resolve({ status, headers, body: Buffer.concat(chunks).toString('utf8') }) })
    stream.on('error', (err) => { clearTimeout(timer); reject(err) })
    if (o.body !== undefined) stream.end(o.body)
  })
}
