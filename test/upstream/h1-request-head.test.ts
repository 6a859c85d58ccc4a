// The request head sallyport's HTTP/1.1 client writes (h1-client.ts
// requestHead): Host first, end-to-end fields as given, framing and connection
// fields its own, and nothing that could split the head or the request.
import t from 'tap'
import { requestHead as headBytes } from '../../lib/upstream/h1-client.ts'

/** The head as the bytes read back (latin1), or the error. */
function requestHead(...args: Parameters<typeof headBytes>): string | Error {
  const head = headBytes(...args)
  return head instanceof Error ? head : head.toString('latin1')
}

function code(x: string | Error): string {
  return typeof x === 'string' ? 'ok' : (x as Error & { code?: string }).code ?? '?'
}

t.test('a GET: host first, fields as given, keep-alive', async (t) => {
  const head = requestHead('GET', '/a?b=1', 'api.example.test', { accept: 'text/plain', 'x-many': ['1', '2'] }, false, false)
  t.equal(head, 'GET /a?b=1 HTTP/1.1\r\nhost: api.example.test\r\naccept: text/plain\r\nx-many: 1\r\nx-many: 2\r\nconnection: keep-alive\r\n\r\n')
})

t.test('framing and hop-by-hop fields are the client\'s own', async (t) => {
  const head = requestHead('GET', '/', 'h', { host: 'other', connection: 'upgrade', 'keep-alive': 'timeout=5', te: 'trailers', 'transfer-encoding': 'chunked', 'content-length': '10', upgrade: 'websocket' }, false, true)
  t.equal(head, 'GET / HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n', 'the last request of a connection says close; a bodiless request sends no length')
  t.equal(requestHead('POST', '/', 'h', {}, false, false), 'POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\nconnection: keep-alive\r\n\r\n', 'a bodiless POST says its length is 0')
  t.equal(requestHead('POST', '/', 'h', { 'content-length': '5' }, true, false), 'POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 5\r\nconnection: keep-alive\r\n\r\n', 'a body with a length keeps it')
  t.equal(requestHead('POST', '/', 'h', {}, true, false), 'POST / HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n', 'a body without one goes chunked')
})

t.test('nothing that could split the head or the request is written', async (t) => {
  t.equal(code(requestHead('GET', '/', 'h', { 'x-a': 'one\r\nx-injected: two' }, false, false)), 'SP_H1_BAD_REQUEST', 'CRLF in a value')
  t.equal(code(requestHead('GET', '/', 'h', { 'x-a': ['ok', 'bad\n'] }, false, false)), 'SP_H1_BAD_REQUEST', 'LF in one of several values')
  t.equal(code(requestHead('GET', '/', 'h', { 'bad name': 'x' }, false, false)), 'SP_H1_BAD_REQUEST', 'a space in a name')
  t.equal(code(requestHead('GET', '/a b', 'h', {}, false, false)), 'SP_H1_BAD_REQUEST', 'a space in the path')
  t.equal(code(requestHead('GET', '', 'h', {}, false, false)), 'SP_H1_BAD_REQUEST', 'an empty path')
  t.equal(code(requestHead('GE T', '/', 'h', {}, false, false)), 'SP_H1_BAD_REQUEST', 'a method that is not a token')
  t.equal(code(requestHead('GET', '/', 'h\r\nx: y', {}, false, false)), 'SP_H1_BAD_REQUEST', 'CRLF in the host')
  t.equal(code(requestHead('POST', '/', 'h', { 'content-length': ['5', '6'] }, true, false)), 'SP_H1_BAD_REQUEST', 'two lengths')
  t.equal(code(requestHead('POST', '/', 'h', { 'content-length': '5x' }, true, false)), 'SP_H1_BAD_REQUEST', 'a length that is not a number')
  t.equal(requestHead('GET', '/', 'h', { 'x-ok': 'tab\tand obs-text \u00e9' }, false, false), 'GET / HTTP/1.1\r\nhost: h\r\nx-ok: tab\tand obs-text \u00e9\r\nconnection: keep-alive\r\n\r\n', 'HTAB and obs-text are fine, one byte each')
})

t.test('a head larger than the shared scratch buffer is written whole, and the next one is not polluted', async (t) => {
  const big = 'v'.repeat(40_000)
  const head = requestHead('GET', '/big', 'h', { 'x-big': big, 'x-after': 'end' }, false, false)
  t.equal(head, `GET /big HTTP/1.1\r\nhost: h\r\nx-big: ${big}\r\nx-after: end\r\nconnection: keep-alive\r\n\r\n`)
  const first = headBytes('GET', '/one', 'h', {}, false, false)
  const second = headBytes('GET', '/two', 'h', {}, false, false)
  t.equal((first as Buffer).toString('latin1'), 'GET /one HTTP/1.1\r\nhost: h\r\nconnection: keep-alive\r\n\r\n', 'a taken head is its own bytes, not a view of the scratch buffer')
  t.equal((second as Buffer).toString('latin1'), 'GET /two HTTP/1.1\r\nhost: h\r\nconnection: keep-alive\r\n\r\n')
  const failed = headBytes('GET', '/x', 'h', { 'x-long': 'w'.repeat(100), 'x-bad': 'a\nb' }, false, false)
  t.ok(failed instanceof Error, 'a head that fails half-built is an error')
  t.equal((headBytes('GET', '/y', 'h', {}, false, false) as Buffer).toString('latin1'), 'GET /y HTTP/1.1\r\nhost: h\r\nconnection: keep-alive\r\n\r\n', 'and leaves nothing behind in the next head')
})
