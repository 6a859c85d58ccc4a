// Which requests a RateLimit `match` (and a BackendTrafficPolicy rule's
// clientSelectors, compiled into one) selects: source ranges compared as
// addresses (IPv6 prefixes that do not end at a group boundary, ::/0), every
// selector's range required, and a header condition's `invert`.
import t from 'tap'
import { rateLimitExtension } from '../../lib/compile/extensions.ts'
import type { CompiledExtension } from '../../lib/compile/table.ts'
import type { ClientInfo, HookResult, RequestView } from '../../lib/extensions/plugin-api.ts'
import { compileMatch, rateLimit } from '../../lib/extensions/rate-limit.ts'
import { RedisPool } from '../../lib/extensions/redis-client.ts'
import { readObject } from '../../lib/resources/read.ts'
import type { BackendTrafficPolicy } from '../../lib/resources/model.ts'

function view(address: string, headers: Record<string, string> = {}): RequestView {
  const client: ClientInfo = { address, namespace: null, serviceAccount: null, pod: null, spiffeId: null }
  return { method: 'GET', path: '/', authority: 'r', headers, client, route: 'default/r', rule: 'default/r/rule/0', backend: 'Backend/default/r:80', gateway: 'default/egress', scheme: 'http' }
}

function selects(match: unknown, address: string, headers: Record<string, string> = {}): boolean {
  const m = compileMatch(match)
  if (m === null) throw new Error('no match compiled')
  return m(view(address, headers))
}

t.test('sourceCIDR compares addresses, not text', async (t) => {
  t.equal(selects({ sourceCIDR: '2001:db8::/48' }, '2001:db8:0:7::1'), true, 'inside the /48')
  t.equal(selects({ sourceCIDR: '2001:db8::/48' }, '2001:db8:5::1'), false, '2001:db8:5::/48 is another /48')
  t.equal(selects({ sourceCIDR: '2001:db8:ab00::/40' }, '2001:db8:abcd::1'), true, 'a prefix inside a group')
  t.equal(selects({ sourceCIDR: '2001:db8:ab00::/40' }, '2001:db8:ac00::1'), false)
  t.equal(selects({ sourceCIDR: '::/0' }, '2001:db8::1'), true, '::/0 is every IPv6 client')
  t.equal(selects({ sourceCIDR: '10.0.0.0/8' }, '::ffff:10.1.2.3'), true, 'an IPv4-mapped client is its IPv4')
  t.equal(selects({ sourceCIDR: '10.0.0.0/8' }, '11.1.2.3'), false)
})

t.test('a header condition with invert selects the requests it does not match', async (t) => {
  const m = { headers: [{ name: 'x-plan', value: 'paid', invert: true }] }
  t.equal(selects(m, '127.0.0.1', { 'x-plan': 'paid' }), false)
  t.equal(selects(m, '127.0.0.1', { 'x-plan': 'free' }), true)
  t.equal(selects(m, '127.0.0.1'), true, 'a request without the header does not match it either')
  const re = { headers: [{ name: 'x-plan', value: 'p.*', type: 'RegularExpression', invert: true }] }
  t.equal(selects(re, '127.0.0.1', { 'x-plan': 'paid' }), false)
  t.equal(selects(re, '127.0.0.1', { 'x-plan': 'free' }), true)
})

function btp(rules: unknown[]): BackendTrafficPolicy {
  const doc = { apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'BackendTrafficPolicy', metadata: { name: 'p', namespace: 'default' }, spec: { targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: 'r' }], rateLimit: { type: 'Local', local: { rules } } } }
  return readObject(doc, { file: 'inline.yaml', doc: 0 }) as BackendTrafficPolicy
}

async function codes(policy: BackendTrafficPolicy, requests: Array<[string, Record<string, string>]>): Promise<number[]> {
  const ext = rateLimitExtension(policy)
  if (ext === null) throw new Error('no extension')
  const spec: CompiledExtension = { key: `BTP ${Math.random()}`, name: ext.name, type: 'RateLimit', phases: ['request-headers'], priority: 0, failOpen: false, scope: 'Route', source: `BackendTrafficPolicy default/p${Math.random()}`, namespace: 'default', config: ext.config, secrets: {}, error: null }
  const hooks = rateLimit(spec, new RedisPool())
  t.teardown(() => hooks.close?.())
  const out: number[] = []
  for (const [address, headers] of requests) {
    const r: HookResult = await (hooks.requestHeaders as (v: RequestView) => HookResult | Promise<HookResult>)(view(address, headers))
    out.push(r !== undefined && r !== null && 'deny' in r ? r.deny.status : 200)
  }
  return out
}

t.test('BackendTrafficPolicy: an inverted header selector limits everyone but the matching value', async (t) => {
  const policy = btp([{ clientSelectors: [{ headers: [{ name: 'x-plan', value: 'paid', invert: true }] }], limit: { requests: 1, unit: 'Hour' } }])
  t.same(await codes(policy, [['127.0.0.1', { 'x-plan': 'free' }], ['127.0.0.1', { 'x-plan': 'free' }], ['127.0.0.1', { 'x-plan': 'paid' }], ['127.0.0.1', { 'x-plan': 'paid' }]]),
    [200, 429, 200, 200], 'free is limited, paid is not')
})

t.test('BackendTrafficPolicy: two selectors with a sourceCIDR each: both ranges must hold', async (t) => {
  const policy = btp([{ clientSelectors: [{ sourceCIDR: { type: 'Exact', value: '10.0.0.0/8' } }, { sourceCIDR: { type: 'Exact', value: '10.1.0.0/16' } }], limit: { requests: 1, unit: 'Hour' } }])
  t.same(await codes(policy, [['10.2.0.1', {}], ['10.2.0.1', {}], ['10.1.0.1', {}], ['10.1.0.1', {}]]), [200, 200, 200, 429], 'only 10.1.0.0/16 (inside both) is limited')
})
