// Human and JSON renderings of a compiled table. Key material never appears:
// printTable shows none, dumpTable replaces it with '[redacted]'.

import type { Status } from './status.ts'
import type { Cluster, HostIndex, L4Route, PrefixNode, RouteMatch, RouteTable, VirtualHost, WeightedCluster } from './table.ts'

const REDACTED = '[redacted]'

function describeMatch(m: RouteMatch): string {
  const parts = [`${m.path.type} ${m.path.value}`]
  if (m.method !== null) parts.push(`method=${m.method}`)
  for (const h of m.headers ?? []) parts.push(`header ${h.name}${h.exact !== null ? `=${h.exact}` : `~${h.regex?.source}`}`)
  for (const q of m.query ?? []) parts.push(`query ${q.name}${q.exact !== null ? `=${q.exact}` : `~${q.regex?.source}`}`)
  return parts.join(' ')
}

function describeBackends(list: readonly WeightedCluster[] | null, total: number): string {
  if (list === null) return ''
  if (list.length === 0) return '(no backends)'
  return list.map(b => `${b.cluster ?? '<unresolved: 500>'} w=${b.weight}${total > 0 ? ` (${Math.round(b.weight * 1000 / total) / 10}%)` : ''}${b.priority > 0 ? ` p=${b.priority}` : ''}`).join(', ')
}

/** All matches of a vhost in rank order. */
export function vhostMatches(v: VirtualHost): RouteMatch[] {
  const all: RouteMatch[] = []
  for (const list of v.exactPaths.values()) all.push(...list)
  const walk = (n: PrefixNode): void => { all.push(...n.matches); for (const c of n.children.values()) walk(c) }
  walk(v.prefixes)
  all.push(...v.regexes)
  return all.sort((a, b) => a.rank - b.rank)
}

function printHosts(out: string[], index: HostIndex): void {
  const vhosts = [...index.exact.values(), ...index.wildcards.map(w => w.value), ...(index.fallback === null ? [] : [index.fallback])]
  for (const v of vhosts) {
    out.push(`    host ${v.hostname}`)
    for (const m of vhostMatches(v)) {
      const r = m.rule
      let action: string
      if (r.direct !== null) action = `direct ${r.direct.status} ${r.direct.code}`
      else if (r.redirect !== null) action = `redirect ${r.redirect.statusCode}${r.redirect.hostname !== null ? ` host=${r.redirect.hostname}` : ''}`
      else action = describeBackends(r.backends, r.totalWeight)
      out.push(`      #${m.rank} ${describeMatch(m)} → ${r.id} → ${action}`)
    }
  }
}

function printL4(r: L4Route): string {
  return `${r.route.kind} ${r.route.namespace}/${r.route.name} → ${describeBackends(r.backends, r.totalWeight)}`
}

function tlsSummary(c: Cluster): string {
  if (c.tls === null) return 'plaintext'
  const t = c.tls
  return [
    `tls sni=${t.servername ?? '-'}`,
    t.caPem !== null ? 'ca=pinned' : 'ca=system',
    t.certPem !== null ? 'client-cert' : '',
    t.insecureSkipVerify ? 'INSECURE-SKIP-VERIFY' : '',
    `id=${t.identityHash.slice(0, 12)}`,
  ].filter(s => s !== '').join(' ')
}

export function printTable(table: RouteTable, status: Status): string {
  const out: string[] = [`route table v${table.version} (class ${table.gatewayClass})`]
  for (const p of table.ports.values()) {
    out.push(`port ${p.port} ${p.protocol}`)
    for (const l of p.listeners) out.push(`  listener ${l.gateway}/${l.name} host=${l.hostname ?? '*'}`)
    if (p.serverTls !== null) {
      const names = [...p.serverTls.exact.keys(), ...p.serverTls.wildcards.map(w => `*${w.suffix}`), ...(p.serverTls.fallback !== null ? ['(default)'] : [])]
      out.push(`  tls certs: ${names.join(', ')}${p.serverTls.clientValidation !== null ? ' +client-validation' : ''}`)
    }
    if (p.http !== null) printHosts(out, p.http)
    if (p.tcp !== null) out.push(`    tcp ${printL4(p.tcp)}`)
    if (p.sni !== null) {
      for (const [name, r] of p.sni.exact) out.push(`    sni ${name} ${printL4(r)}`)
      for (const w of p.sni.wildcards) out.push(`    sni *${w.suffix} ${printL4(w.value)}`)
      if (p.sni.fallback !== null) out.push(`    sni * ${printL4(p.sni.fallback)}`)
    }
  }
  out.push('clusters')
  for (const c of table.clusters.values()) {
    out.push(`  ${c.id} ${c.protocol} ${tlsSummary(c)}${c.hostname !== null ? ` host=${c.hostname}` : ''}`)
    for (const e of c.endpoints) out.push(`    ${e.kind} ${e.host}${e.kind === 'unix' ? '' : `:${e.port}`}${e.zone !== null ? ` zone=${e.zone}` : ''}`)
  }
  // --publish-service: each served Gateway's status.addresses.
  const addressed = [...status.objects.values()].filter(o => o.kind === 'Gateway' && o.addresses !== undefined)
  if (addressed.length > 0) {
    out.push('addresses')
    for (const o of addressed) out.push(`  Gateway ${o.namespace}/${o.name}: ${o.addresses?.length === 0 ? '(none)' : (o.addresses ?? []).map(a => a.value).join(', ')}`)
  }
  const problems = [...status.objects.values()].flatMap(o =>
    [...o.conditions, ...o.parents.flatMap(p => p.conditions), ...o.listeners.flatMap(l => l.conditions)]
      .filter(c => (c.status === 'False' && c.type !== 'Conflicted' && c.type !== 'PartiallyInvalid') || (c.status === 'True' && (c.type === 'Conflicted' || c.type === 'PartiallyInvalid' || c.type === 'Overridden')))
      .map(c => `  ${o.kind} ${o.namespace === '' ? '' : o.namespace + '/'}${o.name}: ${c.type}=${c.status} ${c.reason}${c.message !== '' ? `: ${c.message}` : ''}`))
  if (problems.length > 0) out.push('status', ...[...new Set(problems)])
  return out.join('\n') + '\n'
}

/** JSON-able form for /config_dump and goldens: Maps become objects, RegExps their source, keys redacted. */
export function dumpTable(table: RouteTable): unknown {
  return toJson(table, new Map())
}

/** A URL with a query, in any text: scheme://authority/path?query. */
const URL_WITH_QUERY = /\b([a-z][a-z0-9+.-]*:\/\/[^\s?#"]*)\?([^\s#"]*)/gi

/**
 * Query values of the URLs in a string, redacted: services take API keys in
 * query strings (`?key=`, `?token=`), and extension configs hold their URLs.
 * Parameter names stay (which parameters a URL carries is worth seeing).
 */
function redactQueries(text: string): string {
  if (!text.includes('?')) return text
  return text.replace(URL_WITH_QUERY, (_all, base: string, query: string) =>
    `${base}?${query.split('&').map((p) => { const eq = p.indexOf('='); return eq === -1 ? p : `${p.slice(0, eq)}=${REDACTED}` }).join('&')}`)
}

function toJson(value: unknown, seen: Map<object, unknown>): unknown {
  if (typeof value === 'string') return redactQueries(value)
  if (value === null || typeof value !== 'object') return value
  if (value instanceof RegExp) return value.source
  const done = seen.get(value)
  if (done !== undefined) return done
  if (value instanceof Map) {
    const out: Record<string, unknown> = {}
    seen.set(value, out)
    for (const [k, v] of value) out[String(k)] = toJson(v, seen)
    return out
  }
  if (Array.isArray(value)) return value.map(v => toJson(v, seen))
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) {
    // keyPem: TLS keys; secrets: extension Secret data (issue 7: credentials never in dumps); authorization: upstream proxy credentials (issue 9).
    out[k] = (k === 'keyPem' || k === 'secrets' || k === 'authorization') && v !== null ? redactSecrets(k, v) : toJson(v, seen)
  }
  return out
}

/** Secret values become '[redacted]'; the Secret keys stay visible (which keys were resolved). */
function redactSecrets(k: string, v: unknown): unknown {
  if (k === 'keyPem' || k === 'authorization' || v === null || typeof v !== 'object') return REDACTED
  const out: Record<string, Record<string, string>> = {}
  for (const [path, data] of Object.entries(v as Record<string, Record<string, string>>)) {
    out[path] = Object.fromEntries(Object.keys(data).map(key => [key, REDACTED]))
  }
  return out
}

/** Status as JSON-able data (Maps to objects). */
export function dumpStatus(status: Status): unknown {
  return Object.fromEntries(status.objects)
}
