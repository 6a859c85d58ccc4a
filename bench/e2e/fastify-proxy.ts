// fastify with @fastify/reply-from, the reference issue 3 names beside nginx for
// the HTTP/1.1 throughput target ("1.5x fastify with @fastify/reply-from"), run
// as its own process:
//   node bench/e2e/fastify-proxy.ts <listenPort> <upstreamPort>
// As its README sets it up: every path forwarded to one base URL through
// reply-from's undici pool, fastify's logger off, request bodies passed on as
// streams (no content-type parsing).

import Fastify from 'fastify'
import replyFrom from '@fastify/reply-from'

const listenPort = Number(process.argv[2])
const upstreamPort = Number(process.argv[3])

const app = Fastify({ logger: false, keepAliveTimeout: 120_000 })
app.removeAllContentTypeParsers()
app.addContentTypeParser('*', (_request, payload, done) => { done(null, payload) })
await app.register(replyFrom, { base: `http://127.0.0.1:${upstreamPort}`, undici: { connections: 128, pipelining: 1 } })
app.all('/*', (request, reply) => { void reply.from(request.url) })
await app.listen({ port: listenPort, host: '127.0.0.1' })
process.on('SIGTERM', () => { void app.close().then(() => process.exit(0)) })
