// A signing chain (AWSSigV4) on retries and failover (issue 6 × issue 7). The
// signature covers the Host, content-type and x-amz-* fields and the body, so
// whatever an attempt sends must be what its chain signed:
//
// - a Route-scope chain is one shared object for every backend, yet a failover
//   to a backend of another hostname must be signed for that hostname (the
//   attempt's Host), not reuse the first backend's signature;
// - a backendRef RequestHeaderModifier shapes the request before the chain
//   signs it, on the first try as on retries, so the signature covers exactly
//   the fields sent.
//
// Each upstream verifies the signature for its own hostname with the
// documented algorithm (AWS General Reference, "Create a signed AWS API
// request"), written out here independently of lib/extensions/sigv4.ts, and
// answers 403 SignatureDoesNotMatch as AWS would.
import t, { type Test } from 'tap'
import { createHash, createHmac } from 'node:crypto'
import type http from 'node:http'
import type { CompiledExtension, ExtensionChain, HeaderEdits, RouteRule } from '../../lib/compile/table.ts'
import { configureLogger } from '../../lib/observe/log.ts'
import { buildTable, cluster, freePort } from '../helpers/table-builder.ts'
import { ask, closedPort, gateway, upstream, type Upstream } from './fixtures.ts'

configureLogger({ level: 'silent' })

const ACCESS_KEY = 'AKIDTEST'
const SECRET_KEY = 'test-secret-key'
const REGION = 'us-east-1'
const SERVICE = 'bedrock'
const PATH = '/model/titan/invoke'

const SIGV4: CompiledExtension = {
  key: 'EgressExtension test/sign/sign#1', name: 'sign', type: 'AWSSigV4', phases: ['request-body'], priority: -10, failOpen: false,
  scope: 'Route', source: 'EgressExtension test/sign', namespace: 'test',
  config: { service: SERVICE, region: REGION, secretRef: { name: 'aws' } },
  secrets: { secretRef: { AWS_ACCESS_KEY_ID: ACCESS_KEY, AWS_SECRET_ACCESS_KEY: SECRET_KEY } },
  error: null,
}

/** One chain object for every backend, as compile shares identical chains. */
const CHAIN: ExtensionChain = { id: 'httproute/test/r/rule/0', extensions: [SIGV4] }

const RETRY_503: RouteRule['retry'] = { attempts: 1, codes: [503], backoffMs: null, policy: null }

function hex(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex')
}

function mac(key: string | Buffer, data: string): Buffer {
  return createHmac('sha256', key).update(data, 'utf8').digest()
}

function one(v: string | string[] | undefined): string {
  return Array.isArray(v) ? v.map(s => s.trim().replace(/\s+/g, ' ')).join(',') : (v ?? '').trim().replace(/\s+/g, ' ')
}

/**
 * Why the request is not validly signed for `host`, or null when it is. Every
 * content-type and x-amz-* field sent must be signed (S3's rule; the strictest
 * reading), the Host sent must be `host`, the payload hash must be the body's.
 */
function signatureProblem(req: http.IncomingMessage, body: Buffer, host: string): string | null {
  const auth = String(req.headers.authorization ?? '')
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$/.exec(auth)
  if (m === null) return `not a SigV4 Authorization: ${auth}`
  const [, keyId, date, region, service, signedList, signature] = m as unknown as [string, string, string, string, string, string, string]
  if (keyId !== ACCESS_KEY || region !== REGION || service !== SERVICE) return 'wrong credential scope'
  if (req.headers.host !== host) return `Host ${String(req.headers.host)} is not ${host}`
  const signed = signedList.split(';')
  if (!signed.includes('host')) return 'host not signed'
  for (const name of Object.keys(req.headers)) {
    if ((name === 'content-type' || name.startsWith('x-amz-')) && !signed.includes(name)) return `${name} sent but not signed`
  }
  const payloadHash = hex(body)
  if (req.headers['x-amz-content-sha256'] !== payloadHash) return 'x-amz-content-sha256 is not the body\'s hash'
  const amzDate = one(req.headers['x-amz-date'])
  const canonicalHeaders = signed.map(n => `${n}:${n === 'host' ? host : one(req.headers[n])}\n`).join('')
  // The path is unreserved characters only: encoded (twice, for every service but S3) it stays as it is.
  const canonical = [req.method, PATH, '', canonicalHeaders, signed.join(';'), payloadHash].join('\n')
  const scope = `${date}/${region}/${service}/aws4_request`
  const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, hex(canonical)].join('\n')
  const key = mac(mac(mac(mac('AWS4' + SECRET_KEY, date), region), service), 'aws4_request')
  const expected = createHmac('sha256', key).update(toSign, 'utf8').digest('hex')
  return expected === signature ? null : 'SignatureDoesNotMatch'
}

interface Verifier {
  readonly u: Upstream
  /** Each request's verdict, in order: null valid, else the problem. */
  readonly verdicts: Array<string | null>
  /** Fields of each request received. */
  readonly seen: http.IncomingHttpHeaders[]
}

/** An upstream serving `host` that checks each request's signature, then answers 403, or as `answer` says. */
async function verifier(t: Test, name: string, host: string, answer: (n: number) => number = () => 200): Promise<Verifier> {
  const verdicts: Array<string | null> = []
  const seen: http.IncomingHttpHeaders[] = []
  const u = await upstream(t, name, (req, res, body) => {
    const problem = signatureProblem(req, Buffer.from(body, 'latin1'), host)
    verdicts.push(problem)
    seen.push(req.headers)
    if (problem !== null) return void res.writeHead(403).end(`${name}: ${problem}`)
    res.writeHead(answer(verdicts.length)).end(name)
  })
  return { u, verdicts, seen }
}

const post = { path: PATH, method: 'POST', body: '{"inputText":"hello"}', headers: { host: 'llm.internal', 'content-type': 'application/json' } }

t.test('failover to a backend of another hostname: the Route-scope chain signs again for that Host (503, then refused connections)', async (t) => {
  const a = await verifier(t, 'a', 'a.example.test', () => 503)
  const b = await verifier(t, 'b', 'b.example.test')
  const port = await freePort()
  const backends = [{ cluster: 'a', priority: 0, extensions: CHAIN }, { cluster: 'b', priority: 1, extensions: CHAIN }]
  const table = buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry: RETRY_503, backends }] }] } },
    [cluster('a', a.u.port, { hostname: 'a.example.test' }), cluster('b', b.u.port, { hostname: 'b.example.test' })])
  const gw = await gateway(t, table)
  const r = await ask(gw.port, post)
  t.same(a.verdicts, [null], 'a got a request signed for a.example.test (and answered 503)')
  t.same(b.verdicts, [null], 'the retry to b is signed for b.example.test')
  t.equal(r.status, 200)
  t.equal(r.body, 'b')
  t.equal(b.u.bodies[0], post.body, 'b got the body as sent')

  // No retry policy: a refused connection moves the request to the next level (nothing was sent).
  const dead = await closedPort()
  const port2 = await freePort()
  const table2 = buildTable({ [port2]: { routes: [{ name: 'r', rules: [{ backends }] }] } },
    [cluster('a', dead, { hostname: 'a.example.test' }), cluster('b', b.u.port, { hostname: 'b.example.test' })])
  const gw2 = await gateway(t, table2)
  const r2 = await ask(gw2.port, post)
  t.same(b.verdicts, [null, null], 'the failover to b after a refused connection is signed for b.example.test')
  t.equal(r2.status, 200)
})

const TENANT_A: HeaderEdits = { set: [['content-type', 'application/x-amz-json-1.1'], ['x-amz-meta-tenant', 'a']], add: [], remove: [] }
const TENANT_B: HeaderEdits = { set: [['x-amz-meta-tenant', 'b']], add: [['x-amz-meta-route', 'b']], remove: [] }

t.test('a backendRef RequestHeaderModifier is applied before the chain signs, on the first try and on retries', async (t) => {
  const a = await verifier(t, 'a', 'a.example.test', (n) => n === 1 ? 503 : 200)
  const port = await freePort()
  const table = buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry: RETRY_503, backends: [{ cluster: 'a', extensions: CHAIN, requestHeaders: TENANT_A }] }] }] } },
    [cluster('a', a.u.port, { hostname: 'a.example.test' })])
  const gw = await gateway(t, table)
  const r = await ask(gw.port, post)
  t.same(a.verdicts, [null, null], 'first try and retry both signed over the fields sent')
  t.equal(r.status, 200)
  t.equal(a.seen[0]?.['content-type'], 'application/x-amz-json-1.1', 'the modifier\'s content-type was sent (and signed)')
  t.equal(a.seen[1]?.['x-amz-meta-tenant'], 'a', 'the retry carries the modifier\'s field once')
})

t.test('a retry to a backend with other backendRef header edits (same chain, same Host) is signed with its own edits', async (t) => {
  const a = await verifier(t, 'a', 'api.example.test', () => 503)
  const b = await verifier(t, 'b', 'api.example.test')
  const port = await freePort()
  const backends = [
    { cluster: 'a', priority: 0, extensions: CHAIN, requestHeaders: TENANT_A },
    { cluster: 'b', priority: 1, extensions: CHAIN, requestHeaders: TENANT_B },
  ]
  const table = buildTable({ [port]: { routes: [{ name: 'r', rules: [{ retry: RETRY_503, backends }] }] } },
    [cluster('a', a.u.port, { hostname: 'api.example.test' }), cluster('b', b.u.port, { hostname: 'api.example.test' })])
  const gw = await gateway(t, table)
  const r = await ask(gw.port, post)
  t.same(a.verdicts, [null])
  t.same(b.verdicts, [null], 'b\'s request is signed over b\'s fields')
  t.equal(r.status, 200)
  t.equal(b.seen[0]?.['x-amz-meta-tenant'], 'b', 'b\'s edits, not a\'s')
  t.equal(b.seen[0]?.['content-type'], 'application/json', 'a\'s content-type did not stay on b\'s request')
  t.equal(b.seen[0]?.['x-amz-meta-route'], 'b', 'an added field is sent once')
})
