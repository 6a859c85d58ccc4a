// A configuration problem is a value, not an exception: it names where the bad
// input is (file, document, kind, object, field) so `sallyport validate`, logs and
// status conditions can all say the same thing.

import type { SourceRef } from './meta.ts'

export interface ConfigProblem {
  readonly source: SourceRef
  /** Kind as written ('' when the document has none). */
  readonly kind: string
  /** '' when unknown or cluster-scoped. */
  readonly namespace: string
  /** '' when the document has no name. */
  readonly name: string
  /** Dotted path from the object root, e.g. `spec.rules[0].matches[1].path.value`; '' for the whole object. */
  readonly field: string
  readonly message: string
  /**
   * 'error' drops the object, or (found by compile in an object it keeps: an
   * extension's Secret reference) fails the requests that need it; 'warning'
   * keeps it working (e.g. insecureSkipVerify).
   */
  readonly severity: 'error' | 'warning'
  /**
   * On an error that drops one rule of an HTTPRoute or GRPCRoute and not the
   * object: the rule's index in spec.rules (Gateway API PartiallyInvalid: the
   * route is served without it). Absent: an error drops the object.
   */
  readonly rule?: number
}

/** Whether `p` is an error that takes its whole object out of the snapshot (not only one route rule). */
export function dropsObject(p: ConfigProblem): boolean {
  return p.severity === 'error' && p.rule === undefined
}

/**
 * `FILE:DOC: KIND NS/NAME: FIELD: MESSAGE`, the line format of `sallyport
 * validate`; `FILE:DOC: MESSAGE` for a document with neither kind nor name
 * (one nothing could be read of, an unreadable file).
 */
export function formatProblem(p: ConfigProblem): string {
  const obj = p.namespace === '' ? p.name : `${p.namespace}/${p.name}`
  const field = p.field === '' ? '' : `${p.field}: `
  const what = p.kind === '' && p.name === '' ? '' : `${p.kind || '<no kind>'} ${obj || '<no name>'}: `
  return `${p.source.file}:${p.source.doc}: ${what}${field}${p.message}`
}
