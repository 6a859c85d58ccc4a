// Forward-proxy mode (issue 9): may `CONNECT host:port` on this port open a
// tunnel, and to what? Decided by the routes, never "anything":
//
// - the requested host is matched like an HTTP request's Host, through the
//   port's normal host index (exact, then wildcard, then catch-all), as method
//   CONNECT on path '/';
// - the matched rule must opt in: its HTTPRoute carries
//   `sallyport.io/connect-ports` listing the requested port (compiled into
//   RouteRule.connect);
// - the tunnel goes to the rule's backend (picked by weight like a request);
//   a backend the Gateway's destination policy denies (deny/allow lists,
//   region lock, guard on static addresses — decided in compile) refuses.
//   The guard on resolved addresses runs when the tunnel is dialled
//   (upstream/resolve.ts), like for any Backend.
//
// - a rule that names no backendRefs tunnels to the requested host:port
//   itself (RouteRule.connect.requested): the Gateway's deny/allow lists on
//   the name here, region locks refuse (a requested host has no region), and
//   the address checks (guard, CIDR lists, reverse DNS) when it is dialled;
//   the Gateway's upstream proxy, if any, carries it.
//
// Absolute-form requests (`GET http://host/path`) need nothing here: forward.ts
// routes them by the URL's authority through the normal pipeline.

import type { Cluster, ExtensionChain, HostPatterns, RequestedDestination, RouteRule, RouteTable } from '../compile/table.ts'
import { isIP, isIPv4, isIPv6 } from 'node:net'
import type { MatchInput } from './match.ts'
import { matchOnPort } from './match.ts'
import { pickBackend } from './filters.ts'
import type { ConnectionSni } from './misdirected.ts'

/** Why a CONNECT was refused (metric label, access-log field); bounded. */
export type ConnectRefusal =
  | 'bad_authority' // not host:port
  | 'no_route' // no route for the host on this port
  | 'misdirected' // an HTTPS connection whose SNI selected another listener of the port than the host's (421)
  | 'connect_not_allowed' // the matching route does not allow CONNECT (no sallyport.io/connect-ports)
  | 'port_not_allowed' // the requested port is not among the route's connect-ports
  | 'no_backend' // the rule answers by itself (invalid backends, redirect) or has no weight
  | 'destination_denied' // the Gateway's destination policy denies the backend
  | 'destination_refused' // the backend's name resolves only to refused addresses (guard)
  | 'sni_mismatch' // connect-verify-sni: the tunnelled ClientHello names another host (or none)
  | 'connect_failed' // the backend could not be reached (502)
  | 'extension_denied' // an extension of the backend's chain denied it (Authorization, RateLimit, ...)
  | 'extension_failed' // an extension of the chain failed (failOpen: false)

export interface ConnectAllowed {
  readonly ok: true
  readonly host: string
  readonly port: number
  readonly rule: RouteRule
  readonly cluster: Cluster
  readonly verifySni: boolean
  /** The extension chain of the rule × backend (its request hooks decide the tunnel); null: none. */
  readonly chain: ExtensionChain | null
}

export interface ConnectRefused {
  readonly ok: false
  readonly status: number
  readonly reason: ConnectRefusal
  readonly rule: RouteRule | null
  /** `host:port` as requested (the raw target when it is unreadable), for logs. */
  readonly destination: string
}

export type ConnectDecision = ConnectAllowed | ConnectRefused

/** `host:port` for logs, the access line and extension hooks: an IPv6 host in brackets (`[::1]:443`, never `::1:443`). */
export function connectDestination(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`
}

const CONNECT_INPUT: MatchInput = { method: 'CONNECT', path: '/', query: null, header: () => undefined }

/** `host:port` (IPv6 in brackets) → lowercased host and port; null when unreadable. */
export function parseAuthority(authority: string): { host: string; port: number } | null {
  let host: string
  let rest: string
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']')
    if (close === -1) return null
    host = authority.slice(1, close)
    rest = authority.slice(close + 1)
  } else {
    const colon = authority.lastIndexOf(':')
    if (colon === -1) return null
    host = authority.slice(0, colon)
    rest = authority.slice(colon)
  }
  if (!rest.startsWith(':') || host === '') return null
  // RFC 3986 §3.2.3: port = *DIGIT (Number() also reads 0x1bb, +443, 4.43e2 as 443).
  const digits = rest.slice(1)
  if (!PORT.test(digits)) return null
  const port = Number(digits)
  if (port < 1 || port > 65535) return null
  const name = host.toLowerCase().replace(/\.$/, '')
  // A DNS name (RFC 1035: at most 253 characters) or an IP literal; nothing a
  // resolver or an upstream proxy would read otherwise (a path, %-encoding).
  if (authority.startsWith('[') ? !isIPv6(name) : name.length > 253 || !DNS_NAME.test(name)) return null
  // A numeric last label makes an address of the name for inet_aton and the URL
  // standard (2130706433, 0x7f.1, 0177.0.0.1 are 127.0.0.1): only the dotted
  // quad is an IPv4 literal here, judged by the guard; the other spellings would
  // pass it by name to an upstream proxy, whose resolver reads the address.
  if (!authority.startsWith('[') && NUMERIC_LABEL.test(name) && !isIPv4(name)) return null
  return { host: name, port }
}

const PORT = /^[0-9]{1,5}$/
const DNS_NAME = /^[a-z0-9_-]+(?:\.[a-z0-9_-]+)*$/
const NUMERIC_LABEL = /(?:^|\.)(?:[0-9]+|0x[0-9a-f]*)$/

function refused(status: number, reason: ConnectRefusal, rule: RouteRule | null, destination: string): ConnectRefused {
  return { ok: false, status, reason, rule, destination }
}

/**
 * The verdict on `CONNECT authority` arriving on `port`, from the table the
 * request arrived with; `sni`: the server name of the HTTPS connection it came
 * on (GEP-3567: a host another listener of the port takes is 421, as a request is).
 */
export function routeConnect(table: RouteTable, port: number, authority: string, sni: ConnectionSni | null = null): ConnectDecision {
  const target = parseAuthority(authority)
  // Logged as sent, less a userinfo's credentials (`user:password@host:443` is no CONNECT target).
  if (target === null) return refused(400, 'bad_authority', null, authority.slice(authority.lastIndexOf('@') + 1))
  const dest = connectDestination(target.host, target.port)
  const entry = table.ports.get(port)
  if (entry === undefined || entry.http === null) return refused(403, 'no_route', null, dest)
  if (sni !== null && entry.serverTls !== null && sni.refuses(entry.serverTls, target.host)) return refused(421, 'misdirected', null, dest)
  const match = matchOnPort(entry.http, target.host, CONNECT_INPUT)
  if (match === null) return refused(403, 'no_route', null, dest)
  const rule = match.rule
  const connect = rule.connect ?? null
  if (connect === null) return refused(403, 'connect_not_allowed', rule, dest)
  if (!connect.ports.includes(target.port)) return refused(403, 'port_not_allowed', rule, dest)
  const requested = connect.requested ?? null
  if (requested !== null) return toRequested(requested, rule, target.host, target.port, connect.verifySni)
  if (rule.direct !== null) return refused(rule.direct.status === 403 ? 403 : 502, rule.direct.status === 403 ? 'destination_denied' : 'no_backend', rule, dest)
  const backend = pickBackend(rule, Math.random())
  if (backend === null) return refused(502, 'no_backend', rule, dest)
  if (backend.denied !== undefined) return refused(403, 'destination_denied', rule, dest)
  const cluster = backend.cluster === null ? undefined : table.clusters.get(backend.cluster)
  if (cluster === undefined) return refused(502, 'no_backend', rule, dest)
  return { ok: true, host: target.host, port: target.port, rule, cluster, verifySni: connect.verifySni, chain: backend.extensions ?? null }
}

function listed(p: HostPatterns, host: string): boolean {
  if (p.exact.includes(host)) return true
  for (const s of p.suffixes) if (host.length > s.length && host.endsWith(s)) return true
  return false
}

/** A tunnel to the requested host itself: one endpoint, the Gateway's rules for it. */
function toRequested(r: RequestedDestination, rule: RouteRule, host: string, port: number, verifySni: boolean): ConnectDecision {
  if (r.refusal !== null) return refused(403, 'destination_denied', rule, connectDestination(host, port))
  if (r.deny !== null && listed(r.deny, host)) return refused(403, 'destination_denied', rule, connectDestination(host, port))
  const onList = r.allow === null || listed(r.allow, host)
  const destination = onList ? r.listed : r.unlisted
  if (destination === null) return refused(403, 'destination_denied', rule, connectDestination(host, port))
  // An unlisted name may only go where its addresses fall in the allow-list's
  // CIDRs; through an upstream proxy they are never seen (the proxy resolves
  // the name), so nothing could check them: refused, as a list without CIDRs would.
  if (!onList && r.cluster.upstreamProxy != null && !isIP(host)) return refused(403, 'destination_denied', rule, connectDestination(host, port))
  // Per tunnel: the dialler keeps its per-cluster state in WeakMaps, so this goes with the tunnel.
  const cluster: Cluster = { ...r.cluster, port, destination, endpoints: [{ host, port, kind: 'hostname', weight: 1, zone: null }] }
  return { ok: true, host, port, rule, cluster, verifySni, chain: null }
}
