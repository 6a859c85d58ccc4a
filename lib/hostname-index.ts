// Hostname → value lookup, the one Gateway API rule every name-keyed table of a
// port follows: the exact name, else the longest wildcard covering it, else
// the entry without hostname. Virtual hosts (lib/router/match.ts), server
// certificates (lib/listeners/tls-contexts.ts), TLSRoutes by SNI
// (lib/listeners/tls-passthrough.ts), the listener a name selects
// (lib/router/misdirected.ts, lib/observe/serving-listener.ts): compile builds
// the tables, the data path and observe/ look names up, so both live here,
// below every layer. A wildcard `*.example.com` covers one or more labels in
// place of the `*` (a.example.com, a.b.example.com), never example.com itself.

/**
 * A fully qualified name's one trailing dot dropped (`api.example.com.`, how
 * workloads skip the search domains under ndots:5, is api.example.com), as
 * nginx and Envoy's strip_trailing_host_dot do: SNI, allow-list entries (the
 * Host's own form, with its port, is router/headers.ts hostOf).
 */
export function withoutTrailingDot(name: string): string {
  return name.length > 0 && name.charCodeAt(name.length - 1) === 46 /* '.' */ ? name.slice(0, -1) : name
}

/** The pattern of an entry that takes any hostname (compile/hostnames.ts ANY_HOST). Never a valid hostname itself. */
export const ANY_HOST = '*'

export interface HostnameWildcard<T> {
  /** '.example.com' for '*.example.com': the leading dot included. */
  readonly suffix: string
  readonly value: T
}

export interface HostnameIndex<T> {
  /** Lowercased exact hostnames. */
  readonly exact: ReadonlyMap<string, T>
  /** Wildcard hostnames, longest suffix first. */
  readonly wildcards: ReadonlyArray<HostnameWildcard<T>>
  /** The entry without hostname; null if none. */
  readonly fallback: T | null
}

// hot path
/**
 * The value `name` (lowercased, without port) selects: exact, the longest
 * wildcard, the fallback; null for none.
 *
 * Every kind of index comes through here, and V8 keeps a property load fast
 * only while it sees at most four object shapes. There are four: HostIndex,
 * ServerTls, SniIndex and this builder's plain object (ListenerNames,
 * servingListener's), all frozen, as are their Maps, arrays and wildcard
 * entries. Measured in one process running all five lookups: leaving
 * servingListener's index unfrozen (a fifth shape) made findVirtualHost and
 * selectCert 15-30% slower; leaving only its inner objects unfrozen, 10%.
 */
export function lookupHostname<T>(index: HostnameIndex<T>, name: string): T | null {
  const exact = index.exact.get(name)
  if (exact !== undefined) return exact
  const wildcards = index.wildcards
  for (let i = 0; i < wildcards.length; i++) {
    const w = wildcards[i]
    if (name.length > w.suffix.length && name.endsWith(w.suffix)) return w.value
  }
  return index.fallback
}

/**
 * The index of `entries`, each a lowercased pattern and its value: ANY_HOST
 * is the fallback, `*.example.com` a wildcard, anything else an exact name.
 * The first entry of a pattern keeps it. Wildcards are sorted longest suffix
 * first; equal lengths keep their order in `entries` (no name is covered by
 * two suffixes of one length, so that order only shows in dumps and in
 * tls-contexts.ts defaultCert).
 */
export function buildHostnameIndex<T>(entries: Iterable<readonly [pattern: string, value: T]>): HostnameIndex<T> {
  const exact = new Map<string, T>()
  const wildcards: Array<HostnameWildcard<T>> = []
  const seenSuffixes = new Set<string>()
  let fallback: T | null = null
  let hasFallback = false
  for (const [pattern, value] of entries) {
    if (pattern === ANY_HOST) {
      if (!hasFallback) { fallback = value; hasFallback = true }
    } else if (pattern.startsWith('*.')) {
      const suffix = pattern.slice(1)
      if (!seenSuffixes.has(suffix)) { seenSuffixes.add(suffix); wildcards.push({ suffix, value }) }
    } else if (!exact.has(pattern)) {
      exact.set(pattern, value)
    }
  }
  wildcards.sort((a, b) => b.suffix.length - a.suffix.length)
  return { exact, wildcards, fallback }
}
