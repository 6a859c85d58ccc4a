// One request through an extension chain: request-headers hooks, then the
// request body (buffered within the bound) for request-body hooks, then the
// upstream; on the way back response-headers hooks and response-body hooks
// (buffered) or stream observers (not buffered). Hooks run one after the other
// in the chain's order; a synchronous hook costs no promise. A body extension
// may decline a body by the head (readsRequestBody / readsResponseBody:
// PayloadProcessor reads JSON only); a body no extension reads is never
// buffered and streams through untouched.
//
// Bounds (DESIGN.md: every buffer has one): the request body over the bound
// answers 413 SP_ERR_BODY_TOO_LARGE, the response body 502
// SP_ERR_RESPONSE_TOO_LARGE — unless every body extension of that phase is
// failOpen, in which case the body passes through untouched and the body hooks
// are skipped (counted as failures, "open").
//
// A compressed response body is decoded for the body hooks (gzip, deflate, br;
// within the same bound) and sent on as identity; another coding fails them
// from the head, unread. Stream observers see it decoded (within their bound)
// while the client gets it as sent. HEAD, 204 and 304 answers have no body and
// skip the body hooks.

import { Readable, Transform, type TransformCallback } from 'node:stream'
import zlib from 'node:zlib'
import { ErrorCode, SallyportError } from '../errors.ts'
import type { ExtensionChain } from '../compile/table.ts'
import type { OutgoingHeaders, UpstreamRequest, UpstreamResponse } from '../upstream/types.ts'
import type { ClientInfo, HookResult, MaybePromise, RequestView, ResponseView, StreamObserver } from './plugin-api.ts'
import { allFailOpen, bodyBound, type Instance, type RunnableChain } from './chain.ts'
import { logger } from '../observe/log.ts'
import { extensionDenials, extensionFailures } from '../observe/extension-metrics.ts'
import { writableField } from '../upstream/h1-parser.ts'
import { isGatewayField, keepGatewayFields } from './gateway-fields.ts'

const log = logger('extensions')

/** What the router gives a flow: how to continue, answer or fail the request. */
export interface FlowHost {
  /** An answer began or the client left: stop. */
  isDone(): boolean
  /** Continue upstream with the (possibly changed) request. */
  send(req: UpstreamRequest): void
  /** Answer with the (possibly changed) upstream response. */
  relay(res: UpstreamResponse): void
  /** An extension answers itself. */
  deny(status: number, code: ErrorCode, reason: string, headers: OutgoingHeaders): void
  fail(code: ErrorCode, detail?: string | null): void
  /** Who sent the request; asked only when a hook reads `client` (most chains never do). */
  clientInfo(): ClientInfo
}

/** Where the request goes; the router keeps one per rule × backend, so a request allocates none. */
export interface FlowInfo {
  readonly route: string
  readonly rule: string
  readonly backend: string
  readonly gateway: string
  readonly scheme: 'http' | 'https'
}

/** Why a deny cannot be answered as given, or null: a status outside 200–599, a header that cannot be written. */
export function denyProblem(d: { readonly status: unknown, readonly reason?: unknown, readonly headers?: unknown }): string | null {
  if (typeof d.status !== 'number' || !Number.isInteger(d.status) || d.status < 200 || d.status > 599) {
    return `deny status ${JSON.stringify(d.status) ?? String(d.status)} is not an HTTP status (an integer 200-599)`
  }
  if (typeof d.reason !== 'string') return 'deny reason is not a string'
  if (d.headers === undefined || d.headers === null) return null
  if (typeof d.headers !== 'object') return 'deny headers are not an object'
  for (const [name, value] of Object.entries(d.headers)) {
    if (!writableField(name, value)) return `deny header ${JSON.stringify(name)} cannot be sent`
    // The gateway frames its answer and owns the connection's fields (gateway-fields.ts).
    if (isGatewayField(name)) return `deny header ${JSON.stringify(name)} is the gateway's to set (framing or connection)`
  }
  return null
}

type Invoke = (flow: Flow, inst: Instance) => MaybePromise<HookResult>

function isThenable(v: unknown): v is PromiseLike<HookResult> {
  return v !== null && typeof v === 'object' && typeof (v as { then?: unknown }).then === 'function'
}

// hot path
/** Sequential hooks with a synchronous fast path; `done` runs when all continued. */
function runHooks(flow: Flow, list: readonly Instance[], invoke: Invoke, done: (flow: Flow) => void, start: number): void {
  for (let i = start; i < list.length; i++) {
    if (flow.host.isDone()) return flow.abandon()
    const inst = list[i] as Instance
    let r: MaybePromise<HookResult>
    try {
      r = invoke(flow, inst)
    } catch (err) {
      if (flow.failed(inst, err)) continue
      return
    }
    if (isThenable(r)) {
      const next = i + 1
      r.then(
        (v) => { if (flow.host.isDone()) return flow.abandon(); if (flow.apply(inst, v)) runHooks(flow, list, invoke, done, next) },
        (err: unknown) => { if (flow.host.isDone()) return flow.abandon(); if (flow.failed(inst, err)) runHooks(flow, list, invoke, done, next) },
      )
      return
    }
    if (!flow.apply(inst, r)) return
  }
  if (flow.host.isDone()) return flow.abandon()
  done(flow)
}

const callRequestHeaders: Invoke = (f, inst) => (inst.hooks.requestHeaders as NonNullable<typeof inst.hooks.requestHeaders>)(f.view)
/** A failover's chain run: decision-only instances that already decided for this request are skipped. */
const callRequestHeadersOnce: Invoke = (f, inst) => f.decided !== null && f.decided.includes(inst) ? undefined : callRequestHeaders(f, inst)
const callRequestBody: Invoke = (f, inst) => (inst.hooks.requestBody as NonNullable<typeof inst.hooks.requestBody>)(f.view, f.body as Buffer)
const callResponseHeaders: Invoke = (f, inst) => (inst.hooks.responseHeaders as NonNullable<typeof inst.hooks.responseHeaders>)(f.view, f.resView as ResponseView)
const callResponseBody: Invoke = (f, inst) => (inst.hooks.responseBody as NonNullable<typeof inst.hooks.responseBody>)(f.view, f.resView as ResponseView, f.body as Buffer)

type Reads = (flow: Flow, inst: Instance) => boolean
const readsRequest: Reads = (f, inst) => inst.hooks.readsRequestBody?.(f.view) ?? true
const readsResponse: Reads = (f, inst) => inst.hooks.readsResponseBody?.(f.view, f.resView as ResponseView) ?? true

// hot path
/** The body hooks of `list` that read this body (the list itself when none declines). */
function readers(flow: Flow, list: readonly Instance[], reads: Reads): readonly Instance[] {
  let out: Instance[] | null = null
  for (let i = 0; i < list.length; i++) {
    const inst = list[i] as Instance
    let yes = true
    try { yes = reads(flow, inst) } catch { /* read it: a body is never skipped unseen by mistake */ }
    if (yes) out?.push(inst)
    else out ??= list.slice(0, i)
  }
  return out ?? list
}

class View implements RequestView {
  readonly method: string
  path: string
  readonly authority: string
  readonly headers: OutgoingHeaders
  readonly route: string
  readonly rule: string
  readonly backend: string
  readonly gateway: string
  readonly scheme: 'http' | 'https'
  readonly #host: FlowHost
  #client: ClientInfo | null = null
  constructor(req: UpstreamRequest, info: FlowInfo, host: FlowHost) {
    this.method = req.method
    this.path = req.path
    this.authority = req.authority
    this.headers = req.headers
    this.route = info.route
    this.rule = info.rule
    this.backend = info.backend
    this.gateway = info.gateway
    this.scheme = info.scheme
    this.#host = host
  }
  /** Built on first read: a chain keyed by route or backend never pays for client attribution. */
  get client(): ClientInfo {
    return this.#client ??= this.#host.clientInfo()
  }
}

export class Flow {
  readonly host: FlowHost
  readonly chain: RunnableChain
  readonly view: View
  req: UpstreamRequest
  /** The buffered body of the current body phase. */
  body: Buffer | null = null
  res: UpstreamResponse | null = null
  resView: ResponseView | null = null
  /**
   * Headers request hooks asked to add to the client's answer (ReplyHeaders);
   * null: none. The first hook's object is kept as is (hooks return fresh or
   * immutable objects) and copied only when a second one adds to it.
   */
  replyHeaders: Readonly<Record<string, string>> | null = null
  #ownReply = false
  /** Keep the request body as read, before body hooks change it (a failover re-runs another chain on it). */
  keepOriginal = false
  /** The request body as the client sent it, when keepOriginal and a body phase read it. */
  original: Buffer | null = null
  /** Decision-only instances that already ran for this request (a failover's chain run skips them); null: none. */
  decided: readonly Instance[] | null = null
  /**
   * The framing each message leaves with (gateway-fields.ts): the Content-Length
   * it came with, or the one of a body the flow replaced; hooks' edits of it are undone.
   */
  requestLength: string | string[] | undefined
  responseLength: string | string[] | undefined = undefined

  constructor(host: FlowHost, chain: RunnableChain, req: UpstreamRequest, info: FlowInfo) {
    this.host = host
    this.chain = chain
    this.req = req
    this.view = new View(req, info, host)
    this.requestLength = req.headers['content-length']
    // A body we read is easier uncompressed: ask for identity (an upstream that
    // compresses anyway is decoded, afterResponseHeaders).
    if (chain.readsResponseBody) delete req.headers['accept-encoding']
  }

  // ── request ──

  start(): void {
    runHooks(this, this.chain.requestHeaders, this.decided === null ? callRequestHeaders : callRequestHeadersOnce, afterRequestHeaders, 0)
  }

  /**
   * A failover to a backend with another chain (router/attempts.ts): this flow
   * replaces `prev`. The reply headers and decisions of `prev`'s decision-only
   * extensions (a RateLimit took its token) carry over instead of running twice.
   */
  inherit(prev: Flow): void {
    this.keepDecisions(prev)
    if (prev.replyHeaders !== null) this.addReplyHeaders(prev.replyHeaders)
  }

  /**
   * The decision-only instances `other` ran or carried count as decided here
   * too (a later run skips them), without its reply headers: an attempt back
   * to this flow's backend answers with this run's own (router/forward.ts
   * resumeFirstChain).
   */
  keepDecisions(other: Flow): void {
    const decided = this.decided === null ? [] : [...this.decided]
    for (const i of other.chain.requestHeaders) if (i.decisionOnly && !decided.includes(i)) decided.push(i)
    if (other.decided !== null) for (const i of other.decided) if (!decided.includes(i)) decided.push(i)
    this.decided = decided.length === 0 ? null : decided
  }

  /** true: continue with the next hook. */
  apply(inst: Instance, r: HookResult): boolean {
    if (r === undefined || r === null) return true
    if ('deny' in r) {
      const d = r.deny
      // A deny comes from user code or a callout's JSON: one no client could be
      // sent fails the extension (failOpen decides) instead of the connection.
      const wrong = denyProblem(d)
      if (wrong !== null) return this.failed(inst, new Error(wrong))
      extensionDenials.inc({ extension: inst.spec.name, type: inst.spec.type, status: d.status })
      inst.event(d.status === 429 ? 'RateLimited' : 'ExtensionDenied', `${inst.spec.name} denied a request to ${this.view.route}: ${d.status} ${d.reason}`)
      this.res?.body.destroy()
      const headers: OutgoingHeaders = { 'content-type': 'text/plain; charset=utf-8', ...d.headers }
      this.host.deny(d.status, d.status === 429 ? ErrorCode.RATE_LIMITED : ErrorCode.FORBIDDEN, d.reason, headers)
      return false
    }
    if ('body' in r && Buffer.isBuffer(r.body)) this.body = r.body
    else if ('responseHeaders' in r) this.addReplyHeaders(r.responseHeaders)
    return true
  }

  addReplyHeaders(headers: Readonly<Record<string, string>>): void {
    if (this.replyHeaders === null) { this.replyHeaders = headers; return }
    if (!this.#ownReply) { this.replyHeaders = { ...this.replyHeaders }; this.#ownReply = true }
    Object.assign(this.replyHeaders as Record<string, string>, headers)
  }

  /** true: failOpen, continue. */
  failed(inst: Instance, err: unknown): boolean {
    const open = inst.spec.failOpen
    extensionFailures.inc({ extension: inst.spec.name, type: inst.spec.type, outcome: open ? 'open' : 'closed' })
    const message = err instanceof Error ? err.message : String(err)
    log.warn({ extension: inst.spec.name, type: inst.spec.type, source: inst.spec.source, route: this.view.route, failOpen: open, error: message }, 'extension failed')
    inst.event('ExtensionFailed', `${inst.spec.name} (${inst.spec.type}) failed on ${this.view.route}: ${message}${open ? ' (failOpen: continued)' : ''}`)
    if (open) return true
    this.res?.body.destroy()
    const code = err instanceof SallyportError ? err.code : ErrorCode.EXTENSION_FAILED
    this.host.fail(code, err instanceof SallyportError ? err.detail : inst.spec.name)
    return false
  }

  /** The request ended elsewhere (timeout, client gone) while a hook ran. */
  abandon(): void {
    this.res?.body.destroy()
  }

  /**
   * A stream observer could not read the answer (a coding it cannot decode,
   * corrupt, decoded past its bound): an open failure, whatever failOpen says,
   * since an observer never holds the answer back.
   */
  unread(inst: Instance, message: string): void {
    extensionFailures.inc({ extension: inst.spec.name, type: inst.spec.type, outcome: 'open' })
    log.warn({ extension: inst.spec.name, type: inst.spec.type, source: inst.spec.source, route: this.view.route, error: message }, 'extension could not read the response')
    inst.event('ExtensionFailed', `${inst.spec.name} (${inst.spec.type}) could not read a response on ${this.view.route}: ${message}`)
  }

  /** Body over its bound with every body hook failOpen: count each as an open failure. */
  skipped(list: readonly Instance[], what: string): void {
    for (const inst of list) {
      extensionFailures.inc({ extension: inst.spec.name, type: inst.spec.type, outcome: 'open' })
      inst.event('TransformFailed', `${inst.spec.name}: ${what} over ${inst.maxBodyBytes} bytes passed through unprocessed (failOpen)`)
    }
  }

  send(): void {
    const view = this.view
    const req = this.req
    keepGatewayFields(req.headers, this.requestLength, true, view.route)
    this.host.send(view.path === req.path ? req : { ...req, path: view.path })
  }

  // ── response ──

  onResponse(res: UpstreamResponse): void {
    this.res = res
    this.resView = { status: res.status, headers: res.headers }
    this.responseLength = res.headers['content-length']
    runHooks(this, this.chain.responseHeaders, callResponseHeaders, afterResponseHeaders, 0)
  }
}

function afterRequestHeaders(flow: Flow): void {
  const chain = flow.chain
  if (chain.requestBody.length === 0) return flow.send()
  const list = readers(flow, chain.requestBody, readsRequest)
  if (list.length === 0) return flow.send()
  const body = flow.req.body
  if (body === null) {
    flow.body = Buffer.alloc(0)
    return runHooks(flow, list, callRequestBody, afterRequestBody, 0)
  }
  const whole = list === chain.requestBody
  const bound = whole ? chain.requestBodyBound : bodyBound(list)
  const overBound = (over: Readable): void => {
    if (!(whole ? chain.requestBodyFailOpen : allFailOpen(list))) return flow.host.fail(ErrorCode.BODY_TOO_LARGE, 'extension body bound')
    flow.skipped(list, 'request body')
    flow.req = { ...flow.req, body: over }
    flow.send()
  }
  // As for responses: a body hook sees the body decoded, never skips it unseen
  // (a redaction passed over is a leak); a coding it cannot read fails it.
  const coding = codingOf(flow.req.headers['content-encoding'])
  if (coding !== null && !canDecode(coding)) return undecodableRequest(flow, list, null, coding, NOT_DECODABLE)
  collect(body, bound, (err, buf, over) => {
    if (flow.host.isDone()) return
    if (err !== null) return flow.host.fail(ErrorCode.CLIENT_ABORTED)
    if (over !== null) return overBound(over)
    if (coding === null) return requestBodyHooks(flow, list, buf, buf)
    decode(coding, buf, bound, (decodeErr, decoded) => {
      if (flow.host.isDone()) return
      if (decodeErr === null) {
        // Sent on as identity, framed by its new length (afterRequestBody).
        const headers = { ...flow.req.headers }
        delete headers['content-encoding']
        flow.req = { ...flow.req, headers }
        return requestBodyHooks(flow, list, decoded, buf)
      }
      if ((decodeErr as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') return overBound(Readable.from([buf]))
      undecodableRequest(flow, list, buf, coding, decodeErr.message)
    })
  })
}

/** `sent`: the body as the client sent it (still coded), which a retry through another chain starts from. */
function requestBodyHooks(flow: Flow, list: readonly Instance[], buf: Buffer, sent: Buffer): void {
  flow.body = buf
  if (flow.keepOriginal) flow.original = sent
  runHooks(flow, list, callRequestBody, afterRequestBody, 0)
}

/**
 * A request body in a coding the body extensions cannot read (corrupt, or
 * unknown): each fails (failOpen decides); when all continue, it goes on as
 * the client sent it (`buf`, or the body unread when it was not collected).
 */
function undecodableRequest(flow: Flow, list: readonly Instance[], buf: Buffer | null, coding: string, why: string): void {
  if (!failEach(flow, list, `request Content-Encoding ${coding} cannot be decoded: ${why}`)) return
  if (buf !== null) flow.req = { ...flow.req, body: Readable.from([buf]) }
  flow.send()
}

function afterRequestBody(flow: Flow): void {
  const buf = flow.body as Buffer
  flow.body = null
  if (flow.req.body === null && buf.length === 0) return flow.send()
  // The body as the hooks left it, framed by its length (send() writes it).
  flow.requestLength = String(buf.length)
  flow.req = { ...flow.req, body: Readable.from([buf]) }
  flow.send()
}

function afterResponseHeaders(flow: Flow): void {
  const chain = flow.chain
  const res = flow.res as UpstreamResponse
  if (chain.responseBody.length === 0 || !hasBody(flow.view.method, res.status)) return relay(flow, res)
  const list = readers(flow, chain.responseBody, readsResponse)
  if (list.length === 0) return relay(flow, res)
  const bound = list === chain.responseBody ? chain.responseBodyBound : bodyBound(list)
  const coding = codingOf(res.headers['content-encoding'])
  // A coding we cannot decode fails the body hooks as it would once read: no need to read it.
  if (coding !== null && !canDecode(coding)) return undecodable(flow, list, res, coding, NOT_DECODABLE)
  collect(res.body, bound, (err, buf, over) => {
    if (flow.host.isDone()) return
    if (err !== null) return flow.host.fail(ErrorCode.UPSTREAM_RESET)
    if (over !== null) return overBound(flow, list, res, over)
    if (coding === null) {
      flow.body = buf
      return runHooks(flow, list, callResponseBody, afterResponseBody, 0)
    }
    // We asked for identity (Flow's constructor), but an upstream may compress
    // anyway: body hooks must see the body, not skip it unseen (a redaction
    // passed over is a leak). Decoded within the same bound, then sent as identity.
    decode(coding, buf, bound, (decodeErr, decoded) => {
      if (flow.host.isDone()) return
      if (decodeErr === null) {
        const headers = res.headers
        delete headers['content-encoding']
        // Another representation than the one the upstream tagged (RFC 9110 §8.8.1).
        const etag = headers.etag
        if (typeof etag === 'string' && !etag.startsWith('W/')) headers.etag = 'W/' + etag
        flow.body = decoded
        return runHooks(flow, list, callResponseBody, afterResponseBody, 0)
      }
      const original = { ...res, body: Readable.from([buf]) }
      if ((decodeErr as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') return overBound(flow, list, res, original.body)
      undecodable(flow, list, original, coding, decodeErr.message)
    })
  })
}

const NOT_DECODABLE = 'not a supported coding (gzip, deflate, br)'

/**
 * Corrupt or an unknown coding: each body extension fails (failOpen decides);
 * when all continue, the body passes as the upstream sent it.
 */
function undecodable(flow: Flow, list: readonly Instance[], res: UpstreamResponse, coding: string, why: string): void {
  if (failEach(flow, list, `response Content-Encoding ${coding} cannot be decoded: ${why}`)) relay(flow, res)
}

/** Each extension of `list` fails with `message` (failOpen decides); true when all went on. */
function failEach(flow: Flow, list: readonly Instance[], message: string): boolean {
  const failure = new Error(message)
  for (const inst of list) if (!flow.failed(inst, failure)) return false
  return true
}

/** RFC 9110 §6.4.1: a HEAD answer, a 1xx, a 204 and a 304 have no body; their Content-Length is kept as sent. */
function hasBody(method: string, status: number): boolean {
  return method !== 'HEAD' && status >= 200 && status !== 204 && status !== 304
}

function overBound(flow: Flow, list: readonly Instance[], res: UpstreamResponse, body: Readable): void {
  if (!(list === flow.chain.responseBody ? flow.chain.responseBodyFailOpen : allFailOpen(list))) return flow.host.fail(ErrorCode.RESPONSE_TOO_LARGE)
  flow.skipped(list, 'response body')
  relay(flow, { ...res, body })
}

/** A message's content coding, lowercased; null for none (identity). */
function codingOf(value: string | string[] | undefined): string | null {
  const v = (Array.isArray(value) ? value.join(',') : value ?? '').trim().toLowerCase()
  return v === '' || v === 'identity' ? null : v
}

function canDecode(coding: string): boolean {
  return coding === 'gzip' || coding === 'x-gzip' || coding === 'deflate' || coding === 'br'
}

/** Decodes gzip, deflate (zlib-wrapped, or raw as some servers send it) and br, to at most `bound` bytes. */
function decode(coding: string, buf: Buffer, bound: number, done: (err: Error | null, out: Buffer) => void): void {
  const options = { maxOutputLength: bound }
  if (coding === 'gzip' || coding === 'x-gzip') return zlib.gunzip(buf, options, done)
  if (coding === 'br') return zlib.brotliDecompress(buf, options, done)
  if (coding === 'deflate') {
    return zlib.inflate(buf, options, (err, out) => {
      if (err === null || (err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') return done(err, out)
      zlib.inflateRaw(buf, options, done)
    })
  }
  done(new Error(NOT_DECODABLE), Buffer.alloc(0))
}

function afterResponseBody(flow: Flow): void {
  const res = flow.res as UpstreamResponse
  const buf = flow.body as Buffer
  flow.body = null
  // The body as the hooks left it, framed by its length (relay() writes it).
  flow.responseLength = String(buf.length)
  relay(flow, { ...res, body: Readable.from([buf]) })
}

/** Stream observers see the body as it passes; then the router answers. */
function relay(flow: Flow, res: UpstreamResponse): void {
  keepGatewayFields(res.headers, flow.responseLength, false, flow.view.route)
  const list = flow.chain.responseStream
  if (list.length === 0) return flow.host.relay(res)
  const observers: StreamObserver[] = []
  const watching: Instance[] = []
  for (const inst of list) {
    try {
      const o = (inst.hooks.responseStream as NonNullable<typeof inst.hooks.responseStream>)(flow.view, flow.resView as ResponseView)
      if (o !== null) { observers.push(o); watching.push(inst) }
    } catch (err) {
      if (!flow.failed(inst, err)) return
    }
  }
  if (observers.length === 0) return flow.host.relay(res)
  // We asked for identity (Flow's constructor), but an upstream may compress
  // anyway: the observers read it decoded (an AIUsage that cannot read the
  // usage charges nothing), and the client gets it as sent.
  const coding = hasBody(flow.view.method, res.status) ? codingOf(res.headers['content-encoding']) : null
  if (coding !== null && !canDecode(coding)) {
    for (const inst of watching) flow.unread(inst, `response Content-Encoding ${coding} cannot be decoded: ${NOT_DECODABLE}`)
    abortAll(observers)
    return flow.host.relay(res)
  }
  const tap = new Tap(flow, watching, observers, coding)
  // The upstream's failure fails the tap too; the client writer sees it while
  // it reads, and after it let go (the client left) nobody needs to.
  tap.on('error', noop)
  const body = res.body
  body.on('error', (err) => tap.destroy(err))
  flow.host.relay({ ...res, body: body.pipe(tap) })
}

/**
 * Passes chunks through unchanged, showing each to the observers (whose errors
 * never break the stream). A compressed body (`coding`) is shown decoded, up
 * to the largest maxBodyBytes of the observers' extensions: a decompression
 * bomb costs that much and no more. One that is corrupt or longer stops the
 * observers, an open failure of each (the answer is never held for them).
 */
class Tap extends Transform {
  readonly #flow: Flow
  readonly #watching: readonly Instance[]
  readonly #observers: readonly StreamObserver[]
  readonly #coding: string | null
  readonly #bound: number
  #decoder: Transform | null = null
  /** deflate: the first byte, until the second tells zlib-wrapped from raw. */
  #head: Buffer | null = null
  #decoded = 0
  /** The observers were told how the body ended (or failed). */
  #over = false
  /** The whole body passed (the decoder may still be at work on it). */
  #passed = false

  constructor(flow: Flow, watching: readonly Instance[], observers: readonly StreamObserver[], coding: string | null) {
    super()
    this.#flow = flow
    this.#watching = watching
    this.#observers = observers
    this.#coding = coding
    let bound = 0
    for (const inst of watching) if (inst.maxBodyBytes > bound) bound = inst.maxBodyBytes
    this.#bound = bound
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    if (this.#coding === null) this.#show(chunk)
    else if (!this.#over) this.#decode(chunk)
    cb(null, chunk)
  }

  override _flush(cb: TransformCallback): void {
    this.#passed = true
    if (!this.#over) {
      if (this.#head !== null) this.#start(this.#head)
      // The decoder finishes for the observers on its own: the client is not kept waiting for it.
      if (this.#decoder === null) this.#end()
      else this.#decoder.end()
    }
    cb()
  }

  override _destroy(err: Error | null, cb: (err: Error | null) => void): void {
    // Before the body's end (the client left, the upstream failed): the observers keep what they saw.
    if (!this.#passed) {
      if (!this.#over) {
        this.#over = true
        abortAll(this.#observers)
      }
      this.#decoder?.destroy()
    }
    cb(err)
  }

  #show(data: Buffer): void {
    for (const o of this.#observers) { try { o.chunk(data) } catch (err) { log.debug({ err }, 'stream observer failed') } }
  }

  #end(): void {
    this.#over = true
    for (const o of this.#observers) { try { o.end() } catch (err) { log.debug({ err }, 'stream observer failed') } }
  }

  #decode(chunk: Buffer): void {
    if (this.#decoder === null) {
      const data = this.#head === null ? chunk : Buffer.concat([this.#head, chunk])
      this.#head = null
      if (this.#coding === 'deflate' && data.length < 2) { this.#head = data; return }
      return this.#start(data)
    }
    this.#decoder.write(chunk)
  }

  #start(first: Buffer): void {
    this.#head = null
    const coding = this.#coding
    const decoder = coding === 'br' ? zlib.createBrotliDecompress()
      : coding === 'deflate' ? (isZlibHeader(first) ? zlib.createInflate() : zlib.createInflateRaw())
        : zlib.createGunzip()
    this.#decoder = decoder
    decoder.on('data', (data: Buffer) => {
      if (this.#over) return
      this.#decoded += data.length
      if (this.#decoded > this.#bound) return this.#fail(`decodes to more than ${this.#bound} bytes (maxBodyBytes)`)
      this.#show(data)
    })
    decoder.on('end', () => { if (!this.#over) this.#end() })
    decoder.on('error', (err: Error) => this.#fail(`cannot be decoded: ${err.message}`))
    decoder.write(first)
  }

  #fail(why: string): void {
    if (!this.#over) {
      this.#over = true
      for (const inst of this.#watching) this.#flow.unread(inst, `response Content-Encoding ${this.#coding ?? 'identity'} ${why}`)
      abortAll(this.#observers)
    }
    this.#decoder?.destroy()
  }
}

function abortAll(observers: readonly StreamObserver[]): void {
  for (const o of observers) { try { o.abort?.() } catch (err) { log.debug({ err }, 'stream observer failed') } }
}

/** RFC 1950 §2.2: CM 8 (deflate) and a header checksum; raw deflate (as some servers send it) has neither. */
function isZlibHeader(b: Buffer): boolean {
  return b.length >= 2 && ((b[0] as number) & 0x0f) === 8 && (((b[0] as number) << 8) | (b[1] as number)) % 31 === 0
}

/**
 * Reads a body up to `bound` bytes. Over the bound: `over` is a stream that
 * replays what was read and continues with the rest (for pass-through).
 */
function collect(body: Readable, bound: number, done: (err: Error | null, buf: Buffer, over: Readable | null) => void): void {
  const chunks: Buffer[] = []
  let size = 0
  let finished = false
  const finish = (err: Error | null, over: Readable | null): void => {
    if (finished) return
    finished = true
    body.off('data', onData)
    body.off('end', onEnd)
    body.off('error', onError)
    done(err, err === null && over === null ? Buffer.concat(chunks, size) : Buffer.alloc(0), over)
  }
  const onData = (chunk: Buffer): void => {
    chunks.push(chunk)
    size += chunk.length
    if (size > bound) {
      body.pause()
      finish(null, replay(chunks, body))
    }
  }
  const onEnd = (): void => finish(null, null)
  const onError = (err: Error): void => finish(err, null)
  body.on('data', onData)
  body.on('end', onEnd)
  body.on('error', onError)
}

function replay(head: readonly Buffer[], rest: Readable): Readable {
  async function* gen(): AsyncGenerator<Buffer> {
    for (const b of head) yield b
    for await (const b of rest) yield b as Buffer
  }
  return Readable.from(gen())
}

export type { ExtensionChain }

function noop(): void {}
