// Opens one transport connection to one endpoint: resolve (hostname
// endpoints), then TCP (or unix socket), then TLS with the pool's prebuilt
// options. Connection attempts fall back across the resolved addresses on
// connect-class failures; a TLS failure is an answer about the backend, not the
// address, so it is returned at once. Used by undici pools (as their `connect`
// function) and by the HTTP/2 session manager alike.

import { connect as netConnect, type Socket } from 'node:net'
import { connect as tlsConnect, type TLSSocket } from 'node:tls'
import type { Endpoint } from '../compile/table.ts'
import type { Resolver } from './resolve.ts'
import type { ClientTls } from './tls.ts'
import { localError, codeOf } from './normalize-error.ts'
import { tlsFailureReason } from './tls.ts'

export type ConnectCallback = (err: Error | null, socket: Socket | null) => void

export interface ConnectorOptions {
  readonly endpoint: Endpoint
  readonly tls: ClientTls | null
  readonly resolver: Resolver
  readonly timeoutMs: number
}

export class Connector {
  readonly endpoint: Endpoint
  readonly #tls: ClientTls | null
  readonly #resolver: Resolver
  readonly #timeoutMs: number
  /** Last TLS session ticket of this pool: offered on the next connection (resumption). */
  #session: Buffer | undefined = undefined

  constructor(options: ConnectorOptions) {
    this.endpoint = options.endpoint
    this.#tls = options.tls
    this.#resolver = options.resolver
    this.#timeoutMs = options.timeoutMs
  }

  get secure(): boolean {
    return this.#tls !== null
  }

  /** `alpn`: protocols to offer over TLS (ignored in cleartext); null offers none. */
  connect(alpn: readonly string[] | null, callback: ConnectCallback): void {
    const endpoint = this.endpoint
    if (endpoint.kind !== 'hostname') {
      this.#attempt([endpoint.host], 0, alpn, callback)
      return
    }
    this.#resolver.resolve(endpoint.host).then(
      (addresses) => {
        if (addresses.length === 0) callback(localError('ENOTFOUND', `no addresses for ${endpoint.host}`), null)
        else this.#attempt(addresses, 0, alpn, callback)
      },
      (err: unknown) => callback(err instanceof Error ? err : localError('ENOTFOUND', String(err)), null),
    )
  }

  #attempt(addresses: readonly string[], index: number, alpn: readonly string[] | null, callback: ConnectCallback): void {
    const endpoint = this.endpoint
    const address = addresses[index]
    let socket: Socket
    const tls = this.#tls
    if (tls !== null) {
      const tlsSocket: TLSSocket = tlsConnect({
        ...tls.options,
        ...(endpoint.kind === 'unix' ? { path: address } : { host: address, port: endpoint.port }),
        servername: tls.servername,
        ALPNProtocols: alpn === null || alpn.length === 0 ? undefined : [...alpn],
        session: this.#session,
      })
      tlsSocket.on('session', (session: Buffer) => { this.#session = session })
      socket = tlsSocket
    } else {
      socket = endpoint.kind === 'unix' ? netConnect({ path: address }) : netConnect({ host: address, port: endpoint.port })
    }
    const connectEvent = tls !== null ? 'secureConnect' : 'connect'
    const timer = setTimeout(() => {
      socket.destroy(localError('SP_CONNECT_TIMEOUT', `connect to ${address}:${endpoint.port} timed out after ${this.#timeoutMs} ms`))
    }, this.#timeoutMs)
    const onConnect = (): void => {
      clearTimeout(timer)
      socket.removeListener('error', onError)
      socket.setNoDelay(true)
      socket.setKeepAlive(true, 60_000)
      callback(null, socket)
    }
    const onError = (err: Error): void => {
      clearTimeout(timer)
      socket.removeListener(connectEvent, onConnect)
      socket.destroy()
      const code = codeOf(err)
      // A TLS verdict is about the backend, not this address: do not try the next one.
      if (index + 1 < addresses.length && tlsFailureReason(code) === null) {
        this.#attempt(addresses, index + 1, alpn, callback)
        return
      }
      callback(err, null)
    }
    socket.once(connectEvent, onConnect)
    socket.once('error', onError)
  }
}
