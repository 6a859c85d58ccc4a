import t from 'tap'
import { SallyportError } from '../../lib/errors.ts'
import { normalizeUpstreamError } from '../../lib/upstream/normalize-error.ts'

const coded = (code: string): Error => Object.assign(new Error('message text is never consulted'), { code })

t.test('foreign error codes map to stable SP_ERR codes, keeping the cause', async (t) => {
  const cases: Array<[string, string]> = [
    ['ECONNREFUSED', 'SP_ERR_UPSTREAM_CONNECT'], ['EHOSTUNREACH', 'SP_ERR_UPSTREAM_CONNECT'], ['ENOTFOUND', 'SP_ERR_UPSTREAM_CONNECT'],
    ['UND_ERR_CONNECT_TIMEOUT', 'SP_ERR_UPSTREAM_CONNECT'], ['UND_ERR_HEADERS_TIMEOUT', 'SP_ERR_UPSTREAM_TIMEOUT'],
    ['UND_ERR_BODY_TIMEOUT', 'SP_ERR_UPSTREAM_TIMEOUT'], ['ECONNRESET', 'SP_ERR_UPSTREAM_RESET'], ['UND_ERR_SOCKET', 'SP_ERR_UPSTREAM_RESET'],
    ['ERR_HTTP2_STREAM_ERROR', 'SP_ERR_UPSTREAM_RESET'], ['ERR_HTTP2_GOAWAY_SESSION', 'SP_ERR_UPSTREAM_RESET'],
    ['CERT_HAS_EXPIRED', 'SP_ERR_UPSTREAM_TLS'], ['ERR_TLS_CERT_ALTNAME_INVALID', 'SP_ERR_UPSTREAM_TLS'],
    ['ERR_SSL_WRONG_VERSION_NUMBER', 'SP_ERR_UPSTREAM_TLS'], ['HPE_INVALID_CONSTANT', 'SP_ERR_UPSTREAM_PROTOCOL'],
    // a request that cannot be encoded never reached the upstream (our client, undici, node:http2)
    ['SP_H1_BAD_REQUEST', 'SP_ERR_REQUEST_UNSENDABLE'], ['UND_ERR_INVALID_ARG', 'SP_ERR_REQUEST_UNSENDABLE'],
    ['ERR_HTTP2_INVALID_HEADER_VALUE', 'SP_ERR_REQUEST_UNSENDABLE'], ['ERR_INVALID_CHAR', 'SP_ERR_REQUEST_UNSENDABLE'],
    ['ERR_INVALID_HTTP_TOKEN', 'SP_ERR_REQUEST_UNSENDABLE'],
  ]
  for (const [code, expected] of cases) {
    const cause = coded(code)
    const err = normalizeUpstreamError(cause, null, '10.0.0.1:443')
    t.equal(err.code, expected, code)
    t.equal(err.cause, cause)
  }
  t.match(normalizeUpstreamError(coded('ENOTFOUND'), null, 'x:1').message, /DNS/)
  t.match(normalizeUpstreamError(coded('CERT_HAS_EXPIRED'), null, 'x:1').message, /expired/)
  t.match(normalizeUpstreamError(coded('CERT_NOT_YET_VALID'), null, 'x:1').message, /not_yet_valid/)
  t.match(normalizeUpstreamError(coded('UNABLE_TO_VERIFY_LEAF_SIGNATURE'), null, 'x:1').message, /unknown_ca/)
  const agg = new AggregateError([coded('ECONNREFUSED'), coded('ECONNREFUSED')])
  t.equal(normalizeUpstreamError(agg, null, 'x:1').code, 'SP_ERR_UPSTREAM_CONNECT', 'happy-eyeballs AggregateError')
})

t.test('our own abort wins: the client went away, not the backend', async (t) => {
  const ac = new AbortController()
  ac.abort()
  t.equal(normalizeUpstreamError(coded('ECONNRESET'), ac.signal, 'x:1').code, 'SP_ERR_CLIENT_ABORTED')
  const already = new SallyportError('SP_ERR_UPSTREAM_TLS', 'kept')
  t.equal(normalizeUpstreamError(already, ac.signal, 'x:1'), already)
})
