// Issue 9: egress through an upstream (corporate) HTTP CONNECT proxy. Opens a
// TCP connection to the proxy, asks for a tunnel to `target` (RFC 9110
// §9.3.6), and hands back the socket once the proxy answers 2xx — the caller
// then speaks to the destination through it (TLS origination with
// tls.connect({ socket }), so the destination's certificate is verified end to
// end and the proxy sees only ciphertext).
//
// The target is the destination's name as configured (the proxy resolves it:
// a gateway behind a corporate proxy often has no external DNS at all). Bytes
// the proxy sent after its header (a server speaking first) are unshifted.

import { createHash } from 'node:crypto'
import { connect as netConnect, type Socket } from 'node:net'
import type { UpstreamProxy } from '../compile/table.ts'
import { localError } from './normalize-error.ts'

/** Bound on the proxy's answer header. */
const MAX_ANSWER_BYTES = 16 * 1024
const HEADER_END = Buffer.from('\r\n\r\n')

export type TunnelCallback = (err: Error | null, socket: Socket | null) => void

/** `host:port` as a CONNECT request-target (IPv6 literals bracketed). */
export function connectTarget(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`
}

/**
 * Opens a tunnel through `proxy` to `target`. The callback runs once: a
 * connected socket (paused, ready for TLS or raw bytes) or an error whose code
 * is connect-class (ECONNREFUSED... of the proxy itself, or SP_PROXY_REFUSED
 * when it answered non-2xx), so callers fail over like on any connect failure.
 */
export function openProxyTunnel(proxy: UpstreamProxy, target: string, callback: TunnelCallback): Socket {
  const socket = netConnect({ host: proxy.host, port: proxy.port, noDelay: true })
  let buffered: Buffer | null = null
  let done = false
  const finish = (err: Error | null): void => {
    if (done) return
    done = true
    socket.removeListener('data', onData)
    socket.removeListener('error', finish)
    socket.removeListener('close', onClose)
    if (err !== null) { socket.destroy(); callback(err, null); return }
    callback(null, socket)
  }
  const onClose = (): void => finish(localError('SP_PROXY_REFUSED', `upstream proxy ${proxy.host}:${proxy.port} closed before answering CONNECT ${target}`))
  const onData = (chunk: Buffer): void => {
    const buf = buffered === null ? chunk : Buffer.concat([buffered, chunk])
    const end = buf.indexOf(HEADER_END)
    if (end === -1) {
      if (buf.length > MAX_ANSWER_BYTES) finish(localError('SP_PROXY_REFUSED', `upstream proxy answer to CONNECT ${target} is too long`))
      else buffered = buf
      return
    }
    const statusLine = buf.subarray(0, buf.indexOf('\r\n')).toString('latin1')
    const status = Number(statusLine.split(' ')[1])
    if (!(status >= 200 && status < 300)) {
      finish(localError('SP_PROXY_REFUSED', `upstream proxy ${proxy.host}:${proxy.port} answered ${JSON.stringify(statusLine)} to CONNECT ${target}`))
      return
    }
    socket.pause()
    const rest = buf.subarray(end + HEADER_END.length)
    if (rest.length > 0) socket.unshift(rest)
    finish(null)
  }
  socket.once('connect', () => {
    const auth = proxy.authorization === null ? '' : `proxy-authorization: ${proxy.authorization}\r\n`
    socket.write(`CONNECT ${target} HTTP/1.1\r\nhost: ${target}\r\n${auth}\r\n`)
  })
  socket.on('data', onData)
  socket.once('error', finish)
  socket.once('close', onClose)
  return socket
}

/** Pool-key part of a cluster's proxy ('' when direct); the credential only as a hash. */
export function proxyKey(cluster: { readonly upstreamProxy?: UpstreamProxy | null }): string {
  const p = cluster.upstreamProxy
  if (p == null) return ''
  const auth = p.authorization === null ? '' : '|' + createHash('sha256').update(p.authorization).digest('hex').slice(0, 16)
  return `|via ${connectTarget(p.host, p.port)}${auth}`
}
