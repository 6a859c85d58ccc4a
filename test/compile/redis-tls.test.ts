// The TLS material of a global rate limit's rediss:// Redis (RateLimit and
// AIUsage `global.tls`, the BackendTrafficPolicy annotations
// sallyport.io/rate-limit-redis-ca and -client-cert) is resolved in compile
// with the helpers of backend TLS: CA bundles from ConfigMaps or Secrets (key
// ca.crt, every block a certificate), the client certificate from a
// kubernetes.io/tls Secret whose key matches it. It reaches the compiled
// extension as `secrets['global.tls']`, redacted in /config_dump; a reference
// that cannot be used is a ResolvedRefs problem naming the field on its owner
// alone; a change to a referenced object reloads and rekeys the extension.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import { dumpTable } from '../../lib/compile/print.ts'
import { References } from '../../lib/compile/references.ts'
import type { RouteTable } from '../../lib/compile/table.ts'
import { clientCert, createCa } from '../helpers/pki.ts'
import * as b from './builders.ts'
import { POLICY, backend, extensionOf, snapshotOf } from './redis-fixtures.ts'

const ca = createCa('redis CA')
const second = createCa('next redis CA')
const limiter = clientCert(ca, 'sallyport-limiter')
const other = clientCert(ca, 'someone else')


function configMap(name: string, data: Record<string, string>, namespace = 'default'): string {
  return `apiVersion: v1
kind: ConfigMap
metadata: { name: ${name}, namespace: ${namespace} }
data: ${JSON.stringify(data)}
`
}

function secret(name: string, data: Record<string, string>, type = 'Opaque', namespace = 'default'): string {
  return `apiVersion: v1
kind: Secret
metadata: { name: ${name}, namespace: ${namespace} }
type: ${type}
stringData: ${JSON.stringify(data)}
`
}

/** A CA bundle as refs.ts resolveBundle joins it: each PEM without its trailing blank, one newline after each. */
const bundle = (...pems: string[]): string => pems.map(p => `${p.trimEnd()}\n`).join('')

const tlsSecret = (name: string, certPem: string, keyPem: string): string => secret(name, { 'tls.crt': certPem, 'tls.key': keyPem }, 'kubernetes.io/tls')




const MTLS = `{ caCertificateRefs: [{ kind: ConfigMap, name: redis-ca }], clientCertificateRef: { name: limiter-cert } }`

t.test('global.tls: the CA bundle and client certificate reach the compiled extension by path; /config_dump shows only their keys', async t => {
  const snapshot = snapshotOf(
    backend('rl', 'RateLimit', `{ requests: 5, global: { redis: "rediss://redis.infra:6380", tls: ${MTLS} } }`),
    backend('ai', 'AIUsage', `{ budget: { tokens: 1000, global: { redis: "rediss://redis.infra:6380", tls: { caCertificateRefs: [{ kind: Secret, name: ca-secret }, { kind: ConfigMap, name: redis-ca }] } } } }`),
    backend('rules', 'RateLimit', `{ global: { redis: "redis.infra:6379" }, rules: [{ requests: 1 }, { requests: 2, global: { redis: "rediss://other:6380", tls: { clientCertificateRef: { kind: Secret, name: limiter-cert }, serverName: redis.internal } } }] }`),
    configMap('redis-ca', { 'ca.crt': ca.certPem }),
    secret('ca-secret', { 'ca.crt': second.certPem }),
    tlsSecret('limiter-cert', limiter.certPem, limiter.keyPem),
  )
  t.same(snapshot.problems, [])
  const { table, problems } = compile(snapshot, b.opts)
  t.same(problems, [])
  const rl = extensionOf(table, 'rl.test')
  t.equal(rl?.error, null)
  t.same(rl?.secrets, { 'global.tls': { 'ca.crt': bundle(ca.certPem), 'tls.crt': limiter.certPem, 'tls.key': limiter.keyPem } })
  t.same(extensionOf(table, 'ai.test')?.secrets, { 'budget.global.tls': { 'ca.crt': bundle(second.certPem, ca.certPem) } }, 'the bundles of every ref, in order')
  t.same(extensionOf(table, 'rules.test')?.secrets, { 'rules[1].global.tls': { 'tls.crt': limiter.certPem, 'tls.key': limiter.keyPem } }, 'a rule\'s own global; serverName alone is config')

  const dump = JSON.stringify(dumpTable(table))
  t.notMatch(dump, /PRIVATE KEY/, 'no key in /config_dump')
  t.notMatch(dump, /BEGIN CERTIFICATE/, 'nor a certificate')
  t.match(dump, '"secrets":{"global.tls":{"ca.crt":"[redacted]","tls.crt":"[redacted]","tls.key":"[redacted]"}}', 'the keys that were resolved, redacted')
  t.match(dump, '"clientCertificateRef":{"name":"limiter-cert"}', 'the references themselves show')
})

t.test('CA and client certificate references that cannot be used: ResolvedRefs problems naming the field, on their owner alone', async t => {
  const bad = clientCert(ca, 'bad pair')
  const snapshot = snapshotOf(
    backend('nocm', 'RateLimit', `{ requests: 5, global: { redis: "rediss://r:6380", tls: { caCertificateRefs: [{ kind: ConfigMap, name: no-such-ca }] } } }`),
    backend('nokey', 'RateLimit', `{ requests: 5, global: { redis: "rediss://r:6380", tls: { caCertificateRefs: [{ kind: ConfigMap, name: redis-ca }, { kind: ConfigMap, name: wrong-key }] } } }`),
    backend('notpem', 'RateLimit', `{ requests: 5, global: { redis: "rediss://r:6380", tls: { caCertificateRefs: [{ kind: ConfigMap, name: not-pem }] } } }`),
    backend('nocert', 'AIUsage', `{ budget: { tokens: 9, global: { redis: "rediss://r:6380", tls: { caCertificateRefs: [{ kind: Secret, name: key-not-ca }] } } } }`),
    backend('mismatch', 'RateLimit', `{ requests: 5, global: { redis: "rediss://r:6380", tls: { clientCertificateRef: { name: mismatched } } } }`),
    backend('opaque', 'RateLimit', `{ requests: 5, global: { redis: "rediss://r:6380", tls: { clientCertificateRef: { name: opaque-cert } } } }`),
    backend('nosecret', 'RateLimit', `{ rules: [{ requests: 5, global: { redis: "rediss://r:6380", tls: { clientCertificateRef: { name: no-such-cert } } } }] }`),
    backend('xns', 'RateLimit', `{ requests: 5, global: { redis: "rediss://r:6380", tls: { caCertificateRefs: [{ kind: ConfigMap, name: redis-ca, namespace: infra }] } } }`),
    backend('fine', 'RateLimit', `{ requests: 5, global: { redis: "rediss://r:6380", tls: ${MTLS} } }`),
    configMap('redis-ca', { 'ca.crt': ca.certPem }),
    configMap('redis-ca', { 'ca.crt': ca.certPem }, 'infra'),
    configMap('wrong-key', { 'ca.pem': ca.certPem }),
    configMap('not-pem', { 'ca.crt': 'not a certificate' }),
    secret('key-not-ca', { 'ca.crt': bad.keyPem }),
    tlsSecret('mismatched', bad.certPem, other.keyPem),
    secret('opaque-cert', { 'tls.crt': limiter.certPem, 'tls.key': limiter.keyPem }),
    tlsSecret('limiter-cert', limiter.certPem, limiter.keyPem),
  )
  t.same(snapshot.problems, [])
  const { table, status, problems } = compile(snapshot, b.opts)
  const at = 'spec.extensions[0].config'
  t.same(problems.map(p => [p.name, p.field, p.severity, p.message]), [
    ['nocm', `${at}.global.tls.caCertificateRefs[0]`, 'error', 'ConfigMap default/no-such-ca not found; requests through extension limit fail'],
    ['nokey', `${at}.global.tls.caCertificateRefs[1]`, 'error', 'ConfigMap default/wrong-key has no key ca.crt; requests through extension limit fail'],
    ['notpem', `${at}.global.tls.caCertificateRefs[0]`, 'error', 'ConfigMap default/not-pem key ca.crt is not PEM; requests through extension limit fail'],
    ['nocert', `${at}.budget.global.tls.caCertificateRefs[0]`, 'error', 'Secret default/key-not-ca key ca.crt: no PEM CERTIFICATE in it; requests through extension limit fail'],
    ['mismatch', `${at}.global.tls.clientCertificateRef`, 'error', 'Secret default/mismatched data[tls.key]: the private key does not match the certificate in tls.crt (its first certificate); requests through extension limit fail'],
    ['opaque', `${at}.global.tls.clientCertificateRef`, 'error', 'Secret default/opaque-cert is of type Opaque, not kubernetes.io/tls; requests through extension limit fail'],
    ['nosecret', `${at}.rules[0].global.tls.clientCertificateRef`, 'error', 'Secret default/no-such-cert not found; requests through extension limit fail'],
    ['xns', `${at}.global.tls.caCertificateRefs[0]`, 'error', 'ConfigMap infra/redis-ca is in another namespace and no ReferenceGrant allows it; requests through extension limit fail'],
  ])
  const cond = (name: string) => status.objects.get(`Backend/default/${name}`)?.conditions.find(c => c.type === 'ResolvedRefs')
  t.match(cond('nocm'), { status: 'False', reason: 'InvalidCACertificateRef', message: /caCertificateRefs\[0\]: ConfigMap default\/no-such-ca not found/ })
  t.match(cond('mismatch'), { status: 'False', reason: 'InvalidClientCertificateRef' })
  t.match(cond('xns'), { status: 'False', reason: 'RefNotPermitted' })
  t.match(extensionOf(table, 'mismatch.test')?.error, /does not match the certificate/)
  t.same(extensionOf(table, 'mismatch.test')?.secrets, {}, 'nothing of a key pair TLS cannot use')
  t.notMatch(JSON.stringify(problems), /PRIVATE KEY/)
  // The rest of the configuration keeps working.
  t.equal(extensionOf(table, 'fine.test')?.error, null)
  t.notOk(cond('fine')?.status === 'False', 'the good Backend keeps its ResolvedRefs')

  const granted = compile(snapshotOf(
    backend('xns', 'RateLimit', `{ requests: 5, global: { redis: "rediss://r:6380", tls: { caCertificateRefs: [{ kind: ConfigMap, name: redis-ca, namespace: infra }] } } }`),
    configMap('redis-ca', { 'ca.crt': ca.certPem }, 'infra'),
    `apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: { name: limits-read-ca, namespace: infra }
spec:
  from: [{ group: gateway.envoyproxy.io, kind: Backend, namespace: default }]
  to: [{ group: "", kind: ConfigMap }]
`), b.opts)
  t.same(granted.problems, [])
  t.same(extensionOf(granted.table, 'xns.test')?.secrets, { 'global.tls': { 'ca.crt': bundle(ca.certPem) } }, 'a ReferenceGrant lets it read another namespace')
})


t.test('BackendTrafficPolicy: sallyport.io/rate-limit-redis-ca and -client-cert feed global.tls; problems name the annotation', async t => {
  const annotations = { 'sallyport.io/rate-limit-redis': 'rediss://redis.infra:6380', 'sallyport.io/rate-limit-redis-ca': 'redis-ca', 'sallyport.io/rate-limit-redis-client-cert': 'limiter-cert' }
  const good = compile(snapshotOf(POLICY(annotations), configMap('redis-ca', { 'ca.crt': ca.certPem }), tlsSecret('limiter-cert', limiter.certPem, limiter.keyPem)), b.opts)
  t.same(good.problems, [])
  const ext = extensionOf(good.table, 'api.test', 'rate-limit')
  t.same(ext?.config.global, { redis: 'rediss://redis.infra:6380', tls: { caCertificateRefs: [{ kind: 'ConfigMap', name: 'redis-ca' }], clientCertificateRef: { name: 'limiter-cert' } } })
  t.same(ext?.secrets, { 'global.tls': { 'ca.crt': bundle(ca.certPem), 'tls.crt': limiter.certPem, 'tls.key': limiter.keyPem } })
  t.notMatch(JSON.stringify(dumpTable(good.table)), /PRIVATE KEY/)

  const missing = compile(snapshotOf(POLICY(annotations), tlsSecret('limiter-cert', limiter.certPem, other.keyPem)), b.opts)
  t.same(missing.problems.map(p => [p.kind, p.name, p.field, p.message]), [
    ['BackendTrafficPolicy', 'per-tenant', 'metadata.annotations[sallyport.io/rate-limit-redis-ca]', 'ConfigMap default/redis-ca not found; requests this policy\'s rate limit applies to fail'],
  ], 'the first reference that cannot be used')
  t.match(missing.status.objects.get('BackendTrafficPolicy/default/per-tenant')?.conditions.find(c => c.type === 'ResolvedRefs'), { status: 'False', reason: 'InvalidCACertificateRef', message: /rate-limit-redis-ca\]: ConfigMap default\/redis-ca not found/ })
  t.match(extensionOf(missing.table, 'api.test', 'rate-limit')?.error, /ConfigMap default\/redis-ca not found/)

  const mismatch = compile(snapshotOf(POLICY(annotations), configMap('redis-ca', { 'ca.crt': ca.certPem }), tlsSecret('limiter-cert', limiter.certPem, other.keyPem)), b.opts)
  t.same(mismatch.problems.map(p => [p.field, p.message]), [
    ['metadata.annotations[sallyport.io/rate-limit-redis-client-cert]', 'Secret default/limiter-cert data[tls.key]: the private key does not match the certificate in tls.crt (its first certificate); requests this policy\'s rate limit applies to fail'],
  ])

  // A plain-TCP address: the TLS annotations are ignored (validate warns).
  const plain = compile(snapshotOf(POLICY({ ...annotations, 'sallyport.io/rate-limit-redis': 'redis://redis.infra:6379' })), b.opts)
  t.same(plain.problems, [])
  t.same(extensionOf(plain.table, 'api.test', 'rate-limit')?.config.global, { redis: 'redis://redis.infra:6379' })
})

t.test('the CA ConfigMap and client certificate Secret are referenced: a change reloads, and a rotated one rekeys the extension', async t => {
  for (const docs of [
    [backend('rl', 'RateLimit', `{ requests: 5, global: { redis: "rediss://r:6380", tls: ${MTLS} } }`)],
    [POLICY({ 'sallyport.io/rate-limit-redis': 'rediss://r:6380', 'sallyport.io/rate-limit-redis-ca': 'redis-ca', 'sallyport.io/rate-limit-redis-client-cert': 'limiter-cert' })],
  ]) {
    const references = new References()
    const host = docs[0]?.includes('BackendTrafficPolicy') === true ? 'api.test' : 'rl.test'
    const name = host === 'api.test' ? 'rate-limit' : 'limit'
    const first = compile(references.track(snapshotOf(...docs, configMap('redis-ca', { 'ca.crt': ca.certPem }), configMap('unrelated', { 'ca.crt': ca.certPem }), tlsSecret('limiter-cert', limiter.certPem, limiter.keyPem))), b.opts)
    t.ok(references.referenced('configMaps', 'default/redis-ca'), 'the CA ConfigMap')
    t.ok(references.referenced('secrets', 'default/limiter-cert'), 'the client certificate Secret')
    t.notOk(references.referenced('configMaps', 'default/unrelated'), 'not every ConfigMap')
    const key = (table: RouteTable): string | undefined => extensionOf(table, host, name)?.key
    const same = compile(snapshotOf(...docs, configMap('redis-ca', { 'ca.crt': ca.certPem }), tlsSecret('limiter-cert', limiter.certPem, limiter.keyPem)), b.opts)
    t.equal(key(same.table), key(first.table), 'the same material: the same instance')
    const rotatedCa = compile(snapshotOf(...docs, configMap('redis-ca', { 'ca.crt': second.certPem }), tlsSecret('limiter-cert', limiter.certPem, limiter.keyPem)), b.opts)
    t.not(key(rotatedCa.table), key(first.table), 'a rotated CA: a new instance (and Redis connection)')
    const rotatedCert = compile(snapshotOf(...docs, configMap('redis-ca', { 'ca.crt': ca.certPem }), tlsSecret('limiter-cert', other.certPem, other.keyPem)), b.opts)
    t.not(key(rotatedCert.table), key(first.table), 'a rotated client certificate: a new instance')
  }
})
