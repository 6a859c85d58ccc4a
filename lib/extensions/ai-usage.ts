// AIUsage: token accounting for OpenAI-compatible APIs. Reads
// `usage.prompt_tokens` / `usage.completion_tokens` (and `model`) from JSON
// answers and from server-sent-event streams — the final chunk carries usage
// when the client asked with `stream_options.include_usage` — as the body
// streams past, never holding it back (an SSE answer is parsed line by line;
// a JSON answer is copied aside up to 1 MiB), decoded by the flow when the
// upstream compressed it anyway (extensions/flow.ts, Tap). Exports
// sallyport_ai_tokens_total{model,namespace,service_account,direction} and,
// with `budget`, charges the tokens to a token bucket per namespace or
// serviceAccount (local or Redis): a client whose budget is spent gets 429
// until it refills. A stream cut short (client gone, upstream failed) counts
// the usage it carried so far, and nothing before its usage event.

import { StringDecoder } from 'node:string_decoder'
import type { CompiledExtension } from '../compile/table.ts'
import { aiTokens } from '../observe/extension-metrics.ts'
import { logger } from '../observe/log.ts'
import type { ExtensionHooks, HookResult, RequestView, ResponseView, StreamObserver } from './plugin-api.ts'
import type { RedisPool } from './redis-client.ts'
import { Limiter } from './rate-limit.ts'
import type { Decision } from './token-bucket.ts'

const log = logger('ai-usage')
const MAX_JSON_COPY = 1024 * 1024
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

function usageOf(obj: unknown, into: Usage): boolean {
  if (obj === null || typeof obj !== 'object') return false
  const o = obj as Record<string, unknown>
  if (typeof o.model === 'string' && o.model !== '') into.model = o.model
  const u = o.usage as Record<string, unknown> | null | undefined
  if (u === null || u === undefined || typeof u !== 'object') return false
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

/** Incremental SSE reader: only `data:` lines mentioning "usage" are parsed. */
export class SseUsageReader {
  readonly usage: Usage = { model: '', input: 0, output: 0 }
  found = false
  readonly #decoder = new StringDecoder('utf8')
  #pending = ''

  push(chunk: Buffer): void {
    const text = this.#pending + this.#decoder.write(chunk)
    let start = 0
    for (;;) {
      const nl = text.indexOf('\n', start)
      if (nl === -1) break
      this.#line(text.slice(start, nl))
      start = nl + 1
    }
    this.#pending = text.slice(start)
    // A line without newline longer than the JSON bound is not worth keeping.
    if (this.#pending.length > MAX_JSON_COPY) this.#pending = ''
  }

  end(): void {
    const rest = this.#pending + this.#decoder.end()
    if (rest !== '') this.#line(rest)
    this.#pending = ''
  }

  #line(raw: string): void {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw
    if (!line.startsWith('data:')) return
    if (line.indexOf('"usage"') === -1) return
    const data = line.slice(5).trim()
    if (data === '[DONE]') return
    try {
      if (usageOf(JSON.parse(data), this.usage)) this.found = true
    } catch { /* not JSON: not ours */ }
  }
}

/** JSON answer: copy aside (bounded) while it streams, parse at the end. */
class JsonUsageReader {
  readonly usage: Usage = { model: '', input: 0, output: 0 }
  found = false
  readonly #chunks: Buffer[] = []
  #size = 0
  push(chunk: Buffer): void {
    if (this.#size > MAX_JSON_COPY) return
    this.#chunks.push(chunk)
    this.#size += chunk.length
  }
  end(): void {
    if (this.#size > MAX_JSON_COPY || this.#size === 0) return
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
      const reader = ct.startsWith('text/event-stream') ? new SseUsageReader() : ct.includes('json') ? new JsonUsageReader() : null
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
