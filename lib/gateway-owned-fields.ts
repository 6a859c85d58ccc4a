// Fields no extension sets or removes: the gateway frames each message it
// sends (Content-Length, Transfer-Encoding: RFC 9112 §6), names the upstream's
// Host, and owns each connection's fields (RFC 9110 §7.6.1: Connection, the
// other hop-by-hop fields). Read by the data path (extensions/gateway-fields.ts,
// router/headers.ts), which undoes or refuses an extension's write of one, and
// by `sallyport validate`, which refuses a configuration that names one for a
// credential (it would never be sent).

const GATEWAY_FIELDS: ReadonlySet<string> = new Set([
  'content-length', 'transfer-encoding', 'host',
  'connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'upgrade', 'http2-settings',
  'proxy-authenticate', 'proxy-authorization',
])

/** Whether `name` (any case) is a field the gateway owns, never an extension. */
export function isGatewayField(name: string): boolean {
  return GATEWAY_FIELDS.has(name.toLowerCase())
}
