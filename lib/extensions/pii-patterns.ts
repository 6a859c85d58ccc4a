// Built-in patterns for payload redaction and guardrails. Card numbers are
// confirmed with the Luhn checksum (ISO/IEC 7812-1) so order ids and phone
// numbers of the same length are not mistaken for them.

export interface Pattern {
  readonly name: string
  /** Global regex; compiled once. */
  readonly regex: RegExp
  /**
   * Extra check of a match (at `offset` in `text`): the parts of it that count,
   * as [start, end) spans in order ([] for none: Luhn for cards, within the run
   * of digit groups the regex took); null: every match counts whole.
   */
  readonly confirm: ((match: string, offset: number, text: string) => ReadonlyArray<readonly [number, number]>) | null
}

export function luhn(digits: string): boolean {
  let sum = 0
  let double = false
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48
    if (d < 0 || d > 9) return false
    if (double) { d *= 2; if (d > 9) d -= 9 }
    sum += d
    double = !double
  }
  return digits.length >= 12 && sum % 10 === 0
}

function isDigit(c: number): boolean { return c >= 48 && c <= 57 }

function isWordChar(c: number): boolean {
  return isDigit(c) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95
}

/**
 * The cards in a run of digit groups (`4111 1111 1111 1111 123`: a card and its
 * CVV; `12 34 4111 1111 1111 1111`): from each group on, the longest span of
 * whole groups of 13 to 19 digits that passes Luhn, then on after it. A run
 * without separators is one group, read whole; a span that ends the run must
 * not run into a word (`\b`). The regex takes whole runs and never backtracks,
 * and each group is tried over at most 19 digits: linear in the text.
 */
function cardsIn(m: string, offset: number, text: string): Array<readonly [number, number]> {
  const starts: number[] = []
  const ends: number[] = []
  for (let i = 0; i < m.length; i++) {
    if (!isDigit(m.charCodeAt(i))) continue
    if (i === 0 || !isDigit(m.charCodeAt(i - 1))) starts.push(i)
    if (i === m.length - 1 || !isDigit(m.charCodeAt(i + 1))) ends.push(i + 1)
  }
  const found: Array<readonly [number, number]> = []
  if (m.length < 13) return found
  for (let a = 0; a < starts.length;) {
    // Luhn as the span grows, one digit at a time: `plain` is the sum with the last digit
    // undoubled (the check), `doubled` with it doubled; a new digit shifts the others' parity.
    let plain = 0
    let doubled = 0
    let count = 0
    let last = -1
    for (let b = a; b < ends.length && count <= 19; b++) {
      for (let i = starts[b] as number; i < (ends[b] as number) && count <= 19; i++) {
        const d = m.charCodeAt(i) - 48
        const next = doubled + d
        doubled = plain + (d < 5 ? 2 * d : 2 * d - 9)
        plain = next
        count++
      }
      if (count > 19) break
      if (count >= 13 && plain % 10 === 0 && (b < ends.length - 1 || !isWordChar(text.charCodeAt(offset + m.length)))) last = b
    }
    if (last === -1) { a++; continue }
    found.push([starts[a] as number, ends[last] as number])
    a = last + 1
  }
  return found
}

export const BUILTIN_PATTERNS: Readonly<Record<string, Pattern>> = {
  card: { name: 'card', regex: /\b\d(?:[ -]?\d)*/g, confirm: cardsIn },
  email: { name: 'email', regex: /[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}/g, confirm: null },
  ssn: { name: 'ssn', regex: /\b\d{3}-\d{2}-\d{4}\b/g, confirm: null },
  // Not inside a longer digit run (a card or an id): no digit group right before or after.
  phone: { name: 'phone', regex: /(?<![\d][ .-]?)(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)|\b\d{2,4})[ .-]?\d{3,4}[ .-]?\d{3,4}\b(?![ .-]?\d)/g, confirm: m => m.replace(/\D/g, '').length >= 9 ? [[0, m.length]] : [] },
}

/** A built-in name (`email`) or a regular expression (`regex: ...` objects or plain strings that are not built-in names). */
export function compilePattern(p: unknown): Pattern {
  if (typeof p === 'string') {
    const builtin = BUILTIN_PATTERNS[p]
    if (builtin !== undefined) return builtin
    return { name: 'regex', regex: new RegExp(p, 'g'), confirm: null }
  }
  if (p !== null && typeof p === 'object' && typeof (p as { regex?: unknown }).regex === 'string') {
    const o = p as { regex: string; flags?: string; name?: string }
    const flags = (o.flags ?? '').replace(/g/g, '') + 'g'
    return { name: o.name ?? 'regex', regex: new RegExp(o.regex, flags), confirm: null }
  }
  throw new Error('a pattern is a built-in name (email, phone, card, ssn) or { regex }')
}

/** Replaces every confirmed match; returns the input itself when nothing matched. */
export function redactText(text: string, patterns: readonly Pattern[], replacement: string): string {
  let out = text
  for (const p of patterns) {
    p.regex.lastIndex = 0
    out = out.replace(p.regex, (m: string, ...rest: unknown[]) => {
      if (p.confirm === null) return replacement
      // After the captures: the offset (the first number), then the text.
      const pos = rest.findIndex(x => typeof x === 'number')
      const spans = p.confirm(m, rest[pos] as number, rest[pos + 1] as string)
      if (spans.length === 0) return m
      let kept = ''
      let at = 0
      for (const [start, end] of spans) {
        kept += m.slice(at, start) + replacement
        at = end
      }
      return kept + m.slice(at)
    })
  }
  return out
}

export function findMatch(text: string, p: Pattern): boolean {
  p.regex.lastIndex = 0
  for (const m of text.matchAll(p.regex)) if (p.confirm === null || p.confirm(m[0], m.index, text).length > 0) return true
  return false
}
