// ExternalProcessor: a callout over HTTP to the user's service in the spirit
// of Envoy's ext_proc, one POST per configured phase:
//
//   → { phase, request: { method, path, authority, headers }, response?: { status, headers },
//       client: { address, namespace, serviceAccount }, route, backend, body? }   (body: UTF-8 text, body phases)
//   ← { action?: "continue" | "deny", status?, reason?, setHeaders?: { name: value }, removeHeaders?: [name], body? }
//     (a deny's setHeaders go on its answer to the client)
//
// `timeoutMs` (default 1000) bounds each call in time, and twice maxBodyBytes
// plus 64 KiB bounds the answer (a replacement body as a JSON string, its
// escapes and the other fields); a timeout, a non-2xx answer, one over the
// bound or an unreadable one is a failure (failOpen decides), and so is a
// header it sets that could not be written (a name that is not a token, CR, LF
// or NUL in a value) or one it sets or removes that the gateway owns
// (gateway-fields.ts: Content-Length, Transfer-Encoding, Host, Connection and
// the other hop-by-hop fields); nothing of such an answer is applied. Headers
// set here go to the upstream (request phases) or to the client (response phases).

import type { CompiledExtension } from '../compile/table.ts'
import { DEFAULT_MAX_BODY_BYTES } from '../extension-types.ts'
import type { ExtensionHooks, HookResult, OutgoingHeaders, RequestView, ResponseView } from './plugin-api.ts'
import { readBounded } from '../read-bounded.ts'
import { writableField } from '../upstream/h1-parser.ts'
import { isGatewayField } from './gateway-fields.ts'

/** Room in an answer beyond twice the body bound: the other fields. */
const ANSWER_SLACK = 64 * 1024

interface Answer {
  action?: string
  status?: number
  reason?: string
  setHeaders?: Record<string, string>
  removeHeaders?: string[]
  body?: string
}

/**
 * The answer in the shape it must have, else an error (the callout failed;
 * failOpen decides). An action that is neither continue nor deny (`DENY`,
 * `reject`) would otherwise have let the request through as allowed, and a
 * `setHeaders` string set one header per character.
 */
function answerOf(v: unknown): Answer {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('external processor answer is not an object')
  const a = v as Record<string, unknown>
  if (a.action !== undefined && a.action !== null && a.action !== 'continue' && a.action !== 'deny') {
    throw new Error(`external processor answered action ${JSON.stringify(a.action)}; expected continue or deny`)
  }
  const set = a.setHeaders
  if (set !== undefined && set !== null && (typeof set !== 'object' || Array.isArray(set))) throw new Error('external processor setHeaders is not an object of names and values')
  const remove = a.removeHeaders
  if (remove !== undefined && remove !== null && (!Array.isArray(remove) || !remove.every(n => typeof n === 'string'))) {
    throw new Error('external processor removeHeaders is not a list of names')
  }
  return a as Answer
}

export function externalProcessor(spec: CompiledExtension): ExtensionHooks {
  const url = spec.config.url
  if (typeof url !== 'string') throw new Error('url is required')
  const timeoutMs = typeof spec.config.timeoutMs === 'number' ? spec.config.timeoutMs : 1000
  const m = spec.config.maxBodyBytes
  const maxAnswer = 2 * (typeof m === 'number' && m > 0 ? m : DEFAULT_MAX_BODY_BYTES) + ANSWER_SLACK

  async function call(phase: string, req: RequestView, res: ResponseView | null, body: Buffer | null, target: OutgoingHeaders): Promise<HookResult> {
    const payload = {
      phase,
      request: { method: req.method, path: req.path, authority: req.authority, headers: req.headers },
      response: res === null ? undefined : { status: res.status, headers: res.headers },
      client: req.client, route: req.route, backend: req.backend,
      body: body === null ? undefined : body.toString('utf8'),
    }
    const r = await fetch(url as string, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(payload),
      signal: AbortSignal.timeout(timeoutMs),
    })
    if (!r.ok) {
      void r.body?.cancel().catch(() => {})
      throw new Error(`external processor answered ${r.status}`)
    }
    const text = await readBounded(r, maxAnswer, 'external processor')
    let parsed: unknown
    try { parsed = text === '' ? {} : JSON.parse(text) } catch { throw new Error('external processor answered non-JSON') }
    const a = answerOf(parsed)
    const set = Object.entries(a.setHeaders ?? {})
    // Checked before any is applied: a field no upstream or client could be sent fails the callout
    // (failOpen decides), rather than the exchange after it.
    for (const [name, value] of set) {
      if (!writableField(name, value)) throw new Error(`external processor set an invalid header ${JSON.stringify(name)}`)
      if (isGatewayField(name)) throw new Error(`external processor set ${JSON.stringify(name)}, which is the gateway's (framing or connection)`)
    }
    // Checked with every extension's deny (flow.ts denyProblem): a status that is not an integer 200-599 fails the callout.
    if (a.action === 'deny') {
      const headers: Record<string, string> = {}
      for (const [name, value] of set) headers[name.toLowerCase()] = String(value)
      return { deny: { status: a.status ?? 403, reason: a.reason ?? 'denied by external processor', ...(set.length === 0 ? {} : { headers }) } }
    }
    const remove = (a.removeHeaders ?? []).map((name) => name.toLowerCase())
    for (const name of remove) {
      if (isGatewayField(name)) throw new Error(`external processor removed ${JSON.stringify(name)}, which is the gateway's (framing or connection)`)
    }
    for (const name of remove) delete target[name]
    for (const [name, value] of set) target[name.toLowerCase()] = String(value)
    if (typeof a.body === 'string' && body !== null) return { body: Buffer.from(a.body, 'utf8') }
    return
  }

  const hooks: ExtensionHooks = {
    requestHeaders: (req) => call('request-headers', req, null, null, req.headers),
    requestBody: (req, body) => call('request-body', req, null, body, req.headers),
    responseHeaders: (req, res) => call('response-headers', req, res, null, res.headers),
    responseBody: (req, res, body) => call('response-body', req, res, body, res.headers),
  }
  return hooks
}
