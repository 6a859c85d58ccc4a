// Per-type config checks of the built-in extension types (issue 7), so a typo
// in `config` is a `sallyport validate` error naming the field
// (`spec.extensions[0].config.header`) instead of an extension failing at
// run time. Each type lists its fields (unknown ones are errors) and what is
// required; values are checked where a wrong one would only show per request.

import { ExtensionType, PHASES, canonicalType, effectiveType } from '../extension-types.ts'
import { asArr, asObj, asStr, type Obj } from './access.ts'
import { Findings, child, item, show } from './findings.ts'
import { cidrProblem, headerNameProblem, headerValueProblem, isIPAddress, isDnsSubdomain, wholeRegexProblem } from './checks.ts'
import { isGatewayField } from '../gateway-owned-fields.ts'
import { parseRedisAddress } from '../redis-address.ts'

const UNITS = ['Second', 'Minute', 'Hour', 'Day']
const KEY_PARTS = ['namespace', 'serviceAccount', 'route', 'backend', 'client']
const PATTERNS = ['email', 'phone', 'card', 'ssn']
const PLACEMENT = ['header', 'format', 'queryParam']

function known(o: Obj, at: string, fields: readonly string[], f: Findings): void {
  for (const k of Object.keys(o)) if (!fields.includes(k)) f.error(child(at, k), `unknown field; expected one of ${fields.join(', ')}`)
}

function required(o: Obj, at: string, names: readonly string[], f: Findings): void {
  for (const n of names) if (o[n] === undefined || o[n] === null) f.error(child(at, n), 'required')
}

function positive(o: Obj, at: string, name: string, f: Findings): void {
  const v = o[name]
  if (v !== undefined && !(typeof v === 'number' && v > 0)) f.error(child(at, name), `must be a positive number, got ${show(v)}`)
}

/**
 * A count of requests: a token bucket holds whole requests, so below 1 (or
 * 0.5) it never holds one and every request is refused (Envoy Gateway's
 * RateLimitValue.requests is a uint for the same reason).
 */
function wholeCount(o: Obj, at: string, name: string, f: Findings): void {
  const v = o[name]
  if (v !== undefined && !(typeof v === 'number' && Number.isInteger(v) && v >= 1)) f.error(child(at, name), `must be a whole number of requests, at least 1, got ${show(v)}`)
}

function oneOf(o: Obj, at: string, name: string, values: readonly string[], f: Findings): void {
  const v = o[name]
  if (v !== undefined && !(typeof v === 'string' && values.includes(v))) f.error(child(at, name), `must be one of ${values.join(', ')}, got ${show(v)}`)
}

/**
 * The authority of a URL (or of text that only looks like one): what comes
 * before the first '/', '?', '#' or '\' after the scheme. An '@' in it sets
 * userinfo off, as WHATWG URL parsing (fetch's) reads http(s) URLs.
 */
const AUTHORITY = /^(?:[A-Za-z][A-Za-z0-9+.-]*:\/\/)?([^/?#\\]*)/

/**
 * An http(s) URL without credentials. Like the upstream-proxy annotation
 * (annotations.ts, parseUpstreamProxy): the URL is shown verbatim in
 * /config_dump and log lines, and fetch refuses one with credentials. The
 * value is not echoed then; `where` says where credentials belong instead.
 */
function url(o: Obj, at: string, name: string, where: string, f: Findings): void {
  const v = asStr(o[name])
  if (v === null) return
  if (AUTHORITY.exec(v)?.[1]?.includes('@') === true) f.error(child(at, name), `credentials in the URL would show in logs and /config_dump${where}`)
  else if (!/^https?:\/\/[^/]/.test(v)) f.error(child(at, name), `must be an http:// or https:// URL, got ${show(v)}`)
}

function secretRef(o: Obj, at: string, extra: readonly string[], f: Findings, fields: readonly string[] = ['name', 'namespace', 'key']): void {
  const ref = o.secretRef
  if (ref === undefined) return
  const r = asObj(ref)
  if (r === null || typeof r.name !== 'string' || r.name === '') { f.error(child(at, 'secretRef.name'), 'required: the Secret name'); return }
  known(r, child(at, 'secretRef'), [...fields, ...extra], f)
}

/**
 * A limit's `global`: the Redis address (host:port, redis://, rediss:// for
 * TLS; lib/redis-address.ts, as the data path reads it) without credentials,
 * the Secret with the AUTH password (and ACL username), and the TLS trust and
 * client certificate of a rediss:// Redis.
 */
function globalBlock(v: unknown, at: string, f: Findings): void {
  if (v === undefined) return
  const g = asObj(v)
  if (g === null) { f.error(at, 'must be an object { redis: host:port, secretRef, tls, timeoutMs, failureMode }'); return }
  known(g, at, ['redis', 'secretRef', 'tls', 'timeoutMs', 'failureMode'], f)
  const nested = asObj(g.redis)
  if (nested !== null) known(nested, child(at, 'redis'), ['address'], f)
  const address = nested === null ? g.redis : nested.address
  const where = nested === null ? child(at, 'redis') : child(at, 'redis.address')
  let tls: boolean | null = null
  if (typeof address !== 'string') f.error(where, 'required: host:port of the Redis every replica shares (rediss://host:port for TLS)')
  else {
    const r = parseRedisAddress(address)
    if (!r.ok) f.error(where, r.message)
    else tls = r.value.tls
  }
  redisTls(g.tls, child(at, 'tls'), tls, f)
  const keys = ['namespace', 'usernameKey', 'passwordKey']
  secretRef(g, at, keys, f, ['name'])
  const ref = asObj(g.secretRef)
  for (const k of keys) {
    const v = ref?.[k]
    if (v !== undefined && (typeof v !== 'string' || v === '')) f.error(child(at, `secretRef.${k}`), `must be a non-empty string, got ${show(v)}`)
  }
  positive(g, at, 'timeoutMs', f)
  oneOf(g, at, 'failureMode', ['open', 'closed'], f)
}

const REF_FIELDS = ['group', 'kind', 'name', 'namespace']

/**
 * A reference to a core object (group ""): `kinds` are the kinds it may name,
 * the first one the default when `kind` is left out (null: kind is required).
 */
function coreRef(v: unknown, at: string, kinds: readonly string[], defaultKind: string | null, f: Findings): void {
  const r = asObj(v)
  if (r === null) { f.error(at, `must be an object { ${defaultKind === null ? 'kind, ' : ''}name, namespace? }`); return }
  known(r, at, REF_FIELDS, f)
  if (r.group !== undefined && r.group !== '') f.error(child(at, 'group'), `must be "" (core), got ${show(r.group)}`)
  if (r.kind === undefined ? defaultKind === null : !(typeof r.kind === 'string' && kinds.includes(r.kind))) f.error(child(at, 'kind'), `must be ${kinds.join(' or ')}${r.kind === undefined ? '' : `, got ${show(r.kind)}`}`)
  if (typeof r.name !== 'string' || r.name === '') f.error(child(at, 'name'), `required: the ${kinds.join(' or ')} name`)
  if (r.namespace !== undefined && (typeof r.namespace !== 'string' || r.namespace === '')) f.error(child(at, 'namespace'), `must be a non-empty string, got ${show(r.namespace)}`)
}

/**
 * `global.tls` of a rediss:// Redis: the CAs trusted instead of the system's
 * (ConfigMaps or Secrets with `ca.crt`, as BackendTLSPolicy caCertificateRefs),
 * the client certificate (a kubernetes.io/tls Secret) for a Redis with
 * `tls-auth-clients yes`, and the name the certificate must carry (the SNI).
 * Compile reads the objects (compile/extensions.ts). `tls` is null when the
 * address did not parse (that is its own error).
 */
function redisTls(v: unknown, at: string, tls: boolean | null, f: Findings): void {
  if (v === undefined) return
  const o = asObj(v)
  if (o === null) { f.error(at, 'must be an object { caCertificateRefs, clientCertificateRef, serverName }'); return }
  known(o, at, ['caCertificateRefs', 'clientCertificateRef', 'serverName'], f)
  if (tls === false) f.error(at, 'needs a rediss:// address: global.redis is plain TCP (redis:// or host:port), which never speaks TLS')
  if (o.caCertificateRefs !== undefined) {
    if (!Array.isArray(o.caCertificateRefs) || o.caCertificateRefs.length === 0) f.error(child(at, 'caCertificateRefs'), 'must list at least one ConfigMap or Secret with ca.crt (leave it out to trust the system\'s CAs)')
    else o.caCertificateRefs.forEach((r, i) => coreRef(r, item(child(at, 'caCertificateRefs'), i), ['ConfigMap', 'Secret'], null, f))
  }
  if (o.clientCertificateRef !== undefined) coreRef(o.clientCertificateRef, child(at, 'clientCertificateRef'), ['Secret'], 'Secret', f)
  if (o.serverName !== undefined) {
    const name = asStr(o.serverName)
    if (name === null || isIPAddress(name) || !isDnsSubdomain(name.toLowerCase().replace(/\.$/, ''))) f.error(child(at, 'serverName'), `must be a DNS name (the name the Redis certificate carries, sent as SNI), got ${show(o.serverName)}`)
  }
}

/** Where a credential goes: a header (its name, and the format around the value, are written in the request head) or a query parameter (encoded). */
function placement(o: Obj, at: string, f: Findings): void {
  const format = asStr(o.format)
  if (format !== null && !format.includes('{value}')) f.error(child(at, 'format'), 'must contain {value}')
  if (o.header !== undefined && o.queryParam !== undefined) f.error(child(at, 'queryParam'), 'set header or queryParam, not both')
  headerName(o.header, child(at, 'header'), f)
  const header = asStr(o.header)
  if (header !== null && isGatewayField(header)) f.error(child(at, 'header'), `${show(header)} is the gateway's to set (framing, connection or the upstream's Host): a credential there would never be sent`)
  if (format !== null && o.queryParam === undefined) {
    const problem = headerValueProblem(format)
    if (problem !== null) f.error(child(at, 'format'), problem)
  }
}

function headerName(v: unknown, at: string, f: Findings): void {
  const name = asStr(v)
  const problem = name === null ? null : headerNameProblem(name)
  if (problem !== null) f.error(at, problem)
}

/** An AWS region or service: a part of the credential scope in the Authorization header. */
function awsScopePart(o: Obj, at: string, name: string, f: Findings): void {
  const v = asStr(o[name])
  if (v !== null && !/^[A-Za-z0-9._-]+$/.test(v)) f.error(child(at, name), `${show(v)} is not an AWS region or service name (letters, digits, '.', '_' and '-')`)
}

function regex(v: unknown, at: string, f: Findings): void {
  const o = asObj(v)
  const source = o === null ? asStr(v) : asStr(o.regex)
  if (o === null && source !== null && PATTERNS.includes(source)) return
  if (source === null) { f.error(at, `must be one of ${PATTERNS.join(', ')} or { regex, flags }`); return }
  if (o === null) { f.error(at, `unknown pattern ${show(source)}; expected one of ${PATTERNS.join(', ')} or { regex, flags }`); return }
  try { new RegExp(source, asStr(o.flags) ?? '') } catch (err) { f.error(child(at, 'regex'), `not a valid regular expression: ${(err as Error).message}`) }
}

function selectors(v: unknown, at: string, f: Findings): void {
  const list = Array.isArray(v) ? v : v === undefined ? [] : [v]
  list.forEach((s, i) => {
    const p = Array.isArray(v) ? item(at, i) : at
    if (typeof s !== 'string' || !s.startsWith('$')) f.error(p, `must be a JSON selector starting with $ ($.a.b, $.a[*].b, $..b), got ${show(s)}`)
  })
}

function limitBlock(o: Obj, at: string, amount: 'requests' | 'tokens', extra: readonly string[], f: Findings): void {
  known(o, at, [amount, 'unit', 'burst', 'key', 'global', 'failureMode', 'cost', 'name', 'match', ...extra], f)
  if (amount === 'requests') {
    wholeCount(o, at, 'requests', f)
    wholeCount(o, at, 'burst', f)
  } else {
    positive(o, at, amount, f)
    positive(o, at, 'burst', f)
  }
  positive(o, at, 'cost', f)
  oneOf(o, at, 'unit', UNITS, f)
  oneOf(o, at, 'failureMode', ['open', 'closed'], f)
  asArr(o.key).forEach((k, i) => {
    const h = asObj(k)
    if (typeof k === 'string' ? !KEY_PARTS.includes(k) : h === null || typeof h.header !== 'string') {
      f.error(item(child(at, 'key'), i), `must be one of ${KEY_PARTS.join(', ')} or { header: name }, got ${show(k)}`)
    } else if (h !== null) {
      headerName(h.header, child(item(child(at, 'key'), i), 'header'), f)
    }
  })
  matchBlock(o.match, child(at, 'match'), f)
  globalBlock(o.global, child(at, 'global'), f)
}

/**
 * A rate-limit `match` (extensions/rate-limit.ts compileMatch): a value that
 * does not compile, or a range that does not parse, would fail or never match
 * every request, so it is an error here.
 */
/**
 * Rule names (a rule's `name`, else `<extension>-<index>`, as
 * extensions/rate-limit.ts names them) key the buckets: two rules of one name
 * would count in one bucket, each taking its tokens there.
 */
function duplicateRuleNames(rules: readonly unknown[], extension: string, at: string, f: Findings): void {
  const seen = new Map<string, number>()
  rules.forEach((r, i) => {
    const name = asStr(asObj(r)?.name) ?? `${extension}-${i}`
    const first = seen.get(name)
    if (first === undefined) seen.set(name, i)
    else f.error(child(item(at, i), 'name'), `"${name}" is the name of rules[${first}] too: each rule counts in buckets of its own name`)
  })
}

function matchBlock(v: unknown, at: string, f: Findings): void {
  if (v === undefined) return
  const m = asObj(v)
  if (m === null) { f.error(at, 'must be an object { headers, sourceCIDR }'); return }
  known(m, at, ['headers', 'sourceCIDR'], f)
  asArr(m.headers).forEach((h, i) => {
    const o = asObj(h)
    const p = item(child(at, 'headers'), i)
    if (o === null || typeof o.name !== 'string' || o.name === '') { f.error(child(p, 'name'), 'required: the header name'); return }
    known(o, p, ['name', 'value', 'type', 'invert'], f)
    if (o.invert !== undefined && typeof o.invert !== 'boolean') f.error(child(p, 'invert'), `must be true or false, got ${show(o.invert)}`)
    headerName(o.name, child(p, 'name'), f)
    oneOf(o, p, 'type', ['Exact', 'RegularExpression'], f)
    const value = asStr(o.value)
    const problem = o.type === 'RegularExpression' && value !== null ? wholeRegexProblem(value) : null
    if (problem !== null) f.error(child(p, 'value'), problem)
  })
  if (m.sourceCIDR !== undefined) {
    const cidr = asStr(m.sourceCIDR)
    const problem = cidr === null ? 'must be a CIDR string' : cidrProblem(cidr)
    if (problem !== null) f.error(child(at, 'sourceCIDR'), problem)
  }
}

function payloadRules(v: unknown, at: string, f: Findings): void {
  const b = asObj(v)
  if (b === null) { f.error(at, 'must be an object { redact, deny }'); return }
  known(b, at, ['redact', 'deny'], f)
  const r = asObj(b.redact)
  if (r !== null) {
    known(r, child(at, 'redact'), ['fields', 'patterns', 'scope', 'replacement'], f)
    selectors(r.fields, child(at, 'redact.fields'), f)
    selectors(r.scope, child(at, 'redact.scope'), f)
    asArr(r.patterns).forEach((p, i) => regex(p, item(child(at, 'redact.patterns'), i), f))
  }
  const deny = Array.isArray(b.deny) ? b.deny : b.deny === undefined ? [] : [b.deny]
  deny.forEach((d, i) => {
    const o = asObj(d)
    const p = item(child(at, 'deny'), i)
    if (o === null) return f.error(p, 'must be an object { pattern(s), field(s), reason }')
    known(o, p, ['pattern', 'patterns', 'field', 'fields', 'reason'], f)
    if (o.pattern === undefined && o.patterns === undefined) f.error(child(p, 'pattern'), 'required')
    const pats = o.patterns ?? o.pattern
    ;(Array.isArray(pats) ? pats : [pats]).forEach((x, j) => regex(x, Array.isArray(pats) ? item(child(p, 'patterns'), j) : child(p, 'pattern'), f))
    selectors(o.fields ?? o.field, child(p, o.fields !== undefined ? 'fields' : 'field'), f)
  })
}

/** One extension item's `config` (or `rawConfig`), by its type. */
export function checkExtensionConfig(ext: Obj, at: string, f: Findings): void {
  const typeText = asStr(ext.type)
  if (typeText === null) return
  const canonical = canonicalType(typeText)
  // Not a built-in (the egress proposal's examples name others): nothing to check here; it fails per failOpen when it runs.
  if (canonical === null) return
  const field = ext.rawConfig !== undefined ? 'rawConfig' : 'config'
  const config = asObj(ext[field]) ?? {}
  const c = child(at, field)
  const type = effectiveType(canonical, config)
  const common = ['maxBodyBytes']
  positive(config, c, 'maxBodyBytes', f)
  switch (type) {
    case ExtensionType.CREDENTIAL_INJECTOR:
      known(config, c, ['secretRef', ...PLACEMENT, ...common], f)
      required(config, c, ['secretRef'], f)
      secretRef(config, c, [], f)
      placement(config, c, f)
      break
    case ExtensionType.OAUTH2: {
      const nested = asObj(config.oauth2)
      const o = nested ?? config
      const oc = nested === null ? c : child(c, 'oauth2')
      const fields = ['tokenUrl', 'secretRef', 'scopes', 'scope', 'audience', 'authStyle', 'refreshBeforeSeconds', 'timeoutMs', ...PLACEMENT]
      known(config, c, nested === null ? [...fields, ...common] : ['oauth2', ...PLACEMENT, ...common], f)
      if (nested !== null) known(nested, oc, fields, f)
      required(o, oc, ['tokenUrl', 'secretRef'], f)
      url(o, oc, 'tokenUrl', ': put them in the Secret named by secretRef (client_id, client_secret)', f)
      secretRef(o, oc, ['clientIdKey', 'clientSecretKey'], f)
      oneOf(o, oc, 'authStyle', ['basic', 'header', 'body'], f)
      positive(o, oc, 'refreshBeforeSeconds', f)
      positive(o, oc, 'timeoutMs', f)
      placement(config, c, f)
      break
    }
    case ExtensionType.AWS_SIGV4: {
      const nested = asObj(config.awsSigV4)
      const o = nested ?? config
      const oc = nested === null ? c : child(c, 'awsSigV4')
      const fields = ['service', 'region', 'secretRef', 'payload']
      known(config, c, nested === null ? [...fields, ...common] : ['awsSigV4', ...common], f)
      if (nested !== null) known(nested, oc, fields, f)
      required(o, oc, ['service', 'region', 'secretRef'], f)
      secretRef(o, oc, ['accessKeyIdKey', 'secretAccessKeyKey', 'sessionTokenKey'], f)
      oneOf(o, oc, 'payload', ['signed', 'unsigned'], f)
      awsScopePart(o, oc, 'region', f)
      awsScopePart(o, oc, 'service', f)
      break
    }
    case ExtensionType.RATE_LIMIT:
      if (Array.isArray(config.rules)) {
        known(config, c, ['rules', 'global', 'failureMode', 'responseHeaders'], f)
        globalBlock(config.global, child(c, 'global'), f)
        oneOf(config, c, 'failureMode', ['open', 'closed'], f)
        config.rules.forEach((r, i) => { const o = asObj(r); if (o !== null) { limitBlock(o, item(child(c, 'rules'), i), 'requests', [], f); required(o, item(child(c, 'rules'), i), ['requests'], f) } })
        duplicateRuleNames(config.rules, asStr(ext.name) ?? '', child(c, 'rules'), f)
      } else {
        limitBlock(config, c, 'requests', ['responseHeaders', ...common], f)
        required(config, c, ['requests'], f)
      }
      break
    case ExtensionType.AI_USAGE: {
      known(config, c, ['budget', ...common], f)
      const b = asObj(config.budget)
      if (b !== null) { limitBlock(b, child(c, 'budget'), 'tokens', [], f); required(b, child(c, 'budget'), ['tokens'], f) }
      break
    }
    case ExtensionType.PAYLOAD_PROCESSOR:
      known(config, c, ['request', 'response', ...common], f)
      if (config.request === undefined && config.response === undefined) f.error(child(c, 'request'), 'set request or response (or both)')
      if (config.request !== undefined) payloadRules(config.request, child(c, 'request'), f)
      if (config.response !== undefined) payloadRules(config.response, child(c, 'response'), f)
      break
    case ExtensionType.EXTERNAL_PROCESSOR:
      known(config, c, ['url', 'timeoutMs', 'phases', ...common], f)
      required(config, c, ['url'], f)
      url(config, c, 'url', ', and fetch refuses such a URL (an ExternalProcessor takes no credentials)', f)
      positive(config, c, 'timeoutMs', f)
      asArr(config.phases).forEach((p, i) => { if (!(PHASES as readonly unknown[]).includes(p)) f.error(item(child(c, 'phases'), i), `must be one of ${PHASES.join(', ')}, got ${show(p)}`) })
      break
    case ExtensionType.PLUGIN:
      known(config, c, ['path', 'options', 'secretRef', ...common], f)
      required(config, c, ['path'], f)
      secretRef(config, c, [], f)
      break
    case ExtensionType.AUTHORIZATION:
      known(config, c, ['allow', 'allowUnidentified'], f)
      required(config, c, ['allow'], f)
      asArr(config.allow).forEach((a, i) => {
        const o = asObj(a)
        const p = item(child(c, 'allow'), i)
        if (o === null) return f.error(p, 'must be an object { namespace, serviceAccount, spiffeId }')
        known(o, p, ['namespace', 'serviceAccount', 'spiffeId'], f)
        if (typeof o.spiffeId === 'string' && !o.spiffeId.startsWith('spiffe://') && o.spiffeId !== '*') f.error(child(p, 'spiffeId'), 'must start with spiffe://')
      })
      break
  }
}
