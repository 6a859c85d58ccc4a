// AWS Signature Version 4 request signing (AWS General Reference, "Create a
// signed AWS API request"), for Bedrock-style backends: canonical request →
// string to sign → signing key (HMAC chain over date, region, service,
// "aws4_request") → Authorization header. node:crypto only.
//
// Payload: by default the body is buffered within the bound (request-body
// phase) and its SHA-256 signed — what most AWS services require. With
// `payload: unsigned` the body streams and x-amz-content-sha256 is
// UNSIGNED-PAYLOAD (accepted by S3 and some others; request-headers phase).

import { createHash, createHmac } from 'node:crypto'
import type { CompiledExtension } from '../compile/table.ts'
import type { ExtensionHooks, OutgoingHeaders, RequestView } from './plugin-api.ts'
import { secretValue } from './credential-injector.ts'

export const UNSIGNED_PAYLOAD = 'UNSIGNED-PAYLOAD'

export interface SignInput {
  readonly method: string
  /** Path and query as sent. */
  readonly path: string
  readonly host: string
  /** Headers to sign besides host and x-amz-* (lowercased names). */
  readonly headers: Readonly<Record<string, string>>
  /** Hex SHA-256 of the payload, or UNSIGNED-PAYLOAD. */
  readonly payloadHash: string
  readonly service: string
  readonly region: string
  readonly accessKeyId: string
  readonly secretAccessKey: string
  readonly sessionToken: string | null
  /** `YYYYMMDDTHHMMSSZ`. */
  readonly amzDate: string
  /** Set x-amz-content-sha256 (S3 requires it; harmless elsewhere). */
  readonly contentSha256Header: boolean
}

export interface Signed {
  readonly canonicalRequest: string
  readonly stringToSign: string
  readonly signature: string
  readonly authorization: string
  /** Headers to add to the request (x-amz-date, x-amz-content-sha256, x-amz-security-token, authorization). */
  readonly headers: Readonly<Record<string, string>>
}

export function sha256Hex(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex')
}

function hmac(key: string | Buffer, data: string): Buffer {
  return createHmac('sha256', key).update(data, 'utf8').digest()
}

/** RFC 3986 encoding as SigV4 wants it: everything but unreserved characters, uppercase hex. */
export function uriEncode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, c => '%' + c.charCodeAt(0).toString(16).toUpperCase())
}

const HEX = /^[0-9A-Fa-f]{2}$/

/** One octet as SigV4 writes it: unreserved characters as they are, the rest %XY. */
function octet(b: number): string {
  const unreserved = (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) || (b >= 0x30 && b <= 0x39) || b === 0x2d || b === 0x5f || b === 0x2e || b === 0x7e
  return unreserved ? String.fromCharCode(b) : '%' + b.toString(16).toUpperCase().padStart(2, '0')
}

/**
 * The octets a component stands for, each as SigV4 encodes it: a
 * percent-escape is its octet (UTF-8 or not: `%FF` stays `%FF`), a `%` that
 * escapes nothing is the octet `%`, other characters are their UTF-8 octets.
 * Decoding the whole component as UTF-8 instead left it as sent when one
 * escape was not UTF-8, and encoded its `%` again (`%FF` → `%25FF`).
 */
function canonicalComponent(s: string): string {
  let out = ''
  let i = 0
  while (i < s.length) {
    if (s[i] === '%' && HEX.test(s.slice(i + 1, i + 3))) {
      out += octet(parseInt(s.slice(i + 1, i + 3), 16))
      i += 3
      continue
    }
    const ch = String.fromCodePoint(s.codePointAt(i) as number)
    for (const b of Buffer.from(ch, 'utf8')) out += octet(b)
    i += ch.length
  }
  return out
}

/**
 * RFC 3986 §5.2.4 dot segments, and empty segments dropped (AWS test suite:
 * `//example//` signs as `/example/`); the leading and a trailing `/` kept.
 */
function normalizePath(path: string): string {
  const out: string[] = []
  for (const seg of path.split('/')) {
    if (seg === '' || seg === '.') continue
    if (seg === '..') out.pop()
    else out.push(seg)
  }
  if (out.length === 0) return '/'
  return '/' + out.join('/') + (path.endsWith('/') || path.endsWith('/.') || path.endsWith('/..') ? '/' : '')
}

/**
 * Each segment encoded; every service but S3 first normalizes the path and
 * then encodes each segment twice (AWS: "URI-encoded twice"); S3 does neither.
 */
export function canonicalUri(path: string, service: string): string {
  if (path === '' || path === '/') return '/'
  const s3 = service === 's3'
  return (s3 ? path : normalizePath(path)).split('/').map(seg => {
    const once = canonicalComponent(seg)
    return s3 ? once : uriEncode(once)
  }).join('/')
}

export function canonicalQuery(query: string): string {
  if (query === '') return ''
  const pairs = query.split('&').filter(p => p !== '').map(p => {
    const eq = p.indexOf('=')
    const k = eq === -1 ? p : p.slice(0, eq)
    const v = eq === -1 ? '' : p.slice(eq + 1)
    // A form's `+` is a space (%20), as AWS reads a query.
    return [canonicalComponent(k.replace(/\+/g, '%20')), canonicalComponent(v.replace(/\+/g, '%20'))] as const
  })
  pairs.sort((a, b) => a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0)
  return pairs.map(([k, v]) => `${k}=${v}`).join('&')
}

export function signingKey(secretAccessKey: string, date: string, region: string, service: string): Buffer {
  return hmac(hmac(hmac(hmac('AWS4' + secretAccessKey, date), region), service), 'aws4_request')
}

export function signV4(input: SignInput): Signed {
  const date = input.amzDate.slice(0, 8)
  const added: Record<string, string> = { 'x-amz-date': input.amzDate }
  if (input.contentSha256Header) added['x-amz-content-sha256'] = input.payloadHash
  if (input.sessionToken !== null) added['x-amz-security-token'] = input.sessionToken
  const all: Record<string, string> = { ...input.headers, host: input.host, ...added }
  const names = Object.keys(all).map(n => n.toLowerCase()).sort()
  const canonicalHeaders = names.map(n => `${n}:${(all[n] as string).trim().replace(/\s+/g, ' ')}\n`).join('')
  const signedHeaders = names.join(';')
  const q = input.path.indexOf('?')
  const canonicalRequest = [
    input.method.toUpperCase(),
    canonicalUri(q === -1 ? input.path : input.path.slice(0, q), input.service),
    canonicalQuery(q === -1 ? '' : input.path.slice(q + 1)),
    canonicalHeaders,
    signedHeaders,
    input.payloadHash,
  ].join('\n')
  const scope = `${date}/${input.region}/${input.service}/aws4_request`
  const stringToSign = ['AWS4-HMAC-SHA256', input.amzDate, scope, sha256Hex(canonicalRequest)].join('\n')
  const signature = createHmac('sha256', signingKey(input.secretAccessKey, date, input.region, input.service)).update(stringToSign, 'utf8').digest('hex')
  const authorization = `AWS4-HMAC-SHA256 Credential=${input.accessKeyId}/${scope}, SignedHeaders=${signedHeaders}, Signature=${signature}`
  return { canonicalRequest, stringToSign, signature, authorization, headers: { ...added, authorization } }
}

export function amzDate(ms: number): string {
  return new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '')
}

/**
 * A field sent as several lines (an array) signs as AWS reads them: each
 * value trimmed and its spaces collapsed, joined by a comma. Joined first, the
 * spaces around each comma stayed (`a , b` signed, `a,b` verified).
 */
function first(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.map(one => one.trim().replace(/\s+/g, ' ')).join(',') : v
}

/** Headers worth signing besides host and x-amz-*: content-type (if any). */
function signable(headers: OutgoingHeaders): Record<string, string> {
  const out: Record<string, string> = {}
  const ct = first(headers['content-type'])
  if (ct !== undefined) out['content-type'] = ct
  for (const name of Object.keys(headers)) if (name.startsWith('x-amz-') && name !== 'x-amz-date' && name !== 'x-amz-security-token' && name !== 'x-amz-content-sha256') out[name] = first(headers[name]) as string
  return out
}

export function awsSigV4(spec: CompiledExtension, now: () => number = Date.now): ExtensionHooks {
  const nested = spec.config.awsSigV4 !== undefined
  const c = (nested ? spec.config.awsSigV4 : spec.config) as Record<string, unknown>
  const path = nested ? 'awsSigV4.secretRef' : 'secretRef'
  if (typeof c.service !== 'string' || typeof c.region !== 'string') throw new Error('service and region are required')
  const service = c.service
  const region = c.region
  const accessKeyId = secretValue(spec, path, 'accessKeyIdKey', 'AWS_ACCESS_KEY_ID')
  const secretAccessKey = secretValue(spec, path, 'secretAccessKeyKey', 'AWS_SECRET_ACCESS_KEY')
  const data = spec.secrets[path] ?? {}
  const tokenKey = typeof (c.secretRef as Record<string, unknown> | undefined)?.sessionTokenKey === 'string' ? (c.secretRef as Record<string, string>).sessionTokenKey as string : 'AWS_SESSION_TOKEN'
  const sessionToken = data[tokenKey]?.trim() ?? null
  const sign = (req: RequestView, payloadHash: string): void => {
    const h = req.headers
    // The client's own signature or credentials never pass.
    delete h.authorization
    delete h['x-amz-security-token']
    delete h['x-amz-date']
    const s = signV4({
      method: req.method, path: req.path, host: req.authority, headers: signable(h), payloadHash,
      service, region, accessKeyId, secretAccessKey, sessionToken, amzDate: amzDate(now()), contentSha256Header: true,
    })
    Object.assign(h, s.headers)
  }
  if (c.payload === 'unsigned') return { requestHeaders(req) { sign(req, UNSIGNED_PAYLOAD) } }
  return { requestBody(req, body) { sign(req, sha256Hex(body)) } }
}
