// The real CLI: `sallyport validate` reports what compile finds between
// objects (a route to a missing Backend, a parentRef typo) and exits 1 on
// errors; the quickstart configuration stays clean.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { runCli, tempDir } from './harness.ts'

const config = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: egress, namespace: default }
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: 8080 }]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: openai, namespace: default }
spec:
  endpoints: [{ fqdn: { hostname: api.openai.com, port: 443 } }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: openai, namespace: default }
spec:
  parentRefs: [{ name: egress }]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: openia, port: 443 }]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: anthropic, namespace: default }
spec:
  parentRefs: [{ name: egres }]
  rules:
    - backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: openai, port: 443 }]
`

t.test('validate: a route to a missing Backend is an error, a parentRef typo a warning', async (t) => {
  const file = path.join(tempDir(t), 'egress.yaml')
  fs.writeFileSync(file, config)
  const r = await runCli(t, ['validate', file])
  t.equal(r.code, 1)
  t.equal(r.stdout, [
    `${file}:2: HTTPRoute default/openai: spec.rules[0].backendRefs[0]: Backend default/openia (gateway.envoyproxy.io) not found (ResolvedRefs=False: BackendNotFound)`,
    `${file}:3: HTTPRoute default/anthropic: spec.parentRefs[0]: Gateway default/egres is not in these files`,
    '',
  ].join('\n'))
  t.equal(r.stderr, '1 error, 1 warning\n')
})

t.test('validate: the quickstart configuration has no findings', async (t) => {
  const r = await runCli(t, ['validate', path.join(import.meta.dirname, '../../fixtures/quickstart')])
  t.equal(r.code, 0)
  t.equal(r.stdout, '')
  t.equal(r.stderr, '0 errors, 0 warnings\n')
})
