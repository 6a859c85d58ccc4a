// Hop-by-hop handling at the upstream boundary (RFC 9110 §7.6.1). The request
// path already hands us lowercased end-to-end headers; we still filter here
// because undici rejects `connection`/`upgrade`/`keep-alive` values it does
// not own, and HTTP/2 forbids connection-specific fields (RFC 9113 §8.2.2).

import { createHash } from 'node:crypto'
import type { OutgoingHeaders } from './types.ts'

const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization',
  'te', 'trailer', 'transfer-encoding', 'upgrade', 'http2-settings',
])

export function isHopByHop(name: string): boolean {
  return HOP_BY_HOP.has(name)
}

type IncomingHeaderValue = string | string[] | number | undefined

/**
 * Response headers from undici or node:http2 → OutgoingHeaders without hop-by-hop
 * fields and pseudo-headers. `keep` names one hop-by-hop field to preserve
 * (`upgrade` on a 101, so the listener can echo the protocol).
 */
// hot path
export function responseHeaders(raw: Record<string, IncomingHeaderValue>, keep: string | null): OutgoingHeaders {
  const out: OutgoingHeaders = {}
  const connection = raw.connection
  for (const name in raw) {
    const value = raw[name]
    if (value === undefined) continue
    const lower = name.toLowerCase()
    if (lower.charCodeAt(0) === 58 /* ':' */) continue
    if (HOP_BY_HOP.has(lower) && lower !== keep) continue
    out[lower] = typeof value === 'number' ? String(value) : value
  }
  // RFC 9110 §7.6.1: fields named in Connection are hop-by-hop too.
  if (connection !== undefined && typeof connection !== 'number') dropConnectionNamed(out, connection)
  return out
}

// hot path
function dropConnectionNamed(out: OutgoingHeaders, connection: string | string[]): void {
  // Nearly every response says just `keep-alive`, a field already dropped as hop-by-hop.
  if (connection === 'keep-alive') return
  const list = Array.isArray(connection) ? connection.join(',') : connection
  for (const token of list.split(',')) {
    const name = token.trim().toLowerCase()
    if (name !== '' && name !== 'upgrade') delete out[name]
  }
}

/**
 * Fields a sender must not put in trailers (RFC 9110 §6.5.1: framing, routing,
 * content metadata, the trailer list itself) and a recipient must not merge
 * into the head: dropped from an upstream's trailers rather than relayed (an
 * HTTP/1.1 client given a trailer Content-Length may take it for the framing).
 */
const NOT_IN_TRAILERS: ReadonlySet<string> = new Set([
  'content-length', 'transfer-encoding', 'host', 'trailer', 'content-type', 'content-encoding', 'content-range',
])

/** An upstream's trailers, as relayed: responseHeaders() without the fields trailers may not carry. */
export function trailerFields(raw: Record<string, IncomingHeaderValue>): OutgoingHeaders {
  const out = responseHeaders(raw, null)
  for (const name of NOT_IN_TRAILERS) delete out[name]
  return out
}

/** Request headers for undici: end-to-end fields plus `host`. */
// hot path
export function h1RequestHeaders(headers: OutgoingHeaders, authority: string): OutgoingHeaders {
  const out: OutgoingHeaders = { host: authority }
  for (const name in headers) {
    if (name === 'host' || HOP_BY_HOP.has(name)) continue
    out[name] = headers[name]
  }
  return out
}

/** Request headers for node:http2: pseudo-headers first, no `host`, `te` only as `trailers`. */
// hot path
export function h2RequestHeaders(
  headers: OutgoingHeaders, method: string, path: string, authority: string, scheme: string, protocol: string | null,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = { ':method': method, ':authority': authority, ':scheme': scheme, ':path': path }
  if (protocol !== null) out[':protocol'] = protocol
  for (const name in headers) {
    if (name === 'host') continue
    if (HOP_BY_HOP.has(name)) {
      if (name === 'te' && headers[name] === 'trailers') out.te = 'trailers'
      continue
    }
    out[name] = headers[name]
  }
  return out
}

/** RFC 6455 §4.2.2: the Sec-WebSocket-Accept that answers a Sec-WebSocket-Key. */
export function websocketAccept(key: string): string {
  return createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')
}

/**
 * RFC 6455 §4.1 (items 2 and 4 of the client's checks of a 101): what is wrong
 * with an HTTP/1.1 upstream's answer to a WebSocket upgrade sent with `key`, or
 * null. (`Connection` is gone by now; its `upgrade` is what made this a 101 tunnel.)
 */
export function websocketHandshakeProblem(headers: OutgoingHeaders, key: string): string | null {
  const upgrade = headers.upgrade
  if (typeof upgrade !== 'string' || upgrade.trim().toLowerCase() !== 'websocket') {
    return upgrade === undefined ? 'no Upgrade field' : `Upgrade is ${JSON.stringify(String(upgrade))}, not websocket`
  }
  const accept = headers['sec-websocket-accept']
  if (accept !== websocketAccept(key)) return `${accept === undefined ? 'no' : 'a wrong'} Sec-WebSocket-Accept`
  return null
}
