// Result records and how they print: every comparison is one line,
//   h1 small: sallyport 12345 rps vs nginx-proxy 23456 rps → 0.53x (target >= 0.25)
// and the same records go to bench/results/<timestamp>.json.

export interface Comparison {
  readonly scenario: string
  readonly metric: string
  readonly unit: string
  readonly subject: string
  readonly subjectValue: number
  readonly baseline: string
  readonly baselineValue: number
  /** subject / baseline (or the difference, for `kind: 'delta'`). */
  readonly ratio: number
  readonly kind: 'ratio' | 'delta'
  /** Human text of the target, e.g. '>= 0.25'; null = informational. */
  readonly target: string | null
  /** null when there is no target or it could not be judged. */
  readonly met: boolean | null
}

export interface Note {
  readonly scenario: string
  readonly text: string
}

function fmt(v: number, unit: string): string {
  if (!Number.isFinite(v)) return 'n/a'
  if (unit === 'rps') return String(Math.round(v))
  if (unit === 'ms') return v.toFixed(3)
  if (unit === 'MiB') return v.toFixed(1)
  if (unit === 'MiB/s') return v.toFixed(1)
  return v.toFixed(2)
}

export function ratioOf(subject: number, baseline: number): number {
  return baseline > 0 && Number.isFinite(subject) && Number.isFinite(baseline) ? subject / baseline : NaN
}

export function compare(
  scenario: string, metric: string, unit: string,
  subject: string, subjectValue: number, baseline: string, baselineValue: number,
  target: { readonly min?: number; readonly max?: number } | null,
): Comparison {
  const ratio = ratioOf(subjectValue, baselineValue)
  let met: boolean | null = null
  let text: string | null = null
  if (target !== null && Number.isFinite(ratio)) {
    if (target.min !== undefined) { met = ratio >= target.min; text = `>= ${target.min}` }
    if (target.max !== undefined) { met = ratio <= target.max; text = `<= ${target.max}` }
  } else if (target !== null) {
    text = target.min !== undefined ? `>= ${target.min}` : `<= ${target.max}`
  }
  return { scenario, metric, unit, subject, subjectValue, baseline, baselineValue, ratio, kind: 'ratio', target: text, met }
}

/** An absolute check: subjectValue − baselineValue compared against a bound (e.g. added p99 latency < 1 ms). */
export function delta(
  scenario: string, metric: string, unit: string,
  subject: string, subjectValue: number, baseline: string, baselineValue: number, maxDelta: number | null,
): Comparison {
  const d = subjectValue - baselineValue
  const met = maxDelta === null || !Number.isFinite(d) ? null : d < maxDelta
  return {
    scenario, metric, unit, subject, subjectValue, baseline, baselineValue, ratio: d, kind: 'delta',
    target: maxDelta === null ? null : `< ${maxDelta} ${unit}`, met,
  }
}

export function formatComparison(c: Comparison): string {
  const verdict = c.met === null ? '' : c.met ? ' ok' : ' MISSED'
  if (c.kind === 'delta') {
    const sign = c.ratio >= 0 ? '+' : ''
    const target = c.target === null ? '' : ` (target ${c.target})`
    return `${c.scenario} ${c.metric}: ${c.subject} ${fmt(c.subjectValue, c.unit)} ${c.unit} vs ${c.baseline} ${fmt(c.baselineValue, c.unit)} ${c.unit} → ${sign}${fmt(c.ratio, c.unit)} ${c.unit}${target}${verdict}`
  }
  const target = c.target === null ? '' : ` (target ${c.target})`
  const r = Number.isFinite(c.ratio) ? `${c.ratio.toFixed(3)}x` : 'n/a'
  return `${c.scenario} ${c.metric}: ${c.subject} ${fmt(c.subjectValue, c.unit)} ${c.unit} vs ${c.baseline} ${fmt(c.baselineValue, c.unit)} ${c.unit} → ${r}${target}${verdict}`
}

/** A fixed-width table of raw measurements: one row per (scenario, target). */
export interface Row {
  readonly scenario: string
  readonly target: string
  readonly rps: number
  readonly MiBps: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly errors: number
  readonly extra: string
}

export function formatTable(rows: readonly Row[]): string {
  const head = ['scenario', 'target', 'req/s', 'MiB/s', 'p50 ms', 'p99 ms', 'errors', 'notes']
  const body = rows.map((r) => [
    r.scenario, r.target, fmt(r.rps, 'rps'), fmt(r.MiBps, 'MiB/s'), fmt(r.p50Ms, 'ms'), fmt(r.p99Ms, 'ms'), String(r.errors), r.extra,
  ])
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)))
  const line = (cells: readonly string[]): string => cells.map((c, i) => (i >= 2 && i <= 6 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join('  ').trimEnd()
  return [line(head), line(widths.map((w) => '-'.repeat(w))), ...body.map(line)].join('\n')
}
