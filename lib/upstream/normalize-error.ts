// The one place foreign errors (node:net, node:tls, node:http2, undici) become
// SallyportErrors. Decisions use err.code, never the message text (STYLE.md
// §5, undici's maybeNormalizeConnectError); the original stays as `cause`.

import { ErrorCode, SallyportError } from '../errors.ts'
import { tlsFailureReason } from './tls.ts'
import type { CancelSignal } from './cancel.ts'
import type { Readable } from 'node:stream'

const CONNECT_CODES: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'refused',
  EHOSTUNREACH: 'unreachable',
  ENETUNREACH: 'unreachable',
  EHOSTDOWN: 'unreachable',
  EADDRNOTAVAIL: 'unreachable',
  ENOTFOUND: 'dns',
  EAI_AGAIN: 'dns',
  EAI_NONAME: 'dns',
  ENODATA: 'dns',
  ESERVFAIL: 'dns', // node:dns Resolver (c-ares) codes, issue 5
  EREFUSED: 'dns',
  ETIMEOUT: 'dns',
  UND_ERR_CONNECT_TIMEOUT: 'timeout',
  SP_CONNECT_TIMEOUT: 'timeout',
  ETIMEDOUT: 'timeout',
  ENOENT: 'refused', // unix socket path missing
  SP_PROXY_REFUSED: 'proxy', // issue 9: the upstream CONNECT proxy said no (or closed)
}

/** A try's backendRequest deadline ran out (exchange.ts). */
export const BACKEND_REQUEST_TIMEOUT = 'SP_BACKEND_REQUEST_TIMEOUT'

/**
 * SallyportError.detail of the reason an attempt's signal is aborted with when
 * its per-try timeout (BackendTrafficPolicy retry.perRetry.timeout) runs out
 * (router/attempts.ts): the exchange reports it as the endpoint's timeout.
 */
export const PER_TRY_TIMEOUT = 'per_try_timeout'

const TIMEOUT_CODES: ReadonlySet<string> = new Set([
  'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'SP_HEADERS_TIMEOUT', 'SP_IDLE_TIMEOUT',
  BACKEND_REQUEST_TIMEOUT,
])

/**
 * The code of an HTTP/2 stream closed with REFUSED_STREAM (h2-pool.ts): a reset
 * like any other, but the only one that says the upstream did not process the
 * request (RFC 9113 §8.7), which the refused-stream retry trigger relies on.
 */
export const STREAM_REFUSED = 'SP_STREAM_REFUSED'

const RESET_CODES: ReadonlySet<string> = new Set([
  'ECONNRESET', 'EPIPE', 'ECONNABORTED', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED', 'UND_ERR_DESTROYED',
  'ERR_STREAM_PREMATURE_CLOSE', 'ERR_HTTP2_STREAM_ERROR', 'ERR_HTTP2_GOAWAY_SESSION',
  'ERR_HTTP2_SESSION_ERROR', 'ERR_HTTP2_STREAM_CANCEL', 'ERR_HTTP2_INVALID_SESSION',
  'ERR_HTTP2_ERROR', 'SP_STREAM_RESET', 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
  'SP_H1_INCOMPLETE', 'SP_POOL_CLOSED', // h1-client.ts: the upstream closed mid-response; a pool closed under a request
  'SP_CONNECT_CANCELLED', // connect.ts: a closing pool stopped a connection no request waited for
  STREAM_REFUSED,
])

/**
 * The request cannot be encoded for the upstream (checked before anything is
 * sent): the request's fault, or a filter's or extension's, never the
 * endpoint's. h1-client.ts requestHead, undici's request checks, node:http2's
 * header checks.
 */
const UNSENDABLE_CODES: ReadonlySet<string> = new Set([
  'SP_H1_BAD_REQUEST', 'UND_ERR_INVALID_ARG', 'ERR_INVALID_CHAR', 'ERR_INVALID_HTTP_TOKEN',
  'ERR_HTTP2_INVALID_HEADER_VALUE', 'ERR_HTTP2_INVALID_CONNECTION_HEADERS', 'ERR_HTTP2_HEADER_SINGLE_VALUE',
  'ERR_HTTP2_INVALID_PSEUDOHEADER',
])

/**
 * The code of a request body that failed because its client went away (a reset
 * HTTP/2 stream, a lost connection): the client's failure, never the endpoint's.
 */
export const CLIENT_GONE = 'SP_CLIENT_GONE'

/** Code of an error, looking through AggregateError (happy-eyeballs) to the first inner code. */
export function codeOf(err: unknown): string {
  if (typeof err !== 'object' || err === null) return ''
  const code = (err as { code?: unknown }).code
  if (typeof code === 'string' && code !== '') return code
  if (err instanceof AggregateError && err.errors.length > 0) return codeOf(err.errors[0])
  return ''
}

/** Reason label of a connect failure (metrics), from the SallyportError's cause. */
export function connectReason(err: SallyportError): string {
  return CONNECT_CODES[codeOf(err.cause)] ?? 'other'
}

/** Reason label of a TLS failure (metrics), from the SallyportError's cause. */
export function tlsReason(err: SallyportError): string {
  return tlsFailureReason(codeOf(err.cause)) ?? 'other'
}

/**
 * Map anything thrown or emitted by the upstream exchange to a SallyportError.
 * `signal`: the request's signal — if it fired, the client went away (or the
 * route timeout did) and the failure is ours, not the backend's.
 */
export function normalizeUpstreamError(err: unknown, signal: CancelSignal | null, endpoint: string): SallyportError {
  if (err instanceof SallyportError) return err
  if (signal !== null && signal.aborted) {
    return new SallyportError(ErrorCode.CLIENT_ABORTED, 'request aborted before the upstream answered', { cause: err })
  }
  const code = codeOf(err)
  if (code === CLIENT_GONE) return new SallyportError(ErrorCode.CLIENT_ABORTED, 'the client went away during the request body', { cause: err })
  const connect = CONNECT_CODES[code]
  if (connect !== undefined) {
    const what = connect === 'dns' ? `DNS lookup failed for ${endpoint}` : connect === 'timeout' ? `connect to ${endpoint} timed out` : `connect to ${endpoint} failed (${code})`
    return new SallyportError(ErrorCode.UPSTREAM_CONNECT, what, { cause: err })
  }
  const tls = tlsFailureReason(code)
  if (tls !== null) {
    return new SallyportError(ErrorCode.UPSTREAM_TLS, `TLS to ${endpoint} failed: ${tls} (${code})`, { cause: err, detail: tls })
  }
  if (TIMEOUT_CODES.has(code)) {
    return new SallyportError(ErrorCode.UPSTREAM_TIMEOUT, `upstream ${endpoint} timed out (${code})`, { cause: err })
  }
  if (RESET_CODES.has(code)) {
    return new SallyportError(ErrorCode.UPSTREAM_RESET, `upstream ${endpoint} reset the exchange (${code})`, { cause: err })
  }
  if (UNSENDABLE_CODES.has(code)) {
    const why = err instanceof Error ? err.message : String(err)
    return new SallyportError(ErrorCode.REQUEST_UNSENDABLE, `request cannot be sent to ${endpoint}: ${why} (${code})`, { cause: err })
  }
  if (code === 'UND_ERR_ABORTED' || code === 'ABORT_ERR') {
    return new SallyportError(ErrorCode.UPSTREAM_RESET, `upstream ${endpoint} exchange aborted`, { cause: err })
  }
  return new SallyportError(ErrorCode.UPSTREAM_PROTOCOL, `upstream ${endpoint} failed (${code === '' ? 'unknown' : code})`, { cause: err })
}

/**
 * A request body the upstream exchange is waiting on its client for: not ended,
 * nothing buffered, its reader not holding it back (a reader held back by the
 * upstream pauses it). A timeout then is the client's stall, not the upstream's.
 */
export function awaitingClient(body: Readable | null): boolean {
  return body !== null && !body.readableEnded && !body.destroyed && body.readableLength === 0 && body.readableFlowing === true
}

/** A local error with a code, for the timers and resets we raise ourselves. */
export function localError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code })
}
