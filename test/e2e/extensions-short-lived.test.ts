// The real CLI with the short-lived credential injectors: OAuth2 client
// credentials against a local token endpoint that counts its fetches (one
// fetch for many concurrent requests, cached, refreshed before expiry, the
// client secret from a Secret, never in /config_dump or the logs), and AWS
// SigV4 against an upstream that recomputes the signature itself.
import t from 'tap'
import fs from 'node:fs'
import { createHash, createHmac } from 'node:crypto'
import path from 'node:path'
import { eventually, freePort, gatewayYaml, settleLogs, startCli, tempDir } from './harness.ts'
import { egressBackend, get, recorder, route, send, type Sent } from './extensions-helpers.ts'

const secrets = `apiVersion: v1
kind: Secret
metadata: { name: oauth-client, namespace: default }
stringData: { client_id: gateway-client, client_secret: s3cr3t-oauth-value }
---
apiVersion: v1
kind: Secret
metadata: { name: aws-keys, namespace: default }
stringData:
  AWS_ACCESS_KEY_ID: AKIDEXAMPLE
  AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY
`

// ── an independent SigV4 verifier (AWS General Reference, written from the spec, not from lib/) ──

const enc = (s: string): string => encodeURIComponent(s).replace(/[!'()*]/g, c => '%' + c.charCodeAt(0).toString(16).toUpperCase())
const hex = (d: string): string => createHash('sha256').update(d).digest('hex')
const mac = (k: string | Buffer, d: string): Buffer => createHmac('sha256', k).update(d).digest()

/** null when the request's signature is what the secret key gives; else why not. */
function verifySigV4(req: Sent, secretKey: string, service: string, region: string): string | null {
  const auth = String(req.headers.authorization ?? '')
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$/.exec(auth)
  if (m === null) return `bad Authorization: ${auth}`
  const [, , date, reg, svc, signed, signature] = m as unknown as string[]
  if (reg !== region || svc !== service) return 'wrong scope'
  const amzDate = String(req.headers['x-amz-date'])
  if (!amzDate.startsWith(date as string)) return 'x-amz-date outside the scope date'
  const bodyHash = hex(req.body)
  if (req.headers['x-amz-content-sha256'] !== bodyHash) return 'payload hash differs from the body received'
  const [rawPath, rawQuery = ''] = req.url.split('?') as [string, string?]
  const uri = rawPath.split('/').map(seg => enc(enc(decodeURIComponent(seg)))).join('/')
  const query = rawQuery === '' ? '' : rawQuery.split('&').map(p => p.split('=').map(x => enc(decodeURIComponent(x))) as [string, string])
    .sort((a, b) => a[0] === b[0] ? (a[1] < b[1] ? -1 : 1) : a[0] < b[0] ? -1 : 1).map(([k, v]) => `${k}=${v ?? ''}`).join('&')
  const names = (signed as string).split(';')
  const canonical = [req.method, uri, query, names.map(n => `${n}:${String(req.headers[n]).trim()}\n`).join(''), signed, bodyHash].join('\n')
  const sts = ['AWS4-HMAC-SHA256', amzDate, `${date}/${region}/${service}/aws4_request`, hex(canonical)].join('\n')
  const key = mac(mac(mac(mac('AWS4' + secretKey, date as string), region), service), 'aws4_request')
  return createHmac('sha256', key).update(sts).digest('hex') === signature ? null : 'signature mismatch'
}

t.test('CLI: OAuth2 client credentials and AWS SigV4', async (t) => {
  // Token endpoint: holds answers while `gate` is closed; counts fetches; checks the client's Basic credentials.
  let fetches = 0
  let release: () => void = () => {}
  let gate: Promise<void> = new Promise<void>((r) => { release = r })
  const basics: string[] = []
  const tokens = await recorder(t, (req, res) => {
    fetches++
    basics.push(String(req.headers.authorization))
    const n = fetches
    void gate.then(() => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3 }))
    })
  })
  const api = await recorder(t, (req, res) => {
    const verdict = req.headers['x-amz-date'] === undefined ? null : verifySigV4(req, 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY', 'bedrock', 'us-east-1')
    res.writeHead(verdict === null ? 200 : 403, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ authorization: req.headers.authorization ?? null, verdict }))
  })
  const [httpPort, adminPort] = [await freePort(), await freePort()]
  const dir = tempDir(t)
  const w = (file: string, text: string): void => fs.writeFileSync(path.join(dir, file), text)
  w('gateway.yaml', gatewayYaml(httpPort))
  w('secrets.yaml', secrets)
  w('oauth.yaml', egressBackend('oauth', api.port, `  - name: oauth
    type: OAuth2ClientCredentials
    config:
      tokenUrl: http://127.0.0.1:${tokens.port}/oauth/token
      scopes: [api.read]
      refreshBeforeSeconds: 1
      secretRef: { name: oauth-client }
`))
  w('bedrock.yaml', egressBackend('bedrock', api.port, `  - name: sign
    type: CredentialInjector
    config:
      awsSigV4:
        service: bedrock
        region: us-east-1
        secretRef: { name: aws-keys }
`))
  w('routes.yaml', [route('oauth', 'oauth.example.test', 'oauth', api.port), route('bedrock', 'bedrock.example.test', 'bedrock', api.port)].join('---\n'))
  const cli = startCli(t, ['serve', '--config', dir, '--bind', '127.0.0.1', '--admin', `127.0.0.1:${adminPort}`])
  await eventually(() => get(`http://127.0.0.1:${adminPort}/readyz`, 'x'), (r) => r.status === 200, 20000, '/readyz 200')

  t.test('OAuth2: single-flight, cached, refreshed before expiry', async (t) => {
    // 20 concurrent requests while the first token fetch is held open: all wait on that one fetch.
    const first = Array.from({ length: 20 }, () => send(httpPort, { host: 'oauth.example.test', headers: { authorization: 'Bearer client-own' } }))
    await eventually(async () => fetches, (n) => n >= 1, 5000, 'token fetch started')
    await new Promise((r) => setTimeout(r, 200))
    t.equal(fetches, 1, 'one fetch in flight for 20 waiting requests')
    release()
    const answers = await Promise.all(first)
    t.same(answers.map(a => a.status), Array(20).fill(200))
    t.same(new Set(answers.map(a => (JSON.parse(a.body) as { authorization: string }).authorization)), new Set(['Bearer tok-1']), 'every request carries the token, the client value replaced')
    t.equal(basics[0], 'Basic ' + Buffer.from('gateway-client:s3cr3t-oauth-value').toString('base64'), 'client id and secret from the Secret (RFC 6749 §2.3.1)')
    t.match(tokens.seen[0]?.body, /grant_type=client_credentials/)
    t.match(tokens.seen[0]?.body, /scope=api.read/)
    // Cached: 30 more requests, no fetch.
    for (let i = 0; i < 30; i++) await send(httpPort, { host: 'oauth.example.test' })
    t.equal(fetches, 1, '50 requests, one fetch')
    gate = Promise.resolve()
    // expires_in 3 s, refreshBeforeSeconds 1: the background refresh fetches once, before expiry.
    const refreshed = await eventually(async () => (JSON.parse((await send(httpPort, { host: 'oauth.example.test' })).body) as { authorization: string }).authorization,
      (a) => a === 'Bearer tok-2', 6000, 'refreshed token')
    t.equal(refreshed, 'Bearer tok-2', 'a new token before the old one expired')
    t.ok(fetches <= 3, `still one fetch per refresh, not per request (${fetches})`)
    const dump = await get(`http://127.0.0.1:${adminPort}/config_dump`, 'x')
    t.notMatch(dump.body, /s3cr3t-oauth-value|tok-\d/, 'neither client secret nor token in /config_dump')
  })

  t.test('AWS SigV4: the upstream recomputes the signature', async (t) => {
    const body = JSON.stringify({ prompt: 'Hello', max_tokens: 10 })
    const r = await send(httpPort, {
      host: 'bedrock.example.test', path: '/model/anthropic.claude-3:0/invoke?b=2&a=1', method: 'POST', body,
      headers: { 'content-type': 'application/json', authorization: 'AWS4-HMAC-SHA256 forged' },
    })
    const answer = JSON.parse(r.body) as { verdict: string | null; authorization: string }
    t.equal(answer.verdict, null, 'signature valid over method, path (double-encoded), sorted query, headers and the body hash')
    t.equal(r.status, 200)
    t.match(answer.authorization, /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/\d{8}\/us-east-1\/bedrock\/aws4_request/, 'the client\'s own Authorization replaced')
    const get2 = await send(httpPort, { host: 'bedrock.example.test', path: '/model/list' })
    t.equal((JSON.parse(get2.body) as { verdict: string | null }).verdict, null, 'a GET without body signs the empty payload')
  })

  t.test('no secret in the logs', async (t) => {
    await settleLogs()
    t.notMatch(cli.stdout() + cli.stderr(), /s3cr3t-oauth-value|wJalrXUtnFEMI|tok-\d/, 'client secret, AWS secret key and tokens never logged')
  })
})
