// ExternalProcessor hooks against a loopback callout: an answer is read
// within twice maxBodyBytes plus 64 KiB (a replacement body, JSON-escaped,
// and the other fields); past that the callout fails, whether the answer
// declares its length or streams without end.
import t from 'tap'
import http from 'node:http'
import type { CompiledExtension } from '../../lib/compile/table.ts'
import { externalProcessor } from '../../lib/extensions/ext-proc.ts'
import type { ClientInfo, HookResult, RequestView } from '../../lib/extensions/plugin-api.ts'

/** A callout on 127.0.0.1; `answer` writes the response. */
async function callout(t: { teardown(fn: () => unknown): void }, answer: (url: string, res: http.ServerResponse) => void): Promise<number> {
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => answer(req.url ?? '/', res))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return (server.address() as { port: number }).port
}

function spec(config: Record<string, unknown>): CompiledExtension {
  return {
    key: 'Backend default/b/xp', name: 'xp', type: 'ExternalProcessor', phases: ['request-headers', 'request-body'], priority: 0, failOpen: false,
    scope: 'Backend', source: 'Backend default/b', namespace: 'default', config, secrets: {}, error: null,
  }
}

const client: ClientInfo = { address: '127.0.0.1', namespace: null, serviceAccount: null, pod: null, spiffeId: null }
const view = (): RequestView => ({ method: 'POST', path: '/', authority: 'a.test', headers: {}, client, route: 'default/r', rule: 'r/0', backend: 'b', gateway: 'default/egress', scheme: 'http' })

/** JSON of about `size` bytes: a replacement body of that many characters. */
const answerOf = (size: number): string => JSON.stringify({ body: 'x'.repeat(size) })

t.test('an answer over twice maxBodyBytes plus 64 KiB fails the callout; one within is applied', async (t) => {
  const max = 1000
  const bound = 2 * max + 64 * 1024
  const port = await callout(t, (url, res) => {
    if (url === '/endless') {
      // Chunked, never ending: only the bound (not timeoutMs) stops the read.
      res.writeHead(200, { 'content-type': 'application/json' })
      res.write('{"body":"')
      const more = (): void => { if (!res.destroyed) res.write('x'.repeat(16 * 1024), () => setImmediate(more)) }
      more()
      return
    }
    const body = url === '/within' ? answerOf(bound - 100) : answerOf(bound + 100)
    res.writeHead(200, { 'content-type': 'application/json', ...(url === '/declared' ? { 'content-length': Buffer.byteLength(body) } : {}) })
    if (url === '/declared' || url === '/within') res.end(body)
    else { res.write(body.slice(0, 1000)); res.end(body.slice(1000)) } // chunked: no length up front
  })
  const call = (path: string): Promise<HookResult> => {
    const hooks = externalProcessor(spec({ url: `http://127.0.0.1:${port}${path}`, timeoutMs: 30_000, maxBodyBytes: max }))
    return (hooks.requestBody as (r: RequestView, b: Buffer) => Promise<HookResult>)(view(), Buffer.from('{}'))
  }
  const within = await call('/within') as { body: Buffer }
  t.equal(within.body.length, bound - 100, 'an answer within the bound: its body replaces the request body')
  await t.rejects(call('/declared'), /external processor answered more than 67536 bytes/, 'a declared length over the bound')
  await t.rejects(call('/chunked'), /external processor answered more than 67536 bytes/, 'a chunked answer over the bound')
  await t.rejects(call('/endless'), /external processor answered more than 67536 bytes/, 'an endless answer: stopped at the bound')
})

t.test('the default bound: twice 1 MiB plus 64 KiB', async (t) => {
  const port = await callout(t, (_url, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ setHeaders: { 'x-a': '1' }, padding: 'x'.repeat(3 * 1024 * 1024) }))
  })
  const hooks = externalProcessor(spec({ url: `http://127.0.0.1:${port}/` }))
  await t.rejects((hooks.requestHeaders as (r: RequestView) => Promise<HookResult>)(view()), /more than 2162688 bytes/)
})

// An answer is trusted only in the shape the README gives: an action other
// than continue or deny (`DENY`, `reject`: a typo in a guardrail) let the
// request through as if allowed, and a `setHeaders` that was a string set one
// header per character ("abc" → `0: a`, `1: b`, `2: c`). Each fails the callout now.
t.test('an answer of another shape fails the callout instead of passing the request', async (t) => {
  let answer: unknown = {}
  const port = await callout(t, (_url, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(answer))
  })
  const hooks = externalProcessor(spec({ url: `http://127.0.0.1:${port}/` }))
  const call = (a: unknown): Promise<HookResult> => {
    answer = a
    return (hooks.requestHeaders as (r: RequestView) => Promise<HookResult>)(view())
  }
  await t.rejects(call({ action: 'DENY' }), /action/, 'an action in another case')
  await t.rejects(call({ action: 'reject', status: 403 }), /action/, 'an action that is not continue or deny')
  await t.rejects(call({ setHeaders: 'abc' }), /setHeaders/, 'setHeaders a string')
  await t.rejects(call({ setHeaders: ['x'] }), /setHeaders/, 'setHeaders an array')
  await t.rejects(call({ removeHeaders: 'x-a' }), /removeHeaders/, 'removeHeaders a string')
  await t.rejects(call({ removeHeaders: [1] }), /removeHeaders/, 'removeHeaders not names')
  await t.rejects(call(null), /not an object/, 'null')
  await t.rejects(call([]), /not an object/, 'an array')
  t.equal(await call({}), undefined, 'an empty answer continues')
  t.equal(await call({ action: 'continue' }), undefined, 'continue')
  const v = view()
  answer = { action: 'continue', setHeaders: { 'X-A': '1' }, removeHeaders: ['x-b'] }
  v.headers['x-b'] = ['1', '2']
  await (hooks.requestHeaders as (r: RequestView) => Promise<HookResult>)(v)
  t.same(v.headers, { 'x-a': '1' }, 'set and removed (every value of a repeated field)')
})

t.test('a deny carries the setHeaders of its answer to the client', async (t) => {
  const port = await callout(t, (_url, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ action: 'deny', status: 401, reason: 'no', setHeaders: { 'WWW-Authenticate': 'Bearer realm="x"' } }))
  })
  const hooks = externalProcessor(spec({ url: `http://127.0.0.1:${port}/` }))
  const r = await (hooks.requestHeaders as (r: RequestView) => Promise<HookResult>)(view())
  t.same(r, { deny: { status: 401, reason: 'no', headers: { 'www-authenticate': 'Bearer realm="x"' } } })
})
