// Fields no extension sets or removes (the set: lib/gateway-owned-fields.ts):
// the gateway frames each message it sends (Content-Length, Transfer-Encoding:
// RFC 9112 §6), names the upstream's Host, and owns each connection's fields
// (RFC 9110 §7.6.1: Connection, the other hop-by-hop fields, and whatever a
// Connection value names). An edited
// Content-Length had a request's head declare fewer bytes than its body (the
// rest reached the upstream as another request) and a response's client read
// the body by another length than was sent (the connection cut, or desynced).
//
// An ExternalProcessor answer naming one fails its callout (ext-proc.ts). What
// in-process hooks (a Plugin's) wrote into the headers in place is undone when
// the flow hands the message on (keepGatewayFields); a deny or reply headers
// naming one are refused or dropped (flow.ts denyProblem, router addReplyHeaders).

import type { OutgoingHeaders } from '../upstream/types.ts'
import { logger } from '../observe/log.ts'
import { isGatewayField } from '../gateway-owned-fields.ts'

const log = logger('extensions')

export { isGatewayField }

// hot path
/**
 * The message leaves the flow: its framing is `length` (the Content-Length it
 * came with, or the one of a body the flow replaced), without
 * Transfer-Encoding (the sender frames what it sends); `request`: and without
 * Host (the upstream's is the Backend's). A Connection an extension wrote goes,
 * with the fields it names (except the gateway's own). Logs at debug what it
 * undid, for `route` (`namespace/name`).
 */
export function keepGatewayFields(headers: OutgoingHeaders, length: string | string[] | undefined, request: boolean, route: string): void {
  const connection = headers.connection
  const te = headers['transfer-encoding']
  const host = request ? headers.host : undefined
  if (headers['content-length'] === length && connection === undefined && te === undefined && host === undefined) return
  if (connection !== undefined) {
    const list = Array.isArray(connection) ? connection.join(',') : connection
    for (const token of list.split(',')) {
      const name = token.trim().toLowerCase()
      if (name !== '' && !isGatewayField(name)) delete headers[name]
    }
    delete headers.connection
  }
  delete headers['transfer-encoding']
  if (host !== undefined) delete headers.host
  if (length === undefined) delete headers['content-length']
  else headers['content-length'] = length
  log.debug({ route, request }, 'extension edits of framing or connection fields not applied')
}
