// Closing a connection node handed over (CONNECT, Upgrade) after refusing it.

import type { Socket } from 'node:net'

/** How long a refused client may go on sending before its connection is destroyed. */
const LINGER_MS = 5_000

/**
 * Ends `socket` with `answer`, then reads and discards whatever the client
 * still sends until it closes, for at most LINGER_MS (RFC 9112 §9.6, lingering
 * close). Ending alone is not enough: a socket nobody reads, its receive
 * buffer full of bytes the client pipelined behind its request, never learns
 * of the client's FIN or even its RST, and stayed open for good. Destroying
 * at once instead could reset the connection before the client has read the
 * answer.
 */
export function endAndDiscard(socket: Socket, answer: string): void {
  socket.end(answer)
  socket.resume()
  const timer = setTimeout(() => { socket.destroy() }, LINGER_MS)
  timer.unref()
  socket.once('close', () => { clearTimeout(timer) })
}
