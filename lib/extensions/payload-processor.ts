// PayloadProcessor: JSON request and response bodies, buffered within the
// bound (maxBodyBytes, default 1 MiB). Guardrails first — a deny rule whose
// pattern matches answers 403 with its reason — then redaction: values at the
// `fields` selectors are replaced whole, and `patterns` (email, phone, card
// with Luhn, ssn, or regexes) are replaced inside every string value, and in
// numbers as written (or only inside `scope` selectors). Bodies that are not JSON (by content-type) are
// never read: they stream through untouched and unbuffered, whatever their
// size; a JSON content-type with an unparsable body is a failure (failOpen
// decides).

import type { CompiledExtension } from '../compile/table.ts'
import type { ExtensionHooks, HookResult, OutgoingHeaders } from './plugin-api.ts'
import { parseSelector, select, type Step } from './json-select.ts'
import { compilePattern, findMatch, redactText, type Pattern } from './pii-patterns.ts'
import { isRawNumber, numberText, parseKeepingNumbers } from './json-source.ts'
import { duplicateNameAt } from '../json-names.ts'

interface DenyRule { readonly patterns: readonly Pattern[]; readonly fields: readonly Step[][] | null; readonly reason: string }

interface Rules {
  readonly fields: readonly Step[][]
  readonly patterns: readonly Pattern[]
  readonly scope: readonly Step[][] | null
  readonly replacement: string
  readonly deny: readonly DenyRule[]
}

function list(v: unknown): unknown[] {
  return Array.isArray(v) ? v : v === undefined || v === null ? [] : [v]
}

function compileRules(block: unknown): Rules | null {
  if (block === undefined || block === null || typeof block !== 'object') return null
  const b = block as Record<string, unknown>
  const redact = (b.redact ?? {}) as Record<string, unknown>
  const scope = list(redact.scope).map(s => parseSelector(String(s)))
  return {
    fields: list(redact.fields).map(s => parseSelector(String(s))),
    patterns: list(redact.patterns).map(compilePattern),
    scope: scope.length > 0 ? scope : null,
    replacement: typeof redact.replacement === 'string' ? redact.replacement : '[REDACTED]',
    deny: list(b.deny).map((d) => {
      const r = d as Record<string, unknown>
      const fields = list(r.fields ?? r.field).map(s => parseSelector(String(s)))
      return { patterns: list(r.patterns ?? r.pattern).map(compilePattern), fields: fields.length > 0 ? fields : null, reason: typeof r.reason === 'string' ? r.reason : 'request denied by payload policy' }
    }),
  }
}

function isJson(headers: OutgoingHeaders): boolean {
  const v = headers['content-type']
  const ct = (Array.isArray(v) ? v[0] ?? '' : v ?? '').toLowerCase()
  return ct.includes('json')
}

/**
 * Every string value in `root` (or under the selectors), and every number as
 * its source text (a card or phone number sent as a number), with a setter (a
 * number set is a string from then on).
 */
function eachString(root: unknown, scope: readonly Step[][] | null, fn: (s: string, set: (v: string) => void) => void): void {
  const visit = (parent: Record<string, unknown> | unknown[], key: string | number, value: unknown): void => {
    if (typeof value === 'string') fn(value, v => { (parent as Record<string | number, unknown>)[key] = v })
    else if (isRawNumber(value)) fn(numberText(value), v => { (parent as Record<string | number, unknown>)[key] = v })
    else if (value !== null && typeof value === 'object') {
      if (Array.isArray(value)) value.forEach((_, i) => visit(value, i, value[i]))
      else for (const k of Object.keys(value)) visit(value as Record<string, unknown>, k, (value as Record<string, unknown>)[k])
    }
  }
  if (scope === null) {
    const holder = [root]
    visit(holder, 0, root)
    return
  }
  for (const steps of scope) select(root, steps, visit)
}

export function processJson(rules: Rules, body: Buffer): HookResult {
  if (body.length === 0) return
  let doc: unknown
  const text = body.toString('utf8')
  // Numbers keep their source text: only what the rules select may change.
  try { doc = parseKeepingNumbers(text) } catch { throw new Error('body is not valid JSON') }
  // A name twice in one object: the rules see the last value (JSON.parse), a
  // reader keeping the first would get one they never saw — an email left in,
  // a deny dodged. Such a body is written back from what was checked.
  let changed = duplicateNameAt(text) !== -1
  for (const d of rules.deny) {
    let hit = false
    eachString(doc, d.fields, (s) => { if (!hit) hit = d.patterns.some(p => findMatch(s, p)) })
    if (hit) return { deny: { status: 403, reason: d.reason } }
  }
  for (const steps of rules.fields) {
    select(doc, steps, (parent, key) => {
      (parent as Record<string | number, unknown>)[key] = rules.replacement
      changed = true
    })
  }
  if (rules.patterns.length > 0) {
    eachString(doc, rules.scope, (s, set) => {
      const r = redactText(s, rules.patterns, rules.replacement)
      if (r !== s) { set(r); changed = true }
    })
  }
  return changed ? { body: Buffer.from(JSON.stringify(doc)) } : undefined
}

export function payloadProcessor(spec: CompiledExtension): ExtensionHooks {
  const req = compileRules(spec.config.request)
  const res = compileRules(spec.config.response)
  const hooks: ExtensionHooks = {}
  if (req !== null) {
    hooks.readsRequestBody = view => isJson(view.headers)
    hooks.requestBody = (view, body) => isJson(view.headers) ? processJson(req, body) : undefined
  }
  if (res !== null) {
    hooks.readsResponseBody = (_view, r) => isJson(r.headers)
    hooks.responseBody = (_view, r, body) => isJson(r.headers) ? processJson(res, body) : undefined
  }
  return hooks
}

export type { Rules }
export { compileRules }
