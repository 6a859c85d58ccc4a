// SigV4 canonical URI and query against AWS's documented rules, with the
// expected strings written out by hand from the AWS General Reference ("Create
// a canonical request") and the normalize-path cases of AWS's SigV4 test suite:
//
// - every service but S3 normalizes the path (RFC 3986 §5.2.4 dot segments,
//   and empty segments go: `//example//` → `/example/`), then encodes each
//   segment twice; S3 neither normalizes nor double-encodes;
// - encoding is of octets: everything but A-Z a-z 0-9 - _ . ~ as %XY, uppercase;
//   a percent-escape stands for its octet, whether or not the octets are UTF-8.
import t from 'tap'
import { createHash, createHmac } from 'node:crypto'
import type { CompiledExtension } from '../../lib/compile/table.ts'
import { awsSigV4, canonicalQuery, canonicalUri } from '../../lib/extensions/sigv4.ts'
import type { ClientInfo, OutgoingHeaders, RequestView } from '../../lib/extensions/plugin-api.ts'

t.test('non-S3 paths are normalized before they are encoded (AWS test suite normalize-path)', async (t) => {
  const cases: Array<[string, string]> = [
    ['//', '/'], // get-slash
    ['//example//', '/example/'], // get-slashes
    ['/example/..', '/'], // get-relative
    ['/example1/example2/../..', '/'], // get-relative-relative
    ['/./', '/'], // get-slash-dot-slash
    ['/./example', '/example'], // get-slash-pointless-dot
    ['/a/b/../c/./d', '/a/c/d'],
    ['/..', '/'],
    ['/a/', '/a/'],
    ['/model/m:1/invoke', '/model/m%253A1/invoke'],
  ]
  for (const [path, want] of cases) t.equal(canonicalUri(path, 'service'), want, path)
})

t.test('S3 paths are neither normalized nor double-encoded', async (t) => {
  t.equal(canonicalUri('//bucket//a/./b/../c', 's3'), '//bucket//a/./b/../c')
  t.equal(canonicalUri('/bucket/a b+c', 's3'), '/bucket/a%20b%2Bc')
  t.equal(canonicalUri('/bucket/a%2Fb', 's3'), '/bucket/a%2Fb', 'an encoded slash stays in its segment')
})

t.test('a percent-escape is an octet: not UTF-8 and stray % are encoded as the octets they are', async (t) => {
  // %FF is one octet that is not UTF-8: S3 signs %FF, the others %25FF (encoded again).
  t.equal(canonicalUri('/k%FF', 's3'), '/k%FF')
  t.equal(canonicalUri('/k%FF', 'service'), '/k%25FF')
  t.equal(canonicalUri('/%E2%82%AC%ff', 's3'), '/%E2%82%AC%FF', 'one bad octet does not spoil the rest of the segment')
  t.equal(canonicalUri('/100%', 's3'), '/100%25', 'a % that escapes nothing is the octet %')
  t.equal(canonicalUri('/%7E%41', 's3'), '/~A', 'escaped unreserved characters are the characters')
  t.equal(canonicalQuery('k=%FF&j=%E2%82%AC%ff&l=50%'), 'j=%E2%82%AC%FF&k=%FF&l=50%25')
})

t.test('query: sorted by encoded name then value, empty values, form spaces', async (t) => {
  t.equal(canonicalQuery('b&a=&c=x+y&d=%7E&e=*'), 'a=&b=&c=x%20y&d=~&e=%2A')
  t.equal(canonicalQuery('Param1=value2&Param1=Value1&param0=x'), 'Param1=Value1&Param1=value2&param0=x', 'byte order: uppercase first')
})

// The hook on a request: the client's own Authorization, session token and
// date never pass; a session token of the Secret is sent and signed; a field
// sent as several lines (an array) signs as AWS joins them: each value
// trimmed, spaces collapsed, joined by a comma (`a  b , c` is `a b,c`).
t.test('the hook signs what is sent, and nothing of the client\'s own signature', async (t) => {
  const spec: CompiledExtension = {
    key: 'Backend default/b/sign', name: 'sign', type: 'AWSSigV4', phases: ['request-body'], priority: 0, failOpen: false,
    scope: 'Backend', source: 'Backend default/b', namespace: 'default',
    config: { service: 'bedrock', region: 'us-east-1', secretRef: { name: 'aws' } },
    secrets: { secretRef: { AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE', AWS_SECRET_ACCESS_KEY: 'secret', AWS_SESSION_TOKEN: 'session-token\n' } },
    error: null,
  }
  const hooks = awsSigV4(spec, () => Date.UTC(2015, 7, 30, 12, 36, 0))
  const client: ClientInfo = { address: '127.0.0.1', namespace: null, serviceAccount: null, pod: null, spiffeId: null }
  const headers: OutgoingHeaders = {
    authorization: 'AWS4-HMAC-SHA256 Credential=CLIENT/…', 'x-amz-security-token': 'client-token', 'x-amz-date': '20000101T000000Z',
    'x-amz-meta-a': [' a   b ', ' c'], 'content-type': 'application/json', 'user-agent': 'curl',
  }
  const req: RequestView = { method: 'POST', path: '/model/m:1/invoke?b=2&a=1', authority: 'bedrock-runtime.us-east-1.amazonaws.com', headers, client, route: 'r', rule: 'r/0', backend: 'b', gateway: 'g', scheme: 'https' }
  const body = Buffer.from('{"x":1}')
  await (hooks.requestBody as NonNullable<typeof hooks.requestBody>)(req, body)
  const bodyHash = createHash('sha256').update(body).digest('hex')
  t.equal(headers['x-amz-security-token'], 'session-token', 'the Secret\'s session token replaces the client\'s')
  t.equal(headers['x-amz-date'], '20150830T123600Z')
  t.equal(headers['x-amz-content-sha256'], bodyHash)
  // Reference, written out from the AWS General Reference.
  const creq = [
    'POST', '/model/m%253A1/invoke', 'a=1&b=2',
    'content-type:application/json\nhost:bedrock-runtime.us-east-1.amazonaws.com\nx-amz-content-sha256:' + bodyHash +
      '\nx-amz-date:20150830T123600Z\nx-amz-meta-a:a b,c\nx-amz-security-token:session-token\n',
    'content-type;host;x-amz-content-sha256;x-amz-date;x-amz-meta-a;x-amz-security-token', bodyHash,
  ].join('\n')
  const scope = '20150830/us-east-1/bedrock/aws4_request'
  const sts = ['AWS4-HMAC-SHA256', '20150830T123600Z', scope, createHash('sha256').update(creq).digest('hex')].join('\n')
  const h = (k: string | Buffer, d: string): Buffer => createHmac('sha256', k).update(d).digest()
  const key = h(h(h(h('AWS4secret', '20150830'), 'us-east-1'), 'bedrock'), 'aws4_request')
  const signature = createHmac('sha256', key).update(sts).digest('hex')
  t.equal(headers.authorization, `AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/${scope}, SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-meta-a;x-amz-security-token, Signature=${signature}`)
})
