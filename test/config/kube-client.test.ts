// KubeClient against a real TLS API endpoint on 127.0.0.1 (a test CA in the
// kubeconfig, a bearer token): requests share pooled keep-alive connections
// instead of a TLS handshake each (status writes come by the thousand at
// start-up), the token is sent on every request, and a failure drops the
// pooled connections so the next request starts over.
import t, { type Test } from 'tap'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import { KubeClient, KubeApiError, retryAfterMs } from '../../lib/config/kube-client.ts'
import { KubeConfig } from '@kubernetes/client-node'
import { createCa, serverCert } from '../helpers/pki.ts'

interface Api { readonly port: number; connections: number; readonly auth: string[]; readonly server: https.Server }

async function api(t: Test, handler: (res: import('node:http').ServerResponse) => void = (res) => { res.setHeader('content-type', 'application/json'); res.end('{"ok":true}') }): Promise<Api & { ca: string }> {
  const ca = createCa('kube test CA')
  const leaf = serverCert(ca, ['localhost'])
  const server = https.createServer({ cert: leaf.certPem, key: leaf.keyPem })
  const a = { port: 0, connections: 0, auth: [] as string[], server, ca: ca.certPem }
  server.on('secureConnection', () => { a.connections++ })
  server.on('request', (req, res) => { a.auth.push(req.headers.authorization ?? ''); handler(res) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  a.port = (server.address() as AddressInfo).port
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return a
}

function client(port: number, caPem: string): KubeClient {
  const kc = new KubeConfig()
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: `https://127.0.0.1:${port}`, caData: Buffer.from(caPem).toString('base64'), skipTLSVerify: false }],
    users: [{ name: 'u', token: 'secret-token' }],
    contexts: [{ name: 'ctx', cluster: 'c', user: 'u' }],
    currentContext: 'ctx',
  })
  return new KubeClient(kc)
}

t.test('sequential requests reuse one verified TLS connection and carry the token', async (t) => {
  const a = await api(t)
  const c = client(a.port, a.ca)
  t.teardown(() => c.close())
  for (let i = 0; i < 20; i++) t.same(await c.request('GET', '/api/v1/namespaces/default/pods/x'), { ok: true })
  // undici may open a second connection while the first is being released; never one per request.
  t.ok(a.connections <= 2, `20 requests used ${a.connections} TLS connections`)
  t.ok(a.auth.every((h) => h === 'Bearer secret-token'), 'every request authenticated')
})

t.test('concurrent requests share a bounded pool of connections', async (t) => {
  const a = await api(t)
  const c = client(a.port, a.ca)
  t.teardown(() => c.close())
  for (let round = 0; round < 5; round++) {
    await Promise.all(Array.from({ length: 4 }, () => c.request('GET', '/api/v1/namespaces')))
  }
  t.ok(a.connections <= 8, `4 workers × 5 rounds (20 requests) used ${a.connections} connections`)
})

t.test('a server the CA does not vouch for is refused; a non-2xx answer is a typed error', async (t) => {
  const a = await api(t)
  const other = createCa('some other CA')
  const c = client(a.port, other.certPem)
  t.teardown(() => c.close())
  const err = await c.request('GET', '/api/v1/namespaces').catch((e: unknown) => e)
  t.ok(err instanceof KubeApiError && err.statusCode === 0, 'unreachable (certificate not trusted)')

  const b = await api(t, (res) => { res.statusCode = 403; res.setHeader('content-type', 'application/json'); res.end('{"kind":"Status","reason":"Forbidden","message":"no"}') })
  const d = client(b.port, b.ca)
  t.teardown(() => d.close())
  const e = await d.request('GET', '/api/v1/secrets').catch((x: unknown) => x)
  t.ok(e instanceof KubeApiError && e.statusCode === 403 && e.reason === 'Forbidden')
})

t.test('after a connection failure the next request connects afresh', async (t) => {
  const a = await api(t)
  const c = client(a.port, a.ca)
  t.teardown(() => c.close())
  await c.request('GET', '/api/v1/namespaces')
  a.server.closeAllConnections()
  // The pooled socket is gone; the request still succeeds on a new connection.
  let ok = false
  for (let i = 0; i < 3 && !ok; i++) ok = await c.request('GET', '/api/v1/namespaces').then(() => true, () => false)
  t.ok(ok)
  t.ok(a.connections >= 2)
})

t.test('Retry-After: seconds or an HTTP-date, bounded; on a 429 it rides the error', async (t) => {
  const now = Date.parse('2026-11-27T00:00:00Z')
  t.equal(retryAfterMs('3', now), 3000, 'delay-seconds')
  t.equal(retryAfterMs(' 0 ', now), 0, 'zero')
  t.equal(retryAfterMs('Fri, 27 Nov 2026 00:00:05 GMT', now), 5000, 'an HTTP-date')
  t.equal(retryAfterMs('Thu, 26 Nov 2026 00:00:05 GMT', now), 0, 'a date past')
  t.equal(retryAfterMs('86400', now), 60_000, 'at most a minute')
  t.equal(retryAfterMs('soon', now), null, 'unreadable: none')
  t.equal(retryAfterMs('-1', now), null, 'negative: none')
  t.equal(retryAfterMs(undefined, now), null, 'absent: none')
  const a = await api(t, (res) => { res.statusCode = 429; res.setHeader('retry-after', '2'); res.setHeader('content-type', 'application/json'); res.end('{"kind":"Status","reason":"TooManyRequests","message":"slow down"}') })
  const err = await client(a.port, a.ca).request('GET', '/api/v1/namespaces').catch((e: unknown) => e)
  t.ok(err instanceof KubeApiError, 'a KubeApiError')
  t.match(err, { statusCode: 429, reason: 'TooManyRequests', retryAfterMs: 2000 })
})
