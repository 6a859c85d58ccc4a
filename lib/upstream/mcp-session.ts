// MCP session affinity without shared state. An MCP server (Streamable HTTP
// transport) that issues an `Mcp-Session-Id` usually keeps the session in its
// own memory, and answers 404 to an id it did not issue. So the gateway hands
// its client the id with a tag in front that names the endpoint that answered:
// `<tag>.<id>`. A request carrying such an id goes back to that endpoint, with
// the tag removed (the server sees its own id).
//
// The tag is 12 base64url characters of SHA-256 over the cluster id and the
// endpoint's `address:port` (a hostname endpoint's resolved address: sessions
// live in one server process). It is deterministic, so every worker process and
// every replica of the gateway computes the same tag with nothing shared; it
// does not spell the address out, but it is a label, not a secret (nor a
// signature: a client may write any tag, which can only send it to an endpoint
// of the backend its route already picked). MCP session ids are visible ASCII
// (0x21-0x7E); the tag and the dot are too.

import { createHash } from 'node:crypto'
import type { OutgoingHeaders } from './types.ts'

export const SESSION_HEADER = 'mcp-session-id'

/** Characters in a tag (9 bytes of the hash, base64url); the dot after it makes TAG_LENGTH + 1. */
export const TAG_LENGTH = 12

/** Tags already computed, by cluster id and endpoint; cleared whole when it grows past CACHE_MAX. */
const cache = new Map<string, string>()
const CACHE_MAX = 4096

/** The tag of `endpoint` (`address:port`, as the access line shows it) in the cluster `clusterId`. */
export function sessionTag(clusterId: string, endpoint: string): string {
  const key = clusterId + '\n' + endpoint
  let tag = cache.get(key)
  if (tag === undefined) {
    tag = createHash('sha256').update('sallyport mcp session\n').update(key).digest().subarray(0, 9).toString('base64url')
    if (cache.size >= CACHE_MAX) cache.clear()
    cache.set(key, tag)
  }
  return tag
}

function isTagChar(c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c === 45 /* - */ || c === 95 /* _ */
}

/**
 * Whether a client's session id has the gateway's form `<tag>.<id>`: a tag of
 * TAG_LENGTH base64url characters, a dot, a non-empty id of visible ASCII
 * (0x21-0x7E, as MCP has session ids). Anything else (an id from before the
 * gateway tagged them, a garbled one) is not the gateway's and goes to the
 * upstream as it came. That includes several Mcp-Session-Id fields: node joins
 * repeated fields into one value with ", " (HTTP/1.1 and HTTP/2), and the
 * space cannot be in an id; stripping the first tag of such a value would send
 * the upstream neither what the client sent nor one id.
 */
export function isTagged(value: string): boolean {
  if (value.length <= TAG_LENGTH + 1 || value.charCodeAt(TAG_LENGTH) !== 46 /* . */) return false
  for (let i = 0; i < TAG_LENGTH; i++) if (!isTagChar(value.charCodeAt(i))) return false
  for (let i = TAG_LENGTH + 1; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c < 0x21 || c > 0x7e) return false
  }
  return true
}

/** The endpoint index of each tag of a cluster's endpoint list (`labels`: `address:port` by index). */
export function endpointsByTag(clusterId: string, labels: readonly string[]): ReadonlyMap<string, number> {
  const byTag = new Map<string, number>()
  for (let i = 0; i < labels.length; i++) {
    const tag = sessionTag(clusterId, labels[i])
    if (!byTag.has(tag)) byTag.set(tag, i)
  }
  return byTag
}

/** An upstream's answer: a session id it issued (or repeats) goes to the client tagged with `endpoint`. */
export function tagSessionHeader(headers: OutgoingHeaders, clusterId: string, endpoint: string): void {
  const id = headers[SESSION_HEADER]
  // Several Mcp-Session-Id fields, or an empty one: not a session the client can name; passed on as sent.
  if (typeof id !== 'string' || id === '') return
  headers[SESSION_HEADER] = sessionTag(clusterId, endpoint) + '.' + id
}
