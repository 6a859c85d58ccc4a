// `sallyport serve` with an Envoy Gateway Backend listing several `fqdn`
// endpoints and TLS that names no `sni` or `validation.hostname`: each
// endpoint's connections (HTTP pools and TCPRoute dials alike) send that endpoint's own hostname as SNI and verify
// the certificate against it (certificates here name one host each, no IP
// SAN), and pools are kept apart by that name, so two names on one address and
// port never share a connection. An explicit `sni` still wins for every endpoint.
// Names resolve through dnsmasq on a loopback port.

import t, { type Test } from 'tap'
import fs from 'node:fs'
import https from 'node:https'
import path from 'node:path'
import type { AddressInfo } from 'node:net'
import { createSecureContext, type TLSSocket } from 'node:tls'
import { caConfigMapYaml, eventually, freePort, gatewayYaml, rawExchange, request, startCli, tempDir } from './harness.ts'
import { createCa, serverCert } from '../helpers/pki.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'

const skip = dnsmasqSkip()
const ca = createCa('fqdn e2e root')
// One name each, and no IP SAN: verified against the address, they would fail.
const certA = serverCert(ca, ['a.example.test'], { ips: [] })
const certB = serverCert(ca, ['b.example.test'], { ips: [] })

function backend(name: string, endpoints: ReadonlyArray<readonly [string, number]>, sni: string | null): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
spec:
  endpoints:
${endpoints.map(([host, port]) => `    - fqdn:\n        hostname: ${host}\n        port: ${port}\n`).join('')}  tls:
${sni === null ? '' : `    sni: ${sni}\n`}    caCertificateRefs:
      - kind: ConfigMap
        name: fqdn-ca
---
`
}

function route(name: string, hostname: string, backendName: string): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs:
    - name: egress
  hostnames: [${hostname}]
  rules:
    - backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: ${backendName}
---
`
}

function tcpRoute(name: string, backendName: string): string {
  return `apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs:
    - name: egress
      sectionName: tcp
  rules:
    - backendRefs:
        - group: gateway.envoyproxy.io
          kind: Backend
          name: ${backendName}
---
`
}

/** An HTTPS upstream answering `served=<its name> sni=<the client's SNI>`; `byName` picks the certificate by SNI. */
async function upstream(t: Test, served: string, cert: { certPem: string; keyPem: string }, byName = false): Promise<number> {
  const contexts = new Map([
    ['a.example.test', createSecureContext({ cert: certA.certPem, key: certA.keyPem })],
    ['b.example.test', createSecureContext({ cert: certB.certPem, key: certB.keyPem })],
  ])
  const server = https.createServer({
    cert: cert.certPem, key: cert.keyPem,
    ...(byName ? { SNICallback: (name: string, cb: (err: Error | null, ctx?: ReturnType<typeof createSecureContext>) => void) => cb(null, contexts.get(name)) } : {}),
  }, (req, res) => {
    const sni = (req.socket as TLSSocket & { servername?: string | false }).servername
    res.end(`served=${served} sni=${sni === false || sni === undefined ? 'none' : sni}`)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return (server.address() as AddressInfo).port
}

t.test('serve: a Backend with several fqdn endpoints sends and verifies each endpoint\'s own name', { skip: skip ?? false }, async (t) => {
  const portA = await upstream(t, 'a', certA)
  const portB = await upstream(t, 'b', certB)
  const shared = await upstream(t, 'shared', certA, true)
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.1 a.example.test', '127.0.0.1 b.example.test'], ttl: 1 })

  const [httpPort, adminPort, tcpPort] = [await freePort(), await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'config.yaml'), [
    gatewayYaml(httpPort, `    - name: tcp\n      protocol: TCP\n      port: ${tcpPort}\n`) + '---\n',
    caConfigMapYaml('fqdn-ca', ca.certPem) + '---\n',
    backend('two', [['a.example.test', portA], ['b.example.test', portB]], null), route('two', 'two.example.test', 'two'), tcpRoute('two-tcp', 'two'),
    backend('one-port', [['a.example.test', shared], ['b.example.test', shared]], null), route('one-port', 'one-port.example.test', 'one-port'),
    backend('pinned', [['a.example.test', shared], ['b.example.test', shared]], 'a.example.test'), route('pinned', 'pinned.example.test', 'pinned'),
  ].join(''))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`,
    '--dns-server', dns.server, '--drain-seconds', '1', '--access-log', 'off'])
  await eventually(() => request(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 20000, 'ready')
  const bodies = async (host: string, n: number): Promise<string[]> => {
    const out: string[] = []
    for (let i = 0; i < n; i++) {
      const r = await request(`http://127.0.0.1:${httpPort}/`, { host })
      out.push(`${r.status} ${r.body}`)
    }
    return out
  }

  const two = await bodies('two.example.test', 6)
  t.same(two.filter((b) => !/^200 served=(a sni=a|b sni=b)\.example\.test$/.test(b)), [], 'every request succeeds, each upstream seeing its own name as SNI')
  t.ok(two.includes('200 served=a sni=a.example.test') && two.includes('200 served=b sni=b.example.test'), 'both endpoints are used')

  // Both names on one address and port: a connection made for one name never serves the other.
  const onePort = await bodies('one-port.example.test', 6)
  t.same(onePort.filter((b) => !/^200 served=shared sni=[ab]\.example\.test$/.test(b)), [], 'every request succeeds on one address and port')
  t.ok(onePort.includes('200 served=shared sni=a.example.test') && onePort.includes('200 served=shared sni=b.example.test'), 'each endpoint has its own pool, keyed by its name')

  // An explicit sni is the name of every endpoint, as before.
  const pinned = await bodies('pinned.example.test', 4)
  t.same(pinned, Array(4).fill('200 served=shared sni=a.example.test'), 'tls.sni wins for all endpoints')

  // A TCPRoute to the same Backend originates TLS per endpoint the same way.
  const tcp: string[] = []
  for (let i = 0; i < 4; i++) {
    const raw = await rawExchange(tcpPort, 'GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n', { until: /served=.*sni=\S+$/ })
    tcp.push(raw.slice(raw.indexOf('\r\n\r\n') + 4))
  }
  t.same(tcp.filter((b) => !/^served=(a sni=a|b sni=b)\.example\.test$/.test(b)), [], 'every TCPRoute connection gets through, each upstream seeing its own name')
  t.ok(tcp.includes('served=a sni=a.example.test') && tcp.includes('served=b sni=b.example.test'), 'both endpoints are dialled')
})
