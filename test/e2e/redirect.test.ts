// HTTPRoute RequestRedirect through the real CLI: scheme, hostname, port and
// path replacement (Gateway API: default ports left out of Location), and the
// rule's ResponseHeaderModifier on the redirect itself (it was skipped there).
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, rawExchange, startCli, tempDir } from './harness.ts'
import { get } from './extensions-helpers.ts'

t.test('CLI: RequestRedirect, with the rule\'s response headers', async (t) => {
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml(port))
  fs.writeFileSync(path.join(dir, 'route.yaml'), `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: moved, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [old.example.test]
  rules:
    - matches: [{ path: { type: PathPrefix, value: /api } }]
      filters:
        - type: RequestRedirect
          requestRedirect: { scheme: https, hostname: new.example.test, statusCode: 301, path: { type: ReplacePrefixMatch, replacePrefixMatch: /v2 } }
        - type: ResponseHeaderModifier
          responseHeaderModifier: { set: [{ name: Cache-Control, value: no-store }], add: [{ name: X-Moved, value: "yes" }] }
`)
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const r = await rawExchange(port, 'GET /api/items?page=2 HTTP/1.1\r\nHost: old.example.test\r\nConnection: close\r\n\r\n')
  const head = r.slice(0, r.indexOf('\r\n\r\n'))
  t.match(head, /^HTTP\/1\.1 301 /, '301')
  t.match(head, /\r\nlocation: https:\/\/new\.example\.test\/v2\/items\?page=2(?:\r\n|$)/i, 'https, the new host without the default port, the prefix replaced, the query kept')
  t.match(head, /\r\ncache-control: no-store(?:\r\n|$)/i, 'the rule\'s ResponseHeaderModifier set a field on the redirect')
  t.match(head, /\r\nx-moved: yes(?:\r\n|$)/i, 'and added one')
})
