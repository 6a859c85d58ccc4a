// AIUsage through its hooks with a local budget: usage values an upstream may
// send malformed or hostile (negative, not finite, strings) never give tokens
// back nor throw, and the model label of sallyport_ai_tokens_total takes a
// bounded number of values whatever model names upstreams answer with.
import t from 'tap'
import type { CompiledExtension } from '../../lib/compile/table.ts'
import type { ClientInfo, HookResult, RequestView, ResponseView } from '../../lib/extensions/plugin-api.ts'
import { SseUsageReader, aiUsage } from '../../lib/extensions/ai-usage.ts'
import { RedisPool } from '../../lib/extensions/redis-client.ts'
import { registry } from '../../lib/observe/metrics.ts'

function spec(name: string, config: Record<string, unknown>): CompiledExtension {
  return {
    key: `Backend default/${name}/${name}`, name, type: 'AIUsage', phases: ['request-headers', 'response-body'], priority: 0, failOpen: false,
    scope: 'Backend', source: `Backend default/${name}`, namespace: 'default', config, secrets: {}, error: null,
  }
}

function view(namespace: string): RequestView {
  const client: ClientInfo = { address: '127.0.0.1', namespace, serviceAccount: 'sa', pod: null, spiffeId: null }
  return { method: 'POST', path: '/v1/chat/completions', authority: 'api', headers: {}, client, route: 'default/api', rule: 'default/api/rule/0', backend: 'Backend/default/api:80', gateway: 'default/egress', scheme: 'http' }
}

const json: ResponseView = { status: 200, headers: { 'content-type': 'application/json' } } as ResponseView

type Hooks = ReturnType<typeof aiUsage>

function answer(h: Hooks, req: RequestView, body: string): void {
  const o = h.responseStream?.(req, json)
  if (o === null || o === undefined) throw new Error('not observed')
  o.chunk(Buffer.from(body))
  o.end()
}

async function remaining(h: Hooks, req: RequestView): Promise<number | 'denied'> {
  const r: HookResult = await (h.requestHeaders as (r: RequestView) => HookResult | Promise<HookResult>)(req)
  if (r !== undefined && r !== null && 'deny' in r) return 'denied'
  return -1
}

t.test('a negative, non-finite or non-numeric count never lowers the charge', async (t) => {
  const h = aiUsage(spec('hostile', { budget: { tokens: 1000, unit: 'Hour', key: ['namespace'] } }), new RedisPool())
  t.teardown(() => h.close?.())
  // 1500 output tokens, and a negative prompt count that cancelled 600 of them.
  answer(h, view('team-neg'), JSON.stringify({ model: 'm', usage: { prompt_tokens: -600, completion_tokens: 1500 } }))
  t.equal(await remaining(h, view('team-neg')), 'denied', '1500 tokens spend a 1000-token budget')
  // Infinity (1e400 in JSON), strings: no throw, and the finite count is charged.
  t.doesNotThrow(() => answer(h, view('team-inf'), '{"model":"m","usage":{"prompt_tokens":1e400,"completion_tokens":1200}}'))
  t.equal(await remaining(h, view('team-inf')), 'denied', 'the 1200 finite tokens are charged')
  t.doesNotThrow(() => answer(h, view('team-str'), '{"model":"m","usage":{"prompt_tokens":"5000","completion_tokens":null}}'))
  t.equal(await remaining(h, view('team-str')), -1, 'nothing countable: nothing charged')
})

t.test('the model label takes at most a bounded number of values', async (t) => {
  const h = aiUsage(spec('models', {}), new RedisPool())
  t.teardown(() => h.close?.())
  for (let i = 0; i < 500; i++) answer(h, view('team-models'), JSON.stringify({ model: `model-${i}`, usage: { prompt_tokens: 1, completion_tokens: 1 } }))
  const metric = (await registry.getSingleMetric('sallyport_ai_tokens_total')?.get())
  const models = new Set((metric?.values ?? []).filter(v => v.labels.namespace === 'team-models').map(v => String(v.labels.model)))
  t.ok(models.size <= 101, `${models.size} model label values`)
  t.ok(models.has('model-0'), 'the first models keep their name')
  const total = (metric?.values ?? []).filter(v => v.labels.namespace === 'team-models').reduce((n, v) => n + v.value, 0)
  t.equal(total, 1000, 'every token still counted')
})

// The SSE reader reads events as the SSE specification (WHATWG HTML §9.2.6)
// frames them: lines end in CRLF, LF or CR alone; an event's data is its
// `data` lines joined by LF (a JSON object may span several); `data:` with or
// without the space; comments; and the bytes may be cut anywhere.
function readSse(text: string, cut: number | null): { found: boolean; usage: { model: string; input: number; output: number } } {
  const bytes = Buffer.from(text)
  const r = new SseUsageReader()
  if (cut === null) r.push(bytes)
  else { r.push(bytes.subarray(0, cut)); r.push(bytes.subarray(cut)) }
  r.end()
  return { found: r.found, usage: { ...r.usage } }
}

t.test('SSE usage: every line ending, multi-line data, comments, cut at every byte', async (t) => {
  const usage = '{"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34}}'
  const first = '{"model":"gpt-4o-mini","choices":[{"delta":{"content":"Hé ✓"}}],"usage":null}'
  const want = { model: 'gpt-4o-mini', input: 12, output: 34 }
  for (const [name, eol] of [['LF', '\n'], ['CRLF', '\r\n'], ['CR', '\r']] as const) {
    const streams: Record<string, string> = {
      'one data line': `: keepalive${eol}data: ${first}${eol}${eol}data:${usage}${eol}${eol}data: [DONE]${eol}${eol}`,
      'data over several lines': `data: ${first}${eol}${eol}event: chunk${eol}data: {"model":"gpt-4o-mini","choices":[],${eol}data: "usage":{"prompt_tokens":12,${eol}data:"completion_tokens":34}}${eol}${eol}data: [DONE]${eol}${eol}`,
    }
    for (const [shape, text] of Object.entries(streams)) {
      const bytes = Buffer.byteLength(text)
      let wrong = 0
      for (let cut = 0; cut <= bytes; cut++) {
        const got = readSse(text, cut)
        if (!got.found || got.usage.model !== want.model || got.usage.input !== want.input || got.usage.output !== want.output) wrong++
      }
      t.equal(wrong, 0, `${name}, ${shape}: read at each of ${bytes + 1} cuts`)
    }
  }
})

t.test('SSE usage: a data line never ended by a blank line still counts at the end', async (t) => {
  t.same(readSse('data: {"model":"m","usage":{"prompt_tokens":1,"completion_tokens":2}}', null), { found: true, usage: { model: 'm', input: 1, output: 2 } })
})

t.test('SSE usage: an event past the bound is skipped whole, the next one read', async (t) => {
  const big = 'x'.repeat(700 * 1024)
  const r = new SseUsageReader()
  // One long line cut in pieces, then a long event of two lines: neither is held.
  r.push(Buffer.from(`data: {"usage":{"prompt_tokens":900,"completion_tokens":900},"pad":"${big}`))
  r.push(Buffer.from(`${big}"}\n\ndata: {"usage":{"prompt_tokens":900,"pad":"${big}\ndata: ${big}"}}\n\n`))
  r.push(Buffer.from('data: {"model":"m","usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n'))
  r.end()
  t.same({ found: r.found, ...r.usage }, { found: true, model: 'm', input: 1, output: 2 })
})

// The Responses API streams its usage inside the `response` of its
// `response.completed` event; Anthropic's Messages API streams the input count
// in `message_start`'s `message` and the output count in `message_delta`.
t.test('SSE usage: the Responses API and Anthropic Messages stream shapes', async (t) => {
  const responses = [
    'event: response.created', 'data: {"type":"response.created","response":{"id":"r1","model":"gpt-4.1","usage":null}}', '',
    'event: response.output_text.delta', 'data: {"type":"response.output_text.delta","delta":"Hi"}', '',
    'event: response.completed', 'data: {"type":"response.completed","response":{"id":"r1","model":"gpt-4.1-2025-04-14","usage":{"input_tokens":36,"output_tokens":87,"total_tokens":123}}}', '', '',
  ].join('\n')
  t.same(readSse(responses, null), { found: true, usage: { model: 'gpt-4.1-2025-04-14', input: 36, output: 87 } }, 'Responses API')
  const anthropic = [
    'event: message_start', 'data: {"type":"message_start","message":{"id":"m1","model":"claude-sonnet-4","usage":{"input_tokens":25,"output_tokens":1}}}', '',
    'event: content_block_delta', 'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}', '',
    'event: message_delta', 'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}', '',
    'event: message_stop', 'data: {"type":"message_stop"}', '', '',
  ].join('\n')
  t.same(readSse(anthropic, null), { found: true, usage: { model: 'claude-sonnet-4', input: 25, output: 15 } }, 'Anthropic Messages')
})

// The README: AIUsage reads an answer "within maxBodyBytes". A JSON answer
// was copied aside up to a fixed 1 MiB whatever maxBodyBytes said, so a 2 MiB
// answer (logprobs, a long tool result) with maxBodyBytes 4 MiB charged nothing.
t.test('a JSON answer is read within the extension\'s maxBodyBytes', async (t) => {
  const pad = 'x'.repeat(2 * 1024 * 1024)
  const body = JSON.stringify({ model: 'm', pad, usage: { prompt_tokens: 700, completion_tokens: 600 } })
  const big = aiUsage(spec('big', { maxBodyBytes: 4 * 1024 * 1024, budget: { tokens: 1000, unit: 'Hour', key: ['namespace'] } }), new RedisPool())
  t.teardown(() => big.close?.())
  answer(big, view('team-big'), body)
  t.equal(await remaining(big, view('team-big')), 'denied', '1300 tokens of a 2 MiB answer spend a 1000-token budget')
  const small = aiUsage(spec('small', { maxBodyBytes: 64 * 1024, budget: { tokens: 1000, unit: 'Hour', key: ['namespace'] } }), new RedisPool())
  t.teardown(() => small.close?.())
  answer(small, view('team-small'), JSON.stringify({ model: 'm', pad: 'x'.repeat(128 * 1024), usage: { prompt_tokens: 700, completion_tokens: 600 } }))
  t.equal(await remaining(small, view('team-small')), -1, 'past a smaller maxBodyBytes: not read, nothing charged')
})
