// Request paths normalized before routing, as RFC 3986 §6.2.2 defines
// equivalent paths (Istio's BASE normalization, Envoy's normalize_path): the
// route matches the normalized path and the upstream is sent that same path.
// Without it `/public/../admin` matches a `/public` prefix and an upstream that
// resolves dot segments serves `/admin`.
//
// - percent-encoded unreserved characters (ALPHA DIGIT - . _ ~) are decoded, so
//   `%2e%2e` is a dot segment; every other escape is kept, its hex upper-cased
//   (`%2f` stays an escaped slash, not a separator: APIs put those in names);
// - `\` is a separator, as Envoy and browsers read it (RFC 3986 has no `\` in a
//   path; servers that take it as `/` exist);
// - dot segments are removed (§5.2.4); repeated slashes are kept, as they
//   are in RFC 3986 (Envoy's merge_slashes is off by default too).
// Refused (a 400): a malformed escape (`%` not followed by two hex digits),
// and an escaped slash that would make a dot segment if decoded
// (`/public/x/..%2F../admin`): an upstream that decodes `%2F` before it
// resolves dot segments would serve a path no route matched, and such a path
// has no other use.

/** Why a path was refused; the request is answered 400 with the reason. */
export class PathRefused {
  readonly reason: string
  constructor(reason: string) { this.reason = reason }
}

export const MALFORMED_ESCAPE = new PathRefused('malformed percent-encoding in the path')
export const ESCAPED_DOT_SEGMENT = new PathRefused('an escaped slash next to a dot segment in the path')

// hot path
/** The normalized path (`path` itself when nothing changes), or why it is refused. */
export function normalizePath(path: string): string | PathRefused {
  const escapes = path.indexOf('%') !== -1 || path.indexOf('\\') !== -1
  if (!escapes && path.indexOf('/.') === -1) return path
  const decoded = escapes ? decodeUnreserved(path) : path
  if (decoded === null) return MALFORMED_ESCAPE
  const out = decoded.charCodeAt(0) === 47 /* '/' */ && decoded.indexOf('/.') !== -1 ? removeDotSegments(decoded) : decoded
  // What dot segments are left after removal are made by escaped slashes.
  if (out.indexOf('.') !== -1 && ESCAPED_SLASH.test(out) && DOT_SEGMENT.test(out.replace(ESCAPED_SLASHES, '/'))) return ESCAPED_DOT_SEGMENT
  return out
}

const ESCAPED_SLASH = /%(?:2F|5C)/
const ESCAPED_SLASHES = /%(?:2F|5C)/g
const DOT_SEGMENT = /(?:^|\/)\.\.?(?:\/|$)/

const HEX = '0123456789ABCDEF'

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48
  const l = c | 0x20
  return l >= 97 && l <= 102 ? l - 87 : -1
}

/** RFC 3986 §2.3 unreserved: ALPHA DIGIT - . _ ~ */
export function unreserved(c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c === 45 || c === 46 || c === 95 || c === 126
}

function decodeUnreserved(path: string): string | null {
  let out = ''
  let from = 0
  for (let i = 0; i < path.length; i++) {
    const c = path.charCodeAt(i)
    if (c === 92 /* '\' */) {
      out += path.slice(from, i) + '/'
      from = i + 1
    } else if (c === 37 /* '%' */) {
      const hi = i + 2 < path.length ? hexValue(path.charCodeAt(i + 1)) : -1
      const lo = hi === -1 ? -1 : hexValue(path.charCodeAt(i + 2))
      if (lo === -1) return null
      const v = hi * 16 + lo
      out += path.slice(from, i) + (unreserved(v) ? String.fromCharCode(v) : '%' + HEX[hi] + HEX[lo])
      i += 2
      from = i + 1
    }
  }
  return out + path.slice(from)
}

/** RFC 3986 §5.2.4 on an absolute path: `.` segments go, `..` takes the segment before it with it. */
function removeDotSegments(path: string): string {
  const segments = path.split('/')
  const out: string[] = []
  const last = segments.length - 1
  for (let i = 1; i <= last; i++) {
    const s = segments[i]
    if (s === '.' || s === '..') {
      if (s === '..' && out.length > 0) out.pop()
      if (i === last) out.push('')
    } else {
      out.push(s)
    }
  }
  return '/' + out.join('/')
}
