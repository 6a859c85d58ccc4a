// Loopback ports for tests that need a connection refused.

import net from 'node:net'
import type { AddressInfo } from 'node:net'

/** Accepts the holders' connections. */
let anchor: net.Server | null = null
/** Each held port's client socket, by port. */
const holders = new Map<number, net.Socket>()

/**
 * A loopback port that refuses connections for the rest of this test file.
 * A port that was listened on and closed can be handed out again by the next
 * listen(0) (in one run, a gateway got its own "dead" endpoint's port and
 * answered 508 to itself); this one is held by a connected client socket
 * (bound, not listening), so connections to it are refused and no listener
 * can take it.
 */
export async function closedPort(): Promise<number> {
  if (anchor === null) {
    const server = net.createServer((s) => { s.unref() })
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    server.unref()
    anchor = server
  }
  const holder = net.connect((anchor.address() as AddressInfo).port, '127.0.0.1')
  await new Promise<void>((resolve, reject) => { holder.once('connect', resolve); holder.once('error', reject) })
  holder.unref()
  const port = holder.localPort as number
  holders.set(port, holder)
  return port
}

/**
 * Listens on a port that was closed until now (an unusedPort() a test kept an
 * endpoint dead on). A socket another test just let go of can linger a moment
 * in LAST_ACK there (its bind conflicts until the final ACK is in), so
 * EADDRINUSE is retried for up to two seconds before it counts.
 */
export async function listenOnReleased(server: net.Server, port: number): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject)
        server.listen(port, '127.0.0.1', () => { server.off('error', reject); resolve() })
      })
      return
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || attempt >= 100) throw err
      server.close() // as node's docs do before listening again
      await new Promise((r) => setTimeout(r, 20))
    }
  }
}

/** A server (net, http, https, http2) listening on a free loopback port; resolves with the port. */
export async function listenLoopback(server: { listen: (port: number, host: string, cb: () => void) => unknown; address: () => unknown }): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return (server.address() as AddressInfo).port
}

/**
 * Where ports for listeners started later (a CLI's, a table's) are picked:
 * below the kernel's ephemeral range (32768-60999 by default), which every
 * outgoing connection draws its local port from. A port found free by
 * listen(0) was in that range, and in a loaded run a client connection could
 * take it before the listener bound it: the gateway's listener then failed
 * with EADDRINUSE (reported as invalid; /readyz still 200) and the test saw
 * ECONNREFUSED. Each test process takes its own slice (by pid) and walks it,
 * so two files running at once rarely meet, and one file never repeats a port
 * until it has used the slice.
 */
const SLICE = 500
const BASE = 10_000
const SLICES = 40 // 10000-29999
const slice = process.pid % SLICES
let next = Math.floor(Math.random() * SLICE)

/** A loopback port below the ephemeral range that was free a moment ago. */
export async function unusedPort(): Promise<number> {
  for (let tries = 0; tries < SLICE; tries++) {
    const port = BASE + slice * SLICE + (next++ % SLICE)
    if (await canListen(port)) return port
  }
  // The slice is taken: whatever the kernel gives.
  const server = net.createServer()
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(0, '127.0.0.1', resolve) })
  const port = (server.address() as AddressInfo).port
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}
