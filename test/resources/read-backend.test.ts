import t from 'tap'
import { readObject } from '../../lib/resources/read.ts'
import type { Backend, UpstreamTLS } from '../../lib/resources/model.ts'
import { fixtureSource, loadFixture } from './load-fixture.ts'

const src = { file: 'inline.yaml', doc: 0 }

function backend(doc: Record<string, unknown>): Backend {
  const o = readObject(doc, src)
  if (o === null || o.kind !== 'Backend') throw new Error(`not a Backend: ${JSON.stringify(o)}`)
  return o
}

/** The neutral UpstreamTLS with some fields overridden. */
function tls(over: Partial<UpstreamTLS>): UpstreamTLS {
  return {
    mode: 'ServerOnly', sni: null, hostname: null, caCertificateRefs: [], wellKnownCACertificates: null, subjectAltNames: [],
    clientCertificateRef: null, insecureSkipVerify: false, spkiPins: [], crlRefs: [], minVersion: 'TLSv1.2', alpn: [], ...over,
  }
}

t.test('GEP-4488 examples (spec document)', async (t) => {
  const docs = loadFixture('gep-4488-examples.yaml')
  const openai = readObject(docs[1]!, fixtureSource('gep-4488-examples.yaml', 1)) as Backend
  t.equal(openai.kind, 'Backend')
  t.equal(openai.flavor, 'GEP4488')
  t.equal(openai.apiVersion, 'gateway.networking.k8s.io/v1alpha1')
  t.same(openai.meta.namespace, 'ai-apps')
  t.same(openai.destination, { type: 'ExternalHostname', hostname: 'api.openai.com' })
  t.same(openai.ports, [{
    name: '', port: 443, protocol: 'HTTP', mcp: null,
    tls: tls({ mode: 'ClientAndServer', clientCertificateRef: { group: '', kind: 'Secret', namespace: 'ai-apps', name: 'openai-client-cert' } }),
  }])
  t.same(openai.extensions, [])
  t.equal(openai.fallback, false)
  t.equal(openai.region, null)
  t.same(openai.source, { file: 'fixtures/resources/gep-4488-examples.yaml', doc: 1 })

  const myApi = readObject(docs[3]!, src) as Backend
  t.equal(myApi.meta.namespace, 'default')
  t.same(myApi.destination, { type: 'EndpointSelector', selectorRef: { group: '', kind: 'Service', namespace: 'default', name: 'my-service' }, selector: null })
  t.same(myApi.ports, [{ name: '', port: 8080, protocol: 'HTTP', mcp: null, tls: tls({}) }])
})

t.test('XBackend (experimental channel) — kind normalized to Backend', async (t) => {
  const b = backend({
    apiVersion: 'gateway.networking.x-k8s.io/v1alpha1',
    kind: 'XBackend',
    metadata: { name: 'pods', namespace: 'shop', labels: { 'sallyport.io/region': 'eu-west-1' } },
    spec: {
      type: 'EndpointSelector',
      port: { number: 8443 },
      endpointSelector: { matchLabels: { app: 'cart' } },
      protocol: 'GRPC',
      tls: {
        mode: 'ServerOnly',
        validation: {
          caCertificateRefs: [{ group: '', kind: 'ConfigMap', name: 'cart-ca' }],
          hostname: 'Cart.Shop.svc',
          subjectAltNames: [{ type: 'Hostname', hostname: 'Cart.shop' }, { type: 'URI', uri: 'spiffe://cluster.local/ns/shop/sa/cart' }],
        },
      },
    },
  })
  t.equal(b.kind, 'Backend')
  t.equal(b.flavor, 'XBackend')
  t.equal(b.region, 'eu-west-1')
  t.same(b.destination, { type: 'EndpointSelector', selectorRef: null, selector: { matchLabels: { app: 'cart' }, matchExpressions: [] } })
  t.same(b.ports, [{
    name: '', port: 8443, protocol: 'HTTP2', mcp: null,
    tls: tls({
      hostname: 'cart.shop.svc',
      caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'shop', name: 'cart-ca', key: null }],
      subjectAltNames: [{ type: 'Hostname', value: 'cart.shop' }, { type: 'URI', value: 'spiffe://cluster.local/ns/shop/sa/cart' }],
    }),
  }])
})

t.test('GEP-4488 shapes: {name, port}, selector field, tls None, MCP, protocol mapping', async (t) => {
  const b = backend({
    apiVersion: 'gateway.networking.k8s.io/v1alpha1',
    kind: 'Backend',
    metadata: { name: 'tools', namespace: 'ai' },
    spec: {
      type: 'EndpointSelector',
      port: { name: 'mcp', port: 9000 },
      endpointSelector: { selector: { matchExpressions: [{ key: 'tier', operator: 'In', values: ['mcp'] }, { key: 'bad', operator: 'Nope' }] } },
      protocol: 'MCP',
      tls: { mode: 'None' },
    },
  })
  t.same(b.destination, { type: 'EndpointSelector', selectorRef: null, selector: { matchLabels: {}, matchExpressions: [{ key: 'tier', operator: 'In', values: ['mcp'] }] } })
  t.same(b.ports, [{ name: 'mcp', port: 9000, protocol: 'MCP', tls: null, mcp: { version: null, path: '/mcp' } }])

  const wss = backend({ apiVersion: 'gateway.networking.x-k8s.io/v1alpha1', kind: 'XBackend', metadata: { name: 'ws' }, spec: { type: 'ExternalHostname', externalHostname: { hostname: 'WS.Example.COM' }, port: { number: 443 }, protocol: 'WSS', tls: { mode: 'ServerOnly', validation: { wellKnownCACertificates: 'System', hostname: 'ws.example.com' } } } })
  t.same(wss.destination, { type: 'ExternalHostname', hostname: 'ws.example.com' })
  t.equal(wss.ports[0]!.protocol, 'HTTP11')
  t.equal(wss.ports[0]!.tls!.wellKnownCACertificates, 'System')

  const grpcPlain = backend({ apiVersion: 'gateway.networking.x-k8s.io/v1alpha1', kind: 'XBackend', metadata: { name: 'g' }, spec: { type: 'ExternalHostname', externalHostname: { hostname: 'g.example.com' }, port: { number: 80 }, protocol: 'GRPC' } })
  t.equal(grpcPlain.ports[0]!.protocol, 'H2C')
  t.equal(grpcPlain.ports[0]!.tls, null)
})

t.test('egress proposal example (spec document) normalizes sensibly', async (t) => {
  const [doc] = loadFixture('egress-proposal-example.yaml')
  const b = readObject(doc!, src) as Backend
  t.equal(b.flavor, 'EgressProposal')
  t.same(b.destination, { type: 'ExternalHostname', hostname: 'api.openai.com' })
  // `mode: None | Simple | Mutual` is unreadable: a tls block with an SNI and a CA reads as Simple (verify).
  t.same(b.ports, [{
    name: '', port: 443, protocol: 'TLS', mcp: null,
    tls: tls({ sni: 'api.openai.com', caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'default', name: 'vendor-ca', key: null }] }),
  }])
  t.same(b.extensions, [{
    name: 'inject-credentials',
    type: 'gateway.networking.k8s.io/CredentialInjector:v1',
    phase: 'request-headers',
    priority: 10,
    failOpen: false,
    config: { secretRef: { name: 'openai-api-key', namespace: 'platform-secrets' } },
  }])
})

t.test('egress proposal: each TLS mode, Ip and KubernetesService destinations, MCP options, rawConfig', async (t) => {
  const b = backend({
    apiVersion: 'gateway.networking.k8s.io/v1alpha1',
    kind: 'Backend',
    metadata: { name: 'multi', namespace: 'egress', annotations: { 'sallyport.io/spki-pins': ' AAA= , BBB=,', 'sallyport.io/crl-refs': 'ConfigMap/my-crl, Secret/pki/ca-crl, Bogus/x, ClusterTrustBundle/ns/ctb' } },
    spec: {
      destination: {
        type: 'Fqdn',
        fqdn: { hostname: 'API.Example.com' },
        ports: [
          { number: 443, protocol: 'HTTP', tls: { mode: 'Simple', sni: 'Api.Example.com', caBundleRef: [{ name: 'ca1' }, { name: 'ca2', kind: 'Secret', namespace: 'pki' }], subjectAltNames: ['API.example.com', 'spiffe://td/ns/x/sa/y'], insecureSkipVerify: false } },
          { number: 8443, protocol: 'HTTP2', tls: { mode: 'Mutual', clientCertificateRef: { name: 'client' } } },
          { number: 80, protocol: 'TCP', tls: { mode: 'None' } },
          { number: 9443, protocol: 'MCP', protocolOptions: { mcp: { version: '2025-06-18' } } },
          { number: 993, protocol: 'TLS' },
        ],
      },
      extensions: [{ name: 'x', type: 'y', rawConfig: { a: 1 } }],
    },
  })
  t.same(b.destination, { type: 'ExternalHostname', hostname: 'api.example.com' })
  const pins = ['AAA=', 'BBB=']
  const crls = [
    { group: '', kind: 'ConfigMap', namespace: 'egress', name: 'my-crl', key: null },
    { group: '', kind: 'Secret', namespace: 'pki', name: 'ca-crl', key: null },
    { group: 'certificates.k8s.io', kind: 'ClusterTrustBundle', namespace: '', name: 'ctb', key: null },
  ]
  t.same(b.ports[0], {
    name: '', port: 443, protocol: 'HTTP', mcp: null,
    tls: tls({
      sni: 'api.example.com',
      caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'egress', name: 'ca1', key: null }, { group: '', kind: 'Secret', namespace: 'pki', name: 'ca2', key: null }],
      subjectAltNames: [{ type: 'Hostname', value: 'api.example.com' }, { type: 'URI', value: 'spiffe://td/ns/x/sa/y' }],
      spkiPins: pins, crlRefs: crls,
    }),
  })
  t.same(b.ports[1], { name: '', port: 8443, protocol: 'HTTP2', mcp: null, tls: tls({ mode: 'ClientAndServer', clientCertificateRef: { group: '', kind: 'Secret', namespace: 'egress', name: 'client' }, spkiPins: pins, crlRefs: crls }) })
  t.same(b.ports[2], { name: '', port: 80, protocol: 'TCP', tls: null, mcp: null })
  t.same(b.ports[3], { name: '', port: 9443, protocol: 'MCP', tls: null, mcp: { version: '2025-06-18', path: '/mcp' } })
  // protocol TLS without a tls block still originates verified TLS.
  t.same(b.ports[4], { name: '', port: 993, protocol: 'TLS', mcp: null, tls: tls({ spkiPins: pins, crlRefs: crls }) })
  t.same(b.extensions, [{ name: 'x', type: 'y', phase: null, priority: 0, failOpen: false, config: { a: 1 } }])

  const ip = backend({ apiVersion: 'gateway.networking.k8s.io/v1alpha1', kind: 'Backend', metadata: { name: 'ip' }, spec: { destination: { type: 'Ip', ip: { addresses: ['192.0.2.1', '2001:db8::1'] }, ports: [{ number: 53, protocol: 'TCP' }] } } })
  t.same(ip.destination, { type: 'Ip', addresses: ['192.0.2.1', '2001:db8::1'] })
  // The schema's third form, and the repo's own fixture's (fixtures/valid/backend-egress.yaml): one address as a string.
  const one = backend({ apiVersion: 'gateway.networking.k8s.io/v1alpha1', kind: 'Backend', metadata: { name: 'one' }, spec: { destination: { type: 'Ip', ip: '203.0.113.10', ports: [{ number: 5432, protocol: 'TCP' }] } } })
  t.same(one.destination, { type: 'Ip', addresses: ['203.0.113.10'] }, 'ip: a single address as a string')
  const svc = backend({ apiVersion: 'gateway.networking.k8s.io/v1alpha1', kind: 'Backend', metadata: { name: 'svc', namespace: 'a' }, spec: { destination: { type: 'KubernetesService', service: { name: 'api' }, ports: [{ number: 8080, protocol: 'HTTP' }] } } })
  t.same(svc.destination, { type: 'Service', service: { group: '', kind: 'Service', namespace: 'a', name: 'api' } })
  const none = backend({ apiVersion: 'gateway.networking.k8s.io/v1alpha1', kind: 'Backend', metadata: { name: 'n' }, spec: { destination: { type: 'Fqdn', fqdn: { hostname: 'x.example' } } } })
  t.same(none.ports, [], 'no ports written: none invented')
})

t.test('Envoy Gateway Backend', async (t) => {
  const b = backend({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1',
    kind: 'Backend',
    metadata: { name: 'backend-mixed', namespace: 'eg', labels: { 'sallyport.io/region': 'us-east-1' } },
    spec: {
      endpoints: [
        { fqdn: { hostname: 'Primary.Foo.com', port: 3000 } },
        { fqdn: { hostname: 'secondary.foo.com', port: 3000 } },
        { fqdn: { hostname: 'tertiary.foo.com', port: 3001 } },
      ],
      appProtocols: ['gateway.envoyproxy.io/h2c'],
      fallback: true,
    },
  })
  t.equal(b.flavor, 'EnvoyGateway')
  t.equal(b.fallback, true)
  t.equal(b.region, 'us-east-1')
  t.same(b.destination, {
    type: 'Endpoints',
    endpoints: [
      { kind: 'fqdn', hostname: 'primary.foo.com', port: 3000 },
      { kind: 'fqdn', hostname: 'secondary.foo.com', port: 3000 },
      { kind: 'fqdn', hostname: 'tertiary.foo.com', port: 3001 },
    ],
  })
  t.same(b.ports, [
    { name: '', port: 3000, protocol: 'H2C', tls: null, mcp: null },
    { name: '', port: 3001, protocol: 'H2C', tls: null, mcp: null },
  ])

  const withTls = backend({
    apiVersion: 'gateway.envoyproxy.io/v1alpha1',
    kind: 'Backend',
    metadata: { name: 'tls', namespace: 'eg' },
    spec: {
      endpoints: [{ ip: { address: '10.0.0.1', port: 443 } }, { unix: { path: '/var/run/backend.sock' } }],
      appProtocols: ['gateway.envoyproxy.io/ws'],
      tls: { caCertificateRefs: [{ kind: 'ConfigMap', name: 'ca', namespace: 'elsewhere' }], sni: 'Backend.Example', clientCertificateRef: { name: 'client' }, minVersion: '1.3', alpnProtocols: ['h2'] },
    },
  })
  t.same(withTls.destination, { type: 'Endpoints', endpoints: [{ kind: 'ip', address: '10.0.0.1', port: 443 }, { kind: 'unix', path: '/var/run/backend.sock' }] })
  t.same(withTls.ports, [{
    name: '', port: 443, protocol: 'HTTP', mcp: null,
    tls: tls({
      mode: 'ClientAndServer', sni: 'backend.example',
      // LocalObjectReference: the Backend's namespace, whatever is written.
      caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'eg', name: 'ca', key: null }],
      clientCertificateRef: { group: '', kind: 'Secret', namespace: 'eg', name: 'client' },
      minVersion: 'TLSv1.3', alpn: ['h2'],
    }),
  }])

  const unixOnly = backend({ apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name: 'uds' }, spec: { endpoints: [{ unix: { path: '/s.sock' } }], tls: { wellKnownCACertificates: 'System', insecureSkipVerify: false } } })
  t.same(unixOnly.ports, [{ name: '', port: 0, protocol: 'HTTP', mcp: null, tls: tls({ wellKnownCACertificates: 'System' }) }])

  const dyn = backend({ apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', metadata: { name: 'dyn' }, spec: { type: 'DynamicResolver' } })
  t.same(dyn.destination, { type: 'Endpoints', endpoints: [] })
  t.same(dyn.ports, [])
})

t.test('missing optional fields never throw', async (t) => {
  for (const doc of [
    { apiVersion: 'gateway.networking.k8s.io/v1alpha1', kind: 'Backend' },
    { apiVersion: 'gateway.networking.k8s.io/v1alpha1', kind: 'Backend', spec: { destination: {} } },
    { apiVersion: 'gateway.networking.x-k8s.io/v1alpha1', kind: 'XBackend', spec: { type: 'EndpointSelector' } },
    { apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'Backend', spec: { endpoints: [{}], tls: {} } },
  ]) {
    const b = backend(doc)
    t.equal(b.kind, 'Backend')
    t.equal(b.meta.name, '')
  }
})
