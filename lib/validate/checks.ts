// Predicates shared by the semantic rules: addresses, DNS names, regular
// expressions, durations, base64. Each returns a problem text or null so the
// caller decides the field and the severity.

import { isIP } from 'node:net'
import { parseCidr } from '../address-ranges.ts'
import { show } from './findings.ts'

const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/
const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/

export function isIPAddress(s: string): boolean {
  // Bracketed IPv6 literals are still IPs for the "never an IP" rule.
  const bare = s.startsWith('[') && s.endsWith(']') ? s.slice(1, -1) : s
  return isIP(bare) !== 0
}

export function isDnsSubdomain(s: string): boolean {
  return s.length > 0 && s.length <= 253 && DNS1123_SUBDOMAIN.test(s)
}

export function isDnsLabel(s: string): boolean {
  return s.length > 0 && s.length <= 63 && DNS1123_LABEL.test(s)
}

function labelsFit(s: string): boolean {
  return s.split('.').every((l) => l.length <= 63)
}

/**
 * A route or listener hostname: RFC 1123, a wildcard only as the whole first
 * label (`*.example.com`), never an IP address (Gateway API Hostname).
 */
export function hostnameProblem(h: string): string | null {
  if (isIPAddress(h)) return `"${h}" is an IP address, not a hostname`
  const rest = h.startsWith('*.') ? h.slice(2) : h
  if (rest.includes('*')) return `"${h}": a wildcard is allowed only as a leading "*."`
  if (!isDnsSubdomain(rest) || !labelsFit(rest)) return `"${h}" is not a valid RFC 1123 hostname`
  return null
}

/**
 * The destination hostname of a Backend (GEP-4488 ExternalHostname, the egress
 * proposal's fqdn, Envoy Gateway fqdn endpoints): never an IP, never inside the
 * cluster's DNS (`cluster.local` or below), no wildcard, RFC 1123.
 */
export function externalHostnameProblem(h: string): string | null {
  if (isIPAddress(h)) return `"${h}" is an IP address; a hostname is required`
  if (h.includes('*')) return `"${h}": wildcard hostnames are not allowed for Backends`
  const lower = h.toLowerCase().replace(/\.$/, '')
  if (lower === 'cluster.local' || lower.endsWith('.cluster.local')) {
    return `"${h}" is inside the cluster domain (cluster.local); use a Service or EndpointSelector`
  }
  if (!isDnsSubdomain(h) || !labelsFit(h)) return `"${h}" is not a valid RFC 1123 hostname`
  return null
}

/**
 * Gateway API regular expressions are RE2-flavoured; we run them as JS RegExp.
 * A leading `(?i)` (common in RE2 configs) is read as the `i` flag; compile/
 * must do the same.
 */
export function regexProblem(source: string): string | null {
  let body = source
  let flags = ''
  if (body.startsWith('(?i)')) {
    body = body.slice(4)
    flags = 'i'
  }
  const why = compileError(body, flags)
  return why === null ? null : `regular expression ${JSON.stringify(source)} does not compile: ${why}`
}

/**
 * A header value of type RegularExpression in a rate-limit match or an Envoy
 * Gateway clientSelector: matched whole, as extensions/rate-limit.ts builds it.
 */
export function wholeRegexProblem(source: string): string | null {
  const why = compileError(`^(?:${source})$`, '')
  return why === null ? null : `not a valid regular expression ${JSON.stringify(source)}: ${why}`
}

/** Why `body` does not compile as a RegExp (V8's words, without its prefix); null when it does. */
function compileError(body: string, flags: string): string | null {
  try {
    new RegExp(body, flags)
    return null
  } catch (err) {
    return err instanceof Error ? err.message.replace(/^Invalid regular expression: /, '') : 'invalid'
  }
}

/** `a.b.c.d/n`, `x::y/n` or a bare address; null when it is one. */
export function cidrProblem(text: string): string | null {
  return parseCidr(text) === null ? `must be a CIDR (a.b.c.d/n or x::y/n), got ${JSON.stringify(text)}` : null
}

const GW_DURATION = /^([0-9]{1,5}(h|m|s|ms)){1,4}$/
const UNIT_MS: Readonly<Record<string, number>> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 }

/** Gateway API Duration (GEP-2257) in milliseconds, or null when malformed. */
export function gatewayDurationMs(s: string): number | null {
  if (!GW_DURATION.test(s)) return null
  let total = 0
  for (const m of s.matchAll(/([0-9]+)(ms|h|m|s)/g)) total += Number(m[1]) * (UNIT_MS[m[2] as string] as number)
  return total
}

// Kubernetes decodes []byte fields with Go's base64.StdEncoding, which skips
// \r and \n (YAML block scalars add them) but nothing else.
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/

export function isBase64(s: string): boolean {
  return BASE64.test(s.replace(/[\r\n]/g, ''))
}

/** Path values of Exact / PathPrefix matches (Gateway API HTTPPathMatch CEL rules). */
export function pathValueProblem(value: string): string | null {
  if (!value.startsWith('/')) return `path "${value}" must start with "/"`
  for (const bad of ['//', '/./', '/../', '%2f', '%2F', '#']) {
    if (value.includes(bad)) return `path "${value}" must not contain "${bad}"`
  }
  if (value.endsWith('/..') || value.endsWith('/.')) return `path "${value}" must not end with "/." or "/.."`
  if (!/^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$/.test(value)) return `path "${value}" contains invalid characters`
  return null
}

// What the gateway writes into a request or response head: node refuses to
// send anything else (ERR_INVALID_CHAR), so a value outside these fails every
// request that uses it. The schemas' headerName, headerValue and httpPath
// (schemas/common.json) are the same expressions, for the fields ajv checks.
const TOKEN = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/
const FIELD_VALUE = /^(?:[\x21-\x7e\x80-\xff](?:[\t\x20-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?$/
const HTTP_PATH = /^(?:\/[\x21-\x7e]*)?$/

/** A header name: an RFC 9110 token. */
export function headerNameProblem(name: string): string | null {
  return TOKEN.test(name) ? null : `${show(name)} is not a valid header name (an RFC 9110 token)`
}

/** A header value: an RFC 9110 field-value (no CR, LF, NUL; no whitespace at either end). */
export function headerValueProblem(value: string): string | null {
  return FIELD_VALUE.test(value) ? null : `${show(value)} is not a valid header value (RFC 9110: visible characters, spaces and tabs only between them; no CR, LF, NUL or other control characters)`
}

/** A path the gateway writes (a request line, a Location): "/" then visible ASCII characters. */
export function httpPathProblem(path: string): string | null {
  return HTTP_PATH.test(path) ? null : `${show(path)} is not a valid path ("/" then visible ASCII characters: no spaces, CR, LF, NUL or other control characters)`
}
