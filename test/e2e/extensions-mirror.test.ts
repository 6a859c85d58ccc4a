// The real CLI with a RequestMirror filter on a route whose Backend injects a
// credential: the mirror gets the request as the client sent it (before any
// backend's extension chain), with or without a body; the primary gets the key.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { backendYaml, eventually, freePort, gatewayYaml, request, startCli, tempDir } from './harness.ts'
import { egressBackend, recorder, route, send } from './extensions-helpers.ts'

const KEY = 'PROVIDER-SECRET-KEY'

t.test('CLI: a mirrored request never carries the credential injected for the primary backend', async (t) => {
  const primary = await recorder(t)
  const shadow = await recorder(t)
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(httpPort))
  fs.writeFileSync(path.join(dir, 'secret.yaml'), `apiVersion: v1
kind: Secret
metadata:
  name: provider-key
  namespace: default
stringData:
  token: ${KEY}
`)
  fs.writeFileSync(path.join(dir, 'backends.yaml'), `${egressBackend('provider', primary.port, `  - name: inject
    type: CredentialInjector
    config:
      secretRef:
        name: provider-key
`)}---
${backendYaml('shadow', shadow.port)}`)
  fs.writeFileSync(path.join(dir, 'route.yaml'), route('api', 'api.example.test', 'provider', primary.port, `        - type: RequestMirror
          requestMirror:
            backendRef:
              group: gateway.envoyproxy.io
              kind: Backend
              name: shadow
              port: ${shadow.port}`))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--access-log', 'off'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')

  const get = await send(httpPort, { host: 'api.example.test', path: '/get-no-body' })
  t.equal(get.status, 200)
  const post = await send(httpPort, { host: 'api.example.test', path: '/post-with-body', headers: { 'content-type': 'application/json' }, body: '{"q":1}' })
  t.equal(post.status, 200)

  t.same(primary.seen.map((s) => [s.url, s.headers.authorization]), [['/get-no-body', `Bearer ${KEY}`], ['/post-with-body', `Bearer ${KEY}`]],
    'the primary backend gets the credential both times')
  await eventually(async () => shadow.seen.length, (n) => n === 2, 10000, 'both requests mirrored')
  const mirrored = shadow.seen.slice().sort((a, b) => a.url.localeCompare(b.url))
  t.same(mirrored.map((s) => [s.method, s.url, s.headers.authorization]), [['GET', '/get-no-body', undefined], ['POST', '/post-with-body', undefined]],
    'the mirror never sees the credential, with or without a body')
  t.equal(mirrored[1]?.body, '{"q":1}', 'the mirror got the body')
})
