// The Redis a global rate limit shares (RateLimit and AIUsage `global.redis`,
// the BackendTrafficPolicy annotation sallyport.io/rate-limit-redis), read the
// same way by validate, compile and the data path: `host:port`,
// `redis://host:port` (plain TCP) or `rediss://host:port` (TLS); port 6379
// when left out; an IPv6 address in brackets. Credentials never go in it: the
// address is shown in /config_dump and log lines, so a URL with userinfo is
// refused without echoing it (they belong in the Secret of global.secretRef).

export interface RedisAddress {
  readonly host: string
  readonly port: number
  /** rediss://: TLS, the server verified against the trust store and its name. */
  readonly tls: boolean
}

export type ParsedRedisAddress = { readonly ok: true; readonly value: RedisAddress } | { readonly ok: false; readonly message: string }

const FORMS = 'host:port, redis://host:port, or rediss://host:port for TLS'
const SCHEME = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//
/** A DNS name (letters, digits, '-', '_', dots) or an IPv4 address. */
const HOST = /^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$/
const IPV6 = /^[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?$/

/**
 * Parses a Redis address. `credentials` is the message for userinfo in the
 * URL: where the credentials belong instead (the field or annotation that
 * names the Secret).
 */
export function parseRedisAddress(text: string, credentials = 'put them in the Secret named by global.secretRef'): ParsedRedisAddress {
  const trimmed = text.trim()
  const scheme = SCHEME.exec(trimmed)
  const rest = scheme === null ? trimmed : trimmed.slice(scheme[0].length)
  const end = rest.search(/[/?#\\]/)
  const authority = end === -1 ? rest : rest.slice(0, end)
  const tail = end === -1 ? '' : rest.slice(end)
  // Before anything that echoes the value: it may hold a password.
  if (authority.includes('@')) return { ok: false, message: `credentials in the Redis URL would show in logs and /config_dump: ${credentials}` }
  const bad = (why: string): ParsedRedisAddress => ({ ok: false, message: `${JSON.stringify(text)} is not a Redis address (${FORMS}): ${why}` })
  const s = scheme?.[1]?.toLowerCase() ?? null
  if (s !== null && s !== 'redis' && s !== 'rediss') return bad(`scheme ${s} is not redis or rediss`)
  // A database other than 0 is not selected: the limit's keys live in database 0.
  if (tail !== '' && tail !== '/' && tail !== '/0') return bad('a path, query or fragment (a database other than 0) is not supported')
  if (authority === '') return bad('no host')
  let host: string
  let portText: string | null
  if (authority.startsWith('[')) {
    const close = authority.indexOf(']')
    if (close === -1) return bad('an IPv6 address without its closing bracket')
    host = authority.slice(1, close)
    const after = authority.slice(close + 1)
    if (after !== '' && !after.startsWith(':')) return bad(`${JSON.stringify(after)} after the IPv6 address`)
    portText = after === '' ? null : after.slice(1)
    if (!IPV6.test(host) || !host.includes(':')) return bad(`${JSON.stringify(host)} is not an IPv6 address`)
  } else {
    const colon = authority.lastIndexOf(':')
    if (colon !== authority.indexOf(':')) return bad('an IPv6 address goes in brackets, [::1]:6379')
    host = colon === -1 ? authority : authority.slice(0, colon)
    portText = colon === -1 ? null : authority.slice(colon + 1)
    if (!HOST.test(host) || host.includes('..')) return bad(`${JSON.stringify(host)} is not a host name or IP address`)
  }
  let port = 6379
  if (portText !== null) {
    port = Number(portText)
    if (!/^\d{1,5}$/.test(portText) || port < 1 || port > 65535) return bad(`${JSON.stringify(portText)} is not a port (1-65535)`)
  }
  return { ok: true, value: { host, port, tls: s === 'rediss' } }
}

/** `host:port` (an IPv6 host in brackets), with `rediss://` in front for TLS: how logs and messages name the Redis. */
export function formatRedisAddress(a: RedisAddress): string {
  const hp = `${a.host.includes(':') ? `[${a.host}]` : a.host}:${a.port}`
  return a.tls ? `rediss://${hp}` : hp
}
