// ReplayBody (retries replay the request body): a client that aborts its
// upload fails the attempt's stream, and that must never become an unhandled
// 'error' event once the upstream client has let go of the stream (it had
// crashed the process: bench, 1 MiB uploads cut at the end of a round).

import t from 'tap'
import net from 'node:net'
import { PassThrough } from 'node:stream'
import type { RetrySpec } from '../../lib/compile/table.ts'
import { ReplayBody } from '../../lib/router/replay-body.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { echoH1, h1, startPlane } from '../listeners/fixtures.ts'

configureLogger({ level: 'silent' })

const tick = (ms = 20): Promise<void> => new Promise((r) => setTimeout(r, ms))

t.test('the client failing its body after the consumer let go is not an unhandled error', async (t) => {
  const source = new PassThrough()
  const replay = new ReplayBody(source)
  const first = replay.next()
  const got: Buffer[] = []
  const onData = (c: Buffer): void => { got.push(c) }
  first.on('data', onData)
  source.write('part of the body')
  await tick()
  t.equal(Buffer.concat(got).toString(), 'part of the body', 'the attempt gets the bytes')
  // The consumer is done with the stream (an upstream client that was cancelled detaches its listeners).
  first.removeListener('data', onData)
  source.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }))
  await tick()
  t.ok(first.destroyed, 'the attempt stream is failed with the client')
  t.notOk(replay.replayable, 'a failed body is not replayed')
})

t.test('a client aborting an upload on a retried route leaves the gateway serving', async (t) => {
  // The upstream reads the body slowly, so the upload is mid-way when the client goes.
  const up = await echoH1(t, 'slow-reader', (req, res) => {
    req.on('data', () => { req.pause(); setTimeout(() => req.resume(), 20) })
    req.on('end', () => { res.end('done') })
    req.on('error', () => {})
  })
  const port = await freePort()
  const retry: RetrySpec = {
    attempts: 2, codes: [], backoffMs: null,
    policy: { numRetries: 2, perTryTimeout: null, backoffBase: 1, backoffMax: 5, triggers: ['retriable-status-codes', 'reset'], httpStatusCodes: [503] },
  }
  await startPlane(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry, backends: [{ cluster: 'c' }] }] }] } }, [cluster('c', up.port)]))
  for (let round = 0; round < 5; round++) {
    const socket = net.connect(port, '127.0.0.1')
    socket.on('error', () => {})
    await new Promise<void>((r) => socket.once('connect', () => r()))
    socket.write(`POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: ${8 * 1024 * 1024}\r\n\r\n`)
    for (let i = 0; i < 8; i++) socket.write(Buffer.alloc(64 * 1024, 0x61))
    await tick(30 + round * 10)
    socket.destroy()
    await tick(30)
  }
  const after = await h1(port, { path: '/after' })
  t.equal(after.status, 200, 'still serving after five aborted uploads')
})
