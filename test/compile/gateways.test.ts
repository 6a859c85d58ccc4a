// Listeners (lib/compile/gateways.ts): port conflicts, unsupported protocols,
// certificate references, and that one bad listener never takes the rest of
// the Gateway down.
import t from 'tap'
import { compile } from '../../lib/compile/compile.ts'
import type { ObjectStatus } from '../../lib/compile/status.ts'
import type { ConfigMap, Gateway, Listener } from '../../lib/resources/model.ts'
import { createCa, serverCert } from '../helpers/pki.ts'
import * as b from './builders.ts'

type Obj = Parameters<typeof b.snapshotOf>[0][number]

function run(objects: Obj[]) {
  return compile(b.snapshotOf([b.gatewayClass(), b.service('svc'), ...objects]), b.opts)
}

function listenerConditions(objects: ReadonlyMap<string, ObjectStatus>, gw: string, name: string): Record<string, string> {
  const l = objects.get(`Gateway/default/${gw}`)?.listeners.find(l => l.name === name)
  return Object.fromEntries((l?.conditions ?? []).map(c => [c.type, `${c.status}/${c.reason}`]))
}

const tls = (secret: string, namespace = 'default'): Listener['tls'] => ({ mode: 'Terminate', certificateRefs: [{ group: '', kind: 'Secret', namespace, name: secret }], options: {} })

t.test('ProtocolConflict: a later listener on the same port with another protocol is Conflicted and not served', async t => {
  const { table, status } = run([
    b.gateway('first', [b.listener('web', 8080)], {}, { creationTimestamp: '2024-01-01T00:00:00Z' }),
    b.gateway('second', [b.listener('raw', 8080, 'TCP')], {}, { creationTimestamp: '2024-02-01T00:00:00Z' }),
    b.httpRoute('r', [b.rule([b.match('/')])], { parentRefs: [{ group: b.G, kind: 'Gateway', namespace: 'default', name: 'first', sectionName: null, port: null }] }),
  ])
  t.equal(table.ports.get(8080)?.protocol, 'HTTP', 'the oldest Gateway keeps the port')
  t.same(table.ports.get(8080)?.listeners.map(l => l.gateway), ['default/first'])
  t.equal(listenerConditions(status.objects, 'second', 'raw').Conflicted, 'True/ProtocolConflict')
  t.equal(listenerConditions(status.objects, 'second', 'raw').Programmed, 'False/Invalid')
  t.equal(listenerConditions(status.objects, 'first', 'web').Conflicted, 'False/NoConflicts')
})

t.test('file mode (no creationTimestamp): the Gateway first seen keeps the port, whatever the names; a creationTimestamp still decides', async t => {
  const files = { creationTimestamp: '' }
  const serving = b.gateway('egress', [b.listener('web', 8080)], {}, { ...files, firstSeen: 0 })
  const added = b.gateway('a-new', [b.listener('raw', 8080, 'TCP')], {}, { ...files, firstSeen: 3 })
  let { table, status } = run([serving, added])
  t.same(table.ports.get(8080)?.listeners.map(l => l.gateway), ['default/egress'], 'the one seen first keeps the port')
  t.equal(listenerConditions(status.objects, 'a-new', 'raw').Conflicted, 'True/ProtocolConflict', 'the newcomer is the conflicted one')
  ;({ table } = run([serving, b.gateway('a-new', [b.listener('raw', 8080, 'TCP')], {}, { creationTimestamp: '2024-01-01T00:00:00Z', firstSeen: 3 })]))
  t.same(table.ports.get(8080)?.listeners.map(l => l.gateway), ['default/a-new'], 'a creationTimestamp set in the file wins over none')
  ;({ table } = run([serving, b.gateway('a-new', [b.listener('raw', 8080, 'TCP')], {}, { ...files, firstSeen: 0 })]))
  t.same(table.ports.get(8080)?.listeners.map(l => l.gateway), ['default/a-new'], 'both seen at startup: namespace/name')
})

t.test('HostnameConflict: listeners of one Gateway sharing a hostname on a port are all thrown out; distinct hostnames share the port', async t => {
  // Gateway API: "implementations may accept a partial Listener set only if they throw out *all*
  // the conflicting Listeners. No picking one of the conflicting listeners as the winner."
  const { table, status } = run([b.gateway('gw', [
    b.listener('a', 8080, 'HTTP', { hostname: 'a.example.com' }),
    b.listener('b', 8080, 'HTTP', { hostname: 'b.example.com' }),
    b.listener('a-again', 8080, 'HTTP', { hostname: 'a.example.com' }),
    b.listener('tcp1', 5432, 'TCP'),
    b.listener('tcp2', 5432, 'TCP'),
  ])])
  t.equal(listenerConditions(status.objects, 'gw', 'b').Conflicted, 'False/NoConflicts')
  for (const name of ['a', 'a-again', 'tcp1', 'tcp2']) {
    const c = listenerConditions(status.objects, 'gw', name)
    t.same([c.Conflicted, c.Accepted, c.Programmed], ['True/HostnameConflict', 'False/HostnameConflict', 'False/Invalid'], `${name}: conflicted, not accepted, not programmed`)
  }
  t.same(table.ports.get(8080)?.listeners.map(l => l.name), ['b'], 'only the distinct listener is served')
  t.equal(table.ports.has(5432), false, 'TCP has no hostname to tell listeners apart: neither is served')
})

t.test('ProtocolConflict within one Gateway: every listener on the port is thrown out', async t => {
  const { table, status } = run([b.gateway('gw', [b.listener('web', 8080), b.listener('raw', 8080, 'TCP'), b.listener('other', 9090)])])
  for (const name of ['web', 'raw']) {
    const c = listenerConditions(status.objects, 'gw', name)
    t.same([c.Conflicted, c.Accepted, c.Programmed], ['True/ProtocolConflict', 'False/ProtocolConflict', 'False/Invalid'], `${name}: conflicted`)
  }
  t.equal(table.ports.has(8080), false, 'nothing served on the port: no winner picked')
  t.equal(listenerConditions(status.objects, 'gw', 'other').Programmed, 'True/Programmed', 'the rest of the Gateway serves')
})

t.test('an unsupported listener protocol is refused and the rest of the Gateway keeps working', async t => {
  const { table, status } = run([
    b.gateway('gw', [b.listener('udp', 5353, 'UDP'), b.listener('web', 8080)]),
    b.httpRoute('r', [b.rule([b.match('/')])]),
  ])
  t.equal(listenerConditions(status.objects, 'gw', 'udp').Accepted, 'False/UnsupportedProtocol')
  t.equal(table.ports.has(5353), false)
  t.ok(table.ports.get(8080)?.http?.fallback?.prefixes.matches.length === 1, 'the HTTP listener serves the route')
  const gw = status.objects.get('Gateway/default/gw')
  t.same(gw?.conditions.map(c => `${c.type}=${c.status}/${c.reason}`), ['Accepted=True/ListenersNotValid', 'Programmed=True/Programmed'])
  t.equal(gw?.listeners.find(l => l.name === 'web')?.attachedRoutes, 1)
})

t.test('a Gateway whose every listener is invalid is not programmed', async t => {
  const { table, status } = run([b.gateway('gw', [b.listener('udp', 5353, 'UDP')])])
  t.equal(table.ports.size, 0)
  const gw = status.objects.get('Gateway/default/gw')
  t.same(gw?.conditions.map(c => `${c.type}=${c.status}/${c.reason}`), ['Accepted=False/ListenersNotValid', 'Programmed=False/Invalid'])
})

t.test('HTTPS certificateRefs: same namespace resolves, other namespace needs a ReferenceGrant from Gateway to Secret', async t => {
  const listeners = [
    b.listener('local', 8443, 'HTTPS', { hostname: 'local.example.com', tls: tls('cert') }),
    b.listener('foreign', 9443, 'HTTPS', { tls: tls('cert', 'certs') }),
  ]
  const without = run([b.gateway('gw', listeners), b.tlsSecret('cert'), b.tlsSecret('cert', 'certs')])
  t.equal(listenerConditions(without.status.objects, 'gw', 'local').ResolvedRefs, 'True/ResolvedRefs')
  t.equal(listenerConditions(without.status.objects, 'gw', 'foreign').ResolvedRefs, 'False/RefNotPermitted')
  t.equal(without.table.ports.has(9443), false)
  t.ok(without.table.ports.get(8443)?.serverTls?.exact.has('local.example.com'))

  const wrongKind = b.referenceGrant('g', 'certs', { kind: 'HTTPRoute', namespace: 'default' }, { group: '', kind: 'Secret' })
  const still = run([b.gateway('gw', listeners), b.tlsSecret('cert'), b.tlsSecret('cert', 'certs'), wrongKind])
  t.equal(listenerConditions(still.status.objects, 'gw', 'foreign').ResolvedRefs, 'False/RefNotPermitted', 'a grant for HTTPRoutes does not cover Gateways')

  const grant = b.referenceGrant('g', 'certs', { kind: 'Gateway', namespace: 'default' }, { group: '', kind: 'Secret' })
  const withGrant = run([b.gateway('gw', listeners), b.tlsSecret('cert'), b.tlsSecret('cert', 'certs'), grant])
  t.equal(listenerConditions(withGrant.status.objects, 'gw', 'foreign').ResolvedRefs, 'True/ResolvedRefs')
  t.equal(withGrant.table.ports.get(9443)?.serverTls?.fallback?.hostname, null)
})

t.test('a certificateRef to a Secret that is not kubernetes.io/tls is InvalidCertificateRef', async t => {
  const { status } = run([b.gateway('gw', [b.listener('s', 8443, 'HTTPS', { tls: tls('opaque') })]), b.tlsSecret('opaque', 'default', 'Opaque')])
  t.equal(listenerConditions(status.objects, 'gw', 's').ResolvedRefs, 'False/InvalidCertificateRef')
})

// ── frontend client-certificate validation (GEP-91) on a port Gateways share ──

const clientCaA = createCa('client CA A')
const clientCaB = createCa('client CA B')

function caMap(name: string, pem: string, namespace = 'default'): ConfigMap {
  return { kind: 'ConfigMap', apiVersion: 'v1', meta: b.meta(name, namespace), source: { file: 'test.yaml', doc: 0 }, data: { 'ca.crt': pem } }
}

function frontend(caName: string | null, mode: 'AllowValidOnly' | 'AllowInsecureFallback' = 'AllowValidOnly'): Partial<Gateway> {
  if (caName === null) return {}
  return { frontendValidation: { caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'default', name: caName, key: null }], mode, perPort: [] } }
}

/** Gateways "public" (older, a.example.test) and "secure" (newer, b.example.test) on HTTPS port 8443. */
function sharedPort(pub: Partial<Gateway>, sec: Partial<Gateway>, extra: Obj[] = []) {
  return run([
    b.gateway('public', [b.listener('pub', 8443, 'HTTPS', { hostname: 'a.example.test', tls: tls('cert-a') })], pub, { creationTimestamp: '2024-01-01T00:00:00Z' }),
    b.gateway('secure', [b.listener('sec', 8443, 'HTTPS', { hostname: 'b.example.test', tls: tls('cert-b') })], sec, { creationTimestamp: '2025-01-01T00:00:00Z' }),
    b.tlsSecret('cert-a'), b.tlsSecret('cert-b'), caMap('ca-a', clientCaA.certPem), caMap('ca-b', clientCaB.certPem), ...extra,
  ])
}

t.test('frontend validation differing between Gateways on one HTTPS port: the later Gateway\'s listener is Conflicted, never served under the port\'s', async t => {
  // One TLS handshake serves every listener of a port: requestCert, rejectUnauthorized and the CA
  // are the port's. A client without a certificate got 200 from the AllowValidOnly Gateway's routes
  // when an older Gateway on the port had AllowInsecureFallback (or no validation at all).
  for (const [what, pub] of [['AllowInsecureFallback with another CA', frontend('ca-b', 'AllowInsecureFallback')], ['no validation', frontend(null)]] as const) {
    const { table, status } = sharedPort(pub, frontend('ca-a'))
    const c = listenerConditions(status.objects, 'secure', 'sec')
    t.same([c.Conflicted, c.Accepted, c.Programmed], ['True/FrontendValidationConflict', 'False/FrontendValidationConflict', 'False/Invalid'], `older: ${what}; the newer AllowValidOnly listener is thrown out`)
    const message = status.objects.get('Gateway/default/secure')?.listeners.find(l => l.name === 'sec')?.conditions.find(x => x.type === 'Conflicted')?.message ?? ''
    t.match(message, /Gateway default\/public/, 'the message names the Gateway holding the port')
    t.match(message, /AllowValidOnly/, 'and says how they differ')
    t.equal(listenerConditions(status.objects, 'public', 'pub').Programmed, 'True/Programmed', 'the older Gateway keeps the port')
    const entry = table.ports.get(8443)
    t.same(entry?.listeners.map(l => `${l.gateway}/${l.name}`), ['default/public/pub'], 'only the older Gateway\'s listener is on the port')
    t.equal(entry?.serverTls?.exact.has('b.example.test'), false, 'no certificate for the thrown-out listener\'s name: its clients cannot connect')
  }

  // The other way round: a newer Gateway without validation does not lose its clients to the older one's mTLS.
  const { table, status } = sharedPort(frontend('ca-a'), frontend(null))
  t.equal(listenerConditions(status.objects, 'secure', 'sec').Conflicted, 'True/FrontendValidationConflict')
  t.match(status.objects.get('Gateway/default/secure')?.listeners[0]?.conditions.find(x => x.type === 'Conflicted')?.message ?? '', /none/)
  t.same(table.ports.get(8443)?.serverTls?.clientValidation, { caPem: clientCaA.certPem.trimEnd() + '\n', required: true }, 'the port validates as its Gateway asked')
})

t.test('Gateways whose frontend validation is the same share an HTTPS port', async t => {
  // Two ConfigMaps with the same CA: the effective validation is the same.
  const { table, status } = sharedPort(frontend('ca-a'), frontend('ca-a2'), [caMap('ca-a2', clientCaA.certPem)])
  t.equal(listenerConditions(status.objects, 'secure', 'sec').Conflicted, 'False/NoConflicts')
  t.same(table.ports.get(8443)?.listeners.map(l => l.gateway), ['default/public', 'default/secure'])
  t.equal(table.ports.get(8443)?.serverTls?.clientValidation?.required, true)
  const none = sharedPort(frontend(null), frontend(null))
  t.same(none.table.ports.get(8443)?.listeners.map(l => l.gateway), ['default/public', 'default/secure'], 'neither validating: shared as before')
  t.equal(none.table.ports.get(8443)?.serverTls?.clientValidation, null)
})

t.test('the older per-listener tls.frontendValidation binds all of its Gateway\'s listeners on that port', async t => {
  // read-gateway.ts reads listeners[].tls.frontendValidation as a per-port override.
  const perPort: Partial<Gateway> = { frontendValidation: { caCertificateRefs: [], mode: 'AllowValidOnly', perPort: [{ port: 8443, caCertificateRefs: [{ group: '', kind: 'ConfigMap', namespace: 'default', name: 'ca-a', key: null }], mode: 'AllowValidOnly' }] } }
  const { table, status } = run([
    b.gateway('gw', [
      b.listener('a', 8443, 'HTTPS', { hostname: 'a.example.test', tls: tls('cert-a') }),
      b.listener('b', 8443, 'HTTPS', { hostname: 'b.example.test', tls: tls('cert-b') }),
      b.listener('other', 9443, 'HTTPS', { tls: tls('cert-a') }),
    ], perPort),
    b.tlsSecret('cert-a'), b.tlsSecret('cert-b'), caMap('ca-a', clientCaA.certPem),
  ])
  t.same(table.ports.get(8443)?.listeners.map(l => l.name), ['a', 'b'], 'both listeners served')
  t.equal(table.ports.get(8443)?.serverTls?.clientValidation?.required, true, 'and both validated')
  t.equal(table.ports.get(9443)?.serverTls?.clientValidation, null, 'another port is not')
  t.equal(listenerConditions(status.objects, 'gw', 'b').Conflicted, 'False/NoConflicts')
})

// ── listeners sharing an HTTPS port: isolation (GEP-3567) ──

t.test('OverlappingTLSConfig: set (True, OverlappingHostnames) on every HTTPS listener whose hostname overlaps another\'s on its port, never False', async t => {
  // Gateway API ListenerConditionOverlappingTLSConfig, the example there: foo.example.com and
  // *.example.com overlap, foo.example.org does not; another port is another handshake.
  const gw = b.gateway('gw', [
    b.listener('foo', 8443, 'HTTPS', { hostname: 'foo.example.com', tls: tls('cert-a') }),
    b.listener('org', 8443, 'HTTPS', { hostname: 'foo.example.org', tls: tls('cert-a') }),
    b.listener('wild', 8443, 'HTTPS', { hostname: '*.example.com', tls: tls('cert-a') }),
    b.listener('elsewhere', 9443, 'HTTPS', { hostname: 'bar.example.com', tls: tls('cert-a') }),
    b.listener('plain', 8080, 'HTTP', { hostname: 'foo.example.com' }),
    b.listener('plain-wild', 8080, 'HTTP', { hostname: '*.example.com' }),
  ])
  const spec = run([gw, b.tlsSecret('cert-a')])
  const overlapIn = (objects: typeof spec.status.objects, gw: string, name: string): string | undefined => listenerConditions(objects, gw, name).OverlappingTLSConfig
  for (const name of ['foo', 'wild']) t.equal(overlapIn(spec.status.objects, 'gw', name), 'True/OverlappingHostnames', name)
  for (const name of ['org', 'elsewhere', 'plain', 'plain-wild']) t.equal(overlapIn(spec.status.objects, 'gw', name), undefined, `${name}: no condition`)

  // A later Gateway on the port, without hostname: it overlaps every listener there.
  const { table, status } = run([gw, b.gateway('other', [b.listener('any', 8443, 'HTTPS', { tls: tls('cert-a') })], {}, { creationTimestamp: '2025-01-01T00:00:00Z' }), b.tlsSecret('cert-a')])
  const overlap = (gw: string, name: string): string | undefined => overlapIn(status.objects, gw, name)
  for (const [gw, name] of [['gw', 'foo'], ['gw', 'wild'], ['gw', 'org'], ['other', 'any']] as const) t.equal(overlap(gw, name), 'True/OverlappingHostnames', `${gw}/${name}`)
  for (const name of ['elsewhere', 'plain', 'plain-wild']) t.equal(overlap('gw', name), undefined, `${name}: no condition (HTTPS listeners on one port only)`)
  const message = status.objects.get('Gateway/default/gw')?.listeners.find(l => l.name === 'foo')?.conditions.find(c => c.type === 'OverlappingTLSConfig')?.message ?? ''
  t.match(message, /default\/gw\/wild \(\*\.example\.com\)/, 'the message names the overlapping listeners')
  t.match(message, /421/, 'and what a misdirected request gets')
  t.equal(listenerConditions(status.objects, 'gw', 'foo').Programmed, 'True/Programmed', 'overlapping listeners keep serving')

  const without = run([b.gateway('gw', [
    b.listener('a', 8443, 'HTTPS', { hostname: 'a.example.com', tls: tls('cert-a') }),
    b.listener('b', 8443, 'HTTPS', { hostname: 'b.example.com', tls: tls('cert-a') }),
  ]), b.tlsSecret('cert-a')])
  t.equal(listenerConditions(without.status.objects, 'gw', 'a').OverlappingTLSConfig, undefined, 'distinct hostnames: no condition')

  // The listener each name selects, by the rules certificates are selected by.
  const names = table.ports.get(8443)?.serverTls?.listenerNames
  const listeners = table.ports.get(8443)?.listeners ?? []
  const at = (i: number | null | undefined): string => i == null ? '-' : listeners[i].name
  t.equal(at(names?.exact.get('foo.example.com')), 'foo')
  t.equal(at(names?.exact.get('foo.example.org')), 'org')
  t.same(names?.wildcards.map(w => [w.suffix, at(w.value)]), [['.example.com', 'wild']])
  t.equal(at(names?.fallback), 'any')
  t.equal(table.ports.get(9443)?.serverTls?.listenerNames, null, 'one listener on the port: nothing to tell apart')
})

t.test('a listener Secret whose key does not match its certificate, or whose PEM does not parse, is InvalidCertificateRef; the port serves its other listeners', async t => {
  // Gateway API: a certificateRef that is invalid makes the listener ResolvedRefs=False
  // InvalidCertificateRef. The bad Secret is the port's default certificate (the listener
  // without hostname): the port must still serve the good listener's hostname.
  const other = serverCert(createCa('other CA'), ['other.example.com'])
  const good = b.testKeyPair()
  const garbage = (label: string) => `-----BEGIN ${label}-----\nbm90IGEgcmVhbCBibG9jaw==\n-----END ${label}-----\n`
  const cases = [
    { what: 'key of another certificate', pem: { cert: good.certPem, key: other.keyPem }, field: 'data[tls.key]', message: /the private key does not match the certificate in tls\.crt/ },
    { what: 'unparsable certificate', pem: { cert: garbage('CERTIFICATE'), key: good.keyPem }, field: 'data[tls.crt]', message: /the certificate cannot be parsed/ },
    { what: 'unparsable key', pem: { cert: good.certPem, key: garbage('PRIVATE KEY') }, field: 'data[tls.key]', message: /the private key cannot be parsed/ },
  ]
  for (const c of cases) {
    const result = run([
      b.gateway('gw', [
        b.listener('good', 8443, 'HTTPS', { hostname: 'good.example.com', tls: tls('good') }),
        b.listener('bad', 8443, 'HTTPS', { tls: tls('bad') }),
      ]),
      b.tlsSecret('good'), b.tlsSecret('bad', 'default', 'kubernetes.io/tls', c.pem),
    ])
    const l = result.status.objects.get('Gateway/default/gw')?.listeners.find(l => l.name === 'bad')
    const refs = l?.conditions.find(x => x.type === 'ResolvedRefs')
    t.equal(`${refs?.status}/${refs?.reason}`, 'False/InvalidCertificateRef', `${c.what}: ResolvedRefs`)
    t.match(refs?.message, new RegExp(`^Secret default/bad ${c.field.replace(/[[\].]/g, '\\$&')}: ${c.message.source}`), `${c.what}: the message names the Secret, the field and the problem`)
    t.equal(listenerConditions(result.status.objects, 'gw', 'bad').Programmed, 'False/Invalid', `${c.what}: not programmed`)
    t.equal(listenerConditions(result.status.objects, 'gw', 'good').Programmed, 'True/Programmed', `${c.what}: the other listener is`)
    const served = result.table.ports.get(8443)?.serverTls
    t.equal(served?.fallback, null, `${c.what}: the bad certificate is not served`)
    t.ok(served?.exact.has('good.example.com'), `${c.what}: the good one is`)
    // Errors only: the builders' certificate names none of these listeners' hostnames (a warning each).
    t.same(result.problems.filter(p => p.severity === 'error').map(p => [p.source.file, p.kind, p.namespace, p.name, p.field, p.severity]), [['test.yaml', 'Secret', 'default', 'bad', c.field, 'error']],
      `${c.what}: a problem naming file, Secret and field (log, /config_dump, validate)`)
    t.match(result.problems.find(p => p.severity === 'error')?.message, c.message)
  }
})

t.test('a frontend client-CA bundle that does not parse is InvalidCACertificateRef on the listeners it validates, naming the ConfigMap and key', async t => {
  // GEP-91: "the Reason on all matching HTTPS listeners must be set to InvalidCACertificateRef
  // and the Message of the Condition must indicate which reference is invalid and why".
  const clientCa = createCa('client CA')
  const configMap = (name: string, pem: string) => ({ kind: 'ConfigMap' as const, apiVersion: 'v1', meta: b.meta(name), source: { file: 'ca.yaml', doc: 1 }, data: { 'ca.crt': pem } })
  const garbage = '-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n'
  const caRef = (name: string) => ({ group: '', kind: 'ConfigMap', namespace: 'default', name, key: null })
  const result = run([
    b.gateway('gw', [b.listener('strict', 8443, 'HTTPS', { tls: tls('cert') }), b.listener('open', 9443, 'HTTPS', { tls: tls('cert') })], {
      frontendValidation: {
        caCertificateRefs: [caRef('good-ca'), caRef('bad-ca')], mode: 'AllowValidOnly',
        perPort: [{ port: 9443, caCertificateRefs: [caRef('good-ca')], mode: 'AllowInsecureFallback' }],
      },
    }),
    b.tlsSecret('cert'), configMap('good-ca', clientCa.certPem), configMap('bad-ca', garbage),
  ])
  const refs = result.status.objects.get('Gateway/default/gw')?.listeners.find(l => l.name === 'strict')?.conditions.find(c => c.type === 'ResolvedRefs')
  t.match(refs, { status: 'False', reason: 'InvalidCACertificateRef', message: 'ConfigMap default/bad-ca key ca.crt: a certificate cannot be parsed' })
  t.equal(listenerConditions(result.status.objects, 'gw', 'strict').Programmed, 'False/Invalid', 'not served with an empty trust store')
  t.equal(result.table.ports.has(8443), false)
  t.equal(listenerConditions(result.status.objects, 'gw', 'open').Programmed, 'True/Programmed', 'the port validating against the good bundle serves')
  t.equal(result.table.ports.get(9443)?.serverTls?.clientValidation?.caPem.trim(), clientCa.certPem.trim())
  t.same(result.problems.map(p => [p.source.file, p.source.doc, p.kind, p.namespace, p.name, p.field, p.severity]), [['ca.yaml', 1, 'ConfigMap', 'default', 'bad-ca', 'data[ca.crt]', 'error']],
    'a problem naming file, ConfigMap and field (log, /config_dump, validate)')
})

t.test('Gateways sharing an HTTPS port whose client-CA bundle does not parse: InvalidCACertificateRef on each listener it validates; a Gateway validating otherwise is Conflicted', async t => {
  // frontendOf parses the bundle where it resolves it: a bundle that does not parse compares as
  // unresolved (mode and refs as written), never as "no validation" nor as an empty trust store.
  const garbage = '-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n'
  const alike = sharedPort(frontend('ca-bad'), frontend('ca-bad'), [caMap('ca-bad', garbage)])
  for (const [gw, name] of [['public', 'pub'], ['secure', 'sec']] as const) {
    const c = listenerConditions(alike.status.objects, gw, name)
    t.same([c.ResolvedRefs, c.Conflicted, c.Programmed], ['False/InvalidCACertificateRef', 'False/NoConflicts', 'False/Invalid'], `${gw}/${name}: the same bad bundle, not a conflict`)
  }
  t.equal(alike.table.ports.has(8443), false, 'nothing served with a trust store that could not be read')
  const errors = alike.problems.filter(p => p.severity === 'error') // the builders' certificate names none of the hostnames: warnings
  t.same(errors.map(p => `${p.kind} ${p.namespace}/${p.name} ${p.field}`), ['ConfigMap default/ca-bad data[ca.crt]'], 'one problem for the bundle')
  t.match(errors[0]?.message, /not served: listener default\/public\/pub, default\/secure\/sec/)

  const differ = sharedPort(frontend('ca-bad'), frontend('ca-a'), [caMap('ca-bad', garbage)])
  t.equal(listenerConditions(differ.status.objects, 'public', 'pub').ResolvedRefs, 'False/InvalidCACertificateRef')
  t.equal(listenerConditions(differ.status.objects, 'secure', 'sec').Conflicted, 'True/FrontendValidationConflict', 'a good bundle differs from the port\'s bad one')

  const none = sharedPort(frontend(null), frontend('ca-bad'), [caMap('ca-bad', garbage)])
  t.equal(listenerConditions(none.status.objects, 'secure', 'sec').Conflicted, 'True/FrontendValidationConflict', 'an unreadable bundle is not "no validation"')
  t.equal(listenerConditions(none.status.objects, 'public', 'pub').Programmed, 'True/Programmed', 'the older Gateway keeps the port')
})

t.test('listener tls.options min-version and max-version: a port offers the lowest min-version of its listeners and the lowest max-version; each listener keeps its own floor', async t => {
  // TLS settles the version before the server name picks a listener: a port offers the lowest
  // min-version of its listeners, and the lowest max-version (a cap holds for the whole port);
  // each listener's own min-version is checked once the handshake names it.
  const withOptions = (secret: string, options: Record<string, string>): Listener['tls'] => ({ ...tls(secret), options } as Listener['tls'])
  const { table } = run([
    b.gateway('gw', [
      b.listener('legacy', 8443, 'HTTPS', { hostname: 'legacy.example.com', tls: tls('cert') }),
      b.listener('strict', 8443, 'HTTPS', { hostname: 'strict.example.com', tls: withOptions('cert', { 'sallyport.io/min-version': 'TLSv1.3' }) }),
      b.listener('capped', 9443, 'HTTPS', { hostname: 'capped.example.com', tls: withOptions('cert', { 'sallyport.io/max-version': '1.2' }) }),
      b.listener('also', 9443, 'HTTPS', { hostname: 'also.example.com', tls: tls('cert') }),
      b.listener('only13', 10443, 'HTTPS', { tls: withOptions('cert', { 'sallyport.io/min-version': 'TLSv1.3', 'sallyport.io/max-version': 'TLSv1.2' }) }),
    ]),
    b.tlsSecret('cert'),
  ])
  const shared = table.ports.get(8443)?.serverTls
  t.same([shared?.minVersion, shared?.maxVersion], ['TLSv1.2', 'TLSv1.3'], 'the port offers what its most lenient listener accepts')
  t.equal(shared?.exact.get('strict.example.com')?.minVersion, 'TLSv1.3', 'the strict listener keeps its floor')
  t.equal(shared?.exact.get('legacy.example.com')?.minVersion, 'TLSv1.2')
  const capped = table.ports.get(9443)?.serverTls
  t.same([capped?.minVersion, capped?.maxVersion], ['TLSv1.2', 'TLSv1.2'], 'a cap holds for the whole port')
  const inverted = table.ports.get(10443)?.serverTls
  t.same([inverted?.minVersion, inverted?.maxVersion, inverted?.fallback?.minVersion], ['TLSv1.3', 'TLSv1.3', 'TLSv1.3'], 'a max-version under the min-version is ignored')
})
