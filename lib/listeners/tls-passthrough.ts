// TLSRoute routing by SNI: the ClientHello is read off the client socket
// (bounded in bytes and time, never decrypted), the name is matched against
// the port's SniIndex, and the bytes read are put back in front of the stream
// so the upstream receives the client's TLS exactly as sent.

import type { Socket } from 'node:net'
import type { L4Route, SniIndex } from '../compile/table.ts'
import { lookupHostname } from '../hostname-index.ts'
import { MAX_CLIENT_HELLO_BYTES, parseClientHello } from './sni-client-hello.ts'

/**
 * Gateway API TLSRoute hostnames: exact names first, then wildcards longest
 * suffix first (`*.example.com` matches one or more labels, never the apex),
 * then the routes without hostnames. No SNI → only that fallback.
 */
export function matchSni(index: SniIndex, sni: string | null): L4Route | null {
  return sni !== null ? lookupHostname(index, sni) : index.fallback
}

export type HelloOutcome =
  | { readonly kind: 'hello'; readonly sni: string | null }
  | { readonly kind: 'invalid'; readonly reason: string }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'closed' }

/**
 * Reads the ClientHello from `socket` and calls `done` once. On 'hello' the
 * socket is paused with the bytes read unshifted (nothing consumed); on
 * anything else the caller closes it.
 */
export function readClientHello(socket: Socket, timeoutMs: number, done: (outcome: HelloOutcome) => void): void {
  let buffered: Buffer | null = null
  let settled = false
  const finish = (outcome: HelloOutcome): void => {
    if (settled) return
    settled = true
    clearTimeout(timer)
    socket.removeListener('data', onData)
    socket.removeListener('end', onEnd)
    socket.removeListener('close', onEnd)
    done(outcome)
  }
  const onData = (chunk: Buffer): void => {
    const buf: Buffer = buffered === null ? chunk : Buffer.concat([buffered, chunk])
    const r = parseClientHello(buf)
    if (r.kind === 'more') {
      // parseClientHello rejects before the bound; this is belt and braces.
      if (buf.length > MAX_CLIENT_HELLO_BYTES) finish({ kind: 'invalid', reason: 'too_large' })
      else buffered = buf
      return
    }
    if (r.kind === 'invalid') { finish(r); return }
    socket.pause()
    socket.unshift(buf)
    finish(r)
  }
  const onEnd = (): void => finish({ kind: 'closed' })
  const timer = setTimeout(() => finish({ kind: 'timeout' }), timeoutMs)
  socket.on('data', onData)
  socket.once('end', onEnd)
  socket.once('close', onEnd)
}

export type PeekOutcome =
  | { readonly kind: 'hello'; readonly sni: string | null }
  /** Not a ClientHello we read (malformed, past the bound): TLS reports it itself. */
  | { readonly kind: 'unreadable' }
  | { readonly kind: 'closed' }

/**
 * For a connection this process terminates: the server name of the
 * ClientHello at the start of `socket`, read as passthrough reads it, with
 * every byte read put back (the socket paused) for TLS to read, whatever they
 * were. TLS itself does not always tell the name: on a resumed TLS 1.2
 * session node reports none (OpenSSL gives the session's, which node never
 * stores). Unbounded in time: the caller's handshake timer destroys the
 * socket, which ends this read ('closed').
 */
export function peekClientHello(socket: Socket, done: (outcome: PeekOutcome) => void): void {
  let buffered: Buffer | null = null
  let settled = false
  const finish = (outcome: PeekOutcome): void => {
    if (settled) return
    settled = true
    socket.removeListener('data', onData)
    socket.removeListener('end', onEnd)
    socket.removeListener('close', onEnd)
    if (outcome.kind !== 'closed') {
      socket.pause()
      if (buffered !== null) socket.unshift(buffered)
    }
    done(outcome)
  }
  const onData = (chunk: Buffer): void => {
    buffered = buffered === null ? chunk : Buffer.concat([buffered, chunk])
    const r = parseClientHello(buffered)
    if (r.kind === 'hello') finish(r)
    else if (r.kind === 'invalid' || buffered.length > MAX_CLIENT_HELLO_BYTES) finish({ kind: 'unreadable' })
  }
  const onEnd = (): void => finish({ kind: 'closed' })
  socket.on('data', onData)
  socket.once('end', onEnd)
  socket.once('close', onEnd)
  socket.resume()
}
