// Response headers at the upstream boundary (RFC 9110 §7.6.1): hop-by-hop
// fields and the fields the Connection header names never reach the client.

import t from 'tap'
import { responseHeaders } from '../../lib/upstream/headers.ts'

t.test('hop-by-hop fields and pseudo-headers are dropped; numbers become strings', async (t) => {
  t.same(responseHeaders({
    ':status': '200', connection: 'keep-alive', 'keep-alive': 'timeout=5', 'transfer-encoding': 'chunked',
    'content-length': 12 as unknown as string, 'x-kept': 'v',
  }, null), { 'content-length': '12', 'x-kept': 'v' })
})

t.test('fields named in Connection are dropped, whatever the case and spacing', async (t) => {
  const raw = { connection: 'Keep-Alive , X-Private,x-other', 'x-private': 's', 'x-other': 'o', 'x-kept': 'v' }
  t.same(responseHeaders(raw, null), { 'x-kept': 'v' })
  t.same(responseHeaders({ connection: ['close', 'X-Private'], 'x-private': 's', 'x-kept': 'v' }, null), { 'x-kept': 'v' })
  t.same(responseHeaders({ connection: 'x-private', 'x-private': 's' }, null), {})
  t.same(responseHeaders({ connection: 'close', close: 'odd but named', 'x-kept': 'v' }, null), { 'x-kept': 'v' })
})

t.test('`keep` preserves one hop-by-hop field (upgrade on a 101)', async (t) => {
  t.same(responseHeaders({ connection: 'upgrade', upgrade: 'websocket', 'sec-websocket-accept': 'a' }, 'upgrade'), { upgrade: 'websocket', 'sec-websocket-accept': 'a' })
})
