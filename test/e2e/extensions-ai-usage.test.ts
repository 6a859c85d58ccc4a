// The real CLI with AIUsage in front of an upstream that compresses anyway
// (the gateway asks for identity): a gzip, br or deflate JSON answer and a gzip
// SSE stream are read decoded and charged to the token budget, while the client
// gets the bytes as the upstream sent them; an answer it cannot read (another
// coding, corrupt, decoded past maxBodyBytes) is counted as a failure and
// logged, never held back; a stream the client leaves after its usage event is
// still charged.
import t from 'tap'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import zlib from 'node:zlib'
import { eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'
import { egressBackend, recorder, route, sample } from './extensions-helpers.ts'

const BOUND = 64 * 1024
const usage = (model: string, input: number, output: number): string =>
  JSON.stringify({ model, choices: [{ message: { content: 'Hello' } }], usage: { prompt_tokens: input, completion_tokens: output } })
const event = (body: string): string => `data: ${body}\n\n`
const FIRST = event(JSON.stringify({ model: 'sse', choices: [{ delta: { content: 'Hi' } }], usage: null }))

interface Raw { status: number; headers: http.IncomingHttpHeaders; body: Buffer }

/** One request as user `user` on a fresh connection; the body as bytes (never decoded). */
function ask(port: number, p: string, user: string): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: p, agent: false, headers: { host: 'ai.example.test', 'x-user': user } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }))
    })
    req.setTimeout(10000, () => req.destroy(new Error('timeout')))
    req.on('error', reject)
    req.end()
  })
}

t.test('CLI: AIUsage on compressed answers and cut streams', async (t) => {
  // /cut holds its stream open after the usage event until the test ends.
  let release: () => void = () => {}
  const released = new Promise<void>((resolve) => { release = resolve })
  t.teardown(release)
  const answers: Record<string, { coding: string, body: Buffer }> = {
    '/gzip': { coding: 'gzip', body: zlib.gzipSync(usage('gzip-json', 90, 60)) },
    '/br': { coding: 'br', body: zlib.brotliCompressSync(usage('br-json', 1, 2)) },
    '/deflate': { coding: 'deflate', body: zlib.deflateSync(usage('deflate-json', 3, 4)) },
    '/deflate-raw': { coding: 'deflate', body: zlib.deflateRawSync(usage('deflate-raw-json', 5, 6)) },
    '/zstd': { coding: 'zstd', body: Buffer.from('(zstd frame)') },
    '/corrupt': { coding: 'gzip', body: Buffer.from('not gzip at all') },
    '/bomb': { coding: 'gzip', body: zlib.gzipSync(usage('bomb', 7, 8).replace('"Hello"', JSON.stringify('x'.repeat(BOUND * 4)))) },
  }
  const up = await recorder(t, (req, res) => {
    const a = answers[req.url]
    if (a !== undefined) {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': a.coding, 'content-length': String(a.body.length) })
      res.end(a.body)
      return
    }
    if (req.url === '/gzip-sse') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' })
      const gz = zlib.createGzip({ flush: zlib.constants.Z_SYNC_FLUSH })
      gz.pipe(res)
      gz.write(FIRST)
      gz.write(event(usage('gzip-sse', 70, 80)))
      gz.end(event('[DONE]'))
      return
    }
    if (req.url === '/cut') {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(FIRST)
      res.write(event(usage('cut', 100, 50)))
      void released.then(() => res.end(event('[DONE]')))
      return
    }
    res.writeHead(404); res.end()
  })
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'backends.yaml'), egressBackend('ai', up.port, `  - name: tokens
    type: AIUsage
    config:
      maxBodyBytes: ${BOUND}
      budget: { tokens: 100, unit: Hour, key: [{ header: x-user }] }
`))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), route('ai', 'ai.example.test', 'ai', up.port))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const metrics = async (): Promise<string> => (await request(`http://127.0.0.1:${adminPort}/metrics`)).body
  const tokens = (m: string, model: string, direction: string): number => sample(m, 'sallyport_ai_tokens_total', { model, direction })
  // Counted once the decoder caught up, which may be just after the client got the last byte.
  const counted = async (model: string): Promise<string> => { const m = await metrics(); return `${tokens(m, model, 'input')}/${tokens(m, model, 'output')}` }

  t.test('a gzip JSON answer is counted and charged; the client gets it as sent', async (t) => {
    const r = await ask(httpPort, '/gzip', 'gzip-json')
    t.equal(r.status, 200)
    t.equal(r.headers['content-encoding'], 'gzip', 'the coding as sent')
    t.ok(r.body.equals(answers['/gzip']?.body as Buffer), 'the bytes as sent')
    await eventually(() => counted('gzip-json'), (s) => s === '90/60', 5000, 'gzip-json input/output')
    t.equal((await ask(httpPort, '/gzip', 'gzip-json')).status, 429, '150 tokens spent a budget of 100')
  })

  t.test('a gzip SSE stream is counted and charged; the client gets it as sent', async (t) => {
    const r = await ask(httpPort, '/gzip-sse', 'gzip-sse')
    t.equal(r.status, 200)
    t.equal(r.headers['content-encoding'], 'gzip')
    t.equal(zlib.gunzipSync(r.body).toString(), FIRST + event(usage('gzip-sse', 70, 80)) + event('[DONE]'))
    await eventually(() => counted('gzip-sse'), (s) => s === '70/80', 5000, 'gzip-sse input/output')
    t.equal((await ask(httpPort, '/gzip-sse', 'gzip-sse')).status, 429, '150 tokens spent a budget of 100')
  })

  t.test('br and deflate (zlib-wrapped or raw) answers are counted', async (t) => {
    for (const p of ['/br', '/deflate', '/deflate-raw']) t.equal((await ask(httpPort, p, p)).status, 200, p)
    await eventually(() => counted('br-json'), (s) => s === '1/2', 5000, 'br input/output')
    await eventually(() => counted('deflate-json'), (s) => s === '3/4', 5000, 'deflate input/output')
    await eventually(() => counted('deflate-raw-json'), (s) => s === '5/6', 5000, 'raw deflate input/output')
  })

  t.test('an answer it cannot read passes as sent and is counted as a failure', async (t) => {
    const failures = async (): Promise<number> => sample(await metrics(), 'sallyport_extension_failures_total', { extension: 'tokens', outcome: 'open' })
    const before = await failures()
    for (const p of ['/zstd', '/corrupt', '/bomb']) {
      const r = await ask(httpPort, p, 'unread')
      t.equal(r.status, 200, `${p}: passed on`)
      t.ok(r.body.equals(answers[p]?.body as Buffer), `${p}: as sent`)
    }
    await eventually(failures, (n) => n === before + 3, 5000, 'three failures counted')
    t.equal(tokens(await metrics(), 'bomb', 'output'), 0, 'decoded past maxBodyBytes: not read')
    await cli.waitFor(/"error":"response Content-Encoding zstd cannot be decoded[^"]*","msg":"extension could not read the response"/, 5000)
  })

  t.test('a stream the client leaves after its usage event is charged', async (t) => {
    await new Promise<void>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: httpPort, path: '/cut', agent: false, headers: { host: 'ai.example.test', 'x-user': 'cut' } }, (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('error', () => {}) // ours: the client leaves
        res.on('data', (s: string) => {
          body += s
          if (body.includes('"usage":{')) { req.destroy(); resolve() }
        })
      })
      req.setTimeout(5000, () => req.destroy(new Error('no usage event')))
      req.on('error', reject)
      req.end()
    })
    await eventually(() => counted('cut'), (s) => s === '100/50', 5000, 'the usage seen is counted (input/output)')
    t.equal((await ask(httpPort, '/cut', 'cut')).status, 429, 'and charged')
  })
})
