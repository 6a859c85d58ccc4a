// The global rate limit on a Redis of a private CA that requires client
// certificates (`tls-auth-clients yes`), through the CLI: no
// NODE_EXTRA_CA_CERTS, the trust and the client certificate come from the
// configuration — a BackendTrafficPolicy's sallyport.io/rate-limit-redis-ca and
// -client-cert annotations, and a RateLimit extension's global.tls. Both count
// in Redis (3 per minute: the fourth is 429); a limit with the CA but no client
// certificate is refused by Redis (failureMode closed: 429, counted, logged). No
// key or certificate shows in /config_dump or the log. `validate` names the
// file, object and field of a key that does not match its certificate and of
// global.tls on a plain-TCP address.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { startDemoUpstream } from '../../lib/runtime/demo-upstream.ts'
import { backendYaml, caConfigMapYaml, eventually, freePort, gatewayYaml, metricSum, runCli, settleLogs, startCli, tempDir, tlsSecretYaml } from './harness.ts'
import { egressBackend, get, route } from './extensions-helpers.ts'
import { hasRedis, startRedis } from '../helpers/redis-server.ts'
import { clientCert, createCa, serverCert } from '../helpers/pki.ts'

const skip = hasRedis ? false : 'redis-server is not installed'

function limitYaml(redis: string, tls: string): string {
  return `  - name: per-route
    type: RateLimit
    config:
      requests: 3
      unit: Minute
      key: [route]
      global:
        redis: ${redis}
        timeoutMs: 2000
        tls: ${tls}
      failureMode: closed
`
}

function policyYaml(redis: string): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: per-route
  namespace: default
  annotations:
    sallyport.io/rate-limit-redis: "${redis}"
    sallyport.io/rate-limit-redis-ca: redis-ca
    sallyport.io/rate-limit-redis-client-cert: limiter-cert
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: policy }]
  rateLimit:
    type: Global
    global:
      rules:
      - limit: { requests: 3, unit: Minute }
`
}

t.test('CLI: mTLS to Redis from the policy annotations and from global.tls; the limit counts in Redis', { skip }, async (t) => {
  const ca = createCa('private redis CA')
  const leaf = serverCert(ca, ['localhost'])
  const limiter = clientCert(ca, 'sallyport-limiter')
  const redis = await startRedis(t, { tls: { certPem: leaf.certPem, keyPem: leaf.keyPem, caPem: ca.certPem, authClients: true } })
  const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0, name: 'api' })
  t.teardown(() => upstream.close())
  const up = upstream.address.port
  const address = `rediss://localhost:${redis.port}`
  const [http, admin] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const files: Record<string, string> = {
    'gateway.yaml': gatewayYaml(http),
    'policy.yaml': [backendYaml('plain', up), route('policy', 'policy.example.test', 'plain', up), policyYaml(address)].join('---\n'),
    'mtls.yaml': [egressBackend('mtls', up, limitYaml(address, '{ caCertificateRefs: [{ kind: ConfigMap, name: redis-ca }], clientCertificateRef: { name: limiter-cert } }')), route('mtls', 'mtls.example.test', 'mtls', up)].join('---\n'),
    'anonymous.yaml': [egressBackend('anonymous', up, limitYaml(address, '{ caCertificateRefs: [{ kind: ConfigMap, name: redis-ca }] }')), route('anonymous', 'anonymous.example.test', 'anonymous', up)].join('---\n'),
    'pki.yaml': [caConfigMapYaml('redis-ca', ca.certPem), tlsSecretYaml('limiter-cert', limiter.certPem, limiter.keyPem)].join('---\n'),
  }
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text)
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${admin}`])
  await eventually(() => get(`http://127.0.0.1:${admin}/readyz`, 'x'), (r) => r.status === 200, 20000, 'ready')

  for (const host of ['policy.example.test', 'mtls.example.test']) {
    const statuses: number[] = []
    for (let i = 0; i < 4; i++) statuses.push((await get(`http://127.0.0.1:${http}/`, host)).status)
    t.same(statuses, [200, 200, 200, 429], `${host}: 3 per minute, counted in Redis over mTLS`)
  }
  const limited = await get(`http://127.0.0.1:${http}/`, 'mtls.example.test')
  t.match(String(limited.headers.ratelimit), /^"per-route";r=0;t=\d+$/, 'by the count in Redis (failureMode closed would say t=1 otherwise)')

  // The CA alone: the Redis refuses the handshake for want of a client certificate.
  const refused = await get(`http://127.0.0.1:${http}/`, 'anonymous.example.test')
  t.equal(refused.status, 429, 'failureMode closed')
  t.equal(refused.headers['retry-after'], '1')
  const line = await cli.waitFor(/\{[^\n]*"msg":"global rate limit unavailable"[^\n]*\}/)
  t.match(JSON.parse(line), { component: 'rate-limit', limit: 'per-route', code: 'tls', failOpen: false, error: new RegExp(`^redis rediss://localhost:${redis.port}: .*certificate required`) })
  const metrics = await get(`http://127.0.0.1:${admin}/metrics`, 'x')
  t.ok(metricSum(metrics.body, 'sallyport_rate_limit_redis_errors_total', { outcome: 'closed' }) >= 1, 'counted')

  const dump = (await get(`http://127.0.0.1:${admin}/config_dump`, 'x')).body
  t.match(dump, /"global\.tls": \{\s*"ca\.crt": "\[redacted\]",\s*"tls\.crt": "\[redacted\]",\s*"tls\.key": "\[redacted\]"\s*\}/, 'the material resolved, redacted')
  t.notMatch(dump, /PRIVATE KEY|BEGIN CERTIFICATE/, 'no key or certificate in /config_dump')
  await settleLogs()
  t.notMatch(cli.stdout() + cli.stderr(), /PRIVATE KEY|BEGIN CERTIFICATE/, 'nor in the log')
  t.equal((cli.stdout().match(/global rate limit unavailable/g) ?? []).length, 1, 'only the limit without a certificate failed')
})

t.test('CLI validate: a client certificate whose key does not match, and global.tls on a plain-TCP address, named by file, object and field', async (t) => {
  const ca = createCa()
  const one = clientCert(ca, 'one')
  const two = clientCert(ca, 'two')
  const dir = tempDir(t)
  const limits = path.join(dir, 'limits.yaml')
  const pki = path.join(dir, 'pki.yaml')
  fs.writeFileSync(limits, [
    egressBackend('plain', 8080, limitYaml('redis://redis.infra:6379', '{ caCertificateRefs: [{ kind: ConfigMap, name: redis-ca }] }')),
    egressBackend('mismatch', 8080, limitYaml('rediss://redis.infra:6380', '{ caCertificateRefs: [{ kind: ConfigMap, name: redis-ca }], clientCertificateRef: { name: limiter-cert } }')),
    policyYaml('rediss://redis.infra:6380'),
  ].join('---\n'))
  fs.writeFileSync(pki, [caConfigMapYaml('redis-ca', ca.certPem), tlsSecretYaml('limiter-cert', one.certPem, two.keyPem)].join('---\n'))
  const v = await runCli(t, ['validate', limits, pki])
  t.equal(v.code, 1)
  // The policy's route is not among these files (nor any HTTPRoute): a warning.
  const notTargeted = `${limits}:2: BackendTrafficPolicy default/per-route: spec.targetRefs[0]: HTTPRoute default/policy not found (Accepted=False: TargetNotFound)`
  const mismatch = 'Secret default/limiter-cert data[tls.key]: the private key does not match the certificate in tls.crt (its first certificate)'
  t.same(v.stdout.trim().split('\n'), [
    `${limits}:0: Backend default/plain: spec.extensions[0].config.global.tls: needs a rediss:// address: global.redis is plain TCP (redis:// or host:port), which never speaks TLS`,
    `${limits}:1: Backend default/mismatch: spec.extensions[0].config.global.tls.clientCertificateRef: ${mismatch}; requests through extension per-route fail`,
    `${limits}:2: BackendTrafficPolicy default/per-route: metadata.annotations[sallyport.io/rate-limit-redis-client-cert]: ${mismatch}; requests this policy's rate limit applies to fail`,
    notTargeted,
  ])
  t.notMatch(v.stdout + v.stderr, /PRIVATE KEY/)

  // The manifests alone, without ConfigMaps and Secrets (often created apart): the references are not checked.
  const alone = await runCli(t, ['validate', limits])
  t.same(alone.stdout.trim().split('\n'), [
    `${limits}:0: Backend default/plain: spec.extensions[0].config.global.tls: needs a rediss:// address: global.redis is plain TCP (redis:// or host:port), which never speaks TLS`,
    notTargeted,
  ])
})
