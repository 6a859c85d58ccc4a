// Exchange.respond's contract on node's HTTP/1.1 server (H1Exchange) and its
// HTTP/2 server (H2Exchange): fields the client's protocol cannot carry are
// refused (false), nothing is sent, and the same exchange can still answer
// (the router's 502); fields it can carry go out (true). The fast path's
// exchange has the same test in h1-fast.test.ts.
import t from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import type { AddressInfo } from 'node:net'
import { H1Exchange } from '../../lib/listeners/exchange-h1.ts'
import { H2Exchange } from '../../lib/listeners/exchange-h2.ts'
import type { OutgoingHeaders } from '../../lib/upstream/types.ts'

const TEXT = { 'content-type': 'text/plain; charset=utf-8' }

/** Answers each request with `first`; when refused, with a 502 on the same exchange. Records both results. */
function answerer(first: (path: string) => OutgoingHeaders): { results: Array<[boolean, boolean | null]>, answer: (ex: H1Exchange | H2Exchange, path: string) => void } {
  const results: Array<[boolean, boolean | null]> = []
  return {
    results,
    answer: (ex, path) => {
      const ok = ex.respond(200, first(path), 'fine\n')
      results.push([ok, ok ? null : ex.respond(502, { ...TEXT }, 'upstream protocol error\n')])
    },
  }
}

const FIELDS = (path: string): OutgoingHeaders => path === '/bad-h1' ? { 'x-crlf': 'a\r\nx-injected: 1' }
  : path === '/twice' ? { 'content-type': ['text/plain', 'text/html'] } : { 'x-fine': 'yes' }

t.test('H1Exchange: a field node will not write is refused, then a 502 goes out on the same exchange', async (t) => {
  const { results, answer } = answerer(FIELDS)
  const server = http.createServer((req, res) => answer(new H1Exchange(req, res, 0, 'http'), req.url ?? '/'))
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const port = (server.address() as AddressInfo).port
  const fetchText = async (p: string): Promise<[number, string, string | null]> => {
    const r = await fetch(`http://127.0.0.1:${port}${p}`)
    return [r.status, await r.text(), r.headers.get('x-injected')]
  }
  t.same(await fetchText('/bad-h1'), [502, 'upstream protocol error\n', null], 'CR LF in a value: 502, nothing injected')
  t.same(await fetchText('/twice'), [200, 'fine\n', null], 'two content-type fields: HTTP/1.1 carries them')
  t.same(await fetchText('/ok'), [200, 'fine\n', null])
  t.same(results, [[false, true], [true, null], [true, null]])
})

t.test('H2Exchange: a single-value field twice is refused, then a 502 goes out on the same stream', async (t) => {
  const { results, answer } = answerer(FIELDS)
  const server = http2.createServer()
  server.on('stream', (stream, headers, flags) => answer(new H2Exchange(stream, headers, flags, 0, 'http', { address: '127.0.0.1', spiffeId: null, sni: null }), String(headers[':path'])))
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const session = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)
  t.teardown(() => { session.close(); server.close() })
  const get = (p: string): Promise<[number, string]> => new Promise((resolve, reject) => {
    const s = session.request({ ':path': p })
    let status = 0
    let body = ''
    s.setEncoding('utf8')
    s.on('response', (h) => { status = Number(h[':status']) })
    s.on('data', (c: string) => { body += c })
    s.on('end', () => resolve([status, body]))
    s.on('error', reject)
  })
  t.same(await get('/twice'), [502, 'upstream protocol error\n'], 'two content-type fields: 502')
  t.same(await get('/ok'), [200, 'fine\n'])
  t.same(results, [[false, true], [true, null]])
})
