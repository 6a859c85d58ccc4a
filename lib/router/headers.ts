// Header handling on the hot path: hop-by-hop removal (RFC 9110 §7.6.1) both
// ways, Gateway API header modifiers, X-Forwarded-*, and the loop-detection
// hop list. Header names in the table are lowercased by compile.

import type { IncomingHttpHeaders } from 'node:http'
import type { HeaderEdits } from '../compile/table.ts'
import type { OutgoingHeaders } from '../upstream/types.ts'
import { unreserved } from './path.ts'
import { isGatewayField } from '../extensions/gateway-fields.ts'

/** Connection-specific headers never forwarded (plus any named in Connection). */
const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'upgrade', 'trailer',
  'http2-settings', 'proxy-authorization',
])

/**
 * Loop detection header: a comma list of gateway ids the request went through.
 * It serves the egress proposal's parent mode (a namespace gateway forwarding to
 * a cluster-wide parent gateway): a misconfigured parent pointing back at a
 * child would otherwise bounce requests until sockets run out.
 */
export const HOPS_HEADER = 'x-sallyport-hops'

// hot path
/**
 * Copies the client's headers for the upstream: no pseudo-headers, no Host
 * (authority travels separately), no hop-by-hop headers. `te: trailers` is
 * kept (gRPC needs it on HTTP/2); `upgrade` is kept only for tunnels.
 */
export function forwardableHeaders(incoming: IncomingHttpHeaders, tunnel: boolean): OutgoingHeaders {
  const out: OutgoingHeaders = {}
  const connection = incoming.connection
  const named = connection === undefined ? null : connectionTokens(connection)
  for (const name in incoming) {
    const value = incoming[name]
    if (value === undefined) continue
    if (name.charCodeAt(0) === 58 /* ':' */ || name === 'host') continue
    if (HOP_BY_HOP.has(name)) {
      if (name === 'te') {
        if (typeof value === 'string' && value.toLowerCase().includes('trailers')) out.te = 'trailers'
      } else if (name === 'upgrade' && tunnel) {
        out.upgrade = value
      }
      continue
    }
    if (named !== null && named.has(name)) continue
    // Expect: 100-continue is answered to the client by the gateway (node's server sends
    // the 100) and the body then streams at once: the upstream is not asked again
    // (undici refuses to send it; Envoy strips it too when it answers locally).
    if (name === 'expect') continue
    out[name] = value
  }
  return out
}

/**
 * Whether an Upgrade value (or an extended CONNECT's :protocol) names h2c
 * anywhere in its list, in any case, with or without a version (`h2c`,
 * `websocket, H2C`, `h2c/1.0`). The gateway upgrades to h2c itself and never
 * tunnels it: an upstream that took the upgrade would give the client its own
 * HTTP/2 connection, on which any request reaches any path past the route's
 * matches, filters and extensions (h2c smuggling). Only upgrade requests and
 * 101 answers are read, never the common path.
 */
export function namesH2c(upgrade: string | readonly string[]): boolean {
  if (typeof upgrade !== 'string') return upgrade.some(namesH2c)
  if (upgrade.length < 3) return false
  const parts = upgrade.split(',')
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i].trim()
    const slash = part.indexOf('/')
    if ((slash === -1 ? part : part.slice(0, slash)).trim().toLowerCase() === 'h2c') return true
  }
  return false
}

// hot path
/** Removes hop-by-hop headers from an upstream response (the upstream layer should already have). */
export function stripResponseHopByHop(headers: OutgoingHeaders): void {
  const connection = headers.connection
  if (connection !== undefined) {
    const named = connectionTokens(Array.isArray(connection) ? connection.join(',') : connection)
    for (const name of named) delete headers[name]
  }
  delete headers.connection
  delete headers['keep-alive']
  delete headers['proxy-connection']
  delete headers['transfer-encoding']
  delete headers.te
  delete headers.upgrade
  delete headers.trailer
}

function connectionTokens(value: string): Set<string> {
  const tokens = new Set<string>()
  const parts = value.split(',')
  for (let i = 0; i < parts.length; i++) {
    const t = parts[i].trim().toLowerCase()
    if (t.length > 0) tokens.add(t)
  }
  return tokens
}

// hot path
/**
 * Gateway API HTTPHeaderFilter: `set` replaces, `add` appends to an existing
 * value comma-separated (the spec's `my-header: foo,bar`), `remove` deletes.
 */
export function applyHeaderEdits(headers: OutgoingHeaders, edits: HeaderEdits): void {
  const set = edits.set
  for (let i = 0; i < set.length; i++) headers[set[i][0]] = set[i][1]
  const add = edits.add
  for (let i = 0; i < add.length; i++) {
    const [name, value] = add[i]
    const prev = headers[name]
    if (prev === undefined) headers[name] = value
    else if (Array.isArray(prev)) headers[name] = name === 'set-cookie' ? [...prev, value] : prev.join(',') + ',' + value
    else headers[name] = name === 'set-cookie' ? [prev, value] : prev + ',' + value
  }
  const remove = edits.remove
  for (let i = 0; i < remove.length; i++) delete headers[remove[i]]
}

// hot path
/**
 * Appends the client address to X-Forwarded-For and sets X-Forwarded-Proto.
 * Drops the client's X-Forwarded-Client-Cert, as Envoy's default (SANITIZE):
 * the field states what a proxy verified of the client's certificate, and a
 * client's own says nothing verified, yet an upstream or a chained gateway
 * could take it as the gateway's word. A route's RequestHeaderModifier,
 * applied after, may still set one.
 */
export function addForwarded(headers: OutgoingHeaders, clientAddress: string, scheme: string): void {
  if (headers['x-forwarded-client-cert'] !== undefined) delete headers['x-forwarded-client-cert']
  const prev = headers['x-forwarded-for']
  headers['x-forwarded-for'] = prev === undefined ? clientAddress
    : (Array.isArray(prev) ? prev.join(', ') : prev) + ', ' + clientAddress
  headers['x-forwarded-proto'] = scheme
}

// hot path
/**
 * True when `gatewayId` already appears in the hop list (a loop). Otherwise
 * appends it, so the next gateway on the path can tell.
 */
export function markHop(headers: OutgoingHeaders, gatewayId: string): boolean {
  const prev = headers[HOPS_HEADER]
  if (prev === undefined) {
    headers[HOPS_HEADER] = gatewayId
    return false
  }
  const list = Array.isArray(prev) ? prev.join(',') : prev
  if (list.indexOf(gatewayId) !== -1) {
    const ids = list.split(',')
    for (let i = 0; i < ids.length; i++) if (ids[i].trim() === gatewayId) return true
  }
  headers[HOPS_HEADER] = list + ', ' + gatewayId
  return false
}

// hot path
/** Host from Host / :authority: lowercased, port and one trailing dot stripped, IPv6 brackets removed. */
export function hostOf(authority: string): string {
  if (authority.length === 0) return ''
  if (authority.charCodeAt(0) === 91 /* '[' */) {
    const end = authority.indexOf(']')
    return (end === -1 ? authority.slice(1) : authority.slice(1, end)).toLowerCase()
  }
  const colon = authority.lastIndexOf(':')
  const end = colon === -1 ? authority.length : colon
  // A fully qualified name's trailing dot (`api.example.com.`, how workloads skip the search
  // domains) is the same name: one dot is dropped, as nginx does and Envoy's strip_trailing_host_dot.
  return authority.slice(0, end > 0 && authority.charCodeAt(end - 1) === 46 /* '.' */ ? end - 1 : end).toLowerCase()
}

// hot path
/**
 * What is wrong with a request's authority (Host or :authority) as RFC 3986
 * §3.2.2–3 reads one, null when nothing: a host of reg-name characters
 * (unreserved, %-escapes, sub-delims) or a bracketed IP literal, and a port
 * of digits (it may be empty), and no userinfo (RFC 9110 §4.2.4). RFC 9112
 * §3.2 answers an invalid one 400.
 */
export function authorityProblem(authority: string): string | null {
  let end = authority.length
  let i = 0
  if (authority.charCodeAt(0) === 91 /* '[' */) {
    const close = authority.indexOf(']')
    if (close === -1) return invalid(authority, INVALID_HOST)
    for (i = 1; i < close; i++) if (!ipLiteralChar(authority.charCodeAt(i))) return invalid(authority, INVALID_HOST)
    i = close + 1
    if (i < end && authority.charCodeAt(i) !== 58 /* ':' */) return invalid(authority, INVALID_HOST)
  } else {
    const colon = authority.lastIndexOf(':')
    if (colon !== -1) end = colon
    for (; i < end; i++) if (!regNameChar(authority.charCodeAt(i))) return invalid(authority, INVALID_HOST)
    end = authority.length
  }
  for (i++; i < end; i++) {
    const c = authority.charCodeAt(i)
    if (c < 48 || c > 57) return invalid(authority, INVALID_PORT)
  }
  return null
}

/** What is wrong, or userinfo (`user:pw@host` reads as a bad port, `user@host` as a bad host) when that is it. */
function invalid(authority: string, why: string): string {
  return authority.indexOf('@') === -1 ? why : USERINFO
}

const INVALID_HOST = 'the authority\'s host has a character no host has'
const USERINFO = 'the authority has userinfo (user@), which http and https URIs never carry'
const INVALID_PORT = 'the authority\'s port is not a number'

/** unreserved / pct-encoded / sub-delims (RFC 3986 §3.2.2 reg-name). */
function regNameChar(c: number): boolean {
  return unreserved(c) || c === 37 /* % */ ||
    c === 33 || c === 36 || (c >= 38 && c <= 44) || c === 59 || c === 61 // ! $ & ' ( ) * + , ; =
}

function ipLiteralChar(c: number): boolean {
  return (c >= 48 && c <= 58) || (c >= 97 && c <= 102) || (c >= 65 && c <= 70) || c === 46 || c === 118 || c === 86 // hex : . v
}

/**
 * After response edits (ResponseHeaderModifier filters): the framing stays the
 * upstream's. An edited Content-Length, or a Transfer-Encoding, would have the
 * client read the body by another length than the one sent and take the rest
 * (the upstream's bytes) for the answer to its next request on the connection.
 */
export function keepFraming(headers: OutgoingHeaders, length: string | string[] | undefined): void {
  if (length === undefined) delete headers['content-length']
  else headers['content-length'] = length
  delete headers['transfer-encoding']
}

/**
 * Fields extensions add to the answer (ReplyHeaders), names lowercased; never
 * the framing (keepFraming) or a connection's fields (extensions/gateway-fields.ts).
 */
export function addReplyHeaders(headers: OutgoingHeaders, reply: Readonly<Record<string, string>>): void {
  for (const name in reply) {
    const lower = name.toLowerCase()
    if (isGatewayField(lower)) continue
    headers[lower] = reply[name] as string
  }
}
