// `sallyport validate` reports what compile finds between objects
// (lib/compile/findings.ts, lib/runtime/offline.ts): one line per finding,
// naming the field; a missing object is an error when the files hold objects
// of its kind, a warning when they hold none.

import t, { type Test } from 'tap'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { validateCommand } from '../../lib/runtime/offline.ts'

const gateway = (name = 'egress', extra = ''): string => `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: ${name}, namespace: default }
spec:
  gatewayClassName: sallyport
  listeners:
    - { name: http, protocol: HTTP, port: 8080 }${extra}
`

const backend = (name: string, ns = 'default'): string => `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata: { name: ${name}, namespace: ${ns} }
spec:
  endpoints: [{ fqdn: { hostname: ${name}.example.com, port: 443 } }]
`

const route = (name: string, refs: string, parents = '[{ name: egress }]', extra = ''): string => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ${name}, namespace: default }
spec:
  parentRefs: ${parents}
  hostnames: [${name}.example.test]
  rules:
    - backendRefs: ${refs}${extra}
`

const envoyRef = (name: string, ns = 'default'): string => `[{ group: gateway.envoyproxy.io, kind: Backend, name: ${name}, namespace: ${ns}, port: 443 }]`

/** validate over one file of these documents: its lines (file name stripped), the summary and the exit code. */
async function validate(t: Test, ...docs: string[]): Promise<{ lines: string[]; summary: string; code: number }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-xobj-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'c.yaml')
  fs.writeFileSync(file, docs.join('---\n'))
  const lines: string[] = []
  let summary = ''
  const code = await validateCommand([file], { stdout: (l) => lines.push(l.replace(`${file}:`, '')), stderr: (l) => { summary = l } })
  return { lines, summary, code }
}


t.test('a backendRef to a Backend not in the files: an error when the files hold Backends', async (t) => {
  const r = await validate(t, gateway(), backend('real'), route('api', envoyRef('typo')))
  t.same(r.lines, ['2: HTTPRoute default/api: spec.rules[0].backendRefs[0]: Backend default/typo (gateway.envoyproxy.io) not found (ResolvedRefs=False: BackendNotFound)'])
  t.equal(r.code, 1)
  t.equal(r.summary, '1 error, 0 warnings')
})

t.test('a backendRef to a Backend when the files hold none: a warning (a part of the configuration)', async (t) => {
  const r = await validate(t, gateway(), route('api', envoyRef('elsewhere')))
  t.same(r.lines, ['1: HTTPRoute default/api: spec.rules[0].backendRefs[0]: Backend default/elsewhere (gateway.envoyproxy.io) not found (ResolvedRefs=False: BackendNotFound)'])
  t.equal(r.code, 0)
  t.equal(r.summary, '0 errors, 1 warning')
})

t.test('a Service backendRef: the second ref of a rule is named by its index', async (t) => {
  const svc = 'apiVersion: v1\nkind: Service\nmetadata: { name: there, namespace: default }\nspec: { ports: [{ name: http, port: 80 }] }\n'
  const r = await validate(t, gateway(), svc, route('api', '[{ name: there, port: 80 }, { name: absent, port: 80 }]'))
  t.same(r.lines, ['2: HTTPRoute default/api: spec.rules[0].backendRefs[1]: Service default/absent not found (ResolvedRefs=False: BackendNotFound)'])
  t.equal(r.code, 1)
})

t.test('a Backend in the files that validation dropped is not reported again from the route', async (t) => {
  const bad = 'apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: Backend\nmetadata: { name: broken, namespace: default }\nspec: { endpoints: [{ ip: { address: not-an-ip, port: 1 } }] }\n'
  const r = await validate(t, gateway(), backend('real'), bad, route('api', envoyRef('broken')))
  t.equal(r.lines.length, 1)
  t.match(r.lines[0], /^2: Backend default\/broken: spec\.endpoints\[0\]\.ip\.address/)
})

t.test('a cross-namespace backendRef without a ReferenceGrant', async (t) => {
  const grant = 'apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: { name: other, namespace: shared }\nspec:\n  from: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: elsewhere }]\n  to: [{ group: gateway.envoyproxy.io, kind: Backend }]\n'
  const line = '2: HTTPRoute default/api: spec.rules[0].backendRefs[0]: Backend shared/remote is in another namespace and no ReferenceGrant allows it (ResolvedRefs=False: RefNotPermitted)'
  const withGrants = await validate(t, gateway(), backend('remote', 'shared'), route('api', envoyRef('remote', 'shared')), grant)
  t.same(withGrants.lines, [line])
  t.equal(withGrants.code, 1)
  const without = await validate(t, gateway(), backend('remote', 'shared'), route('api', envoyRef('remote', 'shared')))
  t.same(without.lines, [line], 'no ReferenceGrant in the files at all: a warning')
  t.equal(without.code, 0)
})

t.test('a parentRef to a Gateway not in the files is a warning; one to a missing listener an error', async (t) => {
  const r = await validate(t, gateway(), backend('real'),
    route('typo', envoyRef('real'), '[{ name: egres }]'),
    route('section', envoyRef('real'), '[{ name: egress, sectionName: https }]'))
  t.same(r.lines, [
    '2: HTTPRoute default/typo: spec.parentRefs[0]: Gateway default/egres is not in these files',
    '3: HTTPRoute default/section: spec.parentRefs[0]: Gateway default/egress has no listener https (Accepted=False: NoMatchingParent)',
  ])
  t.equal(r.summary, '1 error, 1 warning')
})

t.test('listeners of two Gateways conflicting on a port: the later one', async (t) => {
  const second = gateway('second').replace('protocol: HTTP, port: 8080', 'protocol: TCP, port: 8080')
  const r = await validate(t, gateway(), second)
  t.same(r.lines, ['1: Gateway default/second: spec.listeners[0]: port 8080 already serves HTTP (Accepted=False: ProtocolConflict)'])
  t.equal(r.code, 1)
})

t.test('a listener certificate Secret that is not there: error with Secrets in the files, warning without', async (t) => {
  const https = gateway().replace('{ name: http, protocol: HTTP, port: 8080 }', '{ name: https, protocol: HTTPS, port: 8443, tls: { certificateRefs: [{ name: cert }] } }')
  const line = '0: Gateway default/egress: spec.listeners[0].tls.certificateRefs[0]: Secret default/cert not found (ResolvedRefs=False: InvalidCertificateRef)'
  const alone = await validate(t, https)
  t.same(alone.lines, [line])
  t.equal(alone.code, 0)
  const other = 'apiVersion: v1\nkind: Secret\nmetadata: { name: other, namespace: default }\nstringData: { token: x }\n'
  const withSecrets = await validate(t, https, other)
  t.same(withSecrets.lines, [line])
  t.equal(withSecrets.code, 1)
})

t.test('an ExtensionRef to an EgressExtension that is not there', async (t) => {
  const ext = 'apiVersion: sallyport.io/v1alpha1\nkind: EgressExtension\nmetadata: { name: real, namespace: default }\nspec:\n  extensions: [{ name: h, type: gateway.networking.k8s.io/CredentialInjector:v1, config: { secretRef: { name: s } } }]\n'
  const filters = '\n      filters: [{ type: ExtensionRef, extensionRef: { group: sallyport.io, kind: EgressExtension, name: missing } }]'
  const r = await validate(t, gateway(), backend('real'), ext, route('api', envoyRef('real'), undefined, filters))
  t.same(r.lines, ['3: HTTPRoute default/api: spec.rules[0].filters[0].extensionRef: ExtensionRef sallyport.io/EgressExtension missing cannot be resolved (ResolvedRefs=False: BackendNotFound)'])
  t.equal(r.code, 1)
})

t.test('policies whose targetRef matches nothing', async (t) => {
  const btp = 'apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: { name: p, namespace: default }\nspec:\n  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: api }, { group: gateway.networking.k8s.io, kind: HTTPRoute, name: gone }]\n  timeout: { http: { requestTimeout: 5s } }\n'
  const tls = 'apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: { name: t, namespace: default }\nspec:\n  targetRefs: [{ group: "", kind: Service, name: nowhere }]\n  validation: { wellKnownCACertificates: System, hostname: nowhere.example.com }\n'
  const r = await validate(t, gateway(), backend('real'), route('api', envoyRef('real')), btp, tls)
  t.same(r.lines, [
    '3: BackendTrafficPolicy default/p: spec.targetRefs[1]: HTTPRoute default/gone not found (Accepted=False: TargetNotFound)',
    '4: BackendTLSPolicy default/t: spec.targetRefs[0]: Service default/nowhere not found (TargetNotFound)',
  ])
  t.equal(r.summary, '1 error, 1 warning', 'routes are in the files; Services are not')
})

t.test('a Gateway of another class is a warning; the quickstart configuration is clean', async (t) => {
  const r = await validate(t, gateway().replace('gatewayClassName: sallyport', 'gatewayClassName: sallyprot'))
  t.same(r.lines, ['0: Gateway default/egress: spec.gatewayClassName: GatewayClass sallyprot is not the one served (sallyport): this Gateway\'s listeners, and the routes attached only to it, are not served'])
  t.equal(r.code, 0)
  const lines: string[] = []
  const code = await validateCommand([path.join(import.meta.dirname, '../../fixtures/quickstart')], { stdout: (l) => lines.push(l), stderr: () => {} })
  t.same(lines, [])
  t.equal(code, 0)
})

t.test('a route attached to no Gateway of the files still has its references checked', async (t) => {
  // The Gateway lives elsewhere (another file set, the cluster): the route's own references are in these files.
  const r = await validate(t, backend('api'), route('pay', `${envoyRef('api')}\n    - backendRefs: ${envoyRef('typo')}`, '[{ name: elsewhere }]'),
    route('far', envoyRef('api', 'other'), '[{ name: elsewhere }]'))
  t.same(r.lines, [
    '1: HTTPRoute default/pay: spec.parentRefs[0]: Gateway default/elsewhere is not in these files',
    '1: HTTPRoute default/pay: spec.rules[1].backendRefs[0]: Backend default/typo (gateway.envoyproxy.io) not found (ResolvedRefs=False: BackendNotFound)',
    '2: HTTPRoute default/far: spec.parentRefs[0]: Gateway default/elsewhere is not in these files',
    '2: HTTPRoute default/far: spec.rules[0].backendRefs[0]: Backend other/api is in another namespace and no ReferenceGrant allows it (ResolvedRefs=False: RefNotPermitted)',
  ])
  t.equal(r.summary, '1 error, 3 warnings', 'no ReferenceGrant in the files: the grant may live elsewhere, a warning')
  t.equal(r.code, 1, 'a Backend missing where the files hold Backends is an error')
})
