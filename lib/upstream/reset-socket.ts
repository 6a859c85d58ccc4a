// Passing a reset on: a TCP RST, so the peer never takes a cut stream for a
// whole one (an orderly FIN would say the transfer is complete).

import type { Socket } from 'node:net'
import { TLSSocket } from 'node:tls'

/**
 * A TCP RST to the peer; a socket node cannot reset (TLS, a unix socket) is
 * destroyed instead. So is one whose FIN may be on its way (ended, not yet
 * finished: the other side's orderly end, passed on just before its reset):
 * libuv refuses to reset a socket while its shutdown is pending, and node has
 * by then let go of the handle, which stayed open for good, read by nobody.
 * Closed, it makes the peer's next write fail all the same.
 */
export function resetSocket(socket: Socket): void {
  if (socket.destroyed) return
  if (socket instanceof TLSSocket || (socket.writableEnded && !socket.writableFinished)) { socket.destroy(); return }
  try {
    socket.resetAndDestroy()
  } catch {
    socket.destroy() // not a TCP handle
  }
}
