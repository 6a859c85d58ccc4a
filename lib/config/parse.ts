// Manifest files → plain documents. YAML files may hold many documents
// (`---`); JSON files hold one object. A `kind: List` (what `kubectl get -o
// yaml` prints) is unwrapped into its items in either format.
//
// A syntax error makes the whole file unreadable: the problem names the file
// and the line, and the caller decides what to keep serving (file-source.ts).

import { LineCounter, parseAllDocuments } from 'yaml'
import type { SourceRef } from '../resources/meta.ts'
import type { ConfigProblem } from '../resources/problem.ts'

export interface ParsedDoc {
  readonly source: SourceRef
  readonly doc: unknown
}

export interface ParseResult {
  readonly docs: ParsedDoc[]
  /** Syntax errors (severity 'error'); non-empty means the file could not be read as a whole. */
  readonly problems: ConfigProblem[]
}

// Aliases are expanded by toJS(); this caps "billion laughs" style expansion.
const MAX_ALIAS_COUNT = 100

/**
 * Parse one file's text. Document indices are positions in the file: empty
 * documents are skipped but still counted, so `file:3` is always the fourth
 * `---` section. Items of a List are numbered as if they were documents of
 * their own, in order (a file that is one List numbers its items 0..n-1).
 */
export function parseManifests(file: string, text: string): ParseResult {
  const raw = file.toLowerCase().endsWith('.json') ? parseJson(file, text) : parseYaml(file, text)
  if (raw.problems.length > 0) return { docs: [], problems: raw.problems }
  const docs: ParsedDoc[] = []
  let index = 0
  for (const value of raw.values) {
    if (isList(value)) {
      for (const item of value.items) docs.push({ source: { file, doc: index++ }, doc: item })
      continue
    }
    if (value !== null && value !== undefined) docs.push({ source: { file, doc: index } , doc: value })
    index++
  }
  return { docs, problems: [] }
}

interface RawResult {
  readonly values: unknown[]
  readonly problems: ConfigProblem[]
}

function parseYaml(file: string, text: string): RawResult {
  const lineCounter = new LineCounter()
  const documents = parseAllDocuments(text, { lineCounter, prettyErrors: false, uniqueKeys: true })
  // parseAllDocuments returns an EmptyStream (not an array) for empty input.
  if (!Array.isArray(documents)) return { values: [], problems: [] }
  const values: unknown[] = []
  for (let i = 0; i < documents.length; i++) {
    const document = documents[i]
    if (document === undefined) continue
    const error = document.errors[0]
    if (error !== undefined) {
      const { line, col } = lineCounter.linePos(error.pos[0])
      return { values: [], problems: [syntaxProblem(file, i, `${line}, column ${col}`, firstLine(error.message))] }
    }
    try {
      values.push(document.toJS({ maxAliasCount: MAX_ALIAS_COUNT }))
    } catch (err) {
      const line = document.range === undefined ? 1 : lineCounter.linePos(document.range[0]).line
      return { values: [], problems: [syntaxProblem(file, i, line, firstLine(messageOf(err)))] }
    }
  }
  return { values, problems: [] }
}

function parseJson(file: string, text: string): RawResult {
  if (text.trim() === '') return { values: [], problems: [] }
  try {
    return { values: [JSON.parse(text)], problems: [] }
  } catch (err) {
    // V8's JSON messages sometimes quote the input (which may hold Secret data):
    // keep only the reason, and find the line from the position, or else from the
    // YAML parser (JSON is YAML 1.2), or else say line 1.
    const message = messageOf(err)
    const reason = message.replace(/, (\.\.\.)?".*" is not valid JSON$/s, '').replace(/ in JSON at position.*$/s, '')
    const lineMatch = /\(line (\d+) column (\d+)\)/.exec(message)
    const posMatch = /at position (\d+)/.exec(message)
    let where = '1'
    if (lineMatch !== null) where = `${lineMatch[1]}, column ${lineMatch[2]}`
    else if (posMatch !== null) where = String(text.slice(0, Number(posMatch[1])).split('\n').length)
    else {
      const yaml = parseYaml(file, text).problems[0]
      if (yaml !== undefined) where = /^line ([^:]+)/.exec(yaml.message)?.[1] ?? '1'
    }
    return { values: [], problems: [syntaxProblem(file, 0, where, `invalid JSON: ${reason}`)] }
  }
}

function syntaxProblem(file: string, doc: number, line: number | string, message: string): ConfigProblem {
  return {
    source: { file, doc }, kind: '', namespace: '', name: '', field: '',
    message: `line ${line}: ${message}`, severity: 'error',
  }
}

function isList(value: unknown): value is { items: unknown[] } {
  if (typeof value !== 'object' || value === null) return false
  const v = value as Record<string, unknown>
  return v.kind === 'List' && Array.isArray(v.items)
}

function firstLine(message: string): string {
  const nl = message.indexOf('\n')
  return nl === -1 ? message : message.slice(0, nl)
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
