// Manifest files → plain documents. YAML files may hold many documents
// (`---`); JSON files hold one object. A `kind: List` (what `kubectl get -o
// yaml` prints) is unwrapped into its items in either format.
//
// A YAML error spoils only the document it is in: the documents around it are
// returned as usual, and the broken one is a problem naming the file, its
// position, the line and column, and its kind and name when they can still be
// read. The caller decides what to keep serving (file-source.ts). A JSON
// syntax error makes the whole file unreadable (it holds one object).

import { LineCounter, isAlias, isMap, isPair, isScalar, isSeq, parseAllDocuments } from 'yaml'
import type { Document, Node as YamlNode } from 'yaml'
import type { SourceRef } from '../resources/meta.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import { duplicateNameAt } from '../json-names.ts'

export interface ParsedDoc {
  readonly source: SourceRef
  readonly doc: unknown
}

export interface ParseResult {
  /** Every document that could be read, including those of a file with broken ones. */
  readonly docs: ParsedDoc[]
  /** Documents (or a whole JSON file) that could not be read (severity 'error'); non-empty means the file is not whole. */
  readonly problems: ConfigProblem[]
}

/**
 * How much aliases may add to one document, counted as one per value plus the
 * characters of each string: far more than anchors for shared defaults ever
 * add, far less than an alias bomb ("billion laughs": 90 values written, 9^9
 * read). go-yaml (kubectl) bounds the same thing, by the share of its work
 * that aliases cause.
 */
const MAX_ALIAS_GROWTH = 4 * 1024 * 1024

/**
 * How deep a document may nest (maps and lists): far more than a manifest
 * ever does (a CRD's openAPIV3Schema, the deepest a config directory may
 * hold, is under 100; the bound is well past it, and below the ~770 levels
 * where the yaml library's own recursion gives up). What reads and prints an object (the snapshot's cache key,
 * validation, /config_dump) recurses, and JSON.parse does not: a JSON file
 * nested 200,000 levels deep overflowed the stack of `serve` at reload and
 * killed it, and the yaml library gives up past a few hundred levels with
 * V8's "Maximum call stack size exceeded".
 */
const MAX_DEPTH = 512
const TOO_DEEP = `nested more than ${MAX_DEPTH} levels deep`

/**
 * Parse one file's text. Document indices are positions in the file: empty
 * documents are skipped but still counted, so `file:3` is always the fourth
 * `---` section. Items of a List are numbered as if they were documents of
 * their own, in order (a file that is one List numbers its items 0..n-1).
 */
export function parseManifests(file: string, text: string): ParseResult {
  const raw = file.toLowerCase().endsWith('.json') ? parseJson(text) : parseYaml(text)
  const docs: ParsedDoc[] = []
  const problems: ConfigProblem[] = []
  let index = 0
  for (const entry of raw) {
    if (entry.error !== null) {
      problems.push(syntaxProblem(file, index++, entry.error, entry.value))
      continue
    }
    const value = entry.value
    if (isList(value)) {
      for (const item of value.items) docs.push({ source: { file, doc: index++ }, doc: item })
      continue
    }
    if (value !== null && value !== undefined) docs.push({ source: { file, doc: index } , doc: value })
    index++
  }
  return { docs, problems }
}

/** One document of a file: its value, or why it cannot be read (`value` is then what could be made of it, to name it by). */
interface RawDoc {
  readonly value: unknown
  readonly error: DocError | null
}

interface DocError {
  /** `12` or `12, column 3`. */
  readonly where: number | string
  readonly message: string
}

function parseYaml(text: string): RawDoc[] {
  const lineCounter = new LineCounter()
  // `merge`: `<<: *defaults` merge keys (YAML 1.1), which kubectl reads.
  // `uniqueKeys: false`: the library compares each key with every key before it
  // (20,000 keys in one map, a 2 MiB file: 6 s with the event loop stopped);
  // checkUniqueKeys does the same check with a set.
  const documents = parseAllDocuments(text, { lineCounter, prettyErrors: false, uniqueKeys: false, merge: true })
  // The library gives an error to the document being composed when it is
  // found; a stray token after a document's end (`]` on a line of its own
  // after `---`) lands on the one before, past its end: such an error belongs
  // to the last document starting at or before it.
  const errorsOf = new Map<number, { pos: number; message: string }>()
  for (let d = 0; d < documents.length; d++) {
    const document = documents[d] as Document.Parsed
    for (const error of document.errors) {
      const pos = error.pos[0]
      let owner = d
      if (pos > document.range[2]) {
        for (let i = d + 1; i < documents.length; i++) {
          if ((documents[i] as Document.Parsed).range[0] <= pos) owner = i
        }
      }
      const seen = errorsOf.get(owner)
      if (seen === undefined || pos < seen.pos) errorsOf.set(owner, { pos, message: error.message })
    }
  }
  const out: RawDoc[] = []
  for (let i = 0; i < documents.length; i++) {
    const document = documents[i] as Document.Parsed
    const error = errorsOf.get(i)
    if (error === undefined) {
      out.push(toValue(document, lineCounter))
      continue
    }
    const { line, col } = lineCounter.linePos(error.pos)
    // The library's composer recurses, and catches its own stack overflow.
    const message = error.message.startsWith('Maximum call stack size exceeded') ? TOO_DEEP : withoutInput(firstLine(error.message))
    out.push({ value: headerOf(document), error: { where: `${line}, column ${col}`, message } })
  }
  return out
}

function toValue(document: Document.Parsed, lineCounter: LineCounter): RawDoc {
  try {
    checkUniqueKeys(document.contents)
    expandAliases(document)
    checkDepth(document.contents)
    // No alias is left for the library to count (its count refuses a 101st use of one anchor).
    return { value: document.toJS({ maxAliasCount: -1 }), error: null }
  } catch (err) {
    const offset = err instanceof NodeError ? err.offset : document.range[0]
    const { line, col } = lineCounter.linePos(offset)
    return { value: headerOf(document), error: { where: err instanceof NodeError ? `${line}, column ${col}` : line, message: withoutInput(firstLine(messageOf(err))) } }
  }
}

/** A problem at one node of a document: `offset` is where it starts. */
class NodeError extends Error {
  readonly offset: number
  constructor(offset: number, message: string) {
    super(message)
    this.offset = offset
  }
}

/**
 * Puts in each alias's place the node it names (the last anchor of that name
 * before it, as YAML has it), so the document becomes a tree the library
 * converts without resolving aliases itself — which it does by scanning every
 * anchor and alias before each one, quadratic: 30,000 aliases took 20 s.
 * Throws a NodeError at the alias that makes the document grow by more than
 * MAX_ALIAS_GROWTH, or that sits inside the node it names (a cycle). An alias
 * naming no anchor is left for the library to report.
 */
function expandAliases(document: Document.Parsed): void {
  const anchors = new Map<string, YamlNode>()
  const sizes = new Map<YamlNode, number>()
  const open = new Set<YamlNode>()
  let growth = 0
  /** `node`, or the node the alias `node` names, and its size once expanded. */
  const resolve = (node: unknown): [unknown, number] => {
    if (!isAlias(node)) return [node, walk(node)]
    const target = anchors.get(node.source)
    if (target === undefined) return [node, 0]
    const offset = node.range?.[0] ?? 0
    if (open.has(target)) throw new NodeError(offset, 'an alias inside the node it names (the value would contain itself)')
    const size = sizes.get(target) ?? 0
    growth += size
    if (growth > MAX_ALIAS_GROWTH) throw new NodeError(offset, `aliases expand the document by more than ${MAX_ALIAS_GROWTH / 1024 / 1024} MiB`)
    return [target, size]
  }
  const walk = (node: unknown): number => {
    const anchored = (isScalar(node) || isMap(node) || isSeq(node)) && node.anchor !== undefined ? node : null
    if (anchored !== null) {
      anchors.set(anchored.anchor as string, anchored)
      open.add(anchored)
    }
    let size = 1
    if (isScalar(node)) {
      if (typeof node.value === 'string') size += node.value.length
    } else if (isMap(node) || isSeq(node)) {
      const items = node.items as unknown[]
      for (let i = 0; i < items.length; i++) {
        const item = items[i]
        if (isPair(item)) {
          const [key, keySize] = resolve(item.key)
          const [value, valueSize] = resolve(item.value)
          item.key = key
          item.value = value
          size += keySize + valueSize
        } else {
          const [value, valueSize] = resolve(item)
          items[i] = value
          size += valueSize
        }
      }
    }
    if (anchored !== null) {
      open.delete(anchored)
      sizes.set(anchored, size)
    }
    return size
  }
  // The root is never an alias that resolves: no anchor comes before it.
  resolve(document.contents)
}

/**
 * Throws a NodeError at the first map or list nested deeper than MAX_DEPTH
 * (aliases already expanded, so one nesting a deep anchor counts it all).
 * Iterative: the point is not to overflow the stack.
 */
function checkDepth(root: unknown): void {
  const stack: Array<[unknown, number]> = [[root, 0]]
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const [node, depth] = top
    if (!isMap(node) && !isSeq(node)) continue
    if (depth >= MAX_DEPTH) throw new NodeError(node.range?.[0] ?? 0, TOO_DEEP)
    for (const item of node.items as unknown[]) {
      if (isPair(item)) {
        stack.push([item.key, depth + 1], [item.value, depth + 1])
      } else {
        stack.push([item, depth + 1])
      }
    }
  }
}

/**
 * A key given twice in one map is an error at the second (YAML 1.2 §3.2.1.1),
 * as the library reports it with `uniqueKeys`: scalar keys are the same when
 * their values are (`1` and `"1"` are not), merge keys (`<<`) may repeat. The
 * first duplicate in the document is the one named.
 */
function checkUniqueKeys(root: unknown): void {
  let first = -1
  const stack: unknown[] = [root]
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    if (isSeq(node)) { for (const item of node.items as unknown[]) stack.push(item); continue }
    if (!isMap(node)) continue
    const seen = new Set<string>()
    for (const item of node.items as unknown[]) {
      if (!isPair(item)) continue
      stack.push(item.key, item.value)
      const key = item.key
      if (!isScalar(key) || key.value === '<<') continue
      const id = `${typeof key.value}:${String(key.value)}`
      if (!seen.has(id)) { seen.add(id); continue }
      const at = key.range?.[0] ?? 0
      if (first === -1 || at < first) first = at
    }
  }
  if (first !== -1) throw new NodeError(first, 'Map keys must be unique')
}

/** The kind, namespace and name of a document that cannot be built, read from its syntax tree (no alias is followed). */
function headerOf(document: Document.Parsed): unknown {
  try {
    return { kind: document.get('kind'), metadata: { namespace: document.getIn(['metadata', 'namespace']), name: document.getIn(['metadata', 'name']) } }
  } catch {
    return undefined
  }
}

function parseJson(text: string): RawDoc[] {
  // A byte order mark is not JSON (RFC 8259 §8.1 lets a parser ignore it);
  // editors on Windows write one, and the YAML parser already skips it.
  const body = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text
  if (body.trim() === '') return []
  const deep = tooDeepAt(body)
  if (deep !== -1) return [{ value: undefined, error: { where: positionOf(body, deep), message: TOO_DEEP } }]
  try {
    const value: unknown = JSON.parse(body)
    // JSON.parse keeps the last of two equal keys; the YAML reader refuses them
    // (which one was meant is the author's to say), and so does this one.
    const duplicate = duplicateNameAt(body)
    if (duplicate !== -1) return [{ value: undefined, error: { where: positionOf(body, duplicate), message: 'Map keys must be unique' } }]
    return [{ value, error: null }]
  } catch {
    // V8's messages quote the input around the bad token (and then give no
    // position), and the input may be a Secret: the problem is built from our
    // own scan of the text, a position and a reason, never from V8's words.
    const error = findJsonError(body)
    if (error === null) return [{ value: undefined, error: { where: 1, message: 'invalid JSON' } }]
    return [{ value: undefined, error: { where: positionOf(body, error.offset), message: `invalid JSON: ${error.reason}` } }]
  }
}

/** `line, column N` of `offset` in `text`. */
function positionOf(text: string, offset: number): string {
  let line = 1
  let lineStart = 0
  for (let i = 0; i < offset; i++) {
    if (text.charCodeAt(i) === 0x0a) { line++; lineStart = i + 1 }
  }
  return `${line}, column ${offset - lineStart + 1}`
}

/** The offset of the `{` or `[` that opens the level past MAX_DEPTH in JSON text (strings skipped), or -1. */
function tooDeepAt(text: string): number {
  let depth = 0
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x22) {
      for (i++; i < text.length && text.charCodeAt(i) !== 0x22; i++) {
        if (text.charCodeAt(i) === 0x5c) i++
      }
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > MAX_DEPTH) return i
    } else if (c === 0x7d || c === 0x5d) {
      depth--
    }
  }
  return -1
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

/**
 * The problem of a document that cannot be read, named by what can be read of
 * it (`readable`). A broken document may have put any text where its name is
 * read, a Secret's value say: only what looks like a kind and a Kubernetes
 * name is taken.
 */
function syntaxProblem(file: string, doc: number, error: DocError, readable: unknown): ConfigProblem {
  const obj = asRecord(readable)
  const meta = asRecord(obj?.metadata)
  return {
    source: { file, doc }, kind: matching(obj?.kind, KIND), namespace: matching(meta?.namespace, NAME), name: matching(meta?.name, NAME),
    field: '', message: `line ${error.where}: ${error.message}`, severity: 'error',
  }
}

const KIND = /^[A-Za-z][A-Za-z0-9]{0,62}$/
const NAME = /^[a-z0-9](?:[-a-z0-9.:]{0,251}[a-z0-9])?$/

function asRecord(value: unknown): Record<string, unknown> | null {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? value as Record<string, unknown> : null
}

function matching(value: unknown, re: RegExp): string {
  return typeof value === 'string' && re.test(value) ? value : ''
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
