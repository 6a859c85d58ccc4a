// The extension chain of each attempt of a retried request (issue 6 × issue
// 7), with real upstreams: an answer goes through the response hooks — and
// carries the reply fields — of the chain run that made the request it
// answers, whichever backends were tried in between (A → B → A), and a
// failover from a backend without extensions to one with a
// CredentialInjector carries the fallback's credential.
import t from 'tap'
import path from 'node:path'
import type { CompiledExtension, ExtensionChain, RouteRule } from '../../lib/compile/table.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { ask, closedPort, gateway, upstream } from './fixtures.ts'

configureLogger({ level: 'silent' })

const TRACE = path.resolve(import.meta.dirname, '../../fixtures/plugins/response-trace.ts')

function ext(owner: string, name: string, type: string, phases: CompiledExtension['phases'], config: Record<string, unknown>, secrets: CompiledExtension['secrets'] = {}): CompiledExtension {
  return {
    key: `Backend test/${owner}/${name}#1`, name, type, phases, priority: 0, failOpen: false,
    scope: 'Backend', source: `Backend test/${owner}`, namespace: 'test', config, secrets, error: null,
  }
}

function traced(owner: string): ExtensionChain {
  return {
    id: `backend/test/${owner}`,
    extensions: [
      ext(owner, `limit-${owner}`, 'RateLimit', ['request-headers'], { requests: 1000, unit: 'Hour', key: ['route'] }),
      ext(owner, 'trace', 'Plugin', ['request-headers', 'response-headers'], { path: TRACE, options: { value: owner } }),
    ],
  }
}

t.test('A → B → A: the answer of the third try goes through A\'s response hooks and carries A\'s reply fields, not B\'s', async (t) => {
  let n = 0
  const seen: Array<[string, string | undefined]> = []
  const a = await upstream(t, 'a', (req, res) => { seen.push(['a', req.headers['x-sent-through'] as string | undefined]); res.writeHead(++n === 1 ? 503 : 200).end('a') })
  const b = await upstream(t, 'b', (req, res) => { seen.push(['b', req.headers['x-sent-through'] as string | undefined]); res.writeHead(503).end('b') })
  const retry: RouteRule['retry'] = { attempts: 2, codes: [503], backoffMs: 1, policy: null }
  const port = await freePort()
  const backends = [{ cluster: 'a', priority: 0, extensions: traced('a') }, { cluster: 'b', priority: 1, extensions: traced('b') }]
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry, backends }] }] } }, [cluster('a', a.port), cluster('b', b.port)]))
  const r = await ask(gw.port)
  t.same(seen, [['a', 'a'], ['b', 'b'], ['a', 'a']], 'A, then B (its own chain run), then A again with A\'s request')
  t.equal(r.status, 200)
  t.equal(r.body, 'a')
  t.equal(r.headers['x-answered-through'], 'a', 'A\'s response hook, not B\'s')
  t.match(String(r.headers['ratelimit-policy']), /^"limit-a";/, 'A\'s RateLimit fields, not B\'s')
  t.match(String(r.headers.ratelimit), /^"limit-a";/)
})

t.test('A (no chain) → B → A: the answer goes through no response hook of B\'s', async (t) => {
  let n = 0
  const a = await upstream(t, 'a', (_req, res) => { res.writeHead(++n === 1 ? 503 : 200).end('a') })
  const b = await upstream(t, 'b', (_req, res) => { res.writeHead(503).end('b') })
  const retry: RouteRule['retry'] = { attempts: 2, codes: [503], backoffMs: 1, policy: null }
  const port = await freePort()
  const backends = [{ cluster: 'a', priority: 0 }, { cluster: 'b', priority: 1, extensions: traced('b') }]
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry, backends }] }] } }, [cluster('a', a.port), cluster('b', b.port)]))
  const r = await ask(gw.port)
  t.equal(r.status, 200)
  t.equal(r.body, 'a')
  t.equal(a.hits, 2)
  t.equal(b.hits, 1)
  t.equal(r.headers['x-answered-through'], undefined, 'B\'s response hook did not see A\'s answer')
  t.equal(r.headers['ratelimit-policy'], undefined, 'nor do B\'s RateLimit fields reach it')
})

const KEY_B: ExtensionChain = {
  id: 'backend/test/b',
  extensions: [ext('b', 'key', 'CredentialInjector', ['request-headers'], { secretRef: { name: 'b-key' } }, { secretRef: { token: 'sk-b' } })],
}

t.test('a primary without extensions fails over to a fallback with a CredentialInjector: the failover carries the fallback\'s credential (503, then a refused connection)', async (t) => {
  const a = await upstream(t, 'a', (_req, res) => { res.writeHead(503).end('a') })
  const atB: Array<string | undefined> = []
  const b = await upstream(t, 'b', (req, res) => { atB.push(req.headers.authorization); res.end('b') })
  const backends = [{ cluster: 'a', priority: 0 }, { cluster: 'b', priority: 1, extensions: KEY_B }]
  const retry: RouteRule['retry'] = { attempts: 1, codes: [503], backoffMs: 1, policy: null }
  const port = await freePort()
  const gw = await gateway(t, buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry, backends }] }] } }, [cluster('a', a.port), cluster('b', b.port)]))
  const r = await ask(gw.port, { headers: { authorization: 'Bearer client-own' }, body: '{"q":1}' })
  t.same([r.status, r.body], [200, 'b'])
  t.equal(a.hits, 1, 'A was tried first')
  t.same(atB, ['Bearer sk-b'], 'B got its own credential, not the client\'s')
  t.same(b.bodies, ['{"q":1}'], 'and the body whole')

  // No retry policy: a refused connection moves the request to the fallback level (nothing was sent).
  const dead = await closedPort()
  const port2 = await freePort()
  const gw2 = await gateway(t, buildTable({ [port2]: { routes: [{ name: 'r', rules: [{ backends }] }] } }, [cluster('a', dead), cluster('b', b.port)]))
  const r2 = await ask(gw2.port, { headers: { authorization: 'Bearer client-own' } })
  t.same([r2.status, r2.body], [200, 'b'])
  t.same(atB, ['Bearer sk-b', 'Bearer sk-b'], 'the failover after a refused connection carries B\'s credential')
})
