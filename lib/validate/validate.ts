// Validation of one parsed manifest document: the kind's JSON Schema (ajv,
// compiled once on first use), then the semantic rules the specs write as CEL.
// The result is a list of ConfigProblems: any 'error' means the caller drops
// the object, but for one that names a route rule (`rule`), which drops that
// rule alone; 'warning's (unknown fields, insecureSkipVerify) keep it.

import type { SourceRef } from '../resources/meta.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import { asObj, asStr } from './access.ts'
import type { Obj } from './access.ts'
import { isDnsLabel, isDnsSubdomain } from './checks.ts'
import { Findings, show } from './findings.ts'
import { lookupKind, unreadKind } from './kinds.ts'
import type { KindEntry } from './kinds.ts'
import { checkSchema } from './schema.ts'
import { checkAnnotations } from './annotations.ts'

export interface DocumentInfo { apiVersion: string; kind: string; namespace: string; name: string }

/** Known kind? Unknown kinds (Deployments, CRDs we don't read) are ignored by callers, never errors. */
export function isKnownKind(apiVersion: string, kind: string): boolean {
  return lookupKind(apiVersion, kind) !== null
}

/**
 * The warning for an unknown kind that is most likely a typo (an apiVersion or
 * kind not read in a group sallyport reads); null for the others.
 */
export function unreadKindProblem(source: SourceRef, info: DocumentInfo): ConfigProblem | null {
  const why = unreadKind(info.apiVersion, info.kind)
  if (why === null) return null
  return { source, kind: info.kind, namespace: info.namespace, name: info.name, field: why.field, message: why.message, severity: 'warning' }
}

/**
 * Validates one parsed YAML/JSON document. `problems` non-empty with severity 'error' => drop it.
 * `info.namespace` is the namespace as written ('' when absent; readers default it).
 * Unknown kinds return no problems, but for the warning of unreadKindProblem.
 */
export function validateDocument(doc: unknown, source: SourceRef): { info: DocumentInfo; problems: ConfigProblem[] } {
  const obj = asObj(doc)
  const apiVersion = asStr(obj?.apiVersion) ?? ''
  const kind = asStr(obj?.kind) ?? ''
  const meta = asObj(obj?.metadata)
  const info: DocumentInfo = { apiVersion, kind, namespace: asStr(meta?.namespace) ?? '', name: asStr(meta?.name) ?? '' }
  const problem = (field: string, message: string, severity: 'error' | 'warning', rule?: number): ConfigProblem =>
    rule === undefined
      ? { source, kind, namespace: info.namespace, name: info.name, field, message, severity }
      : { source, kind, namespace: info.namespace, name: info.name, field, message, severity, rule }

  if (obj === null) {
    const what = Array.isArray(doc) ? 'a list' : doc === null || doc === undefined ? 'empty' : `a ${typeof doc}`
    return { info, problems: [problem('', `document is ${what}, not an object`, 'error')] }
  }
  if (apiVersion === '' || kind === '') {
    const missing = [apiVersion === '' ? 'apiVersion' : '', kind === '' ? 'kind' : ''].filter((s) => s !== '').join(' and ')
    return { info, problems: [problem('', `${missing} required`, 'error')] }
  }
  const entry = lookupKind(apiVersion, kind)
  if (entry === null) {
    const unread = unreadKindProblem(source, info)
    return { info, problems: unread === null ? [] : [unread] }
  }

  const f = new Findings()
  checkMeta(obj, entry, f)
  // The schema types metadata too: a field checkMeta already refused is said once, in its words.
  const metaFields = new Set(f.list.map((x) => x.field))
  const shape = entry.shape(obj)
  const before = f.list.length
  checkSchema(shape.schema, obj, { redact: entry.redact }, f)
  if (metaFields.size > 0) {
    const kept = f.list.filter((x, i) => i < before || !metaFields.has(x.field))
    f.list.length = 0
    f.list.push(...kept)
  }
  // Semantic rules assume the shapes the schema guarantees; on a schema error
  // they would mostly repeat it, so they run once the schema is satisfied. An
  // error of one route rule (schema.ts x-crd-admits) leaves the shapes whole:
  // the rules run, so the route's other errors are found too.
  if (!f.hasObjectErrors()) shape.rules(obj, f)
  checkAnnotations(kind, obj, f)
  return { info, problems: f.list.map((x) => problem(x.field, x.message, x.severity, x.rule)) }
}

function checkMeta(obj: Obj, entry: KindEntry, f: Findings): void {
  const meta = asObj(obj.metadata)
  if (meta === null) {
    f.error(obj.metadata === undefined ? 'metadata.name' : 'metadata', obj.metadata === undefined ? 'required' : 'must be an object')
    return
  }
  const name = meta.name
  if (name === undefined || name === '') f.error('metadata.name', 'required')
  else if (typeof name !== 'string') f.error('metadata.name', `must be a string, got ${show(name)}`)
  else if (entry.name === 'subdomain' && !isDnsSubdomain(name)) f.error('metadata.name', `"${name}" is not a valid DNS subdomain name (lower-case RFC 1123)`)
  else if (entry.name === 'label' && !isDnsLabel(name)) f.error('metadata.name', `"${name}" is not a valid DNS label (lower-case RFC 1123, at most 63 characters)`)
  else if (entry.name === 'path' && (name.length > 253 || /[/%]/.test(name) || name === '.' || name === '..')) f.error('metadata.name', `"${name}" is not a valid name`)

  const ns = meta.namespace
  if (ns !== undefined && ns !== '') {
    if (typeof ns !== 'string' || !isDnsLabel(ns)) f.error('metadata.namespace', `${show(ns)} is not a valid namespace (DNS label)`)
    else if (entry.clusterScoped) f.warn('metadata.namespace', `ignored: ${String(obj.kind)} is cluster-scoped`)
  }
}
