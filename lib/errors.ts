// One error class, one table of stable codes, one place that maps a code to an
// HTTP status. Foreign errors (undici, node:net, node:tls) are normalized at the
// upstream/ boundary and kept as `cause`.

export const ErrorCode = {
  // request path
  NO_ROUTE: 'SP_ERR_NO_ROUTE',
  /** An HTTPS connection's request for a host another listener than the one its SNI selected takes (GEP-3567): 421. */
  MISDIRECTED: 'SP_ERR_MISDIRECTED',
  BACKEND_INVALID: 'SP_ERR_BACKEND_INVALID',
  NO_HEALTHY_UPSTREAM: 'SP_ERR_NO_HEALTHY_UPSTREAM',
  UPSTREAM_CONNECT: 'SP_ERR_UPSTREAM_CONNECT',
  /** A backend name that DNS could not resolve (NXDOMAIN, NODATA, or the resolver failed with no answer to serve): 503. */
  UPSTREAM_DNS: 'SP_ERR_UPSTREAM_DNS',
  UPSTREAM_TLS: 'SP_ERR_UPSTREAM_TLS',
  UPSTREAM_TIMEOUT: 'SP_ERR_UPSTREAM_TIMEOUT',
  UPSTREAM_RESET: 'SP_ERR_UPSTREAM_RESET',
  UPSTREAM_PROTOCOL: 'SP_ERR_UPSTREAM_PROTOCOL',
  /** The request, as filters and extensions left it, cannot be written to the upstream (an invalid header, say): it never reached it. */
  REQUEST_UNSENDABLE: 'SP_ERR_REQUEST_UNSENDABLE',
  REQUEST_TIMEOUT: 'SP_ERR_REQUEST_TIMEOUT',
  CLIENT_ABORTED: 'SP_ERR_CLIENT_ABORTED',
  /** The request body stopped arriving from the client while the upstream waited for it: the client's timeout. */
  CLIENT_TIMEOUT: 'SP_ERR_CLIENT_TIMEOUT',
  BAD_REQUEST: 'SP_ERR_BAD_REQUEST',
  HEADERS_TOO_LARGE: 'SP_ERR_HEADERS_TOO_LARGE',
  /** A request framed in a way the gateway does not take (a transfer coding other than chunked). */
  NOT_IMPLEMENTED: 'SP_ERR_NOT_IMPLEMENTED',
  BODY_TOO_LARGE: 'SP_ERR_BODY_TOO_LARGE',
  LOOP_DETECTED: 'SP_ERR_LOOP_DETECTED',
  FORBIDDEN: 'SP_ERR_FORBIDDEN',
  /** A backend name resolved only to addresses the destination guard refuses (issue 5). */
  DESTINATION_REFUSED: 'SP_ERR_DESTINATION_REFUSED',
  RATE_LIMITED: 'SP_ERR_RATE_LIMITED',
  OVERLOADED: 'SP_ERR_OVERLOADED',
  EXTENSION_FAILED: 'SP_ERR_EXTENSION_FAILED',
  /** A response body an extension must read exceeded its bound (issue 7). */
  RESPONSE_TOO_LARGE: 'SP_ERR_RESPONSE_TOO_LARGE',
  SHUTTING_DOWN: 'SP_ERR_SHUTTING_DOWN',
  INTERNAL: 'SP_ERR_INTERNAL',
  // side loop
  CONFIG_READ: 'SP_ERR_CONFIG_READ',
  CONFIG_PARSE: 'SP_ERR_CONFIG_PARSE',
  CONFIG_INVALID: 'SP_ERR_CONFIG_INVALID',
  LISTEN: 'SP_ERR_LISTEN',
  USAGE: 'SP_ERR_USAGE',
} as const
export type ErrorCode = typeof ErrorCode[keyof typeof ErrorCode]

const STATUS: Record<ErrorCode, number> = {
  SP_ERR_NO_ROUTE: 404,
  SP_ERR_MISDIRECTED: 421,
  SP_ERR_BACKEND_INVALID: 500,
  SP_ERR_NO_HEALTHY_UPSTREAM: 503,
  SP_ERR_UPSTREAM_CONNECT: 503,
  SP_ERR_UPSTREAM_DNS: 503,
  SP_ERR_UPSTREAM_TLS: 502,
  SP_ERR_UPSTREAM_TIMEOUT: 504,
  SP_ERR_UPSTREAM_RESET: 502,
  SP_ERR_UPSTREAM_PROTOCOL: 502,
  SP_ERR_REQUEST_UNSENDABLE: 500,
  SP_ERR_REQUEST_TIMEOUT: 504,
  SP_ERR_CLIENT_ABORTED: 499, // logged only; the client is gone
  SP_ERR_CLIENT_TIMEOUT: 408,
  SP_ERR_BAD_REQUEST: 400,
  SP_ERR_HEADERS_TOO_LARGE: 431,
  SP_ERR_NOT_IMPLEMENTED: 501,
  SP_ERR_BODY_TOO_LARGE: 413,
  SP_ERR_LOOP_DETECTED: 508,
  SP_ERR_FORBIDDEN: 403,
  SP_ERR_DESTINATION_REFUSED: 502,
  SP_ERR_RATE_LIMITED: 429,
  SP_ERR_OVERLOADED: 503,
  SP_ERR_EXTENSION_FAILED: 500,
  SP_ERR_RESPONSE_TOO_LARGE: 502,
  SP_ERR_SHUTTING_DOWN: 503,
  SP_ERR_INTERNAL: 500,
  SP_ERR_CONFIG_READ: 500,
  SP_ERR_CONFIG_PARSE: 500,
  SP_ERR_CONFIG_INVALID: 500,
  SP_ERR_LISTEN: 500,
  SP_ERR_USAGE: 500,
}

/** The HTTP status a code answers with; the only code → status mapping. */
export function statusOf(code: ErrorCode): number {
  return STATUS[code]
}

export class SallyportError extends Error {
  readonly code: ErrorCode
  readonly status: number
  /**
   * A short reason refining the code, safe to show to the client (e.g. the TLS
   * failure class `unknown_ca`; for a DNS failure the name and what DNS said,
   * `api.example.com: SERVFAIL`); null: none. Not a metric label.
   */
  readonly detail: string | null
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; detail?: string }) {
    super(message, options)
    this.name = 'SallyportError'
    this.code = code
    this.status = STATUS[code]
    this.detail = options?.detail ?? null
  }
}

export function isSallyportError(err: unknown): err is SallyportError {
  return err instanceof SallyportError
}
