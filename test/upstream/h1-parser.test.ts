// The HTTP/1.1 response parser of sallyport's upstream client: framing,
// keep-alive, interim responses, strictness (RFC 9112 §6.3, §11.2), bounds,
// and the same events whatever way the bytes are split into reads.

import t from 'tap'
import { maxHeaderSize } from 'node:http'
import { H1ResponseParser, H1ParseError, type H1ResponseHandler, type RawHeaders } from '../../lib/upstream/h1-parser.ts'

type Event =
  | { type: 'interim', status: number, headers: Record<string, string | string[]> }
  | { type: 'head', status: number, headers: Record<string, string | string[]>, keepAlive: boolean }
  | { type: 'body', data: string }
  | { type: 'end', trailers: Record<string, string | string[]> | null }
  | { type: 'error', code: string }

/** Collects the handler's events; consecutive body pieces are merged, the raw chunks kept too. */
class Recorder implements H1ResponseHandler {
  readonly events: Event[] = []
  readonly chunks: Buffer[] = []
  readonly rawHeads: RawHeaders[] = []
  onInterim(status: number, headers: RawHeaders): void {
    this.events.push({ type: 'interim', status, headers: { ...headers } })
  }

  onHead(status: number, headers: RawHeaders, keepAlive: boolean): void {
    this.rawHeads.push(headers)
    this.events.push({ type: 'head', status, headers: { ...headers }, keepAlive })
  }

  onBody(chunk: Buffer): void {
    this.chunks.push(chunk)
    const last = this.events[this.events.length - 1]
    if (last !== undefined && last.type === 'body') last.data += chunk.toString('latin1')
    else this.events.push({ type: 'body', data: chunk.toString('latin1') })
  }

  onEnd(trailers: RawHeaders | null): void {
    this.events.push({ type: 'end', trailers: trailers === null ? null : { ...trailers } })
  }
}

const b = (s: string): Buffer => Buffer.from(s, 'latin1')

/** One response read from `pieces`, then the end of the stream; errors are recorded as events. */
function run(pieces: Buffer[], method = 'GET'): Recorder {
  const rec = new Recorder()
  const parser = new H1ResponseParser(rec)
  parser.expect(method)
  for (const p of pieces) {
    const err = parser.execute(p)
    if (err !== null) { rec.events.push({ type: 'error', code: err.code }); return rec }
  }
  const err = parser.finish()
  if (err !== null) rec.events.push({ type: 'error', code: err.code })
  return rec
}

/** The error code of one response read from `text` in one piece, or null. */
function errorOf(text: string, method = 'GET'): string | null {
  const last = run([b(text)], method).events.at(-1)
  return last !== undefined && last.type === 'error' ? last.code : null
}

const head = (status: number, headers: Record<string, string | string[]>, keepAlive: boolean): Event => ({ type: 'head', status, headers, keepAlive })
const body = (data: string): Event => ({ type: 'body', data })
const end = (trailers: Record<string, string | string[]> | null = null): Event => ({ type: 'end', trailers })

const fixtures: Array<{ name: string, method: string, text: string, events: Event[] }> = [
  {
    name: 'content-length', method: 'GET',
    text: 'HTTP/1.1 200 OK\r\nContent-Length: 11\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello world',
    events: [head(200, { 'content-length': '11', 'x-a': ['1', '2'] }, true), body('hello world'), end()],
  },
  {
    name: 'chunked with extensions and trailers', method: 'GET',
    text: 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;name=val\r\nhello\r\n6 ; q="x"\r\n world\r\nA\r\n0123456789\r\n' +
      '0;last\r\nX-Trailer: yes\r\nX-Trailer: again\r\nChecksum: abc\r\n\r\n',
    events: [head(200, { 'transfer-encoding': 'chunked' }, true), body('hello world0123456789'),
      end({ 'x-trailer': ['yes', 'again'], checksum: 'abc' })],
  },
  {
    name: 'HEAD with Content-Length', method: 'HEAD',
    text: 'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n',
    events: [head(200, { 'content-length': '100' }, true), end()],
  },
  {
    name: '204', method: 'DELETE',
    text: 'HTTP/1.1 204 No Content\r\nX-Id: 7\r\n\r\n',
    events: [head(204, { 'x-id': '7' }, true), end()],
  },
  {
    name: '304 with Content-Length', method: 'GET',
    text: 'HTTP/1.1 304 Not Modified\r\nContent-Length: 42\r\nETag: "a"\r\n\r\n',
    events: [head(304, { 'content-length': '42', etag: '"a"' }, true), end()],
  },
  {
    name: '100 and 103 before 200', method: 'POST',
    text: 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok',
    events: [
      { type: 'interim', status: 100, headers: {} },
      { type: 'interim', status: 103, headers: { link: '</a.css>' } },
      head(200, { 'content-length': '2' }, true), body('ok'), end(),
    ],
  },
  {
    name: 'close-delimited', method: 'GET',
    text: 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the\r\n\r\nend',
    events: [head(200, { 'content-type': 'text/plain' }, false), body('until the\r\n\r\nend'), end()],
  },
]

t.test('every split point gives the events of the unsplit response', async (t) => {
  for (const f of fixtures) {
    const buf = b(f.text)
    const whole = run([buf], f.method).events
    t.same(whole, f.events, `${f.name}: unsplit`)
    const expected = JSON.stringify(whole)
    const bad: number[] = []
    for (let i = 0; i <= buf.length; i++) {
      if (JSON.stringify(run([buf.subarray(0, i), buf.subarray(i)], f.method).events) !== expected) bad.push(i)
    }
    t.same(bad, [], `${f.name}: split in two at every index`)
    const bytes = Array.from(buf, (_, i) => buf.subarray(i, i + 1))
    t.same(run(bytes, f.method).events, whole, `${f.name}: one byte at a time`)
  }
})

t.test('Content-Length body: across reads, and zero-copy', async (t) => {
  const rec = new Recorder()
  const parser = new H1ResponseParser(rec)
  parser.expect('GET')
  t.equal(parser.execute(b('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n')), null)
  t.same(rec.events, [head(200, { 'content-length': '10' }, true)])
  for (const piece of ['abc', 'defg', 'hij']) t.equal(parser.execute(b(piece)), null)
  t.same(rec.chunks.map((c) => c.toString()), ['abc', 'defg', 'hij'])
  t.same(rec.events.slice(1), [body('abcdefghij'), end()])
  t.ok(parser.idle)

  const rec2 = new Recorder()
  const p2 = new H1ResponseParser(rec2)
  p2.expect('GET')
  p2.execute(b('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n'))
  const input = b('hello')
  t.equal(p2.execute(input), null)
  t.equal(rec2.chunks.length, 1)
  t.ok(rec2.chunks[0] === input, 'a read that is all body is handed on as is')

  const rec3 = new Recorder()
  const p3 = new H1ResponseParser(rec3)
  p3.expect('GET')
  const all = b('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello')
  p3.execute(all)
  const chunk = rec3.chunks[0]
  t.ok(chunk.buffer === all.buffer && chunk.byteOffset === all.byteOffset + all.length - 5, 'body after the head is a view, not a copy')
})

t.test('keep-alive', async (t) => {
  const keepAlive = (text: string): boolean | null => {
    const h = run([b(text)]).events[0]
    return h !== undefined && h.type === 'head' ? h.keepAlive : null
  }
  t.equal(keepAlive('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n'), true, 'HTTP/1.1 default')
  t.equal(keepAlive('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n'), false)
  t.equal(keepAlive('HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 0\r\n\r\n'), false)
  t.equal(keepAlive('HTTP/1.1 200 OK\r\nConnection: closed\r\nContent-Length: 0\r\n\r\n'), true, 'a token, not a substring')
  t.equal(keepAlive('HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n'), false, 'HTTP/1.0 default')
  t.equal(keepAlive('HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n'), true)
  t.equal(keepAlive('HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n'), false, 'close-delimited wins over keep-alive')

  const rec = new Recorder()
  const parser = new H1ResponseParser(rec)
  parser.expect('GET')
  t.equal(parser.execute(b('HTTP/1.1 200 OK\r\n\r\nsome')), null)
  t.equal(parser.execute(b(' bytes')), null)
  t.notOk(parser.idle)
  t.same(rec.events, [head(200, {}, false), body('some bytes')], 'no end before the connection closes')
  t.equal(parser.finish(), null)
  t.same(rec.events.at(-1), end())
  t.ok(parser.idle)
})

t.test('two responses on one connection; bytes when idle are an error', async (t) => {
  const rec = new Recorder()
  const parser = new H1ResponseParser(rec)
  t.ok(parser.idle, 'idle before the first request')
  parser.expect('GET')
  t.notOk(parser.idle)
  t.equal(parser.execute(b('HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none')), null)
  t.ok(parser.idle)
  parser.expect('GET')
  t.equal(parser.execute(b('HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n')), null)
  t.ok(parser.idle)
  t.same(rec.events, [head(200, { 'content-length': '3' }, true), body('one'), end(),
    head(404, { 'transfer-encoding': 'chunked' }, true), body('two'), end()])
  const err = parser.execute(b('X'))
  t.ok(err instanceof H1ParseError)
  t.equal(err?.code, 'SP_H1_UNEXPECTED_DATA')
  t.equal(parser.execute(b('HTTP/1.1 200 OK\r\n\r\n')), err, 'stays failed')
  parser.expect('GET')
  t.equal(parser.execute(b('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n')), err, 'expect() does not clear an error')
  t.equal(parser.finish(), err)

  t.equal(errorOf('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n'), 'SP_H1_UNEXPECTED_DATA', 'bytes past the response')
  t.equal(new H1ResponseParser(new Recorder()).execute(b('HTTP/1.1 200 OK\r\n\r\n'))?.code, 'SP_H1_UNEXPECTED_DATA', 'no expect()')
})

t.test('interim responses', async (t) => {
  const rec = run([b('HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n')])
  t.same(rec.events, [
    { type: 'interim', status: 103, headers: { link: '</a>' } },
    head(200, { 'content-length': '0' }, true), end(),
  ], 'the interim head reaches onInterim, the final one onHead')
  const up = run([b('HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n')])
  t.same(up.events, [{ type: 'error', code: 'SP_H1_UNEXPECTED_UPGRADE' }])
})

const chunkedHead = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'
const errors: Array<[string, string, string]> = [
  ['Transfer-Encoding and Content-Length', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['Transfer-Encoding in HTTP/1.0', 'HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['differing Content-Lengths', 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['differing Content-Lengths in one field', 'HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['non-numeric Content-Length', 'HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['signed Content-Length', 'HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['empty Content-Length', 'HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['obs-fold', 'HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\nContent-Length: 0\r\n\r\n', 'SP_H1_BAD_FIELD'],
  ['space before the colon', 'HTTP/1.1 200 OK\r\nFoo : bar\r\n\r\n', 'SP_H1_BAD_FIELD'],
  ['line without a colon', 'HTTP/1.1 200 OK\r\nFoo\r\n\r\n', 'SP_H1_BAD_FIELD'],
  ['empty field name', 'HTTP/1.1 200 OK\r\n: bar\r\n\r\n', 'SP_H1_BAD_FIELD'],
  ['control char in a value', 'HTTP/1.1 200 OK\r\nX-A: a\x01b\r\n\r\n', 'SP_H1_BAD_FIELD'],
  ['NUL in a value', 'HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n', 'SP_H1_BAD_FIELD'],
  ['bare LF inside the head', 'HTTP/1.1 200 OK\r\nX-A: a\nX-B: b\r\n\r\n', 'SP_H1_BAD_FIELD'],
  ['bare CR inside the head', 'HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n', 'SP_H1_BAD_FIELD'],
  ['bare LF in a chunk size line', `${chunkedHead}5\nhello\r\n0\r\n\r\n`, 'SP_H1_BARE_LF'],
  ['bare LF after chunk data', `${chunkedHead}5\r\nhello\n0\r\n\r\n`, 'SP_H1_BARE_LF'],
  ['bare CR in a chunk size line', `${chunkedHead}5\r;x\r\nhello\r\n0\r\n\r\n`, 'SP_H1_BARE_CR'],
  ['HTTP/2.0 status line', 'HTTP/2.0 200 OK\r\n\r\n', 'SP_H1_BAD_STATUS'],
  ['two-digit status', 'HTTP/1.1 20 OK\r\n\r\n', 'SP_H1_BAD_STATUS'],
  ['ICY status line', 'ICY 200 OK\r\n\r\n', 'SP_H1_BAD_STATUS'],
  ['no space after the status', 'HTTP/1.1 200OK\r\n\r\n', 'SP_H1_BAD_STATUS'],
  ['non-hex chunk size', `${chunkedHead}zz\r\n`, 'SP_H1_BAD_CHUNK'],
  ['negative chunk size', `${chunkedHead}-1\r\n`, 'SP_H1_BAD_CHUNK'],
  ['empty chunk size', `${chunkedHead}\r\n`, 'SP_H1_BAD_CHUNK'],
  ['chunk data longer than its size', `${chunkedHead}5\r\nhelloX\r\n0\r\n\r\n`, 'SP_H1_BAD_CHUNK'],
  ['chunk data much longer than its size', `${chunkedHead}5\r\nhello world\r\n0\r\n\r\n`, 'SP_H1_BAD_CHUNK'],
  ['status code under 100', 'HTTP/1.1 099 x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n', 'SP_H1_BAD_STATUS'],
  // RFC 9110 §15: a status code is 100..599; 600..999 are three digits but no HTTP status.
  ['status code 600', 'HTTP/1.1 600 x\r\nContent-Length: 0\r\n\r\n', 'SP_H1_BAD_STATUS'],
  ['status code 999', 'HTTP/1.1 999 x\r\nContent-Length: 0\r\n\r\n', 'SP_H1_BAD_STATUS'],
  // Refused as soon as they are seen, not when a blank line that may never come (or the idle bound) does.
  ['a head with bare LF line ends', 'HTTP/1.1 200 OK\nContent-Length: 2\n\nok', 'SP_H1_BARE_LF'],
  ['an HTTP/0.9 answer: no status line', 'hello world\n', 'SP_H1_BAD_STATUS'],
  ['no status line, bytes still to come', 'X', 'SP_H1_BAD_STATUS'],
  ['obs-fold in trailers', `${chunkedHead}0\r\nX-T: a\r\n b\r\n\r\n`, 'SP_H1_BAD_FIELD'],
  // A transfer coding sallyport does not decode: forwarding the content without it would hand
  // the client coded bytes it cannot know are coded (RFC 9112 §6.1).
  ['a transfer coding before chunked', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['a transfer coding alone', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['Transfer-Encoding: identity', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['chunked twice', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n', 'SP_H1_BAD_FRAMING'],
  ['head longer than maxHeaderSize', `HTTP/1.1 200 OK\r\nX-Big: ${'a'.repeat(maxHeaderSize)}\r\n\r\n`, 'SP_H1_TOO_LONG'],
]

t.test('errors', async (t) => {
  for (const [name, text, code] of errors) {
    const rec = new Recorder()
    const parser = new H1ResponseParser(rec)
    parser.expect('GET')
    const err = parser.execute(b(text))
    t.ok(err instanceof H1ParseError, `${name}: an H1ParseError`)
    t.equal(err?.code, code, name)
    t.equal(parser.execute(b('HTTP/1.1 200 OK\r\n\r\n')), err, `${name}: further reads give the same error`)
    if (!text.startsWith(chunkedHead)) t.same(rec.events, [], `${name}: no head reported`)
  }
  // RFC 9110 §8.6: identical values may be taken as one; the head then carries that one (a client
  // sent two Content-Length lines, or a list, could not tell how long the body is).
  t.same(run([b('HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nok')]).events,
    [head(200, { 'content-length': '2' }, true), body('ok'), end()], 'identical repeated Content-Length: one value')
  t.same(run([b('HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok')]).events,
    [head(200, { 'content-length': '2' }, true), body('ok'), end()], 'identical list: one value')
})

t.test('head size bound', async (t) => {
  const pad = (n: number): string => {
    const start = 'HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Pad: '
    return start + 'p'.repeat(n - start.length)
  }
  t.equal(errorOf(`${pad(maxHeaderSize)}\r\n\r\n`), null, 'exactly maxHeaderSize is accepted')
  t.equal(errorOf(`${pad(maxHeaderSize + 1)}\r\n\r\n`), 'SP_H1_TOO_LONG', 'one byte more is not')

  // Accumulated over many small reads: fails on the read that takes it past the bound, not before.
  const parser = new H1ResponseParser(new Recorder())
  parser.expect('GET')
  const piece = b('X-Many: 0123456789012345678901234567890123456789\r\n')
  const status = b('HTTP/1.1 200 OK\r\n')
  let total = status.length
  let err: H1ParseError | null = parser.execute(status)
  while (err === null && total < 4 * maxHeaderSize) {
    err = parser.execute(piece)
    total += piece.length
  }
  t.equal(err?.code, 'SP_H1_TOO_LONG')
  t.ok(total > maxHeaderSize && total - piece.length <= maxHeaderSize, 'fails as soon as the bound is passed')
})

t.test('field-count bound: 128 fields in a head or a trailer section, as an HTTP/2 upstream gets (node\'s maxHeaderListPairs)', async (t) => {
  const fields = (n: number): string => Array.from({ length: n }, (_, i) => `x-${i}: v\r\n`).join('')
  t.equal(errorOf(`HTTP/1.1 200 OK\r\nContent-Length: 0\r\n${fields(127)}\r\n`), null, '128 fields are accepted')
  t.equal(errorOf(`HTTP/1.1 200 OK\r\nContent-Length: 0\r\n${fields(128)}\r\n`), 'SP_H1_TOO_MANY_FIELDS', '129 are not, though the head is under its size bound')
  t.equal(errorOf(`HTTP/1.1 103 Early Hints\r\n${fields(129)}\r\n`), 'SP_H1_TOO_MANY_FIELDS', 'an interim head the same')
  const chunked = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n'
  t.equal(errorOf(`${chunked}${fields(128)}\r\n`), null, '128 trailer fields are accepted')
  t.equal(errorOf(`${chunked}${fields(129)}\r\n`), 'SP_H1_TOO_MANY_FIELDS', '129 are not')
})

t.test('a head within the bound is accepted whatever the split', async (t) => {
  const start = 'HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Pad: '
  const text = b(`${start}${'p'.repeat(maxHeaderSize - start.length)}\r\n\r\n`)
  const at = maxHeaderSize + 1 // after the head's text and the first CR
  t.same(run([text]).events, [head(200, { 'content-length': '0', 'x-pad': 'p'.repeat(maxHeaderSize - start.length) }, true), end()])
  for (const cut of [at - 1, at, at + 1, at + 2]) {
    t.same(run([text.subarray(0, cut), text.subarray(cut)]).events, run([text]).events, `split ${cut - maxHeaderSize} bytes into CRLFCRLF`)
  }
})

t.test('an incomplete head that cannot become a response fails at once, whatever the split', async (t) => {
  // An upstream answering with bare LF line ends, or without a status line (HTTP/0.9),
  // never sends the CRLFCRLF the head waits for: without this the request waited for
  // the idle bound (minutes) or the upstream's close.
  for (const [name, text, code] of [
    ['bare LF', 'HTTP/1.1 200 OK\nContent-Length: 2\n\nok', 'SP_H1_BARE_LF'],
    ['bare LF after CRLF lines', 'HTTP/1.1 200 OK\r\nX-A: 1\nX-B: 2\r\n', 'SP_H1_BARE_LF'],
    ['no status line', 'hello world\n', 'SP_H1_BAD_STATUS'],
    ['lower-case protocol', 'http/1.1 200 OK\r\n', 'SP_H1_BAD_STATUS'],
  ] as const) {
    const bytes = b(text)
    for (let cut = 1; cut < bytes.length; cut++) {
      const events = run([bytes.subarray(0, cut), bytes.subarray(cut)]).events
      t.same(events.at(-1), { type: 'error', code }, `${name}: split at ${cut}`)
    }
  }
  // A head split anywhere, CR and LF apart included, is no error.
  const text = b('HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n')
  for (let cut = 1; cut < text.length; cut++) {
    t.same(run([text.subarray(0, cut), text.subarray(cut)]).events, [head(200, { 'x-a': '1', 'content-length': '0' }, true), end()], `split at ${cut}`)
  }
  // The status line's start arriving a byte at a time is fine.
  const parser = new H1ResponseParser(new Recorder())
  parser.expect('GET')
  for (const c of 'HTTP/1.1 2') t.equal(parser.execute(b(c)), null, `byte ${JSON.stringify(c)}`)
})

t.test('finish()', async (t) => {
  t.same(run([b('HTTP/1.1 200 OK\r\nContent-Len')]).events, [{ type: 'error', code: 'SP_H1_INCOMPLETE' }], 'mid-head')
  t.same(run([]).events, [{ type: 'error', code: 'SP_H1_INCOMPLETE' }], 'no bytes at all')
  t.same(run([b('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel')]).events.at(-1), { type: 'error', code: 'SP_H1_INCOMPLETE' }, 'mid body')
  t.same(run([b(`${chunkedHead}5\r\nhello\r\n`)]).events.at(-1), { type: 'error', code: 'SP_H1_INCOMPLETE' }, 'mid chunked body')
  t.same(run([b(`${chunkedHead}0\r\nX-T: 1\r\n`)]).events.at(-1), { type: 'error', code: 'SP_H1_INCOMPLETE' }, 'mid trailers')
  const parser = new H1ResponseParser(new Recorder())
  parser.expect('GET')
  t.equal(parser.execute(b('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok')), null)
  t.equal(parser.finish(), null, 'after a complete response')
  t.equal(new H1ResponseParser(new Recorder()).finish(), null, 'before any request')
})

t.test('header handling', async (t) => {
  const rec = run([b('HTTP/1.1 200 OK\r\nX-Multi: a\r\nContent-Length: 0\r\nx-MULTI: b\r\nX-Multi: c\r\n' +
    'X-Ows: \t inner  space \t\r\nX-Empty:\r\n__proto__: polluted\r\nConstructor: c\r\n\r\n')])
  t.same(rec.events, [head(200, {
    'x-multi': ['a', 'b', 'c'], 'content-length': '0', 'x-ows': 'inner  space', 'x-empty': '', constructor: 'c',
  }, true), end()])
  const headers = rec.rawHeads[0]
  t.equal(Object.getPrototypeOf(headers), Object.prototype, 'the prototype is untouched by a `__proto__` field')
  t.notOk(Object.hasOwn(headers, '__proto__'), 'a `__proto__` field is dropped')
  t.equal(headers.constructor, 'c', 'a field named like a prototype property is an own value')
  t.same(Object.keys(headers), ['x-multi', 'content-length', 'x-ows', 'x-empty', 'constructor'])
  const twice = run([b('HTTP/1.1 200 OK\r\nToString: a\r\ntostring: b\r\nContent-Length: 0\r\n\r\n')]).rawHeads[0]
  t.same(twice.tostring, ['a', 'b'], 'repeated prototype-named fields collect into an array, not onto the inherited function')

  const trailers = run([b(`${chunkedHead}0\r\n__proto__: t\r\nX-T: 1\r\n\r\n`)]).events.at(-1)
  t.ok(trailers !== undefined && trailers.type === 'end' && trailers.trailers !== null && !Object.hasOwn(trailers.trailers, '__proto__') && trailers.trailers['x-t'] === '1', 'trailers too')
})

t.test('Transfer-Encoding: chunked, in any case, is the one coding taken', async (t) => {
  t.same(run([b('HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n')]).events,
    [head(200, { 'transfer-encoding': 'Chunked' }, true), body('abc'), end()], 'any case')
  for (const te of ['gzip, chunked', 'gzip\r\nTransfer-Encoding: chunked', 'gzip', 'chunked, gzip', 'chunked, chunked', 'identity', ', chunked']) {
    t.equal(errorOf(`HTTP/1.1 200 OK\r\nTransfer-Encoding: ${te}\r\n\r\n3\r\nabc\r\n0\r\n\r\n`), 'SP_H1_BAD_FRAMING', JSON.stringify(te))
  }
})

t.test('field names: common ones in any case, near misses and others as they are, lower-cased; invalid ones refused', async (t) => {
  const rec = run([b('HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 2\r\nContent-Type: text/plain\r\netag: "x"\r\nServer: a\r\nServeR: b\r\n' +
    'Content-Typf: near\r\nContent_Type: underscore\r\nX-Custom-Thing: y\r\nConnection: Keep-Alive\r\n\r\nok')])
  t.same(rec.events, [
    head(200, {
      'content-length': '2', 'content-type': 'text/plain', etag: '"x"', server: ['a', 'b'],
      'content-typf': 'near', content_type: 'underscore', 'x-custom-thing': 'y', connection: 'Keep-Alive',
    }, true),
    body('ok'),
    { type: 'end', trailers: null },
  ], 'CONTENT-LENGTH frames the body; repeated names in another case are one field')
  // Letters fold, nothing else does: '-' is not '\r' (0x2d vs 0x0d | 0x20) and '@' is not '`'.
  t.equal(errorOf('HTTP/1.1 200 OK\r\nContent\rLength: 2\r\n\r\nok'), 'SP_H1_BAD_FIELD')
  t.equal(errorOf('HTTP/1.1 200 OK\r\nD@te: x\r\ncontent-length: 0\r\n\r\n'), 'SP_H1_BAD_FIELD')
  t.equal(errorOf('HTTP/1.1 200 OK\r\nDa te: x\r\ncontent-length: 0\r\n\r\n'), 'SP_H1_BAD_FIELD')
  t.equal(errorOf('HTTP/1.1 200 OK\r\n__proto__: x\r\ncontent-length: 0\r\n\r\n'), null, '__proto__ is dropped, not an error')
})
