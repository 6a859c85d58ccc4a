// The Redis of a global rate limit (RateLimit and AIUsage `global`, the
// BackendTrafficPolicy annotations): an address sallyport can use (host:port,
// redis://, rediss:// for TLS), never with credentials in it — they would
// show in logs and /config_dump — and a secretRef of the shape compile
// resolves.
import t from 'tap'
import { validateDocument } from '../../lib/validate/validate.ts'
import { formatProblem } from '../../lib/resources/problem.ts'
import { parseRedisAddress } from '../../lib/redis-address.ts'

const src = { file: 'limits.yaml', doc: 2 }

function backend(type: string, config: Record<string, unknown>): unknown {
  return {
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name: 'api', namespace: 'default' },
    spec: { endpoints: [{ ip: { address: '192.0.2.1', port: 80 } }], extensions: [{ name: 'limit', type, config }] },
  }
}

const limit = (global: unknown): unknown => backend('RateLimit', { requests: 5, unit: 'Minute', global })

function errorsOf(doc: unknown): string[] {
  return validateDocument(doc, src).problems.filter((p) => p.severity === 'error').map(formatProblem)
}

function warningsOf(doc: unknown): string[] {
  return validateDocument(doc, src).problems.filter((p) => p.severity === 'warning').map((p) => `${p.field}: ${p.message}`)
}

t.test('parseRedisAddress: host:port, redis://, rediss:// (TLS); port 6379 when left out; IPv6 in brackets', async (t) => {
  const ok = (text: string): unknown => { const r = parseRedisAddress(text); return r.ok ? r.value : r.message }
  t.same(ok('redis.infra:6379'), { host: 'redis.infra', port: 6379, tls: false })
  t.same(ok('redis://redis.infra:6380'), { host: 'redis.infra', port: 6380, tls: false })
  t.same(ok('rediss://cache.abc.use1.cache.amazonaws.com:6379'), { host: 'cache.abc.use1.cache.amazonaws.com', port: 6379, tls: true })
  t.same(ok('REDISS://my-cache.redis.cache.windows.net:6380/'), { host: 'my-cache.redis.cache.windows.net', port: 6380, tls: true })
  t.same(ok('redis'), { host: 'redis', port: 6379, tls: false })
  t.same(ok('redis://10.0.0.7/0'), { host: '10.0.0.7', port: 6379, tls: false })
  t.same(ok('[::1]:6379'), { host: '::1', port: 6379, tls: false })
  t.same(ok('rediss://[fd00::7]'), { host: 'fd00::7', port: 6379, tls: true })
})

t.test('credentials in global.redis are an error naming file, object and field, without echoing them', async (t) => {
  const message = 'credentials in the Redis URL would show in logs and /config_dump: put them in the Secret named by global.secretRef'
  for (const redis of ['redis://limiter:SECRET-1@redis.infra:6379', 'rediss://:SECRET-2@redis.infra:6380', 'SECRET-3@redis.infra:6379', 'redis://user@redis.infra']) {
    const errors = errorsOf(limit({ redis }))
    t.same(errors, [`limits.yaml:2: Backend default/api: spec.extensions[0].config.global.redis: ${message}`], redis)
    t.notMatch(errors.join(), /SECRET/, 'not echoed')
  }
  // The object form, a rule's own global, and AIUsage's budget alike.
  t.match(errorsOf(limit({ redis: { address: 'redis://u:SECRET-4@redis:6379' } })), [/spec\.extensions\[0\]\.config\.global\.redis\.address: credentials in the Redis URL/])
  t.match(errorsOf(backend('RateLimit', { rules: [{ requests: 1, global: { redis: 'rediss://u:SECRET-5@r:6380' } }] })), [/spec\.extensions\[0\]\.config\.rules\[0\]\.global\.redis: credentials in the Redis URL/])
  t.match(errorsOf(backend('RateLimit', { rules: [{ requests: 1 }], global: { redis: 'rediss://u:SECRET-6@r:6380' } })), [/spec\.extensions\[0\]\.config\.global\.redis: credentials in the Redis URL/])
  t.match(errorsOf(backend('AIUsage', { budget: { tokens: 1000, global: { redis: 'redis://:SECRET-7@r' } } })), [/spec\.extensions\[0\]\.config\.budget\.global\.redis: credentials in the Redis URL/])
})

t.test('an address sallyport cannot use is an error naming the field and saying why', async (t) => {
  const forms = '(host:port, redis://host:port, or rediss://host:port for TLS)'
  const at = 'limits.yaml:2: Backend default/api: spec.extensions[0].config.global.redis'
  t.same(errorsOf(limit({ redis: 'redis.infra:99999' })), [`${at}: "redis.infra:99999" is not a Redis address ${forms}: "99999" is not a port (1-65535)`])
  t.same(errorsOf(limit({ redis: 'redis.infra:' })), [`${at}: "redis.infra:" is not a Redis address ${forms}: "" is not a port (1-65535)`])
  t.same(errorsOf(limit({ redis: 'not a host!' })), [`${at}: "not a host!" is not a Redis address ${forms}: "not a host!" is not a host name or IP address`])
  t.same(errorsOf(limit({ redis: 'http://redis.infra:6379' })), [`${at}: "http://redis.infra:6379" is not a Redis address ${forms}: scheme http is not redis or rediss`])
  t.same(errorsOf(limit({ redis: 'redis://redis.infra:6379/3' })), [`${at}: "redis://redis.infra:6379/3" is not a Redis address ${forms}: a path, query or fragment (a database other than 0) is not supported`])
  t.same(errorsOf(limit({ redis: '::1:6379' })), [`${at}: "::1:6379" is not a Redis address ${forms}: an IPv6 address goes in brackets, [::1]:6379`])
  t.same(errorsOf(limit({ redis: '' })), [`${at}: "" is not a Redis address ${forms}: no host`])
  t.same(errorsOf(limit({})), [`${at}: required: host:port of the Redis every replica shares (rediss://host:port for TLS)`])
  t.same(errorsOf(limit({ redis: 'rediss://redis.infra:6380', timeoutMs: 0, failureMode: 'shut' })), [
    'limits.yaml:2: Backend default/api: spec.extensions[0].config.global.timeoutMs: must be a positive number, got 0',
    'limits.yaml:2: Backend default/api: spec.extensions[0].config.global.failureMode: must be one of open, closed, got "shut"',
  ])
  t.same(errorsOf(limit({ redis: 'rediss://redis.infra:6380', timeoutMs: 500 })), [], 'TLS, a timeout: fine')
})

t.test('global.secretRef: a Secret name, and only the fields compile reads', async (t) => {
  const at = 'limits.yaml:2: Backend default/api: spec.extensions[0].config.global.secretRef'
  t.same(errorsOf(limit({ redis: 'r:6379', secretRef: { name: 'redis-auth', namespace: 'infra', usernameKey: 'user', passwordKey: 'pass' } })), [])
  t.same(errorsOf(limit({ redis: 'r:6379', secretRef: {} })), [`${at}.name: required: the Secret name`])
  t.same(errorsOf(limit({ redis: 'r:6379', secretRef: 'redis-auth' })), [`${at}.name: required: the Secret name`])
  t.same(errorsOf(limit({ redis: 'r:6379', secretRef: { name: 'redis-auth', key: 'password' } })), [`${at}.key: unknown field; expected one of name, namespace, usernameKey, passwordKey`])
  t.same(errorsOf(limit({ redis: 'r:6379', secretRef: { name: 'redis-auth', passwordKey: 7 } })), [`${at}.passwordKey: must be a non-empty string, got 7`])
  t.same(errorsOf(limit({ redis: 'r:6379', password: 'x' })), ['limits.yaml:2: Backend default/api: spec.extensions[0].config.global.password: unknown field; expected one of redis, secretRef, tls, timeoutMs, failureMode'])
  t.match(errorsOf(backend('AIUsage', { budget: { tokens: 1000, global: { redis: 'r:6379', secretRef: { name: '' } } } })), [/config\.budget\.global\.secretRef\.name: required: the Secret name$/])
})

t.test('BackendTrafficPolicy annotations: a Redis address with credentials or unusable is a warning (the annotation is ignored)', async (t) => {
  const policy = (annotations: Record<string, string>, type = 'Global'): unknown => ({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'BackendTrafficPolicy', metadata: { name: 'p', namespace: 'default', annotations },
    spec: {
      targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'r' }],
      rateLimit: { type, [type === 'Global' ? 'global' : 'local']: { rules: [{ limit: { requests: 5, unit: 'Minute' } }] } },
    },
  })
  const redis = 'metadata.annotations[sallyport.io/rate-limit-redis]'
  const secret = 'metadata.annotations[sallyport.io/rate-limit-redis-secret]'
  t.same(warningsOf(policy({ 'sallyport.io/rate-limit-redis': 'rediss://redis.infra:6380', 'sallyport.io/rate-limit-redis-secret': 'redis-auth' })), [])
  t.same(warningsOf(policy({ 'sallyport.io/rate-limit-redis': 'redis://u:SECRET-8@redis.infra:6379' })), [
    `${redis}: credentials in the Redis URL would show in logs and /config_dump: put them in a Secret named by sallyport.io/rate-limit-redis-secret; the annotation is ignored and the limit counted per process`,
  ])
  t.same(warningsOf(policy({ 'sallyport.io/rate-limit-redis': 'redis.infra:0' })), [
    `${redis}: "redis.infra:0" is not a Redis address (host:port, redis://host:port, or rediss://host:port for TLS): "0" is not a port (1-65535); the annotation is ignored and the limit counted per process`,
  ])
  t.same(warningsOf(policy({ 'sallyport.io/rate-limit-redis': 'redis.infra:6379', 'sallyport.io/rate-limit-redis-secret': 'infra/redis-auth' })), [
    `${secret}: Secret infra/redis-auth is in another namespace; only default can be read; the annotation is ignored: no AUTH is sent`,
  ])
  t.same(warningsOf(policy({ 'sallyport.io/rate-limit-redis-secret': 'redis-auth' })), [`${secret}: has no effect without sallyport.io/rate-limit-redis`])
  t.same(warningsOf(policy({ 'sallyport.io/rate-limit-redis': 'redis.infra:6379' }, 'Local')), [`${redis}: has no effect unless spec.rateLimit.type is Global`])
  t.same(errorsOf(policy({ 'sallyport.io/rate-limit-redis': 'redis://u:SECRET-9@redis.infra:6379' })), [], 'the policy itself still serves')
})

t.test('global.tls: only with a rediss:// address; CA refs to ConfigMaps or Secrets, a Secret client certificate, a DNS serverName', async (t) => {
  const at = 'limits.yaml:2: Backend default/api: spec.extensions[0].config.global.tls'
  const tls = { caCertificateRefs: [{ kind: 'ConfigMap', name: 'redis-ca' }, { group: '', kind: 'Secret', name: 'ca', namespace: 'infra' }], clientCertificateRef: { name: 'limiter-cert' }, serverName: 'redis.internal' }
  t.same(errorsOf(limit({ redis: 'rediss://10.0.0.7:6380', tls })), [], 'fine')
  t.same(errorsOf(limit({ redis: 'redis://redis.infra:6379', tls })), [`${at}: needs a rediss:// address: global.redis is plain TCP (redis:// or host:port), which never speaks TLS`])
  t.same(errorsOf(limit({ redis: 'redis.infra', tls: { serverName: 'redis.internal' } })), [`${at}: needs a rediss:// address: global.redis is plain TCP (redis:// or host:port), which never speaks TLS`])
  t.same(errorsOf(limit({ redis: 'rediss://r', tls: 'on' })), [`${at}: must be an object { caCertificateRefs, clientCertificateRef, serverName }`])
  t.same(errorsOf(limit({ redis: 'rediss://r', tls: { insecureSkipVerify: true } })), [`${at}.insecureSkipVerify: unknown field; expected one of caCertificateRefs, clientCertificateRef, serverName`])
  t.same(errorsOf(limit({ redis: 'rediss://r', tls: { caCertificateRefs: [] } })), [`${at}.caCertificateRefs: must list at least one ConfigMap or Secret with ca.crt (leave it out to trust the system's CAs)`])
  t.same(errorsOf(limit({ redis: 'rediss://r', tls: { caCertificateRefs: [{ name: 'redis-ca' }, { kind: 'ClusterTrustBundle', name: 'b' }, { kind: 'ConfigMap', name: '', key: 'x' }, { kind: 'ConfigMap', name: 'c', group: 'v1' }] } })), [
    `${at}.caCertificateRefs[0].kind: must be ConfigMap or Secret`,
    `${at}.caCertificateRefs[1].kind: must be ConfigMap or Secret, got "ClusterTrustBundle"`,
    `${at}.caCertificateRefs[2].key: unknown field; expected one of group, kind, name, namespace`,
    `${at}.caCertificateRefs[2].name: required: the ConfigMap or Secret name`,
    `${at}.caCertificateRefs[3].group: must be "" (core), got "v1"`,
  ])
  t.same(errorsOf(limit({ redis: 'rediss://r', tls: { clientCertificateRef: { kind: 'ConfigMap', name: 'c', namespace: '' } } })), [
    `${at}.clientCertificateRef.kind: must be Secret, got "ConfigMap"`,
    `${at}.clientCertificateRef.namespace: must be a non-empty string, got ""`,
  ])
  t.same(errorsOf(limit({ redis: 'rediss://r', tls: { clientCertificateRef: 'limiter-cert' } })), [`${at}.clientCertificateRef: must be an object { name, namespace? }`])
  t.same(errorsOf(limit({ redis: 'rediss://r', tls: { serverName: '10.0.0.7' } })), [`${at}.serverName: must be a DNS name (the name the Redis certificate carries, sent as SNI), got "10.0.0.7"`])
  t.same(errorsOf(limit({ redis: 'rediss://r', tls: { serverName: 'not a name' } })), [`${at}.serverName: must be a DNS name (the name the Redis certificate carries, sent as SNI), got "not a name"`])
  // A rule's own global and AIUsage's budget alike.
  t.match(errorsOf(backend('RateLimit', { rules: [{ requests: 1, global: { redis: 'redis://r:6379', tls: { serverName: 'r' } } }] })), [/config\.rules\[0\]\.global\.tls: needs a rediss:\/\/ address/])
  t.match(errorsOf(backend('AIUsage', { budget: { tokens: 1000, global: { redis: 'r:6379', tls: { serverName: 'r' } } } })), [/config\.budget\.global\.tls: needs a rediss:\/\/ address/])
})

t.test('BackendTrafficPolicy annotations rate-limit-redis-ca and -client-cert: own namespace, a rediss:// address, else a warning', async (t) => {
  const policy = (annotations: Record<string, string>): unknown => ({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'BackendTrafficPolicy', metadata: { name: 'p', namespace: 'default', annotations },
    spec: { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'r' }], rateLimit: { type: 'Global', global: { rules: [{ limit: { requests: 5, unit: 'Minute' } }] } } },
  })
  const ca = 'metadata.annotations[sallyport.io/rate-limit-redis-ca]'
  const cert = 'metadata.annotations[sallyport.io/rate-limit-redis-client-cert]'
  const tls = { 'sallyport.io/rate-limit-redis-ca': 'redis-ca', 'sallyport.io/rate-limit-redis-client-cert': 'limiter-cert' }
  t.same(warningsOf(policy({ 'sallyport.io/rate-limit-redis': 'rediss://redis.infra:6380', ...tls })), [])
  t.same(warningsOf(policy({ 'sallyport.io/rate-limit-redis': 'redis://redis.infra:6379', ...tls })), [
    `${ca}: has no effect: sallyport.io/rate-limit-redis is plain TCP; TLS needs a rediss:// address`,
    `${cert}: has no effect: sallyport.io/rate-limit-redis is plain TCP; TLS needs a rediss:// address`,
  ])
  t.same(warningsOf(policy(tls)), [`${ca}: has no effect without sallyport.io/rate-limit-redis`, `${cert}: has no effect without sallyport.io/rate-limit-redis`])
  t.same(warningsOf(policy({ 'sallyport.io/rate-limit-redis': 'rediss://r:6380', 'sallyport.io/rate-limit-redis-ca': 'infra/redis-ca', 'sallyport.io/rate-limit-redis-client-cert': 'a/b/c' })), [
    `${ca}: ConfigMap infra/redis-ca is in another namespace; only default can be read; the annotation is ignored`,
    `${cert}: "a/b/c" is not a Secret name; the annotation is ignored`,
  ])
  const route = { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'r', namespace: 'default', annotations: tls }, spec: { parentRefs: [{ name: 'gw' }] } }
  t.same(warningsOf(route), [`${ca}: applies to BackendTrafficPolicies only; ignored here`, `${cert}: applies to BackendTrafficPolicies only; ignored here`])
})
