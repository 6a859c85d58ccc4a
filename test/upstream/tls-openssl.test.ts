// Against `openssl s_server`, where OpenSSL behaves unlike node:tls servers:
// it refuses an untrusted client certificate inside the handshake (an alert
// the gateway reports as client_cert_rejected), reports the client
// certificate it verified, and staples the OCSP response given by -status_file.

import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { createUpstreams } from '../../lib/upstream/registry.ts'
import type { Cluster, ClusterTls } from '../../lib/compile/table.ts'
import { cluster, clusterTls, endpoint, expectError, forward, readBody, request } from './fixtures.ts'
import { clientCert, createCa, createIntermediate, ocspResponse, serverCert } from '../helpers/pki.ts'

const root = createCa('openssl root')
const inter = createIntermediate(root, 'openssl intermediate')
const leaf = serverCert(inter, ['api.test'])
const gateway = clientCert(inter, 'gateway-client')
const stranger = clientCert(createCa('stranger CA'), 'stranger')

async function freePort(): Promise<number> {
  const s = net.createServer()
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))
  const port = (s.address() as net.AddressInfo).port
  await new Promise<void>((resolve) => s.close(() => resolve()))
  return port
}

/** `openssl s_server -www` on a loopback port, killed in teardown; resolves once it accepts. */
async function sServer(t: Test, extra: string[], files: Record<string, string | Buffer>): Promise<number> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-openssl-'))
  for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), content)
  const port = await freePort()
  const child = spawn('openssl', ['s_server', '-accept', `127.0.0.1:${port}`, '-www', '-cert', 'leaf.pem', '-key', 'leaf.key', '-cert_chain', 'chain.pem', ...extra], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => { child.kill('SIGKILL'); fs.rmSync(dir, { recursive: true, force: true }) })
  const deadline = Date.now() + 10_000
  for (let i = 0; i < 200 && Date.now() < deadline; i++) {
    const up = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => { s.destroy(); resolve(true) })
      s.on('error', () => resolve(false))
    })
    if (up) return port
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error('openssl s_server did not start')
}

const baseFiles = { 'leaf.pem': leaf.certPem, 'leaf.key': leaf.keyPem, 'chain.pem': inter.certPem, 'root.pem': root.certPem }

function c(port: number, over: Partial<ClusterTls>): Cluster {
  return cluster({ protocol: 'HTTP11', endpoints: [endpoint(port)], tls: clusterTls({ servername: 'api.test', verifyHostname: 'api.test', caPem: root.certPem, ...over }) })
}

t.test('openssl s_server requiring a client certificate (TLS 1.2 and 1.3)', async (t) => {
  const up = createUpstreams()
  t.teardown(() => up.close())
  for (const version of ['-tls1_2', '-tls1_3']) {
    const port = await sServer(t, [version, '-Verify', '2', '-verify_return_error', '-CAfile', 'root.pem'], baseFiles)
    const o = await forward(up, request(c(port, { certPem: gateway.fullChainPem, keyPem: gateway.keyPem })))
    t.equal(o.kind, 'response', `${version}: mTLS accepted`)
    if (o.kind === 'response') t.match(await readBody(o.res.body), /CN\s*=\s*gateway-client/, `${version}: s_server verified our certificate`)
    const err = expectError(await forward(up, request(c(port, { certPem: stranger.certPem, keyPem: stranger.keyPem }))))
    t.equal(err.detail, 'client_cert_rejected', `${version}: an untrusted client certificate is refused (${err.message})`)
  }
})

t.test('openssl s_server stapling an OCSP response (-status_file)', async (t) => {
  const up = createUpstreams()
  t.teardown(() => up.close())
  const good = await sServer(t, ['-status_file', 'ocsp.der'], { ...baseFiles, 'ocsp.der': ocspResponse(inter, leaf, { status: 'good' }) })
  const o = await forward(up, request(c(good, { ocsp: 'require' })))
  t.equal(o.kind, 'response', 'good staple from OpenSSL satisfies ocsp: require')
  if (o.kind === 'response') await readBody(o.res.body)
  const revoked = await sServer(t, ['-status_file', 'ocsp.der'], { ...baseFiles, 'ocsp.der': ocspResponse(inter, leaf, { status: 'revoked' }) })
  t.equal(expectError(await forward(up, request(c(revoked, {})))).detail, 'revoked')
})
