// ajv against schemas/*.json, compiled once on first use (all schema files are
// added together so `common.json#/$defs/...` references resolve), and ajv's
// errors turned into findings with our dotted field paths.
//
// A schema may list, under `x-crd-admits`, keywords of its own that are
// stricter than the upstream CRD (a header value's RFC 9110 pattern, where the
// Gateway API CRD only bounds the length): the API server admits what fails
// them, so under `spec.rules[N]` of a route such an error drops rule N alone
// (Findings.ruleError, Gateway API PartiallyInvalid), not the whole object.

import { readdirSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { join } from 'node:path'
import { Ajv2020 } from 'ajv/dist/2020.js'
import type { ErrorObject, ValidateFunction } from 'ajv/dist/2020.js'
import { Findings, item, key, show } from './findings.ts'

const SCHEMA_DIR = fileURLToPath(new URL('../../schemas/', import.meta.url))
const BASE = 'https://sallyport.io/schemas/'
/** Annotation: the keywords of this schema the upstream CRD does not have (see the top). */
const ADMITS = 'x-crd-admits'
/** `/spec/rules/N/...`: an error within rule N. */
const IN_RULE = /^\/spec\/rules\/(\d+)\//

let ajv: Ajv2020 | null = null
const compiled = new Map<string, ValidateFunction>()

function instance(): Ajv2020 {
  if (ajv !== null) return ajv
  const a = new Ajv2020({ allErrors: true, verbose: true, strict: true, strictTypes: false, strictRequired: false })
  a.addKeyword({ keyword: ADMITS, schemaType: 'array' })
  for (const file of readdirSync(SCHEMA_DIR).filter((f) => f.endsWith('.json')).sort()) {
    a.addSchema(JSON.parse(readFileSync(join(SCHEMA_DIR, file), 'utf8')) as object)
  }
  ajv = a
  return a
}

/** The validator for `ref` ("backend.json#/$defs/egress"), compiled at most once. */
function validatorFor(ref: string): ValidateFunction {
  let fn = compiled.get(ref)
  if (fn === undefined) {
    fn = instance().getSchema(BASE + ref)
    if (fn === undefined) throw new Error(`schema ${ref} not found in ${SCHEMA_DIR}`)
    compiled.set(ref, fn)
  }
  return fn
}

/** Compiles every schema the registry names (for a fail-fast check at startup and in tests). */
export function compileSchemas(refs: Iterable<string>): void {
  for (const ref of refs) validatorFor(ref)
}

export interface SchemaOptions {
  /** Never put values under these top-level keys in messages (Secret data). */
  readonly redact: readonly string[]
}

/** Validates `doc` against `ref`, adding one finding per distinct schema error. */
export function checkSchema(ref: string, doc: unknown, options: SchemaOptions, out: Findings): void {
  const fn = validatorFor(ref)
  if (fn(doc)) return
  const seen = new Set<string>()
  for (const e of fn.errors ?? []) {
    const f = toFinding(e, doc, options)
    if (f === null) continue
    const key = `${f.severity}|${f.field}|${f.message}`
    if (seen.has(key)) continue
    seen.add(key)
    const rule = f.severity === 'error' && admitted(e) ? IN_RULE.exec(e.instancePath) : null
    if (rule !== null) out.ruleError(Number(rule[1]), f.field, f.message)
    else if (f.severity === 'error') out.error(f.field, f.message)
    else out.warn(f.field, f.message)
  }
}

/** The failed keyword is one the upstream CRD does not have (`x-crd-admits`). */
function admitted(e: ErrorObject): boolean {
  const list = (e.parentSchema as Record<string, unknown> | undefined)?.[ADMITS]
  return Array.isArray(list) && list.includes(e.keyword)
}

/** JSON pointer of the instance → `spec.rules[0].matches[1]`, using the document to tell list indexes from keys. */
function fieldOf(pointer: string, doc: unknown): string {
  if (pointer === '') return ''
  let field = ''
  let node: unknown = doc
  for (const raw of pointer.slice(1).split('/')) {
    const seg = raw.replace(/~1/g, '/').replace(/~0/g, '~')
    if (Array.isArray(node)) {
      field = item(field, Number(seg))
      node = node[Number(seg)]
    } else {
      field = key(field, seg)
      node = typeof node === 'object' && node !== null ? (node as Record<string, unknown>)[seg] : undefined
    }
  }
  return field
}

function toFinding(e: ErrorObject, doc: unknown, options: SchemaOptions): { field: string; message: string; severity: 'error' | 'warning' } | null {
  const field = fieldOf(e.instancePath, doc)
  const top = field.split(/[.[]/)[0] ?? ''
  const secret = options.redact.includes(top)
  const value = secret ? 'value' : show(e.data)
  const p = e.params as Record<string, unknown>
  switch (e.keyword) {
    case 'if':
      return null // the failing then/else branch reports the real error
    case 'required':
      return { field: key(field, String(p.missingProperty)), message: 'required', severity: 'error' }
    case 'additionalProperties':
      // Like the API server's default field validation ("Warn"): an unknown
      // field is reported and ignored, the object is kept.
      return { field: key(field, String(p.additionalProperty)), message: 'unknown field (ignored)', severity: 'warning' }
    case 'enum': {
      const allowed = (p.allowedValues as unknown[]).map((v) => String(v)).join(', ')
      return { field, message: `${value} is not one of ${allowed}`, severity: 'error' }
    }
    case 'const':
      return { field, message: `${value} must be ${show(p.allowedValue)}`, severity: 'error' }
    case 'pattern': {
      const what = (e.parentSchema as { description?: string } | undefined)?.description
      return { field, message: what === undefined ? `${value} does not match ${String(p.pattern)}` : `${value} is not a valid ${what}`, severity: 'error' }
    }
    case 'type':
      // YAML reads a number past ±1.8e308 (`1e400`) as Infinity, which JSON prints as null.
      if (typeof e.data === 'number' && !Number.isFinite(e.data)) {
        const message = Number.isNaN(e.data) ? `must be ${String(p.type)}, got NaN (.nan)` : `the number is out of range (beyond ±1.8e308): must be ${String(p.type)}`
        return { field, message, severity: 'error' }
      }
      return { field, message: `must be ${String(p.type)}, got ${secret ? typeName(e.data) : value}`, severity: 'error' }
    case 'minimum':
    case 'maximum':
      return { field, message: `${value} must be ${String(p.comparison)} ${String(p.limit)}`, severity: 'error' }
    case 'minLength':
      return { field, message: p.limit === 1 ? 'must not be empty' : `must be at least ${String(p.limit)} characters`, severity: 'error' }
    case 'maxLength':
      return { field, message: `must be at most ${String(p.limit)} characters`, severity: 'error' }
    case 'minItems':
      return { field, message: `must have at least ${String(p.limit)} item${p.limit === 1 ? '' : 's'}`, severity: 'error' }
    case 'maxItems':
      return { field, message: `must have at most ${String(p.limit)} items`, severity: 'error' }
    default:
      return { field, message: e.message ?? `fails ${e.keyword}`, severity: 'error' }
  }
}

function typeName(v: unknown): string {
  return Array.isArray(v) ? 'array' : v === null ? 'null' : typeof v
}
