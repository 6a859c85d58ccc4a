// Clients and upstreams for the tunnel end-to-end tests: a WebSocket upgrade
// over HTTP/1.1 (a raw socket that allows half-open) and an RFC 8441
// extended CONNECT over HTTP/2 (prior-knowledge h2c), both seen as one
// TunnelClient; every wait bounded in time.
import { createHash } from 'node:crypto'
import http2 from 'node:http2'
import net from 'node:net'
import fs from 'node:fs'
import path from 'node:path'
import type { Test } from 'tap'
import { backendYaml, eventually, freePort, gatewayYaml, request, routeYaml, startCli, tempDir, type Cli } from './harness.ts'

/** RFC 6455 §4.2.2: the Sec-WebSocket-Accept value for a key. */
export function websocketAccept(key: string): string {
  return createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')
}

export const CLIENT_KEY = 'dGhlIHNhbXBsZSBub25jZQ=='

/** One client end of a tunnel, as the client sees it. */
export interface TunnelClient {
  /** The response status (101 for HTTP/1.1, 200 for HTTP/2 on success). */
  readonly status: number
  /** The response head: raw text (HTTP/1.1) or the header object as JSON (HTTP/2). */
  readonly head: string
  /** Tunnel bytes received so far. */
  readonly got: string
  /** The peer's orderly end arrived (FIN, END_STREAM). */
  readonly ended: boolean
  /** The tunnel was reset under the client (TCP RST, RST_STREAM). */
  readonly reset: boolean
  readonly closed: boolean
  write(text: string): void
  /** Half-close: FIN, or END_STREAM. */
  end(): void
  /** A reset: TCP RST, or RST_STREAM CANCEL without END_STREAM before it. */
  abort(): void
  /** HTTP/2: node's close(), an END_STREAM and a RST_STREAM CANCEL right behind it; HTTP/1.1: the FIN, then a reset. */
  endAndAbort(): void
}

/** Polls `check` until it holds; rejects after `ms` naming `what`. */
export async function until(check: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** A WebSocket upgrade on a fresh HTTP/1.1 connection; resolves once the response head is in. */
export function h1Tunnel(t: Test, port: number, host: string, path: string, headers = ''): Promise<TunnelClient> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true })
    t.teardown(() => { socket.destroy() })
    let text = ''
    let headDone = false
    const client = {
      status: 0, head: '', got: '', ended: false, reset: false, closed: false,
      write: (s: string): void => { socket.write(s) },
      end: (): void => { socket.end() },
      abort: (): void => { socket.resetAndDestroy() },
      // libuv cannot reset a socket while its FIN is on the way: once it is out.
      endAndAbort: (): void => { socket.end(() => { socket.resetAndDestroy() }) },
    }
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`no response head for ${path}: ${JSON.stringify(text)}`)) }, 5000)
    socket.on('data', (chunk: Buffer) => {
      if (headDone) { client.got += chunk.toString('latin1'); return }
      text += chunk.toString('latin1')
      const end = text.indexOf('\r\n\r\n')
      if (end === -1) return
      headDone = true
      clearTimeout(timer)
      client.head = text.slice(0, end + 4)
      client.status = Number(text.slice(9, 12))
      client.got = text.slice(end + 4)
      resolve(client)
    })
    socket.on('end', () => { client.ended = true })
    socket.on('error', (err: NodeJS.ErrnoException) => { if (err.code === 'ECONNRESET') client.reset = true })
    socket.on('close', () => {
      client.closed = true
      if (!headDone) { clearTimeout(timer); reject(new Error(`closed before a response head for ${path}: ${JSON.stringify(text)}`)) }
    })
    socket.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${CLIENT_KEY}\r\n${headers}\r\n`)
  })
}

/** A prior-knowledge h2c session to the gateway that has announced RFC 8441 support. */
export async function h2Session(t: Test, port: number): Promise<http2.ClientHttp2Session> {
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => { session.destroy() })
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no SETTINGS from the gateway')), 5000)
    session.once('remoteSettings', (s) => {
      clearTimeout(timer)
      if (s.enableConnectProtocol === true) resolve()
      else reject(new Error('gateway did not announce SETTINGS_ENABLE_CONNECT_PROTOCOL'))
    })
  })
  return session
}

/** An extended CONNECT (:protocol websocket) on `session`; resolves once the response head is in. */
export function h2Tunnel(session: http2.ClientHttp2Session, host: string, path: string, headers: Record<string, string> = {}): Promise<TunnelClient> {
  return new Promise((resolve, reject) => {
    const aborter = new AbortController()
    const stream = session.request({
      ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'http', ':path': path, ':authority': host, 'sec-websocket-version': '13', ...headers,
    }, { endStream: false, signal: aborter.signal })
    const client = {
      status: 0, head: '', got: '', ended: false, reset: false, closed: false,
      write: (s: string): void => { stream.write(s) },
      end: (): void => { stream.end() },
      // The abort signal resets with CANCEL and no END_STREAM first (close() would end the stream first).
      abort: (): void => { aborter.abort() },
      endAndAbort: (): void => { stream.close(http2.constants.NGHTTP2_CANCEL) },
    }
    const timer = setTimeout(() => { stream.destroy(); reject(new Error(`no response head for ${path}`)) }, 5000)
    stream.on('error', () => {})
    stream.on('response', (h) => {
      clearTimeout(timer)
      client.status = Number(h[':status'])
      client.head = JSON.stringify(h)
      resolve(client)
    })
    stream.on('data', (chunk: Buffer) => { client.got += chunk.toString('latin1') })
    stream.on('end', () => { if (!stream.aborted) client.ended = true })
    stream.on('close', () => {
      client.closed = true
      if (stream.rstCode !== undefined && stream.rstCode !== http2.constants.NGHTTP2_NO_ERROR) { client.reset = true; client.ended = false }
      if (client.status === 0) { clearTimeout(timer); reject(new Error(`stream closed before a response head for ${path} (RST_STREAM ${stream.rstCode})`)) }
    })
  })
}

/** One upstream end of a tunnel, as the upstream sees it. */
export interface UpstreamEnd {
  write(text: string): void
  end(): void
  /** A reset: TCP RST, or RST_STREAM CANCEL without END_STREAM before it. */
  abort(): void
  /** Appends what happens: the bytes, `<FIN>` for an orderly end, `<RST>` for a reset. */
  onEvent(fn: (event: string) => void): void
}

export type TunnelHandler = (path: string, end: UpstreamEnd, headers: Record<string, string | string[] | undefined>) => void

/**
 * An HTTP/1.1 upstream that switches every upgrade to a WebSocket (its 101
 * carries the right Sec-WebSocket-Accept unless `handler` answers otherwise) and
 * hands the tunnel to `handler`. `respond` may replace the 101 head.
 */
export async function h1Upstream(t: Test, handler: TunnelHandler, respond: (path: string, key: string) => string | null = () => null): Promise<number> {
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    socket.on('error', () => {})
    let text = ''
    const onData = (chunk: Buffer): void => {
      text += chunk.toString('latin1')
      const endOfHead = text.indexOf('\r\n\r\n')
      if (endOfHead === -1) return
      socket.removeListener('data', onData)
      const lines = text.slice(0, endOfHead).split('\r\n')
      const path = lines[0].split(' ')[1] ?? ''
      const headers: Record<string, string> = {}
      for (const line of lines.slice(1)) {
        const colon = line.indexOf(':')
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
      }
      const key = headers['sec-websocket-key'] ?? ''
      const head = respond(path, key) ?? `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${websocketAccept(key)}\r\n\r\n`
      socket.write(head)
      if (!head.startsWith('HTTP/1.1 101')) { socket.end(); return }
      const rest = text.slice(endOfHead + 4)
      const listeners: Array<(e: string) => void> = []
      const emit = (e: string): void => { for (const fn of listeners) fn(e) }
      socket.on('data', (c: Buffer) => emit(c.toString('latin1')))
      socket.on('end', () => emit('<FIN>'))
      socket.on('error', (err: NodeJS.ErrnoException) => { if (err.code === 'ECONNRESET' || err.code === 'EPIPE') emit('<RST>') })
      handler(path, {
        write: (s) => { socket.write(s) },
        end: () => { socket.end() },
        abort: () => { socket.resetAndDestroy() },
        onEvent: (fn) => { listeners.push(fn); if (rest !== '') fn(rest) },
      }, headers)
    }
    socket.on('data', onData)
  })
  const sockets = new Set<net.Socket>()
  server.on('connection', (s) => { sockets.add(s); s.once('close', () => sockets.delete(s)) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close() })
  return (server.address() as net.AddressInfo).port
}

/** An h2c upstream that takes RFC 8441 extended CONNECTs (200, with `fields`) and hands each tunnel to `handler`. */
export async function h2Upstream(t: Test, handler: TunnelHandler, fields: Record<string, string> = {}): Promise<number> {
  const server = http2.createServer({ settings: { enableConnectProtocol: true } })
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {})
    if (headers[':method'] !== 'CONNECT') { stream.respond({ ':status': 404 }, { endStream: true }); return }
    stream.respond({ ':status': 200, ...fields })
    const listeners: Array<(e: string) => void> = []
    const emit = (e: string): void => { for (const fn of listeners) fn(e) }
    stream.on('data', (c: Buffer) => emit(c.toString('latin1')))
    stream.on('end', () => { if (!stream.aborted) emit('<FIN>') })
    stream.on('close', () => { if (stream.rstCode !== undefined && stream.rstCode !== http2.constants.NGHTTP2_NO_ERROR) emit('<RST>') })
    handler(String(headers[':path']), {
      write: (s) => { stream.write(s) },
      end: () => { stream.end() },
      // close() would send END_STREAM first: with _final a no-op only the RST_STREAM goes out.
      abort: () => { stream._final = (cb: (err?: Error | null) => void): void => { cb() }; stream.close(http2.constants.NGHTTP2_CANCEL) },
      onEvent: (fn) => { listeners.push(fn) },
    }, headers)
  })
  const sessions = new Set<http2.ServerHttp2Session>()
  server.on('session', (s) => { sessions.add(s); s.once('close', () => sessions.delete(s)) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sessions) s.destroy(); server.close() })
  return (server.address() as net.AddressInfo).port
}

/** A Backend whose endpoints speak h2c (Envoy Gateway appProtocols). */
export function h2cBackendYaml(name: string, port: number): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
spec:
  appProtocols:
    - gateway.envoyproxy.io/h2c
  endpoints:
    - ip:
        address: 127.0.0.1
        port: ${port}
`
}

export interface TunnelGateway {
  readonly port: number
  readonly adminPort: number
  readonly cli: Cli
  /** An HTTP/2 session to the gateway (RFC 8441 announced). */
  readonly session: http2.ClientHttp2Session
}

/**
 * The CLI in front of an HTTP/1.1 and an h2c upstream that both hand their
 * tunnels to `handler`: host h1.test routes to the first (route to-h1), h2.test
 * to the second (to-h2); ready, with an HTTP/2 session open to it.
 */
export async function tunnelGateway(t: Test, handler: TunnelHandler, serveArgs: readonly string[] = []): Promise<TunnelGateway> {
  const upH1 = await h1Upstream(t, handler)
  const upH2 = await h2Upstream(t, handler)
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(port), backendYaml('up-h1', upH1), h2cBackendYaml('up-h2', upH2),
    routeYaml('to-h1', 'h1.test', 'up-h1', upH1), routeYaml('to-h2', 'h2.test', 'up-h2', upH2),
  ].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, ...serveArgs])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')
  return { port, adminPort, cli, session: await h2Session(t, port) }
}
