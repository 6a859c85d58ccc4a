// ResponseBody.attachSink: the HTTP/1.1 fast path takes an upstream body's
// chunks directly (no stream buffering or ticks). Every byte, the end, the
// trailers, backpressure to the upstream, cancellation and upstream failures
// must reach the sink as they reach a stream reader.
import t, { type Test } from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { ResponseBody, type BodySink } from '../../lib/upstream/exchange.ts'
import { SallyportError } from '../../lib/errors.ts'
import type { UpstreamResponse } from '../../lib/upstream/types.ts'
import { cluster, endpoint, listen, request, table } from './fixtures.ts'

class RecordingSink implements BodySink {
  readonly chunks: Buffer[] = []
  ends = 0
  errors: Error[] = []
  /** onBodyData's answer. */
  accept = true
  readonly done: Promise<void>
  #settle: () => void = () => {}
  constructor() {
    this.done = new Promise((resolve) => { this.#settle = resolve })
  }

  get bytes(): number { return this.chunks.reduce((n, c) => n + c.length, 0) }
  onBodyData(chunk: Buffer): boolean {
    this.chunks.push(chunk)
    return this.accept
  }

  onBodyEnd(): void { this.ends++; this.#settle() }
  onBodyError(err: Error): void { this.errors.push(err); this.#settle() }
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * Forwards a GET to an upstream answering with `handler`; `sink` is attached
 * in onResponse, as the fast path does (before any chunk can arrive).
 */
async function respond(t: Test, protocol: 'HTTP11' | 'H2C', handler: (res: http.ServerResponse) => void, sink: BodySink | null): Promise<{ res: UpstreamResponse, attached: boolean }> {
  // The compatibility API's response has the calls the handlers make (writeHead, write, addTrailers, end).
  const server = protocol === 'HTTP11' ? http.createServer((_req, res) => handler(res)) : http2.createServer((_req, res) => handler(res as unknown as http.ServerResponse))
  const port = await listen(server as http.Server)
  t.teardown(() => { server.close() })
  const up = createUpstreams()
  t.teardown(() => up.close())
  const c = cluster({ protocol, endpoints: [endpoint(port)] })
  up.retain(table([c]))
  return await new Promise((resolve, reject) => {
    up.forward(request(c, { headers: { te: 'trailers' } }), {
      onResponse: (res) => resolve({ res, attached: sink === null ? false : res.body instanceof ResponseBody && res.body.attachSink(sink) }),
      onTunnel: () => reject(new Error('tunnel')),
      onError: (err) => reject(err),
    })
  })
}

for (const protocol of ['HTTP11', 'H2C'] as const) {
  t.test(`${protocol}: the sink gets every byte, then the end and the trailers`, async (t) => {
    const part = Buffer.alloc(64 * 1024, 0x61)
    const sink = new RecordingSink()
    const { res, attached } = await respond(t, protocol, (res) => {
      res.writeHead(200, { 'content-type': 'text/plain', trailer: 'x-sum' })
      for (let i = 0; i < 8; i++) res.write(part)
      res.addTrailers({ 'x-sum': 'done' })
      res.end()
    }, sink)
    t.ok(attached, 'attached')
    t.notOk((res.body as ResponseBody).attachSink(new RecordingSink()), 'a second sink is refused')
    await sink.done
    t.equal(sink.bytes, 8 * part.length)
    t.equal(sink.ends, 1)
    t.same(sink.errors, [])
    t.same(res.trailers?.(), { 'x-sum': 'done' })
  })

  t.test(`${protocol}: a sink that says stop holds the upstream until resumeSink`, async (t) => {
    const total = 8 * 1024 * 1024
    let written = 0
    const sink = new RecordingSink()
    sink.accept = false
    const { res, attached } = await respond(t, protocol, (res) => {
      res.writeHead(200, { 'content-length': String(total) })
      const chunk = Buffer.alloc(64 * 1024, 0x62)
      const more = (): void => {
        while (written < total) {
          written += chunk.length
          if (!res.write(chunk)) { res.once('drain', more); return }
        }
        res.end()
      }
      more()
    }, sink)
    t.ok(attached)
    await sleep(300)
    const held = sink.bytes
    t.ok(held > 0 && held < total / 2, `a little arrived and then nothing (${held} bytes)`)
    t.ok(written < total, `the upstream was held too (${written} of ${total} written)`)
    sink.accept = true
    ;(res.body as ResponseBody).resumeSink()
    await sink.done
    t.equal(sink.bytes, total)
    t.equal(sink.ends, 1)
  })

  t.test(`${protocol}: destroying the body cancels the upstream and tells the sink once, without an unhandled error`, async (t) => {
    let upstreamClosed: () => void = () => {}
    const closed = new Promise<void>((resolve) => { upstreamClosed = resolve })
    const sink = new RecordingSink()
    const { res, attached } = await respond(t, protocol, (res) => {
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.write('first part')
      res.on('close', upstreamClosed)
    }, sink)
    t.ok(attached)
    while (sink.bytes === 0) await sleep(10)
    res.body.destroy(new Error('client went away'))
    await closed
    t.equal(sink.errors.length, 1)
    t.equal(sink.errors[0].message, 'client went away')
    t.equal(sink.ends, 0)
    await sleep(20) // an 'error' event nobody listens to would have thrown by now
  })

  t.test(`${protocol}: an upstream that fails mid-body fails the sink`, async (t) => {
    const sink = new RecordingSink()
    const { attached } = await respond(t, protocol, (res) => {
      res.writeHead(200, { 'content-length': '1000' })
      res.write('only part of it')
      setTimeout(() => {
        if ('stream' in res) (res as unknown as http2.Http2ServerResponse).stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR)
        else res.socket?.destroy()
      }, 20)
    }, sink)
    t.ok(attached)
    await sink.done
    t.equal(sink.ends, 0)
    t.equal(sink.errors.length, 1)
    t.ok(sink.errors[0] instanceof SallyportError, `a coded error (${sink.errors[0].message})`)
  })
}

t.test('a body already read as a stream takes no sink', async (t) => {
  const { res } = await respond(t, 'HTTP11', (res) => { res.end('hello') }, null)
  const got: Buffer[] = []
  res.body.on('data', (c: Buffer) => got.push(c))
  t.notOk((res.body as ResponseBody).attachSink(new RecordingSink()))
  await new Promise((resolve) => res.body.once('end', resolve))
  t.equal(Buffer.concat(got).toString(), 'hello')
})
