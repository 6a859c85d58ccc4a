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
