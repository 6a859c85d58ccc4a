// A loopback address whose connects hang, as a dead host or a firewall that
// drops SYNs behaves (loopback itself never stays silent: a closed port
// refuses at once). A listener with a backlog of 1 (node reads 0 as its default, 511) whose accept queue is full:
// the kernel then drops further SYNs, so connect() waits until its timeout.
// The listener lives in a worker thread that blocks right after listen() and
// so never accepts; the test fills the queue, then closes everything in
// teardown (the worker is woken through a SharedArrayBuffer, not killed).

import http from 'node:http'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { Worker } from 'node:worker_threads'
import type { Test } from 'tap'

const WORKER = `
const net = require('node:net')
const { workerData, parentPort } = require('node:worker_threads')
const { host, port, flag } = workerData
const server = net.createServer()
server.on('error', (err) => parentPort.postMessage({ error: err.code ?? String(err) }))
server.listen({ host, port, backlog: 1 }, () => {
  parentPort.postMessage({ port: server.address().port })
  // Never back to the event loop: nothing is ever accepted.
  Atomics.wait(flag, 0, 0)
  server.close()
})
`

export interface Blackhole {
  readonly host: string
  readonly port: number
  close(): Promise<void>
}

/** A connect that does not complete within `ms`: the queue is full. */
function connectsWithin(host: string, port: number, ms: number, fillers: net.Socket[]): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host, port })
    s.on('error', () => {})
    fillers.push(s)
    const timer = setTimeout(() => resolve(false), ms)
    s.once('connect', () => { clearTimeout(timer); resolve(true) })
  })
}

/**
 * A listener on `host:port` (port 0: any) whose connects hang; rejects with
 * EADDRINUSE (err.code) when the port is taken there.
 */
export async function blackhole(t: Test, host: string, port = 0): Promise<Blackhole> {
  const flag = new Int32Array(new SharedArrayBuffer(4))
  const worker = new Worker(WORKER, { eval: true, workerData: { host, port, flag } })
  const bound = await new Promise<number>((resolve, reject) => {
    worker.once('message', (m: { port?: number; error?: string }) => {
      if (m.port !== undefined) resolve(m.port)
      else reject(Object.assign(new Error(`blackhole listen on ${host}:${port}: ${m.error}`), { code: m.error }))
    })
    worker.once('error', reject)
  }).catch(async (err: unknown) => { await worker.terminate(); throw err })
  const fillers: net.Socket[] = []
  let closed = false
  const close = async (): Promise<void> => {
    if (closed) return
    closed = true
    for (const s of fillers) s.destroy()
    Atomics.store(flag, 0, 1)
    Atomics.notify(flag, 0)
    await worker.terminate()
  }
  t.teardown(close)
  if (port !== 0 && bound !== port) throw new Error('blackhole bound elsewhere')
  // Fill the accept queue: connect until one hangs (after two or three).
  for (let i = 0; i < 8; i++) {
    if (!await connectsWithin(host, bound, 300, fillers)) return { host, port: bound, close }
  }
  await close()
  throw new Error(`blackhole on ${host}:${bound}: connects kept completing`)
}

/** One port on several loopback addresses: node:http servers answering their address on `live`, hanging connects on `dead`. */
export async function addressesOnOnePort(t: Test, live: readonly string[], dead: readonly string[]): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const closers: Array<() => Promise<void>> = []
    try {
      let port = 0
      for (const host of live) {
        const s = http.createServer((_req, res) => { res.end(host) })
        await new Promise<void>((resolve, reject) => { s.once('error', reject); s.listen(port, host, () => { s.off('error', reject); resolve() }) })
        closers.push(() => new Promise<void>((resolve) => { s.closeAllConnections(); s.close(() => resolve()) }))
        port = (s.address() as AddressInfo).port
      }
      for (const host of dead) {
        const b = await blackhole(t, host, port)
        closers.push(() => b.close())
      }
      t.teardown(async () => { for (const c of closers) await c() })
      return port
    } catch (err) {
      for (const c of closers) await c()
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err
    }
  }
  throw new Error('no port free on every address')
}
