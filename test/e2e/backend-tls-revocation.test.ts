// `sallyport serve` checking revocation of upstream chains (CRLs, stapled
// OCSP) against servers that send more than their chain: a certificate that
// only borrows its issuer's name (a "decoy" intermediate, its own key) must not
// stand in for the issuer the chain was verified with, or the revocation checks
// would look for the issuer's signature under the wrong key.

import t from 'tap'
import fs from 'node:fs'
import https from 'node:https'
import path from 'node:path'
import type { Test } from 'tap'
import { caConfigMapYaml, eventually, freePort, gatewayYaml, metricSum, request, routeYaml, startCli, tempDir } from './harness.ts'
import { createCa, createIntermediate, makeCrl, ocspResponse, serverCert, type Leaf, type TestCa } from '../helpers/pki.ts'

const DAY = 86400_000
const root = createCa('e2e revocation root')
const inter = createIntermediate(root, 'e2e revocation intermediate')
// Same subject Name as the intermediate, its own key, self-signed and expired: OpenSSL
// builds the verified chain through the valid intermediate, but Node's
// getPeerCertificate(true) links the leaf to the first certificate carrying the name.
const decoy = createCa('e2e revocation intermediate', { notBefore: new Date(Date.now() - 3 * DAY), notAfter: new Date(Date.now() - 2 * DAY) })
const revoked = serverCert(inter, ['api.test'])
const crl = makeCrl(inter, { revoked: [revoked] }) + makeCrl(root)

function crlConfigMap(name: string, pem: string): string {
  return `apiVersion: v1
kind: ConfigMap
metadata: { name: ${name}, namespace: default }
data:
  ca.crl: |
${pem.trim().split(/\r?\n/).map((l) => `    ${l}`).join('\n')}
---
`
}

function tlsBackend(name: string, port: number, annotations: Readonly<Record<string, string>>): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
  annotations:
${Object.entries(annotations).map(([k, v]) => `    ${k}: "${v}"`).join('\n')}
spec:
  endpoints:
    - ip: { address: 127.0.0.1, port: ${port} }
  tls:
    sni: api.test
    caCertificateRefs:
      - { kind: ConfigMap, name: root-ca }
---
`
}

async function upstream(t: Test, leaf: Leaf, chainPem: string, staple: Buffer | null): Promise<number> {
  const server = https.createServer({ key: leaf.keyPem, cert: leaf.certPem + chainPem }, (_req, res) => res.end('reached'))
  if (staple !== null) {
    server.on('OCSPRequest', (_c: Buffer, _i: Buffer, cb: (err: Error | null, resp?: Buffer) => void) => cb(null, staple))
  }
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return (server.address() as { port: number }).port
}

t.test('serve: a decoy intermediate in the served chain does not hide a revoked leaf or forge a staple', async (t) => {
  const ocspLeaf = serverCert(inter, ['api.test'])
  const forged = ocspResponse(decoy as TestCa, ocspLeaf) // signed by the decoy's key, CertID over the decoy
  const ports = {
    crlHonest: await upstream(t, revoked, inter.chainPem, null),
    crlDecoy: await upstream(t, revoked, decoy.certPem + inter.chainPem, null),
    ocspDecoy: await upstream(t, ocspLeaf, decoy.certPem + inter.chainPem, forged),
  }
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const crlNotes = { 'sallyport.io/crl-refs': 'ConfigMap/inter-crl' }
  fs.writeFileSync(path.join(dir, 'all.yaml'), gatewayYaml(httpPort) + '---\n' +
    caConfigMapYaml('root-ca', root.certPem) + '---\n' + crlConfigMap('inter-crl', crl) +
    tlsBackend('crl-honest', ports.crlHonest, crlNotes) + tlsBackend('crl-decoy', ports.crlDecoy, crlNotes) +
    tlsBackend('ocsp-decoy', ports.ocspDecoy, { 'sallyport.io/ocsp': 'require' }) +
    routeYaml('crl-honest', 'crl-honest.test', 'crl-honest', ports.crlHonest) + '---\n' +
    routeYaml('crl-decoy', 'crl-decoy.test', 'crl-decoy', ports.crlDecoy) + '---\n' +
    routeYaml('ocsp-decoy', 'ocsp-decoy.test', 'ocsp-decoy', ports.ocspDecoy))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--log-level', 'warn', '--allow-destination-cidr', '127.0.0.0/8'])
  const admin = `http://127.0.0.1:${adminPort}`
  await eventually(() => request(`${admin}/readyz`), (r) => r.status === 200, 20000, '/readyz 200')
  const get = (host: string) => request(`http://127.0.0.1:${httpPort}/`, { host })

  const honest = await get('crl-honest.test')
  t.equal(honest.status, 502, 'the revoked leaf with its real chain is refused')
  t.match(honest.body, /revoked/)

  const decoyed = await get('crl-decoy.test')
  t.equal(decoyed.status, 502, 'the revoked leaf behind a decoy intermediate is refused too')
  t.match(decoyed.body, /bad_chain/)

  const stapled = await get('ocsp-decoy.test')
  t.equal(stapled.status, 502, 'a staple the decoy signed is no good staple')
  t.match(stapled.body, /bad_chain/)

  const metrics = (await request(`${admin}/metrics`)).body
  t.equal(metricSum(metrics, 'sallyport_upstream_tls_handshake_errors_total', { reason: 'bad_chain' }), 2, 'counted as bad_chain')
})
