// The access line is built in bytes, not by pino: it must be the very line pino
// writes for log.info(record, 'request') on the access child, for every kind of
// value (escapes, non-ASCII, lone surrogates, nulls, fractions, long paths),
// whether the sink takes bytes or strings.
import t from 'tap'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { createAccessLog, type AccessRecord } from '../../lib/observe/access-log.ts'

const base: AccessRecord = {
  method: 'GET', authority: 'api.example.test', path: '/v1/items', status: 200, durationMs: 0.564, upstreamMs: 0.31,
  bytesIn: 0, bytesOut: 1234, route: 'httproute/default/api/rule/0', backend: 'Backend/default/api:443', upstream: '127.0.0.1:8443', retries: 0,
  protocol: 'h1', client: '10.0.0.7', clientNamespace: 'team-a', clientServiceAccount: 'worker', code: null, reason: null, grpcStatus: null,
}

const records: Array<[string, AccessRecord]> = [
  ['plain', base],
  ['nulls and integers', { ...base, upstreamMs: null, durationMs: 12, clientNamespace: null, clientServiceAccount: null }],
  ['a gRPC call', { ...base, grpcStatus: 14 }],
  ['retried', { ...base, retries: 2 }],
  ['an error', { ...base, status: 503, code: 'SP_ERR_NO_HEALTHY_UPSTREAM', reason: 'no endpoint "ready" \\ here' }],
  ['escapes', { ...base, path: '/a"b\\c\td\u0001e\u007f', authority: 'h\u0000st' }],
  ['non-ASCII', { ...base, path: '/caf\u00e9/\u6f22/\u{1f642}', method: 'G\u00c9T' }],
  ['a long path', { ...base, path: '/' + 'p\u00e9'.repeat(5000) }],
  ['userinfo left out', { ...base, authority: 'user:secret@api.example.test' }],
  ['tiny and huge numbers', { ...base, durationMs: 1e-7, bytesOut: 2 ** 53 - 1 }],
  ['numbers past the safe integers and not rounded', { ...base, durationMs: 2 ** 53 + 2, upstreamMs: 0.1 + 0.2, bytesIn: 1e21, bytesOut: 123456.7891 }],
  // Durations as the request path rounds them (to the microsecond): the
  // numbers are written without a string (a string per duration outlived the
  // minor GCs in V8's number-to-string cache), so every shape of them is here.
  ...[0, 0.001, 0.01, 0.1, 0.02, 0.25, 0.5, 1, 1.001, 1.01, 1.1, 9.999, 10, 99.9, 100.05, 999.999, 1000, 1234.5, 65535.123, 999999999.999, 1e9, 1e9 + 0.5, 1e12 + 0.125]
    .map((ms): [string, AccessRecord] => [`duration ${ms}`, { ...base, durationMs: ms, upstreamMs: ms / 2 }]),
]


/** What pino writes for the record at the same time. */
function pinoLine(r: AccessRecord, time: string): string {
  let out = ''
  const sink = new Writable({ write(chunk: Buffer, _e, cb) { out += chunk.toString('utf8'); cb() } })
  const at = r.authority.lastIndexOf('@')
  const authority = at === -1 ? r.authority : r.authority.slice(at + 1)
  const direct = pino({ base: { pid: process.pid }, timestamp: () => `,"time":"${time}"` }, sink as unknown as pino.DestinationStream)
  direct.child({ component: 'access' }).info({ ...r, authority }, 'request')
  return out
}

for (const [how, takesBytes] of [['bytes', true], ['strings', false]] as const) {
  t.test(`each line is pino's line (a sink taking ${how})`, async (t) => {
    const lines: string[] = []
    const sink = takesBytes
      ? { write(): void { throw new Error('bytes expected') }, writeBytes(b: Buffer, n: number): void { lines.push(b.toString('utf8', 0, n)) } }
      : { write(line: string): void { lines.push(line) } }
    const log = createAccessLog(true, sink)
    if (log === null) throw new Error('no access log')
    for (const [name, r] of records) {
      log.write(r)
      const line = lines.at(-1) ?? ''
      const time = (JSON.parse(line) as { time: string }).time
      t.match(time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, `${name}: ISO time with milliseconds`)
      t.equal(line, pinoLine(r, time), `${name}: same text as pino`)
    }
    t.notMatch(lines.join(''), /secret/, 'no userinfo anywhere')
    // Random durations in every range the gateway sees, rounded as forward.ts rounds them.
    const differ: string[] = []
    for (let i = 0; i < 300; i++) {
      const raw = Math.random() * 10 ** (i % 8 - 2)
      const r = { ...base, durationMs: Math.round(raw * 1000) / 1000, upstreamMs: Math.round(raw * 500) / 1000, bytesOut: Math.floor(raw * 1e4) }
      log.write(r)
      const line = lines.at(-1) ?? ''
      const expected = pinoLine(r, (JSON.parse(line) as { time: string }).time)
      if (line !== expected) differ.push(`${line} != ${expected}`)
    }
    t.same(differ, [], '300 random durations: the same text as pino')
    // Where pino differs, on purpose: it writes a lone surrogate as U+FFFD; the
    // access line escapes it (as JSON.stringify does), so the path round-trips.
    log.write({ ...base, path: '/x\ud800y\udc00' })
    const line = lines.at(-1) ?? ''
    t.match(line, /"path":"\/x\\ud800y\\udc00"/, 'a lone surrogate is escaped')
    t.equal((JSON.parse(line) as { path: string }).path, '/x\ud800y\udc00', 'and reads back as it was')
  })
}

t.test('off: no access log', async (t) => {
  t.equal(createAccessLog(false, { write() {} }), null)
  t.equal(createAccessLog(true, null), null)
})
