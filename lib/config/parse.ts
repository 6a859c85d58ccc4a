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
      return { values: [], problems: [syntaxProblem(file, i, `${line}, column ${col}`, withoutInput(firstLine(error.message)))] }
    }
    try {
      values.push(document.toJS({ maxAliasCount: MAX_ALIAS_COUNT }))
    } catch (err) {
      const line = document.range === undefined ? 1 : lineCounter.linePos(document.range[0]).line
      return { values: [], problems: [syntaxProblem(file, i, line, withoutInput(firstLine(messageOf(err))))] }
    }
  }
  return { values, problems: [] }
}

function parseJson(file: string, text: string): RawResult {
  // A byte order mark is not JSON (RFC 8259 §8.1 lets a parser ignore it);
  // editors on Windows write one, and the YAML parser already skips it.
  const body = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text
  if (body.trim() === '') return { values: [], problems: [] }
  try {
    return { values: [JSON.parse(body)], problems: [] }
  } catch {
    // V8's messages quote the input around the bad token (and then give no
    // position), and the input may be a Secret: the problem is built from our
    // own scan of the text, a position and a reason, never from V8's words.
    const error = findJsonError(body)
    if (error === null) return { values: [], problems: [syntaxProblem(file, 0, 1, 'invalid JSON')] }
    let line = 1
    let lineStart = 0
    for (let i = 0; i < error.offset; i++) {
      if (body.charCodeAt(i) === 0x0a) { line++; lineStart = i + 1 }
    }
    const where = `${line}, column ${error.offset - lineStart + 1}`
    return { values: [], problems: [syntaxProblem(file, 0, where, `invalid JSON: ${error.reason}`)] }
  }
}

interface JsonError {
  readonly offset: number
  readonly reason: string
}

// What the scanner expects next.
const Expect = { VALUE: 0, FIRST_VALUE: 1, KEY: 2, FIRST_KEY: 3, AFTER: 4 } as const
type Expect = typeof Expect[keyof typeof Expect]
const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y

/**
 * Where `text` first stops being JSON (RFC 8259), and why, in words that
 * quote nothing. Iterative (an explicit stack), so deep nesting cannot
 * overflow the call stack. `null` if the whole text is one valid JSON value.
 */
function findJsonError(text: string): JsonError | null {
  const n = text.length
  const stack: boolean[] = [] // true: inside an object, false: inside an array
  let mode: Expect = Expect.VALUE
  let i = 0
  for (;;) {
    while (i < n && isJsonSpace(text.charCodeAt(i))) i++
    if (i >= n) return mode === Expect.AFTER && stack.length === 0 ? null : { offset: n, reason: 'unexpected end of input' }
    const c = text[i]
    if (mode === Expect.AFTER) {
      if (stack.length === 0) return { offset: i, reason: 'unexpected text after the value' }
      const inObject = stack[stack.length - 1] === true
      if (c === ',') { i++; mode = inObject ? Expect.KEY : Expect.VALUE; continue }
      if (c === (inObject ? '}' : ']')) { i++; stack.pop(); continue }
      return { offset: i, reason: inObject ? 'expected \',\' or \'}\' after a property value' : 'expected \',\' or \']\' after an array element' }
    }
    if (mode === Expect.KEY || mode === Expect.FIRST_KEY) {
      if (mode === Expect.FIRST_KEY && c === '}') { i++; stack.pop(); mode = Expect.AFTER; continue }
      if (c !== '"') return { offset: i, reason: 'expected a double-quoted property name' }
      const end = scanJsonString(text, i)
      if (typeof end !== 'number') return end
      i = end
      while (i < n && isJsonSpace(text.charCodeAt(i))) i++
      if (i >= n) return { offset: n, reason: 'unexpected end of input' }
      if (text[i] !== ':') return { offset: i, reason: 'expected \':\' after a property name' }
      i++
      mode = Expect.VALUE
      continue
    }
    // A value is expected (or, right after '[', the end of the array).
    if (mode === Expect.FIRST_VALUE && c === ']') { i++; stack.pop(); mode = Expect.AFTER; continue }
    mode = Expect.AFTER
    if (c === '{') { i++; stack.push(true); mode = Expect.FIRST_KEY; continue }
    if (c === '[') { i++; stack.push(false); mode = Expect.FIRST_VALUE; continue }
    if (c === '"') {
      const end = scanJsonString(text, i)
      if (typeof end !== 'number') return end
      i = end
      continue
    }
    if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) {
      NUMBER.lastIndex = i
      if (!NUMBER.test(text)) return { offset: i, reason: 'invalid number' }
      i = NUMBER.lastIndex
      continue
    }
    const literal = text.startsWith('true', i) ? 4 : text.startsWith('null', i) ? 4 : text.startsWith('false', i) ? 5 : 0
    if (literal === 0) return { offset: i, reason: 'expected a value' }
    i += literal
  }
}

/** The offset just past the string starting at `start` (a '"'), or the error in it. */
function scanJsonString(text: string, start: number): number | JsonError {
  for (let i = start + 1; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x22) return i + 1
    if (c < 0x20) return { offset: i, reason: 'control character in a string' }
    if (c !== 0x5c) continue
    const e = text[i + 1]
    if (e === undefined) break
    if (e === 'u') {
      if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) return { offset: i, reason: 'invalid \\u escape in a string' }
      i += 5
    } else if ('"\\/bfnrt'.includes(e)) {
      i++
    } else {
      return { offset: i, reason: 'invalid escape in a string' }
    }
  }
  return { offset: text.length, reason: 'unexpected end of input' }
}

function isJsonSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
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

/**
 * The yaml library's messages that end with the input they stopped at: a block
 * scalar header with text after it (a newline forgotten after `|-`), an escape,
 * an alias. In a Secret that input is the secret, and these messages reach the
 * log, `validate` and /config_dump: only the fixed part is kept (the line and
 * column say where).
 */
const QUOTING_MESSAGES: readonly RegExp[] = [
  /^(Block scalar header includes extra characters)\b/,
  /^(Invalid escape sequence)\b/,
  /^(Unresolved tag)\b/,
  /^(Unresolved alias \(the anchor must be set before the alias\))/,
]

function withoutInput(message: string): string {
  for (const re of QUOTING_MESSAGES) {
    const m = re.exec(message)
    if (m !== null) return m[1] as string
  }
  return message
}

function firstLine(message: string): string {
  const nl = message.indexOf('\n')
  return nl === -1 ? message : message.slice(0, nl)
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
