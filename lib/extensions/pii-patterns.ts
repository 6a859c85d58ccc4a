// Built-in patterns for payload redaction and guardrails. Card numbers are
// confirmed with the Luhn checksum (ISO/IEC 7812-1) so order ids and phone
// numbers of the same length are not mistaken for them.

export interface Pattern {
  readonly name: string
  /** Global regex; compiled once. */
  readonly regex: RegExp
  /** Extra check of a match (Luhn for cards); null: every match counts. */
  readonly confirm: ((match: string) => boolean) | null
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

export const BUILTIN_PATTERNS: Readonly<Record<string, Pattern>> = {
  card: { name: 'card', regex: /\b\d(?:[ -]?\d){12,18}\b/g, confirm: m => luhn(m.replace(/[ -]/g, '')) },
  email: { name: 'email', regex: /[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}/g, confirm: null },
  ssn: { name: 'ssn', regex: /\b\d{3}-\d{2}-\d{4}\b/g, confirm: null },
  // Not inside a longer digit run (a card or an id): no digit group right before or after.
  phone: { name: 'phone', regex: /(?<![\d][ .-]?)(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)|\b\d{2,4})[ .-]?\d{3,4}[ .-]?\d{3,4}\b(?![ .-]?\d)/g, confirm: m => m.replace(/\D/g, '').length >= 9 },
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
    out = out.replace(p.regex, m => p.confirm === null || p.confirm(m) ? replacement : m)
  }
  return out
}

export function findMatch(text: string, p: Pattern): boolean {
  p.regex.lastIndex = 0
  for (const m of text.matchAll(p.regex)) if (p.confirm === null || p.confirm(m[0])) return true
  return false
}
