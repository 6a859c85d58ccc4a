// The real CLI with an OAuth2 token whose lifetime (expires_in 60) is no
// longer than the refresh lead (refreshBeforeSeconds, default 60): the token
// is fetched once and served from the cache, not fetched on every request
// and once a second while idle.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, startCli, tempDir } from './harness.ts'
import { egressBackend, get, recorder, route, send } from './extensions-helpers.ts'

t.test('CLI: OAuth2 expires_in ≤ refreshBeforeSeconds: one fetch, the token served from the cache', async (t) => {
  let fetches = 0
  const tokens = await recorder(t, (_req, res) => {
    fetches++
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ access_token: `tok-${fetches}`, token_type: 'Bearer', expires_in: 60 }))
  })
  const api = await recorder(t)
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'secret.yaml'), `apiVersion: v1
kind: Secret
metadata: { name: oauth-client, namespace: default }
stringData: { client_id: gateway-client, client_secret: s3cr3t-oauth-value }
`)
  fs.writeFileSync(path.join(dir, 'oauth.yaml'), egressBackend('oauth', api.port, `  - name: oauth
    type: OAuth2ClientCredentials
    config:
      tokenUrl: http://127.0.0.1:${tokens.port}/oauth/token
      secretRef: { name: oauth-client }
`))
  fs.writeFileSync(path.join(dir, 'routes.yaml'), route('oauth', 'oauth.example.test', 'oauth', api.port))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off'])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  for (let i = 0; i < 20; i++) {
    const r = await send(httpPort, { host: 'oauth.example.test' })
    t.equal(r.status, 200)
  }
  t.same(new Set(api.seen.map((s) => s.headers.authorization)), new Set(['Bearer tok-1']), 'every request carries the cached token')
  t.equal(fetches, 1, '20 requests, one fetch')
  // Idle: the background refresh is half a lifetime (30 s) away, not a second.
  await new Promise((resolve) => setTimeout(resolve, 2500))
  t.equal(fetches, 1, 'no fetch while idle')
})

// A token the provider revoked before its expiry: the upstream answers 401 to
// it. That answer goes back to the client (no retry policy lists 401), and the
// cached token is dropped, so the next request carries a new one instead of
// the dead one for the rest of its hour. An upstream that refuses every token
// costs at most about one fetch a second.
t.test('CLI: OAuth2: an upstream 401 to the cached token drops it; the next request fetches a new one; bounded', async (t) => {
  let fetches = 0
  const tokens = await recorder(t, (_req, res) => {
    fetches++
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ access_token: `tok-${fetches}`, token_type: 'Bearer', expires_in: 3600 }))
  })
  const revoked = new Set<string>()
  let refuseAll = false
  const api = await recorder(t, (req, res) => {
    const auth = String(req.headers.authorization)
    if (refuseAll || revoked.has(auth)) return void res.writeHead(401, { 'www-authenticate': 'Bearer error="invalid_token"' }).end('revoked')
    res.writeHead(200).end(auth)
  })
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'all.yaml'), `${gatewayYaml(httpPort)}---
apiVersion: v1
kind: Secret
metadata: { name: oauth-client, namespace: default }
stringData: { client_id: gateway-client, client_secret: s3cr3t-oauth-value }
---
${egressBackend('oauth', api.port, `  - name: oauth
    type: OAuth2ClientCredentials
    config:
      tokenUrl: http://127.0.0.1:${tokens.port}/oauth/token
      secretRef: { name: oauth-client }
`)}---
${route('oauth', 'oauth.example.test', 'oauth', api.port)}`)
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off'])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  t.equal((await send(httpPort, { host: 'oauth.example.test' })).body, 'Bearer tok-1')
  // The drop waits a second after the fetch (the refetch bound).
  await new Promise((resolve) => setTimeout(resolve, 1100))
  revoked.add('Bearer tok-1')
  const seenBefore = api.seen.length
  const refused = await send(httpPort, { host: 'oauth.example.test' })
  t.equal(refused.status, 401, 'the 401 goes back to the client')
  t.equal(api.seen.length, seenBefore + 1, 'and is not retried')
  const next = await eventually(() => send(httpPort, { host: 'oauth.example.test' }), (r) => r.status === 200, 5000, 'a request with a new token')
  t.equal(next.body, 'Bearer tok-2', 'the next request carries a new token')
  t.equal(fetches, 2, 'one fetch for the 401')

  // Every token refused for 3 s: at most about one fetch a second.
  refuseAll = true
  const from = fetches
  const until = Date.now() + 3000
  let n = 0
  // Paced, so the 3 s pass before the count bound on a fast machine too (the drop waits a second).
  while (Date.now() < until && n < 1000) {
    n++
    await send(httpPort, { host: 'oauth.example.test' })
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  t.ok(n > 20, `${n} refused requests`)
  t.ok(fetches - from <= 4, `bounded refetches: ${fetches - from} in 3 s`)
  t.ok(fetches - from >= 1, 'a refused token is replaced')
})
