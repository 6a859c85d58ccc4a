// A Route-scope AWSSigV4 on failover, through the real CLI: two providers
// behind one route at priorities 0/1, ExternalHostname-style Backends of two
// hostnames (resolved by a local dnsmasq to 127.0.0.1), one EgressExtension
// signing for both (one shared chain), and a backendRef RequestHeaderModifier
// on the second. Each upstream recomputes the signature for its own hostname,
// requiring every content-type and x-amz-* field it got to be signed. When A
// answers 503 or refuses connections, the request B gets is signed for B's
// Host, over the fields B's backendRef set.
import t from 'tap'
import fs from 'node:fs'
import { createHash, createHmac } from 'node:crypto'
import path from 'node:path'
import { closedPort } from '../helpers/ports.ts'
import { dnsmasqSkip, startDnsmasq } from '../helpers/dnsmasq.ts'
import { backendYaml, eventually, freePort, gatewayYaml, startCli, tempDir } from './harness.ts'
import { get, recorder, send, type Sent } from './extensions-helpers.ts'

const SECRET_KEY = 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY'

// ── an independent SigV4 verifier (AWS General Reference, written from the spec, not from lib/) ──

const hex = (d: string): string => createHash('sha256').update(d).digest('hex')
const mac = (k: string | Buffer, d: string): Buffer => createHmac('sha256', k).update(d).digest()

/** null when `req` is signed for `host` over every content-type and x-amz-* field it carries; else why not. */
function verify(req: Sent, host: string): string | null {
  const auth = String(req.headers.authorization ?? '')
  const m = /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/(\d{8})\/us-east-1\/bedrock\/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$/.exec(auth)
  if (m === null) return `bad Authorization: ${auth}`
  const [, date, signed, signature] = m as unknown as [string, string, string, string]
  if (req.headers.host !== host) return `Host ${String(req.headers.host)}, not ${host}`
  const names = signed.split(';')
  for (const n of Object.keys(req.headers)) if ((n === 'content-type' || n.startsWith('x-amz-')) && !names.includes(n)) return `${n} not signed`
  const bodyHash = hex(req.body)
  if (req.headers['x-amz-content-sha256'] !== bodyHash) return 'payload hash differs from the body received'
  // The path is unreserved characters only; no query.
  const canonical = [req.method, req.url, '', names.map(n => `${n}:${n === 'host' ? host : String(req.headers[n]).trim()}\n`).join(''), signed, bodyHash].join('\n')
  const sts = ['AWS4-HMAC-SHA256', String(req.headers['x-amz-date']), `${date}/us-east-1/bedrock/aws4_request`, hex(canonical)].join('\n')
  const key = mac(mac(mac(mac('AWS4' + SECRET_KEY, date), 'us-east-1'), 'bedrock'), 'aws4_request')
  return createHmac('sha256', key).update(sts).digest('hex') === signature ? null : 'SignatureDoesNotMatch'
}

function manifests(port: number, a: number, b: number): string {
  return `${gatewayYaml(port)}---
apiVersion: v1
kind: Secret
metadata: { name: aws-keys, namespace: default }
stringData: { AWS_ACCESS_KEY_ID: AKIDEXAMPLE, AWS_SECRET_ACCESS_KEY: "${SECRET_KEY}" }
---
${backendYaml('provider-a', a, 'a.example.test')}---
${backendYaml('provider-b', b, 'b.example.test')}---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: llm
  namespace: default
  annotations: { sallyport.io/backend-priority: "provider-a=0,provider-b=1" }
spec:
  parentRefs: [{ name: egress }]
  hostnames: [llm.example.test]
  rules:
    - retry: { codes: [503], attempts: 1 }
      backendRefs:
        - { group: gateway.envoyproxy.io, kind: Backend, name: provider-a, port: ${a} }
        - group: gateway.envoyproxy.io
          kind: Backend
          name: provider-b
          port: ${b}
          filters:
            - type: RequestHeaderModifier
              requestHeaderModifier: { set: [{ name: x-amz-meta-tenant, value: b }, { name: content-type, value: application/x-amz-json-1.1 }] }
---
apiVersion: sallyport.io/v1alpha1
kind: EgressExtension
metadata: { name: sign, namespace: default }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm }]
  extensions:
    - name: sign
      type: AWSSigV4
      priority: -100
      config: { service: bedrock, region: us-east-1, secretRef: { name: aws-keys } }
`
}

t.test('CLI: a Route-scope SigV4 signs the failover to another hostname for that Host, over its backendRef\'s fields (503 and refused connections)', { skip: dnsmasqSkip() ?? false }, async (t) => {
  const dns = await startDnsmasq(t, { hosts: ['127.0.0.1 a.example.test b.example.test'] })
  const verdicts: Record<string, Array<string | null>> = { a: [], b: [] }
  const a = await recorder(t, (req, res) => { verdicts.a?.push(verify(req, 'a.example.test')); res.writeHead(503).end('a busy') })
  const b = await recorder(t, (req, res) => {
    const v = verify(req, 'b.example.test')
    verdicts.b?.push(v)
    res.writeHead(v === null ? 200 : 403).end(v ?? 'b')
  })
  const [port, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'all.yaml'), manifests(port, a.port, b.port))
  startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`, '--dns-server', dns.server])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  const ask = { host: 'llm.example.test', path: '/model/titan/invoke', method: 'POST', body: '{"inputText":"hi"}', headers: { 'content-type': 'application/json' } }
  const r = await send(port, ask)
  t.same(verdicts.a, [null], 'A got a request signed for a.example.test')
  t.same(verdicts.b, [null], 'the retry to B is signed for b.example.test, its backendRef fields included')
  t.equal(r.status, 200)
  t.equal(b.seen[0]?.headers['x-amz-meta-tenant'], 'b')
  t.equal(b.seen[0]?.headers['content-type'], 'application/x-amz-json-1.1', 'B\'s backendRef content-type was sent, and signed')
  t.equal(b.seen[0]?.body, ask.body)

  // A refuses connections: the request moves to B (nothing was sent), signed for B.
  fs.writeFileSync(path.join(dir, 'all.yaml'), manifests(port, await closedPort(), b.port))
  const moved = await eventually(async () => {
    const before = verdicts.a?.length
    return { answer: await send(port, ask), reachedA: verdicts.a?.length !== before }
  }, (x) => x.answer.status === 200 && !x.reachedA, 20000, 'reloaded: A refuses, B answers')
  t.equal(moved.answer.body, 'b')
  t.same(verdicts.b.filter(v => v !== null), [], 'every request B got was signed for b.example.test')
})
