// The real CLI with policy extensions: the example Plugin loaded by path;
// priority order (two header-setting extensions, higher priority first, as the
// upstream sees them); precedence Route > Backend > Gateway with the oldest
// winning among equals, conflicts in /config_dump status; Authorization by the
// namespace of the Pod whose IP sent the request and by the SPIFFE ID of a
// verified client certificate on an HTTPS listener with frontend validation;
// an Event (a log line in file mode) for every denial.
import t from 'tap'
import fs from 'node:fs'
import https from 'node:https'
import path from 'node:path'
import { createCa, clientCert, serverCert } from '../helpers/pki.ts'
import { eventually, freePort, startCli, tempDir } from './harness.ts'
import { egressBackend, get, pod, recorder, route, send, type Sent } from './extensions-helpers.ts'

function plugin(name: string, value: string, priority = 0, header = 'x-order'): string {
  return `  - name: ${name}
    type: Plugin
    priority: ${priority}
    config:
      path: fixtures/plugins/append-header.ts
      options: { header: ${header}, value: ${value} }
`
}

function egressExtension(name: string, created: string, extensions: string, targetRefs = ''): string {
  return `apiVersion: sallyport.io/v1alpha1
kind: EgressExtension
metadata:
  name: ${name}
  namespace: default
  creationTimestamp: "${created}"
spec:
${targetRefs}  extensions:
${extensions}`
}

const refFilter = (name: string): string => `        - type: ExtensionRef
          extensionRef: { group: sallyport.io, kind: EgressExtension, name: ${name} }`

function gateways(httpPort: number, httpsPort: number, otherPort: number, certPem: string, keyPem: string, clientCaPem: string): string {
  const indent = (pem: string): string => pem.trim().split('\n').map(l => `    ${l}`).join('\n')
  return `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: sallyport }
spec: { controllerName: sallyport.io/gateway-controller }
---
apiVersion: v1
kind: Secret
metadata: { name: gw-cert, namespace: default }
type: kubernetes.io/tls
stringData:
  tls.crt: |
${indent(certPem)}
  tls.key: |
${indent(keyPem)}
---
apiVersion: v1
kind: ConfigMap
metadata: { name: client-ca, namespace: default }
data:
  ca.crt: |
${indent(clientCaPem)}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: egress
  namespace: default
  annotations: { sallyport.io/allow-destination-cidrs: 127.0.0.0/8 }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: http, protocol: HTTP, port: ${httpPort} }
    - name: https
      protocol: HTTPS
      port: ${httpsPort}
      tls: { mode: Terminate, certificateRefs: [{ name: gw-cert }] }
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{ group: "", kind: ConfigMap, name: client-ca }]
          mode: AllowValidOnly
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: other
  namespace: default
  annotations: { sallyport.io/allow-destination-cidrs: 127.0.0.0/8 }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: http, protocol: HTTP, port: ${otherPort} }
`
}

const upstreamSaw = (body: string): Sent => JSON.parse(body) as Sent

t.test('CLI: Plugin, priority, precedence, Authorization by Pod IP and SPIFFE ID, Events', async (t) => {
  const up = await recorder(t)
  const [httpPort, httpsPort, otherPort, adminPort] = [await freePort(), await freePort(), await freePort(), await freePort()]
  const serverCa = createCa('gateway CA')
  const gwCert = serverCert(serverCa, ['authz.example.test'])
  const clientCa = createCa('workload CA')
  const dir = tempDir(t)
  const w = (file: string, text: string): void => fs.writeFileSync(path.join(dir, file), text)
  w('gateways.yaml', gateways(httpPort, httpsPort, otherPort, gwCert.certPem, gwCert.keyPem, clientCa.certPem))
  w('pods.yaml', [pod('team-a', 'a-1', 'app', '127.0.0.2'), pod('team-b', 'b-1', 'app', '127.0.0.3')].join('---\n'))
  w('plain.yaml', `${egressBackend('plain', up.port, '  []\n').replace('  extensions:\n  []\n', '')}`)
  // Priority: declared low first; high (10) must run first.
  w('order.yaml', egressBackend('order', up.port, plugin('low', 'low', 1) + plugin('high', 'high', 10)))
  w('routes.yaml', [
    route('plugin', 'plugin.example.test', 'plain', up.port, refFilter('tenant')),
    route('order', 'order.example.test', 'order', up.port),
    route('authz', 'authz.example.test', 'plain', up.port, refFilter('team-a-only')),
  ].join('---\n'))
  w('extensions.yaml', [
    egressExtension('tenant', '2024-01-01T00:00:00Z', `  - name: tenant
    type: Plugin
    config:
      path: fixtures/plugins/tenant-header.ts
      options: { requireTenant: true }
`),
    egressExtension('team-a-only', '2024-01-01T00:00:00Z', `  - name: who
    type: Authorization
    config:
      allow: [{ namespace: team-a }]
`),
  ].join('---\n'))
  // Precedence, on the Gateway "other": the extension "tag" at all three scopes and twice at Route scope.
  w('precedence.yaml', [
    egressBackend('prec', up.port, plugin('tag', 'backend')),
    route('prec', 'prec.example.test', 'prec', up.port, refFilter('route-new')).replace('- name: egress', '- name: other'),
    egressExtension('route-new', '2024-02-01T00:00:00Z', plugin('tag', 'route-new')),
    egressExtension('route-old', '2024-01-01T00:00:00Z', plugin('tag', 'route-old'), `  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: prec }]\n`),
    egressExtension('gateway-wide', '2023-01-01T00:00:00Z', plugin('tag', 'gateway') + plugin('gw-only', 'gw', 0, 'x-gateway'),
      `  targetRefs: [{ group: gateway.networking.k8s.io, kind: Gateway, name: other }]\n`),
  ].join('---\n'))

  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  t.test('the example Plugin, loaded by path', async (t) => {
    const refused = await send(httpPort, { host: 'plugin.example.test', from: '127.0.0.2' })
    t.equal(refused.status, 400, 'requireTenant: no x-tenant header → the plugin denies')
    t.match(refused.body, /x-tenant header required/)
    const ok = await send(httpPort, { host: 'plugin.example.test', from: '127.0.0.2', headers: { 'x-tenant': 't1' } })
    t.equal(ok.status, 200)
    t.equal(upstreamSaw(ok.body).headers['x-caller-namespace'], 'team-a', 'request hook: the caller namespace (Pod 127.0.0.2)')
    t.equal(ok.headers['x-plugin'], 'tenant-header', 'response hook: a header for the client')
  })

  t.test('priority: higher first', async (t) => {
    const r = await send(httpPort, { host: 'order.example.test' })
    t.equal(upstreamSaw(r.body).headers['x-order'], 'high,low', 'priority 10 ran before priority 1 (declared after it)')
  })

  t.test('precedence: Route > Backend > Gateway; oldest wins at one scope; conflicts in status', async (t) => {
    const r = await send(otherPort, { host: 'prec.example.test' })
    t.equal(r.status, 200)
    const seen = upstreamSaw(r.body).headers
    t.equal(seen['x-order'], 'route-old', 'only the Route-scope "tag" of the oldest EgressExtension ran')
    t.equal(seen['x-gateway'], 'gw', 'a Gateway-scope extension of another name still applies')
    const dump = JSON.parse((await get(`http://127.0.0.1:${adminPort}/config_dump`, 'x')).body) as { status: Array<{ kind: string; name: string; conditions: Array<{ type: string; message: string }> }> }
    const cond = (kind: string, name: string, type: string): string | undefined =>
      dump.status.find(s => s.kind === kind && s.name === name)?.conditions.find(c => c.type === type)?.message
    t.match(cond('EgressExtension', 'route-new', 'Conflicted'), /tag: EgressExtension default\/route-old is older at the same scope/, 'same scope: the newer is Conflicted')
    t.match(cond('Backend', 'prec', 'Overridden'), /tag: EgressExtension default\/route-old is more specific/, 'Backend scope: Overridden by Route')
    t.match(cond('EgressExtension', 'gateway-wide', 'Overridden'), /tag: .* is more specific/, 'Gateway scope: Overridden')
    t.equal(cond('EgressExtension', 'route-old', 'Conflicted'), undefined, 'the winner has no conflict')
  })

  t.test('Authorization by the Pod IP namespace', async (t) => {
    t.equal((await send(httpPort, { host: 'authz.example.test', from: '127.0.0.2' })).status, 200, 'team-a (127.0.0.2) may')
    const denied = await send(httpPort, { host: 'authz.example.test', from: '127.0.0.3' })
    t.equal(denied.status, 403, 'team-b (127.0.0.3) may not')
    t.match(denied.body, /client team-b\/app may not use this route/, 'the reason')
    const unknown = await send(httpPort, { host: 'authz.example.test', from: '127.0.0.1' })
    t.equal(unknown.status, 403, 'an unidentified client is denied')
    t.match(unknown.body, /client identity unknown/)
  })

  t.test('Authorization by the SPIFFE ID of a verified client certificate', async (t) => {
    const ask = (ns: string): Promise<{ status: number; body: string }> => {
      const c = clientCert(clientCa, `${ns}-app`, { uris: [`spiffe://cluster.local/ns/${ns}/sa/app`] })
      return new Promise((resolve, reject) => {
        const req = https.request({
          host: '127.0.0.1', port: httpsPort, path: '/', servername: 'authz.example.test', ca: serverCa.certPem,
          cert: c.certPem, key: c.keyPem, agent: false, headers: { host: 'authz.example.test' },
        }, (res) => {
          let body = ''
          res.setEncoding('utf8').on('data', (s: string) => { body += s }).on('end', () => resolve({ status: res.statusCode ?? 0, body }))
        })
        req.setTimeout(10000, () => req.destroy(new Error('timeout')))
        req.on('error', reject)
        req.end()
      })
    }
    // The source is 127.0.0.1 (no Pod): the identity comes from the certificate alone.
    t.equal((await ask('team-a')).status, 200, 'spiffe://…/ns/team-a/sa/app may')
    const denied = await ask('team-b')
    t.equal(denied.status, 403, 'spiffe://…/ns/team-b/sa/app may not')
    t.match(denied.body, /client team-b\/app may not use this route/)
  })

  t.test('an Event (log line) for each denial', async (t) => {
    await cli.waitFor(/"reason":"ExtensionDenied".*who denied a request to default\/authz: 403/, 10000)
    await cli.waitFor(/"reason":"ExtensionDenied".*tenant denied a request to default\/plugin: 400 x-tenant header required/, 10000)
    t.pass('denials by Authorization and by the Plugin emitted Events')
  })
})
