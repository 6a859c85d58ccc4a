// Durations as manifests write them. Gateway API's Duration (GEP-2257) is a
// subset of Go's time.ParseDuration: `^([0-9]{1,5}(h|m|s|ms)){1,4}$`, e.g. "1h",
// "10s", "500ms", "1h30m". Envoy Gateway fields are metav1.Duration, which
// accepts the full Go syntax ("1.5s", "100us", "0"). We accept the Go syntax
// (a superset) so one parser serves both; validate/ enforces the stricter
// Gateway API pattern where a schema asks for it.

const UNIT_MS: Readonly<Record<string, number>> = {
  h: 3_600_000,
  m: 60_000,
  s: 1000,
  ms: 1,
  us: 0.001,
  'µs': 0.001,
  'μs': 0.001,
  ns: 0.000001,
}

// One "<number><unit>" component; the units are tried longest first so that
// "ms" is not read as "m" followed by garbage.
const COMPONENT = /^(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|μs|ns|h|m|s)/

/** Gateway API duration ("1h", "10s", "500ms", "1h30m"...) to milliseconds; null if malformed. */
export function parseDuration(text: string): number | null {
  if (typeof text !== 'string') return null
  const s = text.trim()
  if (s === '') return null
  // Go accepts a bare "0" (and only zero) without a unit.
  if (s === '0') return 0
  let rest = s
  let total = 0
  while (rest.length > 0) {
    const m = COMPONENT.exec(rest)
    if (m === null) return null
    total += Number(m[1]) * (UNIT_MS[m[2] as string] as number)
    rest = rest.slice(m[0].length)
  }
  return Number.isFinite(total) ? total : null
}
