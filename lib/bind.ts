// Binding a listener's server: resolve once it listens, reject with the listen
// error (EADDRINUSE, EACCES…) so the data plane can report the port as failed;
// after that, server errors are logged, never thrown.
//
// `::` (the default of --bind and --admin) is every address of both families:
// node opens a dual-stack socket, so IPv4 clients reach it too (their addresses
// read as ::ffff:a.b.c.d, which clientIp() turns back). On a kernel without
// IPv6 (booted with ipv6.disable=1) that socket cannot be opened: then
// 0.0.0.0, every IPv4 address.

import type { Server } from 'node:net'
import type { Logger } from './observe/log.ts'

/** Every address, both families where the kernel has IPv6. */
export const ANY_ADDRESS = '::'

export async function bindServer(server: Server, bind: string, port: number, log: Logger): Promise<void> {
  try {
    await listenOnce(server, bind, port)
  } catch (err) {
    if (bind !== ANY_ADDRESS || !noIpv6(err)) throw err
    log.info({ port }, 'no IPv6 on this host: listening on 0.0.0.0 (IPv4) instead of ::')
    await listenOnce(server, '0.0.0.0', port)
  }
  server.on('error', (err: Error) => log.error({ err: err.message }, 'listener error'))
}

function listenOnce(server: Server, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => { server.off('listening', onListening); reject(err) }
    const onListening = (): void => { server.off('error', onError); resolve() }
    server.once('error', onError)
    server.once('listening', onListening)
    server.listen({ host, port, exclusive: false })
  })
}

/** The error of opening an IPv6 socket where the kernel has none. */
function noIpv6(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code
  return code === 'EAFNOSUPPORT' || code === 'EADDRNOTAVAIL' || code === 'EPROTONOSUPPORT'
}

/** How often a server at its connection limit warns again. */
const CAP_WARN_EVERY_MS = 10_000

/**
 * Holds `server` to `max` open connections: past it node closes a new one at
 * accept ('drop'). `onDrop` runs for each one closed, `warn` at most every 10 s.
 * The Gateway listeners (--max-connections) and the admin server share it.
 */
export function capConnections(server: Server, max: number, onDrop: () => void, warn: () => void): void {
  server.maxConnections = max
  let warned = -Infinity
  server.on('drop', () => {
    onDrop()
    const now = performance.now()
    if (now - warned < CAP_WARN_EVERY_MS) return
    warned = now
    warn()
  })
}
