// What the rules collect while looking at one document: field path, message,
// severity. validate.ts turns them into ConfigProblems (adding source, kind and
// object identity), so rules stay small and never repeat who they are about.

export interface Finding {
  /** Dotted path from the object root with [i] indexes; '' for the whole object. */
  readonly field: string
  readonly message: string
  readonly severity: 'error' | 'warning'
  /**
   * On an error that invalidates one rule of an HTTPRoute or GRPCRoute and
   * nothing else: that rule's index in spec.rules. The rule is dropped and the
   * route keeps the others (Gateway API RouteConditionPartiallyInvalid).
   * Absent: the error is the whole object's.
   */
  readonly rule?: number
}

export class Findings {
  readonly list: Finding[] = []

  error(field: string, message: string): void {
    this.list.push({ field, message, severity: 'error' })
  }

  /**
   * An error that drops only rule `rule` of a route. Reserved for what the
   * API server admits (the CRD's schema and CEL do not check it, as the
   * RE2-versus-JavaScript dialect of a regular expression): what the CRD
   * refuses never reaches a controller from the cluster, so files are held to
   * the same bar and lose the whole object (rules-route.ts).
   */
  ruleError(rule: number, field: string, message: string): void {
    this.list.push({ field, message, severity: 'error', rule })
  }

  warn(field: string, message: string): void {
    this.list.push({ field, message, severity: 'warning' })
  }

  hasErrors(): boolean {
    return this.list.some((f) => f.severity === 'error')
  }

  /** An error of the whole object (not one of a single rule). */
  hasObjectErrors(): boolean {
    return this.list.some((f) => f.severity === 'error' && f.rule === undefined)
  }
}

const SIMPLE_KEY = /^[A-Za-z_$][A-Za-z0-9_$]*$/

/** `base.sub`, where `sub` is a field or dotted field path (`tls.mode`). */
export function child(base: string, sub: string): string {
  return base === '' ? sub : `${base}.${sub}`
}

/** A key of a map (data, labels) or a schema segment: `base.key`, or `base[key]` when the key is not an identifier (`data[ca.crt]`, as kubectl prints it). */
export function key(base: string, k: string): string {
  return SIMPLE_KEY.test(k) ? child(base, k) : `${base}[${k}]`
}

/** `base[i]`. */
export function item(base: string, i: number): string {
  return `${base}[${i}]`
}

/** A value for a message: JSON, cut short so one bad field cannot flood a log line. */
export function show(value: unknown): string {
  // JSON prints these as null; YAML reads `1e400` as Infinity, `.nan` as NaN.
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value)
  let s: string
  try {
    s = JSON.stringify(value) ?? String(value)
  } catch {
    s = String(value)
  }
  return s.length > 80 ? `${s.slice(0, 77)}...` : s
}
