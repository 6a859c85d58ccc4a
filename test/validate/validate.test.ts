import t from 'tap'
import { isKnownKind, validateDocument } from '../../lib/validate/validate.ts'
import { allSchemaRefs } from '../../lib/validate/kinds.ts'
import { compileSchemas } from '../../lib/validate/schema.ts'

const src = { file: 'test.yaml', doc: 3 }

t.test('every schema the registry names compiles', async (t) => {
  t.doesNotThrow(() => compileSchemas(allSchemaRefs()))
})

t.test('isKnownKind covers every published apiVersion/shape', async (t) => {
  const known: Array<[string, string]> = [
    ['gateway.networking.k8s.io/v1', 'Gateway'], ['gateway.networking.k8s.io/v1beta1', 'Gateway'],
    ['gateway.networking.k8s.io/v1alpha2', 'GatewayClass'], ['gateway.networking.k8s.io/v1beta1', 'HTTPRoute'],
    ['gateway.networking.k8s.io/v1alpha2', 'GRPCRoute'], ['gateway.networking.k8s.io/v1alpha2', 'TCPRoute'],
    ['gateway.networking.k8s.io/v1', 'TCPRoute'], ['gateway.networking.k8s.io/v1alpha3', 'TLSRoute'],
    ['gateway.networking.k8s.io/v1beta1', 'ReferenceGrant'], ['gateway.networking.k8s.io/v1', 'ReferenceGrant'],
    ['gateway.networking.k8s.io/v1alpha2', 'BackendTLSPolicy'], ['gateway.networking.k8s.io/v1alpha3', 'BackendTLSPolicy'],
    ['gateway.networking.k8s.io/v1', 'BackendTLSPolicy'], ['gateway.networking.k8s.io/v1alpha1', 'Backend'],
    ['gateway.networking.x-k8s.io/v1alpha1', 'XBackend'], ['gateway.envoyproxy.io/v1alpha1', 'Backend'],
    ['gateway.envoyproxy.io/v1alpha1', 'BackendTrafficPolicy'], ['sallyport.io/v1alpha1', 'EgressExtension'],
    ['v1', 'Secret'], ['v1', 'ConfigMap'], ['v1', 'Service'], ['v1', 'Namespace'], ['v1', 'Pod'],
    ['discovery.k8s.io/v1', 'EndpointSlice'], ['certificates.k8s.io/v1beta1', 'ClusterTrustBundle'],
    ['certificates.k8s.io/v1alpha1', 'ClusterTrustBundle'],
  ]
  for (const [v, k] of known) t.ok(isKnownKind(v, k), `${v} ${k}`)
  t.notOk(isKnownKind('apps/v1', 'Deployment'))
  t.notOk(isKnownKind('networking.x-k8s.io/v1alpha1', 'Mesh'))
  t.notOk(isKnownKind('gateway.networking.k8s.io/v1', 'Backend'))
})

t.test('unknown kinds are not errors', async (t) => {
  const r = validateDocument({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'x', namespace: 'a' }, spec: 42 }, src)
  t.same(r.info, { apiVersion: 'apps/v1', kind: 'Deployment', namespace: 'a', name: 'x' })
  t.same(r.problems, [])
})

t.test('a kind or version sallyport does not read, in a group it reads, is a warning naming the ones it reads', async (t) => {
  const doc = (apiVersion: string, kind: string): unknown => ({ apiVersion, kind, metadata: { name: 'x', namespace: 'a' } })
  const version = validateDocument(doc('gateway.envoyproxy.io/v1', 'Backend'), src).problems
  t.same(version.map((p) => [p.severity, p.kind, p.name, p.field]), [['warning', 'Backend', 'x', 'apiVersion']])
  t.equal(version[0]?.message, 'gateway.envoyproxy.io/v1 is not an apiVersion sallyport reads Backend in (it reads gateway.networking.k8s.io/v1alpha1, gateway.envoyproxy.io/v1alpha1): the object is ignored')
  const v9 = validateDocument(doc('gateway.networking.k8s.io/v9', 'HTTPRoute'), src).problems
  t.match(v9[0]?.message, /^gateway\.networking\.k8s\.io\/v9 is not an apiVersion sallyport reads HTTPRoute in \(it reads gateway\.networking\.k8s\.io\/v1, gateway\.networking\.k8s\.io\/v1beta1, gateway\.networking\.k8s\.io\/v1alpha2\)/)
  const kind = validateDocument(doc('gateway.networking.k8s.io/v1', 'HTTPRoutee'), src).problems
  t.same(kind.map((p) => [p.severity, p.kind, p.field]), [['warning', 'HTTPRoutee', 'kind']])
  t.match(kind[0]?.message, /^HTTPRoutee is not a kind sallyport reads in gateway\.networking\.k8s\.io \(it reads GatewayClass, Gateway, HTTPRoute, .*\): the object is ignored$/)
  t.match(validateDocument(doc('sallyport.io/v1alpha1', 'EgressExtensions'), src).problems[0]?.message, /it reads EgressExtension\)/)
  t.match(validateDocument(doc('v2', 'Secret'), src).problems[0]?.message, /^v2 is not an apiVersion sallyport reads Secret in \(it reads v1\)/)
  // Groups sallyport does not read, and the core group's other kinds, stay silent.
  for (const [v, k] of [['apps/v1', 'Deployment'], ['v1', 'ServiceAccount'], ['certificates.k8s.io/v1', 'CertificateSigningRequest'], ['example.com/v1', 'HTTPRoute']]) {
    t.same(validateDocument(doc(v as string, k as string), src).problems, [], `${v} ${k}`)
  }
})

t.test('documents that are not objects, or lack apiVersion/kind, give one whole-document problem', async (t) => {
  for (const doc of [null, undefined, 'text', 42, [1]]) {
    const r = validateDocument(doc, src)
    t.equal(r.problems.length, 1)
    t.equal(r.problems[0]?.field, '')
    t.equal(r.problems[0]?.severity, 'error')
  }
  const r = validateDocument({ metadata: { name: 'x' } }, src)
  t.same(r.problems.map((p) => p.message), ['apiVersion and kind required'])
})

t.test('a wrong-typed metadata.name or namespace is one problem each, not two', async (t) => {
  const r = validateDocument({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 5, namespace: ['x'] }, spec: {} }, src)
  t.same(r.problems.map((p) => `${p.field}: ${p.message}`), ['metadata.name: must be a string, got 5', 'metadata.namespace: ["x"] is not a valid namespace (DNS label)'])
})

t.test('problems carry source and object identity', async (t) => {
  const r = validateDocument({
    apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute',
    metadata: { name: 'r', namespace: 'apps' },
    spec: { rules: [{ backendRefs: [{ name: 'svc' }] }] },
  }, src)
  t.same(r.info, { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', namespace: 'apps', name: 'r' })
  t.same(r.problems, [{
    source: src, kind: 'HTTPRoute', namespace: 'apps', name: 'r',
    field: 'spec.rules[0].backendRefs[0].port', message: 'required for a Service reference', severity: 'error',
  }])
})

t.test('unknown fields warn and keep the object; semantic rules still run', async (t) => {
  const r = validateDocument({
    apiVersion: 'gateway.networking.x-k8s.io/v1alpha1', kind: 'XBackend', metadata: { name: 'b' },
    spec: { type: 'ExternalHostname', externalHostname: { hostname: '10.1.2.3' }, port: 443, retries: 3 },
  }, src)
  t.same(r.problems.map((p) => [p.severity, p.field]), [
    ['warning', 'spec.retries'],
    ['error', 'spec.externalHostname.hostname'],
  ])
})

t.test('the inline TLS fields sallyport reads (README Backend TLS) are no unknown fields, in every Backend shape', async (t) => {
  const fields = { minVersion: '1.3', alpnProtocols: ['h2'], crlRefs: [{ kind: 'ConfigMap', name: 'corp-crl' }] }
  const docs = [
    { apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name: 'eg' },
      spec: { endpoints: [{ fqdn: { hostname: 'api.example.com', port: 443 } }], tls: { sni: 'api.example.com', ...fields } } },
    { apiVersion: 'gateway.networking.x-k8s.io/v1alpha1', kind: 'XBackend', metadata: { name: 'x' },
      spec: { type: 'ExternalHostname', externalHostname: { hostname: 'api.example.com' }, port: 443, tls: { mode: 'ServerOnly', ...fields } } },
    { apiVersion: 'gateway.networking.k8s.io/v1alpha1', kind: 'Backend', metadata: { name: 'e' },
      spec: { destination: { type: 'Fqdn', fqdn: { hostname: 'api.example.com' }, ports: [{ number: 443, protocol: 'TLS', tls: { mode: 'Simple', ...fields } }] } } },
  ]
  for (const doc of docs) {
    t.same(validateDocument(doc, src).problems.map((p) => `${p.field}: ${p.message}`), [], `${doc.kind} ${doc.metadata.name}`)
  }
})

t.test('Secret values never appear in messages', async (t) => {
  const secretValue = 'sk-live-DO-NOT-PRINT'
  const r = validateDocument({
    apiVersion: 'v1', kind: 'Secret', metadata: { name: 's' }, type: 'Opaque',
    data: { token: secretValue, 'ca.crt': 'not base64!' },
  }, src)
  t.same(r.problems.map((p) => p.field), ['data.token', 'data[ca.crt]'])
  for (const p of r.problems) t.notMatch(p.message, /sk-live|not base64!/)
  const typed = validateDocument({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 's' }, stringData: { token: 12345 } }, src)
  t.same(typed.problems.map((p) => `${p.field}: ${p.message}`), ['stringData.token: must be string, got number'])
})

t.test('Backend shape follows apiVersion and spec keys', async (t) => {
  const base = { apiVersion: 'gateway.networking.k8s.io/v1alpha1', kind: 'Backend', metadata: { name: 'b' } }
  const egress = validateDocument({ ...base, spec: { destination: { type: 'Fqdn', fqdn: { hostname: 'x.cluster.local' }, ports: [{ number: 443, protocol: 'HTTP' }] } } }, src)
  t.same(egress.problems.map((p) => p.field), ['spec.destination.fqdn.hostname'])
  const gep = validateDocument({ ...base, spec: { type: 'ExternalHostname', externalHostname: { hostname: 'x.cluster.local' }, port: 443 } }, src)
  t.same(gep.problems.map((p) => p.field), ['spec.externalHostname.hostname'])
  const eg = validateDocument({ ...base, apiVersion: 'gateway.envoyproxy.io/v1alpha1', spec: { endpoints: [{ fqdn: { hostname: 'x.cluster.local', port: 443 } }] } }, src)
  t.same(eg.problems.map((p) => p.field), ['spec.endpoints[0].fqdn.hostname'])
})

t.test('insecureSkipVerify is a warning, not an error', async (t) => {
  const r = validateDocument({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name: 'b' },
    spec: { endpoints: [{ fqdn: { hostname: 'api.example.com', port: 443 } }], tls: { insecureSkipVerify: true } },
  }, src)
  t.same(r.problems.map((p) => [p.severity, p.field]), [['warning', 'spec.tls.insecureSkipVerify']])
})

t.test('cluster-scoped kinds: a namespace is ignored with a warning', async (t) => {
  const r = validateDocument({ apiVersion: 'certificates.k8s.io/v1beta1', kind: 'ClusterTrustBundle', metadata: { name: 'a:b', namespace: 'x' }, spec: { trustBundle: 'pem' } }, src)
  t.same(r.problems.map((p) => [p.severity, p.field]), [['warning', 'metadata.namespace']])
})

t.test('map keys that are not identifiers use brackets', async (t) => {
  const r = validateDocument({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c', labels: { 'app.kubernetes.io/name': 1 } } }, src)
  t.same(r.problems.map((p) => p.field), ['metadata.labels[app.kubernetes.io/name]'])
})

/** The error fields and messages of one document. */
function errorsOf(doc: unknown): string[] {
  return validateDocument(doc, src).problems.filter((p) => p.severity === 'error').map((p) => `${p.field}: ${p.message}`)
}

t.test('RateLimit match: an invalid regular expression or sourceCIDR is an error naming its path', async (t) => {
  const backend = (match: unknown): unknown => ({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name: 'a', namespace: 'default' },
    spec: {
      endpoints: [{ ip: { address: '127.0.0.1', port: 41001 } }],
      extensions: [{ name: 'per-tenant', type: 'RateLimit', config: { rules: [{ requests: 5, unit: 'Second', match }] } }],
    },
  })
  const bad = errorsOf(backend({ headers: [{ name: 'x-tenant', type: 'RegularExpression', value: 'team-(a|b' }], sourceCIDR: '300.1.1.1/40' }))
  t.match(bad, [
    /^spec\.extensions\[0\]\.config\.rules\[0\]\.match\.headers\[0\]\.value: not a valid regular expression/,
    /^spec\.extensions\[0\]\.config\.rules\[0\]\.match\.sourceCIDR: must be a CIDR/,
  ])
  t.equal(bad.length, 2)
  t.same(errorsOf(backend({ headers: [{ name: 'x-tenant', type: 'RegularExpression', value: 'team-(a|b)' }], sourceCIDR: '10.0.0.0/8' })), [])
  t.same(errorsOf(backend({ headers: [{ name: 'x-tenant', value: 'team-(a|b' }], sourceCIDR: 'fd00::/8' })), [], 'Exact values are not regular expressions')
})

t.test('BackendTrafficPolicy rateLimit clientSelectors: an invalid regular expression or sourceCIDR is an error naming its path', async (t) => {
  const policy = (selector: unknown): unknown => ({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'BackendTrafficPolicy', metadata: { name: 'p', namespace: 'default' },
    spec: {
      targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'b' }],
      rateLimit: { type: 'Global', global: { rules: [
        { clientSelectors: [{ headers: [{ name: 'x-tenant', type: 'Distinct' }] }], limit: { requests: 3, unit: 'Minute' } },
        { clientSelectors: [selector], limit: { requests: 2, unit: 'Minute' } },
      ] } },
    },
  })
  const bad = errorsOf(policy({ headers: [{ name: 'x-plan', type: 'RegularExpression', value: 'free-(a|b' }], sourceCIDR: { type: 'Exact', value: '300.1.1.1/40' } }))
  t.match(bad, [
    /^spec\.rateLimit\.global\.rules\[1\]\.clientSelectors\[0\]\.headers\[0\]\.value: not a valid regular expression/,
    /^spec\.rateLimit\.global\.rules\[1\]\.clientSelectors\[0\]\.sourceCIDR\.value: must be a CIDR/,
  ])
  t.equal(bad.length, 2)
  t.same(errorsOf(policy({ headers: [{ name: 'x-plan', type: 'RegularExpression', value: 'free-(a|b)' }], sourceCIDR: { type: 'Distinct', value: '10.0.0.0/8' } })), [])
  t.same(errorsOf(policy({ headers: [{ name: 'x-plan', value: 'paid', invert: true }] })), [], 'invert on an Exact header')
  t.match(errorsOf(policy({ headers: [{ name: 'x-plan', type: 'Distinct', invert: true }] })), [/^spec\.rateLimit\.global\.rules\[1\]\.clientSelectors\[0\]\.headers\[0\]\.invert: must not be set when type is Distinct/])
})

t.test('RateLimit requests and burst are whole numbers of requests, at least 1 (a bucket of 0.5 never holds one request)', async (t) => {
  const backend = (limit: Record<string, unknown>): unknown => ({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name: 'a', namespace: 'default' },
    spec: {
      endpoints: [{ ip: { address: '127.0.0.1', port: 41001 } }],
      extensions: [{ name: 'rl', type: 'RateLimit', config: limit.rules === undefined ? { unit: 'Second', ...limit } : limit }],
    },
  })
  t.match(errorsOf(backend({ requests: 0.5 })), [/^spec\.extensions\[0\]\.config\.requests: must be a whole number of requests, at least 1, got 0\.5/])
  t.match(errorsOf(backend({ requests: 10, burst: 0.5 })), [/^spec\.extensions\[0\]\.config\.burst: must be a whole number of requests, at least 1/])
  t.match(errorsOf(backend({ rules: [{ requests: 2.5, unit: 'Minute' }] })), [/^spec\.extensions\[0\]\.config\.rules\[0\]\.requests: must be a whole number/])
  t.same(errorsOf(backend({ requests: 1 })), [])
  t.same(errorsOf(backend({ requests: 3, burst: 6 })), [])
  // rules[0] named as rules[1] is by default (rl-1): both would count in one bucket.
  t.match(errorsOf(backend({ rules: [{ name: 'rl-1', requests: 5, unit: 'Minute' }, { requests: 100, unit: 'Hour' }] })), [/^spec\.extensions\[0\]\.config\.rules\[1\]\.name: "rl-1" is the name of rules\[0\] too/])
  t.same(errorsOf(backend({ rules: [{ name: 'a', requests: 5, unit: 'Minute' }, { requests: 100, unit: 'Hour' }] })), [])
})

t.test('a number too large for a document (YAML 1e400 reads as Infinity) is out of range, not "null"', async (t) => {
  const route = (weight: unknown): unknown => ({
    apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'r' },
    spec: { rules: [{ backendRefs: [{ name: 's', port: 80, weight }] }] },
  })
  t.same(validateDocument(route(Infinity), src).problems.map((p) => `${p.field}: ${p.message}`),
    ['spec.rules[0].backendRefs[0].weight: the number is out of range (beyond ±1.8e308): must be integer'])
  t.same(validateDocument(route(-Infinity), src).problems.map((p) => p.message), ['the number is out of range (beyond ±1.8e308): must be integer'])
  t.same(validateDocument(route(NaN), src).problems.map((p) => p.message), ['must be integer, got NaN (.nan)'])
  // Semantic rules' messages show such a number as itself too.
  const ext = validateDocument({
    apiVersion: 'sallyport.io/v1alpha1', kind: 'EgressExtension', metadata: { name: 'e' },
    spec: { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'g' }], extensions: [{ name: 'l', type: 'RateLimit', config: { requests: Infinity, unit: 'Second' } }] },
  }, src)
  t.match(ext.problems.map((p) => p.message).join('\n'), /got Infinity/)
})

t.test('listeners that are not distinct are warned about each, as compile will leave them unserved', async (t) => {
  const gateway = (listeners: unknown[]): unknown => ({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: 'g', namespace: 'a' }, spec: { gatewayClassName: 'sallyport', listeners } })
  const cert = { certificateRefs: [{ name: 'c' }] }
  const r = validateDocument(gateway([
    { name: 'web', protocol: 'HTTP', port: 8080 },
    { name: 'https', protocol: 'HTTPS', port: 8443, tls: cert },
    { name: 'tls', protocol: 'TLS', port: 8443, tls: { mode: 'Passthrough' } },
    { name: 'a', protocol: 'HTTP', port: 9090, hostname: 'api.example.com' },
    { name: 'b', protocol: 'HTTP', port: 9090, hostname: 'api.example.com' },
  ]), src)
  t.same(r.problems.filter((p) => p.severity === 'warning').map((p) => [p.severity, p.field, p.message]), [
    ['warning', 'spec.listeners[1].port', 'listeners on port 8443 differ in protocol: https (HTTPS), tls (TLS); none of them is served (Conflicted: ProtocolConflict)'],
    ['warning', 'spec.listeners[2].port', 'listeners on port 8443 differ in protocol: https (HTTPS), tls (TLS); none of them is served (Conflicted: ProtocolConflict)'],
  ], 'the listeners in conflict, each by its field; the Gateway is kept (warnings)')
  // One hostname twice on a port is the rule above it (the API server's CEL refuses the Gateway).
  t.same(r.problems.filter((p) => p.severity === 'error').map((p) => [p.field, p.message]), [['spec.listeners[4]', 'port, protocol and hostname repeat spec.listeners[3]']])
  const distinct = validateDocument(gateway([
    { name: 'a', protocol: 'HTTPS', port: 8443, hostname: 'a.example.com', tls: cert },
    { name: 'b', protocol: 'HTTPS', port: 8443, hostname: 'b.example.com', tls: cert },
    { name: 'c', protocol: 'TLS', port: 9443, tls: { mode: 'Terminate', ...cert } },
    { name: 'd', protocol: 'TLS', port: 9443, hostname: 'd.example.com', tls: { mode: 'Terminate', ...cert } },
  ]), src)
  t.same(distinct.problems, [], 'distinct listeners sharing a port: nothing to say')
})

t.test('spec.addresses: an address type sallyport cannot publish is a warning (UnsupportedAddress); IPAddress and Hostname pass', async (t) => {
  const gateway = (addresses: unknown[]): unknown => ({ apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: 'g', namespace: 'a' }, spec: { gatewayClassName: 'sallyport', addresses, listeners: [{ name: 'web', protocol: 'HTTP', port: 8080 }] } })
  const r = validateDocument(gateway([{ type: 'IPAddress', value: '10.0.0.1' }, { type: 'Hostname', value: 'gw.example.com' }, { value: '10.0.0.2' }, { type: 'example.com/pool', value: 'blue' }]), src)
  t.same(r.problems.map((p) => [p.severity, p.field, p.message]), [
    ['warning', 'spec.addresses[3].type', 'address type example.com/pool is not supported (IPAddress, Hostname): the Gateway is not Accepted (UnsupportedAddress); its listeners are still served'],
  ])
})

t.test('a credential header the gateway owns (Host, framing, connection fields) is an error: it would never be sent', async (t) => {
  const backend = (type: string, config: Record<string, unknown>): unknown => ({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name: 'a', namespace: 'default' },
    spec: { endpoints: [{ ip: { address: '127.0.0.1', port: 41001 } }], extensions: [{ name: 'cred', type, config }] },
  })
  const secretRef = { name: 'key' }
  for (const header of ['Host', 'content-length', 'Transfer-Encoding', 'connection', 'proxy-authorization']) {
    t.same(errorsOf(backend('CredentialInjector', { secretRef, header })),
      [`spec.extensions[0].config.header: "${header}" is the gateway's to set (framing, connection or the upstream's Host): a credential there would never be sent`], header)
  }
  t.match(errorsOf(backend('OAuth2', { tokenUrl: 'https://idp.example.com/token', secretRef, header: 'host' })), [/^spec\.extensions\[0\]\.config\.header: "host" is the gateway's to set/], 'OAuth2 alike')
  t.same(errorsOf(backend('CredentialInjector', { secretRef, header: 'x-api-key' })), [], 'any other header is the credential\'s')
})

// As for the upstream-proxy annotation: a URL the extension is configured with
// is shown verbatim in /config_dump and (OAuth2's tokenUrl) in log lines, and
// fetch refuses a URL with credentials anyway.
t.test('credentials in an extension URL (ExternalProcessor url, OAuth2 tokenUrl) are an error naming the field, without echoing them', async (t) => {
  const backend = (type: string, config: Record<string, unknown>): unknown => ({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name: 'a', namespace: 'default' },
    spec: { endpoints: [{ ip: { address: '127.0.0.1', port: 41001 } }], extensions: [{ name: 'x', type, config }] },
  })
  const secretRef = { name: 'idp' }
  const extProc = 'spec.extensions[0].config.url: credentials in the URL would show in logs and /config_dump, and fetch refuses such a URL (an ExternalProcessor takes no credentials)'
  const token = (at: string): string => `spec.extensions[0].config.${at}: credentials in the URL would show in logs and /config_dump: put them in the Secret named by secretRef (client_id, client_secret)`
  t.same(errorsOf(backend('ExternalProcessor', { url: 'http://extuser:SECRET-1@ext.example.com:9000/?apikey=q' })), [extProc])
  t.same(errorsOf(backend('ExternalProcessor', { url: 'https://extuser@ext.example.com/' })), [extProc], 'a user name alone')
  t.same(errorsOf(backend('OAuth2', { tokenUrl: 'https://tokenuser:SECRET-2@idp.example.com/token', secretRef })), [token('tokenUrl')])
  t.same(errorsOf(backend('CredentialInjector', { oauth2: { tokenUrl: 'https://u:SECRET-3@idp.example.com/token', secretRef } })), [token('oauth2.tokenUrl')], 'the nested oauth2 form')
  t.same(errorsOf(backend('OAuth2', { tokenUrl: 'u:SECRET-4@idp.example.com/token', secretRef })), [token('tokenUrl')], 'no scheme: still not echoed in the scheme error')
  const extension = validateDocument({
    apiVersion: 'sallyport.io/v1alpha1', kind: 'EgressExtension', metadata: { name: 'e', namespace: 'default' },
    spec: { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'egress' }], extensions: [{ name: 'x', type: 'ExternalProcessor', config: { url: 'http://a:SECRET-5@ext.example.com/' } }] },
  }, src).problems
  t.match(extension.map((p) => p.message), [/^credentials in the URL would show in logs and \/config_dump/], 'an EgressExtension alike')
  t.same(errorsOf(backend('ExternalProcessor', { url: 'http://ext.example.com/p@th?user=a@b#c@d' })), [], "an '@' past the host is no credential")
  t.same(errorsOf(backend('OAuth2', { tokenUrl: 'https://idp.example.com/token', secretRef })), [])
})

// The configuration probe: these annotations' values were read only by
// compile, which ignores what it cannot read (an OCSP mode, a CRL reference,
// a deny-list entry) and keeps a default; `validate` said nothing, so a typo
// (`ocsp: requir`, `crl-refs: ConfigMap:corp-crl`) silently weakened the policy.
t.test('sallyport annotations whose whole meaning is their value: an unreadable one is a warning naming the annotation', async (t) => {
  const warnings = (kind: string, apiVersion: string, annotations: Record<string, string>, spec: unknown): string[] =>
    validateDocument({ apiVersion, kind, metadata: { name: 'x', namespace: 'a', annotations }, spec }, src).problems
      .filter((p) => p.severity === 'warning').map((p) => `${p.field}: ${p.message}`)
  const backendSpec = { endpoints: [{ fqdn: { hostname: 'api.example.com', port: 443 } }] }
  const backend = (annotations: Record<string, string>): string[] => warnings('Backend', 'gateway.envoyproxy.io/v1alpha1', annotations, backendSpec)
  t.same(backend({
    'sallyport.io/ocsp': 'requir', 'sallyport.io/crl-stale': 'maybe', 'sallyport.io/crl-fetch': 'yes', 'sallyport.io/tls-min-version': '1.1',
    'sallyport.io/spki-pins': 'n3dHbRsk0mVqKEP9p7fUyfb1cyqqrT5Mu2EGNwMWuJs=,notbase64!!', 'sallyport.io/crl-refs': 'ConfigMap/corp-crl,ConfigMap:other,Pod/x',
    'sallyport.io/reverse-dns-suffixes': '.amazonaws.com,..x',
  }), [
    'metadata.annotations[sallyport.io/ocsp]: "requir" is not off, allow, must-staple or require; the annotation is ignored (must-staple)',
    'metadata.annotations[sallyport.io/crl-stale]: "maybe" is not fail or allow; the annotation is ignored (fail)',
    'metadata.annotations[sallyport.io/crl-fetch]: "yes" is not "true" or "false"; the annotation is ignored',
    'metadata.annotations[sallyport.io/tls-min-version]: "1.1" is not 1.2 or 1.3; the annotation is ignored',
    'metadata.annotations[sallyport.io/spki-pins]: "notbase64!!" is not a base64 SHA-256 hash (44 characters); no certificate can match it',
    'metadata.annotations[sallyport.io/crl-refs]: "ConfigMap:other" is not Kind/name or Kind/namespace/name (ConfigMap, Secret, ClusterTrustBundle); the entry is ignored',
    'metadata.annotations[sallyport.io/crl-refs]: "Pod/x" is not Kind/name or Kind/namespace/name (ConfigMap, Secret, ClusterTrustBundle); the entry is ignored',
    'metadata.annotations[sallyport.io/reverse-dns-suffixes]: "..x" is not a DNS suffix; the entry is ignored',
  ])
  t.same(backend({ 'sallyport.io/ocsp': 'Require', 'sallyport.io/crl-stale': 'allow', 'sallyport.io/crl-fetch': 'true', 'sallyport.io/tls-min-version': 'TLSv1.3', 'sallyport.io/crl-refs': 'Secret/ns/crl' }), [], 'readable values pass')

  const gateway = (annotations: Record<string, string>): string[] => warnings('Gateway', 'gateway.networking.k8s.io/v1', annotations,
    { gatewayClassName: 'sallyport', listeners: [{ name: 'web', protocol: 'HTTP', port: 8080 }] })
  t.same(gateway({
    'sallyport.io/allow-destination-cidrs': '127.0.0.1/33,10.0.0.0/8', 'sallyport.io/destination-allowlist': '*.openai.com,a_b,::1/200',
    'sallyport.io/destination-denylist': '*.*.pastebin.example', 'sallyport.io/allowed-regions': ' , ',
  }), [
    'metadata.annotations[sallyport.io/allow-destination-cidrs]: "127.0.0.1/33" is not a CIDR; the entry is ignored',
    'metadata.annotations[sallyport.io/destination-allowlist]: "a_b" is neither a hostname nor a CIDR; the entry is ignored',
    'metadata.annotations[sallyport.io/destination-allowlist]: "::1/200" is not a CIDR; the entry is ignored',
    'metadata.annotations[sallyport.io/destination-denylist]: "*.*.pastebin.example" is neither a hostname nor a CIDR; the entry is ignored',
    'metadata.annotations[sallyport.io/allowed-regions]: lists no region: every Backend is refused',
  ])
  t.same(warnings('HTTPRoute', 'gateway.networking.k8s.io/v1', { 'sallyport.io/backend-priority': 'a=0,b=first,c,=1' }, { parentRefs: [{ name: 'g' }] }), [
    'metadata.annotations[sallyport.io/backend-priority]: "b=first" is not name=N (N a whole number, 0 first); the entry is ignored',
    'metadata.annotations[sallyport.io/backend-priority]: "c" is not name=N (N a whole number, 0 first); the entry is ignored',
    'metadata.annotations[sallyport.io/backend-priority]: "=1" is not name=N (N a whole number, 0 first); the entry is ignored',
  ])
})

t.test('health check payloads: the field the type names is required, binary is base64; each an error naming its path', async (t) => {
  const btp = (active: unknown): unknown => ({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'BackendTrafficPolicy', metadata: { name: 'hc', namespace: 'default' },
    spec: { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'r' }], healthCheck: { active } },
  })
  const problems = (active: unknown): Array<[string, string]> => validateDocument(btp(active), src).problems.map((p) => [p.severity, p.field])
  t.same(problems({ type: 'HTTP', http: { path: '/h', expectedResponse: { type: 'Text', text: 'ok' } } }), [])
  t.same(problems({ type: 'TCP', tcp: { send: { type: 'Binary', binary: 'UElORw0K' }, receive: { type: 'Text', text: '+PONG' } } }), [])
  const noText = validateDocument(btp({ type: 'HTTP', http: { path: '/h', expectedResponse: { type: 'Text', binary: 'b2s=' } } }), src).problems
  t.same(noText.map((p) => [p.severity, p.name, p.field]), [['error', 'hc', 'spec.healthCheck.active.http.expectedResponse.text']])
  t.same(problems({ type: 'TCP', tcp: { send: { type: 'Binary', binary: 'not base64!' } } }), [['error', 'spec.healthCheck.active.tcp.send.binary']])
  t.same(problems({ type: 'TCP', tcp: { receive: { type: 'Hex', text: 'ff' } } }), [['error', 'spec.healthCheck.active.tcp.receive.type']])
})

t.test('a header modifier entry repeating an earlier name (any case) is a warning: only the first counts', async (t) => {
  const mod = { set: [{ name: 'X-Team', value: 'a' }, { name: 'x-team', value: 'b' }], add: [{ name: 'X-Tag', value: 'a' }, { name: 'X-TAG', value: 'b' }] }
  const http = validateDocument({
    apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: 'r', namespace: 'a' },
    spec: { rules: [{ filters: [{ type: 'RequestHeaderModifier', requestHeaderModifier: mod }] }] },
  }, src)
  t.same(http.problems.map((p) => [p.severity, p.field]), [
    ['warning', 'spec.rules[0].filters[0].requestHeaderModifier.set[1].name'],
    ['warning', 'spec.rules[0].filters[0].requestHeaderModifier.add[1].name'],
  ])
  const grpc = validateDocument({
    apiVersion: 'gateway.networking.k8s.io/v1', kind: 'GRPCRoute', metadata: { name: 'g', namespace: 'a' },
    spec: { rules: [{ filters: [{ type: 'ResponseHeaderModifier', responseHeaderModifier: { set: mod.set } }] }] },
  }, src)
  t.same(grpc.problems.map((p) => [p.severity, p.field, p.message]), [
    ['warning', 'spec.rules[0].filters[0].responseHeaderModifier.set[1].name', '"x-team" repeats "X-Team" (header names compare case-insensitively); this entry is ignored'],
  ])
})
