// Destination policy at Gateway scope, through the real pipeline (YAML →
// snapshot → compile): region locks, hostname and CIDR allow/deny lists, the
// guard on static Ip backends and its explicit allowance, what travels on the
// Cluster for upstream/ to enforce on resolved addresses, and status.
import t from 'tap'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { compile, type CompileOptions } from '../../lib/compile/compile.ts'
import type { RouteRule, RouteTable } from '../../lib/compile/table.ts'
import type { Status } from '../../lib/compile/status.ts'

const OPTIONS: CompileOptions = { now: 1700000000000, version: 1, gatewayClass: 'sallyport' }

function gateway(annotations: Record<string, string>, name = 'egress'): string {
  const lines = Object.entries(annotations).map(([k, v]) => `    ${k}: ${JSON.stringify(v)}`).join('\n')
  return `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: ${name}
  namespace: default
${lines === '' ? '' : `  annotations:\n${lines}\n`}spec:
  gatewayClassName: sallyport
  listeners:
    - name: http
      protocol: HTTP
      port: ${name === 'egress' ? 8080 : 8081}
`
}

function hostnameBackend(name: string, hostname: string, labels: Record<string, string> = {}, annotations: Record<string, string> = {}): string {
  const l = Object.entries(labels).map(([k, v]) => `    ${k}: ${JSON.stringify(v)}`).join('\n')
  const a = Object.entries(annotations).map(([k, v]) => `    ${k}: ${JSON.stringify(v)}`).join('\n')
  return `apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata:
  name: ${name}
  namespace: default
${l === '' ? '' : `  labels:\n${l}\n`}${a === '' ? '' : `  annotations:\n${a}\n`}spec:
  type: ExternalHostname
  externalHostname:
    hostname: ${hostname}
  port:
    name: https
    port: 443
  protocol: HTTP
`
}

function ipBackend(name: string, address: string): string {
  return `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
spec:
  endpoints:
    - ip:
        address: ${address}
        port: 8000
`
}

function route(name: string, host: string, backends: Array<{ kind: 'XBackend' | 'Backend'; name: string }>, gatewayName = 'egress'): string {
  const refs = backends.map(b => b.kind === 'XBackend'
    ? `        - group: gateway.networking.x-k8s.io\n          kind: XBackend\n          name: ${b.name}\n          port: 443`
    : `        - group: gateway.envoyproxy.io\n          kind: Backend\n          name: ${b.name}\n          port: 8000`).join('\n')
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs:
    - name: ${gatewayName}
  hostnames: [${host}]
  rules:
    - backendRefs:
${refs}
`
}

const CLASS = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: sallyport
spec:
  controllerName: sallyport.io/gateway-controller
`

/** An ExternalName Service (`labels`: flow-style map entries, e.g. `"sallyport.io/region": eu-west-1`). */
function externalNameService(name: string, externalName: string, labels = ''): string {
  return `apiVersion: v1
kind: Service
metadata:
  name: ${name}
  namespace: default
${labels === '' ? '' : `  labels: { ${labels} }\n`}spec:
  type: ExternalName
  externalName: ${externalName}
  ports: [{ name: http, port: 80 }]
`
}

/** An HTTPRoute for `host` to the Service `name`, port 80. */
function serviceRoute(name: string, host: string): string {
  return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs: [{ name: egress }]
  hostnames: [${host}]
  rules: [{ backendRefs: [{ name: ${name}, port: 80 }] }]
`
}

function run(docs: string[], options: Partial<CompileOptions> = {}): { table: RouteTable; status: Status } {
  const parsed = parseManifests('test.yaml', [CLASS, ...docs].join('---\n'))
  const snapshot = buildSnapshot(parsed.docs, parsed.problems)
  t.same(snapshot.problems.filter(p => p.severity === 'error'), [], 'fixtures are valid')
  return compile(snapshot, { ...OPTIONS, ...options })
}

function ruleFor(table: RouteTable, host: string, port = 8080): RouteRule {
  const rule = table.ports.get(port)?.http?.exact.get(host)?.prefixes.matches[0]?.rule
  if (rule === undefined) throw new Error(`no rule for ${host}`)
  return rule
}

/** Status of the XBackend `name`, else of the Envoy Gateway Backend `name` (status keys carry group and kind). */
function backendStatus(status: Status, name: string) {
  return status.objects.get(`XBackend/default/${name}`) ?? status.objects.get(`Backend/default/${name}`)
}

function backendParent(status: Status, name: string, gatewayName = 'egress'): string {
  const c = backendStatus(status, name)?.parents.find(p => p.parentRef.name === gatewayName)?.conditions[0]
  return c === undefined ? 'none' : `${c.type}=${c.status} ${c.reason}`
}

t.test('region lock: a Backend outside the allowed regions (or unlabelled) gets 403 and a condition', async t => {
  const { table, status } = run([
    gateway({ 'sallyport.io/allowed-regions': 'eu-west-1, eu-central-1' }),
    hostnameBackend('eu', 'api.eu.example.com', { 'sallyport.io/region': 'eu-west-1' }),
    hostnameBackend('us', 'api.us.example.com', { 'sallyport.io/region': 'us-east-1' }),
    hostnameBackend('nowhere', 'api.nowhere.example.com'),
    route('eu', 'eu.test', [{ kind: 'XBackend', name: 'eu' }]),
    route('us', 'us.test', [{ kind: 'XBackend', name: 'us' }]),
    route('nowhere', 'nowhere.test', [{ kind: 'XBackend', name: 'nowhere' }]),
    route('mixed', 'mixed.test', [{ kind: 'XBackend', name: 'eu' }, { kind: 'XBackend', name: 'us' }]),
  ])
  t.equal(ruleFor(table, 'eu.test').direct, null, 'compliant Backend routes')
  t.same(ruleFor(table, 'us.test').direct, { status: 403, code: 'SP_ERR_FORBIDDEN', body: 'destination not allowed by gateway policy' })
  t.equal(ruleFor(table, 'nowhere.test').direct?.status, 403, 'no region label: not compliant')
  const mixed = ruleFor(table, 'mixed.test')
  t.equal(mixed.direct, null, 'one compliant backend keeps the rule routing')
  t.equal(mixed.backends?.[1]?.denied?.status, 403, 'the denied share answers 403')
  t.equal(mixed.backends?.[0]?.denied, undefined)
  t.equal(backendParent(status, 'us'), 'Accepted=False RegionNotAllowed')
  t.match(backendStatus(status, 'us')?.conditions[0]?.message, /region us-east-1 is not among/)
  t.equal(backendParent(status, 'eu'), 'Accepted=True Accepted')
  t.equal(backendParent(status, 'nowhere'), 'Accepted=False RegionNotAllowed')
  const gw = status.objects.get('Gateway/default/egress')?.conditions.find(c => c.type === 'sallyport.io/DestinationPolicy')
  t.equal(gw?.status, 'True', 'the Gateway says its destination policy was read')
})

t.test('the lock is per Gateway: the same Backend is fine through a Gateway without one', async t => {
  const { table, status } = run([
    gateway({ 'sallyport.io/allowed-regions': 'eu-west-1' }),
    gateway({}, 'open'),
    hostnameBackend('us', 'api.us.example.com', { 'sallyport.io/region': 'us-east-1' }),
    route('locked', 'us.test', [{ kind: 'XBackend', name: 'us' }]),
    route('open', 'us-open.test', [{ kind: 'XBackend', name: 'us' }], 'open'),
  ])
  t.equal(ruleFor(table, 'us.test').direct?.status, 403)
  t.equal(ruleFor(table, 'us-open.test', 8081).direct, null)
  t.equal(backendParent(status, 'us', 'egress'), 'Accepted=False RegionNotAllowed')
  t.equal(backendParent(status, 'us', 'open'), 'Accepted=True Accepted')
  t.equal(backendStatus(status, 'us')?.conditions[0]?.status, 'True', 'accepted by one Gateway: the object stays Accepted')
  t.same(table.clusters.get('XBackend/default/us:443')?.destination?.gateways.map(g => g.gateway), ['default/open'], 'the locked Gateway does not narrow the other')
})

t.test('hostname deny-list and allow-list (exact and wildcard)', async t => {
  const { table, status } = run([
    gateway({ 'sallyport.io/destination-denylist': 'evil.example.com, *.tracker.example', 'sallyport.io/destination-allowlist': '*.example.com, api.partner.example' }),
    hostnameBackend('evil', 'evil.example.com'),
    hostnameBackend('tracker', 'a.b.tracker.example'),
    hostnameBackend('api', 'api.example.com'),
    hostnameBackend('apex', 'example.com'),
    hostnameBackend('partner', 'api.partner.example'),
    route('evil', 'evil.test', [{ kind: 'XBackend', name: 'evil' }]),
    route('tracker', 'tracker.test', [{ kind: 'XBackend', name: 'tracker' }]),
    route('api', 'api.test', [{ kind: 'XBackend', name: 'api' }]),
    route('apex', 'apex.test', [{ kind: 'XBackend', name: 'apex' }]),
    route('partner', 'partner.test', [{ kind: 'XBackend', name: 'partner' }]),
  ])
  t.equal(backendParent(status, 'evil'), 'Accepted=False DestinationDenied', 'deny wins over an allow-list wildcard')
  t.equal(backendParent(status, 'tracker'), 'Accepted=False DestinationDenied', 'wildcards match several labels')
  t.equal(ruleFor(table, 'api.test').direct, null)
  t.equal(backendParent(status, 'apex'), 'Accepted=False DestinationNotAllowed', '*.example.com does not match the apex')
  t.equal(ruleFor(table, 'apex.test').direct?.status, 403)
  t.equal(ruleFor(table, 'partner.test').direct, null, 'exact allow-list entry')
})

t.test('an ExternalName Service names an external host: the Gateway\'s hostname lists apply to it too', async t => {
  const { table } = run([
    gateway({ 'sallyport.io/destination-allowlist': 'api.example.com', 'sallyport.io/destination-denylist': 'evil.example.com' }),
    externalNameService('ok', 'api.example.com'), externalNameService('other', 'other.example.net'), externalNameService('evil', 'evil.example.com'),
    serviceRoute('ok', 'ok.test'), serviceRoute('other', 'other.test'), serviceRoute('evil', 'evil.test'),
  ])
  t.equal(ruleFor(table, 'ok.test').direct, null, 'a listed name')
  t.equal(ruleFor(table, 'other.test').direct?.status, 403, 'a name the allow-list does not list')
  t.equal(ruleFor(table, 'evil.test').direct?.status, 403, 'a denied name')
  const c = table.clusters.get('Service/default/ok:80')
  t.same(c?.destination?.gateways.map(g => g.gateway), ['default/egress'], 'its resolved addresses are checked for the Gateway (upstream/)')
  // externalName: 169.254.169.254 is a valid DNS-1123 subdomain: an address in a name's place, guarded when dialled.
  const meta = run([gateway({}), externalNameService('meta', '169.254.169.254'), serviceRoute('meta', 'meta.test')])
  t.same(meta.table.clusters.get('Service/default/meta:80')?.endpoints.map(e => e.kind), ['hostname'], 'an address externalName is resolved (and guarded) like a name')
  t.ok(meta.table.clusters.get('Service/default/meta:80')?.destination !== null, 'with its Gateway\'s address policy')
})

t.test('static Ip backends need an explicit allowance for guarded ranges; CIDR lists apply', async t => {
  const docs = [
    ipBackend('loop', '127.0.0.1'), ipBackend('meta', '169.254.169.254'), ipBackend('public', '192.0.2.10'), ipBackend('pod', '198.51.100.7'),
    route('loop', 'loop.test', [{ kind: 'Backend', name: 'loop' }]),
    route('meta', 'meta.test', [{ kind: 'Backend', name: 'meta' }]),
    route('public', 'public.test', [{ kind: 'Backend', name: 'public' }]),
    route('pod', 'pod.test', [{ kind: 'Backend', name: 'pod' }]),
  ]
  const refused = run([gateway({}), ...docs], { destination: { allowCidrs: [], clusterCidrs: ['198.51.100.0/24'] } })
  t.equal(ruleFor(refused.table, 'loop.test').direct?.status, 403, 'loopback needs an allowance')
  t.equal(backendParent(refused.status, 'loop'), 'Accepted=False DestinationRefused')
  t.match(backendStatus(refused.status, 'loop')?.conditions[0]?.message, /127\.0\.0\.1 is a loopback address; allow it explicitly with the Gateway annotation sallyport\.io\/allow-destination-cidrs/)
  t.equal(ruleFor(refused.table, 'meta.test').direct?.status, 403, 'the metadata service needs an allowance')
  t.equal(ruleFor(refused.table, 'public.test').direct, null, 'public addresses need none')
  t.match(backendStatus(refused.status, 'pod')?.conditions[0]?.message, /198\.51\.100\.7 is a cluster address/, '--cluster-cidr')

  const allowed = run([gateway({ 'sallyport.io/allow-destination-cidrs': '127.0.0.1/32' }), ...docs])
  t.equal(ruleFor(allowed.table, 'loop.test').direct, null, 'allowed by the Gateway annotation')
  t.equal(ruleFor(allowed.table, 'meta.test').direct?.status, 403, 'only what was allowed')
  const flag = run([gateway({}), ...docs], { destination: { allowCidrs: ['127.0.0.0/8'], clusterCidrs: [] } })
  t.equal(ruleFor(flag.table, 'loop.test').direct, null, 'allowed by --allow-destination-cidr')

  const lists = run([gateway({ 'sallyport.io/destination-denylist': '192.0.2.0/24', 'sallyport.io/allow-destination-cidrs': '127.0.0.0/8' }), ...docs])
  t.equal(backendParent(lists.status, 'public'), 'Accepted=False DestinationDenied')
  t.equal(ruleFor(lists.table, 'loop.test').direct, null)
  const only = run([gateway({ 'sallyport.io/destination-allowlist': '192.0.2.0/24' }), ...docs])
  t.equal(ruleFor(only.table, 'public.test').direct, null)
  t.equal(backendParent(only.status, 'pod'), 'Accepted=False DestinationNotAllowed')

  // A NAT64 address carrying a denied IPv4 one is denied too (a NAT64 gateway reaches 192.0.2.10).
  const nat64 = run([gateway({ 'sallyport.io/destination-denylist': '192.0.2.0/24' }), ipBackend('nat64', '64:ff9b::c000:20a'), route('nat64', 'nat64.test', [{ kind: 'Backend', name: 'nat64' }])])
  t.equal(backendParent(nat64.status, 'nat64'), 'Accepted=False DestinationDenied', 'deny-list CIDR through NAT64')
})

t.test('what upstream/ enforces on resolved addresses travels on the Cluster', async t => {
  const { table } = run([
    gateway({
      'sallyport.io/allow-destination-cidrs': '10.0.0.0/8',
      'sallyport.io/destination-denylist': '203.0.113.0/24',
      'sallyport.io/destination-allowlist': 'api.listed.example, 198.51.100.0/24',
      'sallyport.io/reverse-dns-suffixes': '.amazonaws.com',
    }),
    hostnameBackend('listed', 'api.listed.example', {}, { 'sallyport.io/reverse-dns-suffixes': '.googleapis.com, example.net' }),
    hostnameBackend('unlisted', 'api.unlisted.example'),
    route('listed', 'listed.test', [{ kind: 'XBackend', name: 'listed' }]),
    route('unlisted', 'unlisted.test', [{ kind: 'XBackend', name: 'unlisted' }]),
  ])
  const listed = table.clusters.get('XBackend/default/listed:443')
  t.same(listed?.destination, {
    gateways: [{ gateway: 'default/egress', allowCidrs: ['10.0.0.0/8'], denyCidrs: ['203.0.113.0/24'], onlyCidrs: null, reverseDnsSuffixes: ['.amazonaws.com'] }],
    reverseDnsSuffixes: ['.googleapis.com', 'example.net'],
  }, 'a listed hostname: no CIDR restriction on its addresses')
  t.equal(listed?.enableIPv6, false, 'IPv4 only unless a BackendTrafficPolicy enables IPv6')
  t.same(table.clusters.get('XBackend/default/unlisted:443')?.destination?.gateways[0]?.onlyCidrs, ['198.51.100.0/24'],
    'an unlisted hostname may still reach addresses the allow-list names')
  t.equal(ruleFor(table, 'unlisted.test').direct, null, 'decided at run time, not here')
})

t.test('bad annotation entries are reported on the Gateway and ignored', async t => {
  const { status } = run([
    gateway({ 'sallyport.io/allow-destination-cidrs': '10.0.0.0/33, 127.0.0.1', 'sallyport.io/destination-denylist': 'bad_name!' }),
  ])
  const c = status.objects.get('Gateway/default/egress')?.conditions.find(c => c.type === 'sallyport.io/DestinationPolicy')
  t.equal(c?.status, 'False')
  t.match(c?.message, /"10\.0\.0\.0\/33" is not a CIDR/)
  t.match(c?.message, /"bad_name!" is neither a hostname nor a CIDR/)
})

t.test('an ExternalName Service behind a Backend, or under a region lock, is judged as the external name it is', async t => {
  // The egress proposal's Backend of type KubernetesService naming an ExternalName Service.
  const wrapper = (name: string, service: string): string => `apiVersion: gateway.networking.k8s.io/v1alpha1
kind: Backend
metadata:
  name: ${name}
  namespace: default
spec:
  destination:
    type: KubernetesService
    service: { name: ${service}, namespace: default }
    ports:
    - number: 80
      protocol: HTTP
`
  const wrapperRoute = (name: string, host: string): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: ${name}
  namespace: default
spec:
  parentRefs: [{ name: egress }]
  hostnames: [${host}]
  rules: [{ backendRefs: [{ group: gateway.networking.k8s.io, kind: Backend, name: ${name}, port: 80 }] }]
`
  const lists = run([
    gateway({ 'sallyport.io/destination-denylist': 'evil.example.com' }),
    externalNameService('evil', 'evil.example.com'), wrapper('evil-wrapped', 'evil'), wrapperRoute('evil-wrapped', 'wrapped.test'),
    externalNameService('fine', 'api.example.com'), wrapper('fine-wrapped', 'fine'), wrapperRoute('fine-wrapped', 'fine.test'),
  ])
  t.equal(ruleFor(lists.table, 'wrapped.test').direct?.status, 403, 'a Backend wrapping an ExternalName Service of a denied name is denied')
  t.equal(ruleFor(lists.table, 'fine.test').direct, null, 'one wrapping an allowed name is not')

  const regions = run([
    gateway({ 'sallyport.io/allowed-regions': 'eu-west-1' }),
    externalNameService('unlabelled', 'api.us.example.com'), serviceRoute('unlabelled', 'unlabelled.test'),
    externalNameService('us', 'api.us.example.com', '"sallyport.io/region": us-east-1'), serviceRoute('us', 'us.test'),
    externalNameService('eu', 'api.eu.example.com', '"sallyport.io/region": eu-west-1'), serviceRoute('eu', 'eu.test'),
    externalNameService('wrapped', 'api.us.example.com'), wrapper('wrapper', 'wrapped'), wrapperRoute('wrapper', 'wrapper.test'),
  ])
  t.equal(ruleFor(regions.table, 'unlabelled.test').direct?.status, 403, 'an unlabelled ExternalName Service is outside every allowed region')
  t.equal(ruleFor(regions.table, 'us.test').direct?.status, 403, 'one labelled with another region is refused')
  t.equal(ruleFor(regions.table, 'eu.test').direct, null, 'one labelled with an allowed region is served')
  t.equal(ruleFor(regions.table, 'wrapper.test').direct?.status, 403, 'through a Backend too')
})
