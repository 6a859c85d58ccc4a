// The HTTP/1.1 pool frees a request body chunk once it is written, when the
// body is an owned stream (lib/upstream/release.ts): over plain TCP and over
// TLS the upstream gets every byte, the chunks sent are freed, and chunks
// someone keeps (the retry replay buffer) or of a stream nobody vouched for
// are left alone.

import t from 'tap'
import { createHash } from 'node:crypto'
import http from 'node:http'
import https from 'node:https'
import { Readable } from 'node:stream'
import type { Server } from 'node:net'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import { ownedStreams, retained } from '../../lib/upstream/release.ts'
import type { Cluster } from '../../lib/compile/table.ts'
import { createCa, serverCert } from '../helpers/pki.ts'
import { cluster, clusterTls, endpoint, expectResponse, forward, listen, readBody, request, table } from './fixtures.ts'

const CHUNK = 64 * 1024
const COUNT = 64

/** Fresh, unpooled chunks with distinct contents (each the whole of its ArrayBuffer). */
function chunks(): Buffer[] {
  return Array.from({ length: COUNT }, (_, i) => Buffer.alloc(CHUNK, i % 251))
}

function sha256(parts: readonly Buffer[]): string {
  const h = createHash('sha256')
  for (const p of parts) h.update(p)
  return h.digest('hex')
}

/** Answers with the sha256 of the request body. */
function hashing(req: http.IncomingMessage, res: http.ServerResponse): void {
  const h = createHash('sha256')
  req.on('data', (c: Buffer) => h.update(c))
  req.on('end', () => res.end(h.digest('hex')))
}

const ca = createCa('release root')
const leaf = serverCert(ca, ['api.test'])

async function send(c: Cluster, body: Readable): Promise<string> {
  const up = createUpstreams()
  up.retain(table([c]))
  try {
    const res = expectResponse(await forward(up, request(c, { method: 'POST', body, headers: { 'content-length': String(CHUNK * COUNT) } })))
    return await readBody(res.body)
  } finally {
    await up.close()
  }
}

t.test('an owned body: every byte arrives, over TCP and TLS, and the chunks are freed once written', async (t) => {
  const plain = http.createServer(hashing)
  const tls = https.createServer({ key: leaf.keyPem, cert: leaf.fullChainPem, ALPNProtocols: ['http/1.1'] }, hashing)
  t.teardown(() => { for (const s of [plain, tls] as Server[]) s.close() })
  const clusters: Array<[string, Cluster]> = [
    ['TCP', cluster({ protocol: 'HTTP11', endpoints: [endpoint(await listen(plain))] })],
    ['TLS', cluster({ protocol: 'HTTP11', endpoints: [endpoint(await listen(tls))], tls: clusterTls({ servername: 'api.test', verifyHostname: 'api.test', caPem: ca.certPem }) })],
  ]
  for (const [name, c] of clusters) {
    const parts = chunks()
    const expected = sha256(parts)
    const body = Readable.from(parts, { objectMode: false })
    ownedStreams.add(body)
    t.equal(await send(c, body), expected, `${name}: the upstream got every byte`)
    t.equal(parts.filter((p) => p.buffer.byteLength === 0).length, COUNT, `${name}: every chunk was freed once written`)
  }
})

t.test('kept chunks, and bodies nobody vouched for, are not freed', async (t) => {
  const server = http.createServer(hashing)
  t.teardown(() => server.close())
  const c = cluster({ protocol: 'HTTP11', endpoints: [endpoint(await listen(server))] })

  const parts = chunks()
  const expected = sha256(parts)
  for (const p of parts.slice(0, 4)) retained.add(p)
  const body = Readable.from(parts, { objectMode: false })
  ownedStreams.add(body)
  t.equal(await send(c, body), expected)
  t.equal(parts.slice(0, 4).filter((p) => p.buffer.byteLength === CHUNK).length, 4, 'the kept chunks are intact')
  t.equal(parts.slice(4).filter((p) => p.buffer.byteLength === 0).length, COUNT - 4, 'the others were freed')

  const other = chunks()
  t.equal(await send(c, Readable.from(other, { objectMode: false })), sha256(other))
  t.equal(other.filter((p) => p.buffer.byteLength === CHUNK).length, COUNT, 'a stream not marked owned keeps all its chunks')
})
