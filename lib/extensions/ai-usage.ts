// AIUsage: token accounting for OpenAI-compatible APIs. Reads
// `usage.prompt_tokens` / `usage.completion_tokens` (and `model`) from JSON
// answers and from server-sent-event streams — the final chunk carries usage
// when the client asked with `stream_options.include_usage`; the Responses API
// (`input_tokens` / `output_tokens`) streams it in `response.completed`'s
// `response`, Anthropic's Messages API in `message_start`'s `message` (input)
// and `message_delta` (output) — as the body
// streams past, never holding it back (an SSE answer is parsed line by line;
// a JSON answer is copied aside up to maxBodyBytes), decoded by the flow when the
// upstream compressed it anyway (extensions/flow.ts, Tap). Exports
// sallyport_ai_tokens_total{model,namespace,service_account,direction} and,
// with `budget`, charges the tokens to a token bucket per namespace or
// serviceAccount (local or Redis): a client whose budget is spent gets 429
// until it refills. A stream cut short (client gone, upstream failed) counts
// the usage it carried so far, and nothing before its usage event.

import { StringDecoder } from 'node:string_decoder'
import type { CompiledExtension } from '../compile/table.ts'
import { DEFAULT_MAX_BODY_BYTES } from '../extension-types.ts'
import { aiTokens } from '../observe/extension-metrics.ts'
import { logger } from '../observe/log.ts'
import type { ExtensionHooks, HookResult, RequestView, ResponseView, StreamObserver } from './plugin-api.ts'
import type { RedisPool } from './redis-client.ts'
import { Limiter } from './rate-limit.ts'
import type { Decision } from './token-bucket.ts'

const log = logger('ai-usage')
const MAX_MODEL_LABEL = 64

export interface Usage { model: string; input: number; output: number }

/** Distinct model label values per process; the models seen after these count as `other`. */
const MAX_MODELS = 100
const models = new Set<string>()

/** The model label: the name (cut to MAX_MODEL_LABEL), one of the first MAX_MODELS, else `other` (upstreams choose the names). */
function modelLabel(model: string): string {
  const name = model.slice(0, MAX_MODEL_LABEL)
  if (models.has(name)) return name
  if (models.size >= MAX_MODELS) return 'other'
  models.add(name)
  return name
}

/** A token count: a finite number, not negative; anything else (a string, -600, 1e400) is no count. */
function tokenCount(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : null
}

function usageOf(obj: unknown, into: Usage, nested = false): boolean {
  if (obj === null || typeof obj !== 'object') return false
  const o = obj as Record<string, unknown>
  if (typeof o.model === 'string' && o.model !== '') into.model = o.model
  const u = o.usage as Record<string, unknown> | null | undefined
  if (u === null || u === undefined || typeof u !== 'object') {
    // Streamed inside the event's object: the Responses API's `response.completed`
    // (`response`), Anthropic's `message_start` (`message`).
    // One level: an object nested deeper is not a usage report.
    const inner = nested ? null : o.response ?? o.message
    return inner !== null && typeof inner === 'object' && !Array.isArray(inner) && usageOf(inner, into, true)
  }
  // OpenAI chat/completions: prompt/completion; the Responses API: input/output.
  // A count that is not one never lowers the other's charge nor throws; an
  // event without one keeps what an earlier event said.
  const input = tokenCount(u.prompt_tokens ?? u.input_tokens)
  const output = tokenCount(u.completion_tokens ?? u.output_tokens)
  if (input === null && output === null) return false
  if (input !== null) into.input = input
  if (output !== null) into.output = output
  return true
}

/** A line end of SSE: CRLF, LF or CR alone (WHATWG HTML §9.2.6). */
const LINE_END = /[\r\n]/g

/**
 * Incremental SSE reader, framing events as the SSE specification does: lines
 * end in CRLF, LF or CR; an event's data is its `data` lines joined by LF (one
 * JSON object may span several), the event ends at a blank line, comments and
 * other fields are skipped. Only events whose data mentions "usage" are parsed;
 * an event's data is held up to `bound` characters (a longer one is skipped whole).
 */
export class SseUsageReader {
  readonly usage: Usage = { model: '', input: 0, output: 0 }
  found = false
  readonly #bound: number
  readonly #decoder = new StringDecoder('utf8')
  /** The unended line's text so far. */
  #pending = ''
  /** The last chunk ended in CR: an LF first in the next one ends no second line. */
  #afterCr = false
  /** The unended line grew past the bound: it (and its event) is skipped. */
  #longLine = false
  /** The current event's data, and whether it has a data line at all. */
  #data = ''
  #hasData = false
  /** The current event had data past the bound: skipped whole. */
  #skip = false

  constructor(bound = DEFAULT_MAX_BODY_BYTES) { this.#bound = bound }

  push(chunk: Buffer): void {
    let text = this.#decoder.write(chunk)
    if (text === '') return
    if (this.#afterCr && text.charCodeAt(0) === 10) text = text.slice(1)
    this.#afterCr = false
    let start = 0
    LINE_END.lastIndex = 0
    for (let m = LINE_END.exec(text); m !== null; m = LINE_END.exec(text)) {
      const at = m.index
      const line = this.#pending === '' ? text.slice(start, at) : this.#pending + text.slice(start, at)
      this.#pending = ''
      this.#line(line)
      start = at + 1
      if (text.charCodeAt(at) === 13) {
        if (start === text.length) this.#afterCr = true
        else if (text.charCodeAt(start) === 10) start++
      }
      LINE_END.lastIndex = start
    }
    if (start < text.length) this.#pending += text.slice(start)
    // A line longer than the bound is not worth keeping: it and its event are skipped.
    if (this.#pending.length > this.#bound) {
      this.#pending = ''
      this.#longLine = true
    }
  }

  /** The body's end: a last line or event without its blank line still counts. */
  end(): void {
    const rest = this.#pending + this.#decoder.end()
    this.#pending = ''
    if (rest !== '' || this.#longLine) this.#line(rest)
    this.#dispatch()
  }

  #line(line: string): void {
    if (this.#longLine) {
      this.#longLine = false
      this.#skip = true
      return
    }
    if (line === '') return this.#dispatch()
    if (line.charCodeAt(0) === 58 /* : comment */) return
    const colon = line.indexOf(':')
    if ((colon === -1 ? line : line.slice(0, colon)) !== 'data' || this.#skip) return
    const value = colon === -1 ? '' : line.charCodeAt(colon + 1) === 32 ? line.slice(colon + 2) : line.slice(colon + 1)
    if (this.#data.length + value.length > this.#bound) {
      this.#skip = true
      this.#data = ''
      return
    }
    this.#data = this.#hasData ? this.#data + '\n' + value : value
    this.#hasData = true
  }

  #dispatch(): void {
    const data = this.#data
    const parse = this.#hasData && !this.#skip && data.indexOf('"usage"') !== -1
    this.#data = ''
    this.#hasData = false
    this.#skip = false
    if (!parse) return
    try {
      if (usageOf(JSON.parse(data), this.usage)) this.found = true
    } catch { /* not JSON ([DONE] among them): not ours */ }
  }
}

/** JSON answer: copy aside (up to `bound` bytes) while it streams, parse at the end. */
class JsonUsageReader {
  readonly usage: Usage = { model: '', input: 0, output: 0 }
  found = false
  readonly #bound: number
  readonly #chunks: Buffer[] = []
  #size = 0
  constructor(bound: number) { this.#bound = bound }
  push(chunk: Buffer): void {
    if (this.#size > this.#bound) return
    this.#chunks.push(chunk)
    this.#size += chunk.length
  }
  end(): void {
    if (this.#size > this.#bound || this.#size === 0) return
    try {
      this.found = usageOf(JSON.parse(Buffer.concat(this.#chunks, this.#size).toString('utf8')), this.usage)
    } catch { /* not JSON */ }
  }
}

function contentType(h: ResponseView['headers']): string {
  const v = h['content-type']
  return (Array.isArray(v) ? v[0] ?? '' : v ?? '').toLowerCase()
}

export function aiUsage(spec: CompiledExtension, redis: RedisPool): ExtensionHooks {
  // The answer is read within maxBodyBytes, as every body extension (extensions/chain.ts).
  const m = spec.config.maxBodyBytes
  const bound = typeof m === 'number' && m > 0 ? m : DEFAULT_MAX_BODY_BYTES
  const budgetBlock = spec.config.budget as Record<string, unknown> | undefined
  const budget = budgetBlock === undefined || budgetBlock === null ? null : new Limiter(spec, budgetBlock, redis, 'tokens', { globalAt: 'budget.global' })
  const onCheck = (d: Decision): HookResult => d.allowed || budget === null ? undefined : budget.deny(d, 'token budget exhausted')

  const record = (req: RequestView, u: Usage): void => {
    const labels = {
      model: modelLabel(u.model), namespace: req.client.namespace ?? '', service_account: req.client.serviceAccount ?? '',
    }
    if (u.input > 0) aiTokens.inc({ ...labels, direction: 'input' }, u.input)
    if (u.output > 0) aiTokens.inc({ ...labels, direction: 'output' }, u.output)
    if (budget !== null && u.input + u.output > 0) {
      const d = budget.decide(budget.key(req), 'charge', u.input + u.output)
      if (d instanceof Promise) d.catch((err: unknown) => log.warn({ error: String(err) }, 'token budget charge failed'))
    }
  }

  return {
    close(): void { budget?.close() },
    requestHeaders(req: RequestView) {
      if (budget === null) return
      const d = budget.decide(budget.key(req), 'check', 0)
      return d instanceof Promise ? d.then(onCheck) : onCheck(d)
    },
    responseStream(req: RequestView, res: ResponseView): StreamObserver | null {
      if (res.status < 200 || res.status >= 300) return null
      const ct = contentType(res.headers)
      const reader = ct.startsWith('text/event-stream') ? new SseUsageReader(bound) : ct.includes('json') ? new JsonUsageReader(bound) : null
      if (reader === null) return null
      return {
        chunk(data: Buffer): void { reader.push(data) },
        end(): void {
          reader.end()
          if (reader.found) record(req, reader.usage)
        },
        // Cut short: the usage seen so far is charged (cumulative usage, or the
        // final event before [DONE]); before any, the tokens are unknown.
        abort(): void {
          if (reader.found) record(req, reader.usage)
        },
      }
    },
  }
}
