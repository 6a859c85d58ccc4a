// Issue 9: which clusters a Gateway's upstream proxy reaches, a Backend's own
// choice (a proxy, or `none`), CONNECT to requested hosts, and the status an
// unreadable annotation or a missing Secret gets.

import t from 'tap'
import { parseManifests } from '../../lib/config/parse.ts'
import { buildSnapshot } from '../../lib/config/snapshot-builder.ts'
import { compile } from '../../lib/compile/compile.ts'
import type { CompileResult } from '../../lib/compile/compile.ts'
import { routeConnect } from '../../lib/router/forward-proxy.ts'
import { matchOnPort } from '../../lib/router/match.ts'
import type { RouteRule } from '../../lib/compile/table.ts'
import { parseConnectPorts, parseSecretRef, parseUpstreamProxy } from '../../lib/validate/annotations.ts'

function build(gatewayAnnotations: string, extra = ''): CompileResult {
  const yaml = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: default
  annotations:
${gatewayAnnotations}
spec:
  gatewayClassName: sallyport
  listeners: [{ name: http, protocol: HTTP, port: 8080 }]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ext, namespace: default }
spec: { endpoints: [{ fqdn: { hostname: api.example.com, port: 443 } }] }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: own, namespace: default, annotations: { sallyport.io/upstream-proxy: "http://other.proxy:8080" } }
spec: { endpoints: [{ fqdn: { hostname: own.example.com, port: 443 } }] }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: none, namespace: default, annotations: { sallyport.io/upstream-proxy: none } }
spec: { endpoints: [{ fqdn: { hostname: none.example.com, port: 443 } }] }
---
apiVersion: v1
kind: Service
metadata: { name: svc, namespace: default }
spec: { ports: [{ port: 80 }] }
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: r, namespace: default, annotations: { sallyport.io/connect-ports: "443" } }
spec:
  parentRefs: [{ name: gw }]
  rules:
    - matches: [{ path: { type: PathPrefix, value: /ext } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: ext, port: 443 }]
    - matches: [{ path: { type: PathPrefix, value: /own } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: own, port: 443 }]
    - matches: [{ path: { type: PathPrefix, value: /none } }]
      backendRefs: [{ group: gateway.envoyproxy.io, kind: Backend, name: none, port: 443 }]
    - matches: [{ path: { type: PathPrefix, value: /svc } }]
      backendRefs: [{ name: svc, port: 80 }]
    - {}
${extra}`
  const parsed = parseManifests('p.yaml', yaml)
  return compile(buildSnapshot(parsed.docs, parsed.problems), { now: 1, version: 1, gatewayClass: 'sallyport' })
}

t.test('a Gateway proxy reaches its external Backends without a choice of their own, never in-cluster Services', async (t) => {
  const { table, status } = build(`    sallyport.io/upstream-proxy: http://proxy.corp:3128
    sallyport.io/upstream-proxy-secret: creds`, `---
apiVersion: v1
kind: Secret
metadata: { name: creds, namespace: default }
stringData: { username: u, password: p }
`)
  const proxyOf = (id: string): unknown => table.clusters.get(id)?.upstreamProxy ?? null
  t.same(proxyOf('Backend/default/ext:443'), { host: 'proxy.corp', port: 3128, authorization: 'Basic ' + Buffer.from('u:p').toString('base64') })
  t.same(proxyOf('Backend/default/own:443'), { host: 'other.proxy', port: 8080, authorization: null }, 'the Backend\'s own proxy wins')
  t.equal(proxyOf('Backend/default/none:443'), null, '`none` keeps the Backend direct')
  t.equal(proxyOf('Service/default/svc:80'), null, 'an in-cluster Service is never proxied')
  t.equal(status.objects.get('Gateway/default/gw')?.conditions.find(c => c.type === 'sallyport.io/UpstreamProxy')?.status, 'True')
})

t.test('a rule without backendRefs on a CONNECT route tunnels to the requested host with the Gateway\'s proxy', async (t) => {
  const { table } = build('    sallyport.io/upstream-proxy: http://proxy.corp:3128\n    sallyport.io/destination-denylist: "*.evil.test"')
  const d = routeConnect(table, 8080, 'api.example.net:443')
  t.ok(d.ok, 'allowed')
  if (!d.ok) return
  t.equal(d.cluster.id, 'CONNECT/default/r/4', 'a bounded label: the route and rule')
  t.same(d.cluster.endpoints.map(e => [e.host, e.port, e.kind]), [['api.example.net', 443, 'hostname']], 'the requested host is the endpoint')
  t.same(d.cluster.upstreamProxy, { host: 'proxy.corp', port: 3128, authorization: null }, 'through the Gateway\'s proxy')
  t.match(routeConnect(table, 8080, 'x.evil.test:443'), { ok: false, status: 403, reason: 'destination_denied' }, 'the deny-list decides names')
  t.match(routeConnect(table, 8080, 'api.example.net:8443'), { ok: false, reason: 'port_not_allowed' })
  const userinfo = routeConnect(table, 8080, 'user:s3cret@api.example.net:443')
  t.match(userinfo, { ok: false, status: 400, reason: 'bad_authority' }, 'a target with userinfo is not host:port')
  t.notMatch(userinfo.ok ? '' : userinfo.destination, /s3cret/, 'and its password stays out of the logged destination')
})

t.test('through an upstream proxy, an allow-list with CIDRs admits no unlisted Backend hostname (its addresses are never seen)', async (t) => {
  const { table, status } = build('    sallyport.io/upstream-proxy: http://proxy.corp:3128\n    sallyport.io/destination-allowlist: "api.example.com, 198.51.100.0/24"')
  const ruleOf = (path: string): RouteRule | undefined => {
    const http = table.ports.get(8080)?.http
    return http == null ? undefined : matchOnPort(http, 'x.test', { method: 'GET', path, query: null, header: () => undefined })?.rule
  }
  // A rule whose only backend is denied answers 403 itself (direct).
  const statusOf = (rule: RouteRule | undefined): number | undefined => rule?.direct?.status ?? rule?.backends?.[0]?.denied?.status
  t.ok(ruleOf('/ext') !== undefined && statusOf(ruleOf('/ext')) === undefined, 'a listed name passes to the proxy')
  t.equal(statusOf(ruleOf('/own')), 403, 'an unlisted name behind its own proxy: 403')
  t.equal(statusOf(ruleOf('/none')), undefined, 'an unlisted name reached directly: its resolved addresses are checked against the CIDRs')
  const parent = (name: string): unknown => status.objects.get(`Backend/default/${name}`)?.parents.find(p => p.parentRef.name === 'gw')?.conditions[0]
  t.match(parent('own'), { type: 'Accepted', status: 'False', reason: 'DestinationNotAllowed', message: /own\.example\.com .*upstream proxy/ }, 'the Backend\'s status says why')
  t.notMatch(parent('ext'), { status: 'False' })

  // The same through the Gateway's own proxy: `ext` unlisted this time.
  const other = build('    sallyport.io/upstream-proxy: http://proxy.corp:3128\n    sallyport.io/destination-allowlist: "own.example.com, 198.51.100.0/24"')
  const otherRule = (path: string): RouteRule | undefined => {
    const http = other.table.ports.get(8080)?.http
    return http == null ? undefined : matchOnPort(http, 'x.test', { method: 'GET', path, query: null, header: () => undefined })?.rule
  }
  t.equal(statusOf(otherRule('/ext')), 403, 'an unlisted name behind the Gateway\'s proxy: 403')
  t.equal(statusOf(otherRule('/own')), undefined, 'a listed name behind its own proxy passes')
  t.equal(statusOf(otherRule('/none')), undefined, 'direct: left to the address check')
})

t.test('an unreadable Gateway proxy is ignored and says why; a missing Secret keeps the proxy without credentials', async (t) => {
  const bad = build('    sallyport.io/upstream-proxy: socks5://proxy.corp:1080')
  const c = bad.status.objects.get('Gateway/default/gw')?.conditions.find(x => x.type === 'sallyport.io/UpstreamProxy')
  t.equal(c?.status, 'False')
  t.match(c?.message, /scheme socks5 is not supported.*connecting directly/)
  t.equal(bad.table.clusters.get('Backend/default/ext:443')?.upstreamProxy ?? null, null)
  const noSecret = build('    sallyport.io/upstream-proxy: http://proxy.corp:3128\n    sallyport.io/upstream-proxy-secret: missing')
  const m = noSecret.status.objects.get('Gateway/default/gw')?.conditions.find(x => x.type === 'sallyport.io/UpstreamProxy')
  t.match(m?.message, /Secret default\/missing not found; no credentials sent/)
  t.same(noSecret.table.clusters.get('Backend/default/ext:443')?.upstreamProxy, { host: 'proxy.corp', port: 3128, authorization: null })
})

t.test('annotation parsers', async (t) => {
  t.same(parseConnectPorts('443, 8443 9443'), { ok: true, value: [443, 8443, 9443] })
  t.notOk(parseConnectPorts('443,0').ok)
  t.notOk(parseConnectPorts(' ').ok)
  t.same(parseUpstreamProxy('http://[::1]:3128'), { ok: true, value: { host: '::1', port: 3128 } })
  t.same(parseUpstreamProxy('http://proxy'), { ok: true, value: { host: 'proxy', port: 80 } })
  t.same(parseUpstreamProxy('none'), { ok: true, value: 'none' })
  t.match(parseUpstreamProxy('http://u:p@proxy:1'), { ok: false, message: /credentials in the URL/ })
  t.match(parseUpstreamProxy('http://proxy:1/path'), { ok: false, message: /no path/ })
  t.match(parseUpstreamProxy('https://proxy.corp:3128'), { ok: false, message: /^scheme https is not supported/ })
  // Credentials in a URL that does not parse (no host, a bad port, a space) are not echoed either:
  // the message goes to status, /config_dump, the log and `validate`.
  for (const text of ['http://u:pw-Secret1@', 'http://u:pw-Secret1@proxy:31x8', 'http://u:pw-Secret1@proxy corp:3128', 'http://pw-Secret1@[::1']) {
    const r = parseUpstreamProxy(text)
    t.match(r, { ok: false, message: /credentials in the URL/ }, text)
    t.notMatch(JSON.stringify(r), /pw-Secret1/, `${text}: the password is not in the message`)
  }
  t.match(parseUpstreamProxy('http://proxy:31x8'), { ok: false, message: /"http:\/\/proxy:31x8" is not a URL/ }, 'without credentials, the text is still shown')
  t.same(parseSecretRef('ns/name', 'ns'), { ok: true, value: 'ns/name' })
  t.match(parseSecretRef('other/name', 'ns'), { ok: false, message: /another namespace/ })
})

t.test('CONNECT to requested hosts: an allow-list admits only its names; a region lock refuses them all', async (t) => {
  const allow = build('    sallyport.io/destination-allowlist: "*.ok.test"').table
  t.ok(routeConnect(allow, 8080, 'a.ok.test:443').ok, 'a listed name')
  t.match(routeConnect(allow, 8080, 'b.other.test:443'), { ok: false, reason: 'destination_denied' }, 'an unlisted name')
  const withCidr = build('    sallyport.io/destination-allowlist: "*.ok.test, 203.0.113.0/24"').table
  const d = routeConnect(withCidr, 8080, 'b.other.test:443')
  t.ok(d.ok, 'with CIDRs on the list, an unlisted name may still resolve into them')
  if (d.ok) t.same(d.cluster.destination?.gateways[0]?.onlyCidrs, ['203.0.113.0/24'], 'checked when dialled')
  const region = build('    sallyport.io/allowed-regions: eu').table
  t.match(routeConnect(region, 8080, 'a.ok.test:443'), { ok: false, reason: 'destination_denied' })
})
