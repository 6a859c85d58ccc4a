// A thin client for the Kubernetes API on top of @kubernetes/client-node's
// KubeConfig: it does authentication and TLS (in-cluster service account token,
// kubeconfig certificates, exec plugins) and hands us an undici dispatcher. We
// speak JSON to paths we build ourselves (kube-resources.ts), so one helper
// serves every kind, core or custom, list or status write, without discovery.
//
// client-node builds a new undici Agent for every request, so each request
// would open (and leave open) a connection of its own: a TLS handshake per
// status write, thousands at a leader's start. Requests here share one Agent
// instead, kept for DISPATCHER_MAX_AGE_MS so rotated client certificates and
// CAs (kubeconfig exec plugins, a re-read CA file) are picked up, and dropped at
// once after a failed request. Watches keep their own (long-lived) connections.
// Requests go through the Agent's own request() rather than fetch(): a status
// write is a few hundred bytes of JSON, and fetch's streams and WebIDL layers
// cost several times the request itself.

import type { KubernetesObject, User } from '@kubernetes/client-node'
import { HttpMethod, KubeConfig, RequestContext, Watch } from '@kubernetes/client-node'
import fs from 'node:fs'
import { STATUS_CODES, type IncomingHttpHeaders } from 'node:http'
import path from 'node:path'
import { parse as parseYaml } from 'yaml'
import type { Duplex } from 'node:stream'
import { getGlobalDispatcher, type Dispatcher } from 'undici'
import { ErrorCode, SallyportError } from '../errors.ts'

/** A non-2xx answer from the API server (or no answer: statusCode 0). */
export class KubeApiError extends SallyportError {
  /** HTTP status; ListWatch reads `statusCode === 410` to relist. */
  readonly statusCode: number
  readonly reason: string
  /** How long the server asked us to wait (`Retry-After`, on a 429 or 503), or null. */
  readonly retryAfterMs: number | null
  constructor(statusCode: number, reason: string, message: string, options?: { cause?: unknown; retryAfterMs?: number | null }) {
    super(ErrorCode.CONFIG_READ, message, options?.cause === undefined ? undefined : { cause: options.cause })
    this.statusCode = statusCode
    this.reason = reason
    this.retryAfterMs = options?.retryAfterMs ?? null
  }
}

/** The longest Retry-After honoured: a server asking for more is asked again after this. */
const MAX_RETRY_AFTER_MS = 60_000

/**
 * RFC 9110 §10.2.3 Retry-After: delay-seconds or an HTTP-date, as milliseconds
 * from now (at most MAX_RETRY_AFTER_MS), or null when absent or unreadable.
 */
export function retryAfterMs(value: string | string[] | undefined, now = Date.now()): number | null {
  if (typeof value !== 'string') return null
  const v = value.trim()
  if (/^\d+$/.test(v)) return Math.min(Number(v) * 1000, MAX_RETRY_AFTER_MS)
  const at = /^[A-Za-z]{3}, /.test(v) ? Date.parse(v) : Number.NaN // an HTTP-date starts with its day name
  if (Number.isNaN(at)) return null
  return Math.min(Math.max(0, at - now), MAX_RETRY_AFTER_MS)
}

export interface RequestOptions {
  readonly query?: Readonly<Record<string, string | undefined>>
  readonly body?: unknown
  /** Default application/json; merge patches pass application/merge-patch+json. */
  readonly contentType?: string
  /** Abort the request (the Lease requests of leader election are bounded by the renew deadline). */
  readonly signal?: AbortSignal
}

/** No answer (headers, or silence within the body) for this long: the request fails. */
const REQUEST_TIMEOUT_MS = 30_000

/** How long requests share one connection pool before a fresh one (new TLS material) takes over. */
const DISPATCHER_MAX_AGE_MS = 5 * 60_000

export class KubeClient {
  readonly config: KubeConfig
  #shared: { readonly dispatcher: Dispatcher; readonly since: number } | null = null
  readonly #tokenFile = new TokenFileAuth()

  constructor(config: KubeConfig) {
    this.config = config
    config.addAuthenticator(this.#tokenFile)
  }

  /** In the cluster: the Pod's service account (token, CA, KUBERNETES_SERVICE_HOST/PORT). */
  static inCluster(): KubeClient {
    const kc = new KubeConfig()
    kc.loadFromCluster()
    // client-node reads the projected token again only once a minute, even after a 401.
    kc.users = kc.users.map((u) => {
      const file = (u.authProvider as { config?: { tokenFile?: unknown } } | undefined)?.config?.tokenFile
      return typeof file === 'string' ? withTokenFile(u, file) : u
    })
    return new KubeClient(kc)
  }

  static fromFile(file: string): KubeClient {
    const kc = new KubeConfig()
    kc.loadFromFile(file)
    // client-node does not know the kubeconfig's `tokenFile` (client-go's name for it), and reads
    // its own `token-file` once, at load: the current user's token file is ours to read.
    const tokenFile = kubeconfigTokenFile(fs.readFileSync(file, 'utf8'), kc.getCurrentUser()?.name ?? null)
    if (tokenFile !== null) {
      const absolute = path.resolve(path.dirname(file), tokenFile)
      kc.users = kc.users.map((u) => (u.name === kc.getCurrentUser()?.name ? withTokenFile(u, absolute) : u))
    }
    return new KubeClient(kc)
  }

  server(): string {
    const cluster = this.config.getCurrentCluster()
    if (cluster === null) throw new KubeApiError(0, 'NoCluster', 'the kubeconfig has no current cluster')
    return cluster.server
  }

  async request<T>(method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', path: string, options: RequestOptions = {}): Promise<T> {
    const url = new URL(this.server().replace(/\/$/, '') + path)
    for (const [k, v] of Object.entries(options.query ?? {})) if (v !== undefined && v !== '') url.searchParams.set(k, v)
    const ctx = new RequestContext(url.toString(), HttpMethod[method])
    try {
      await this.config.applySecurityAuthentication(ctx)
    } catch (err) {
      throw err instanceof KubeApiError ? err : new KubeApiError(0, 'NoCredentials', `${method} ${path}: ${errorText(err)}`, { cause: err })
    }
    const headers: Record<string, string> = { ...ctx.getHeaders(), accept: 'application/json' }
    let body: string | undefined
    if (options.body !== undefined) {
      body = JSON.stringify(options.body)
      headers['content-type'] = options.contentType ?? 'application/json'
    }
    const dispatcher = this.#dispatcher(ctx.getDispatcher() as Dispatcher | undefined)
    let status: number
    let text: string
    let retryAfter: string | string[] | undefined
    try {
      const response = await (dispatcher ?? getGlobalDispatcher()).request({
        origin: url.origin, path: `${url.pathname}${url.search}`, method, headers, body,
        headersTimeout: REQUEST_TIMEOUT_MS, bodyTimeout: REQUEST_TIMEOUT_MS, signal: options.signal,
      })
      status = response.statusCode
      retryAfter = response.headers['retry-after']
      text = await response.body.text()
    } catch (err) {
      this.#drop(dispatcher)
      throw new KubeApiError(0, 'Unreachable', `${method} ${path}: ${errorText(err)}`, { cause: err })
    }
    if (status === 401) { // credentials may have rotated
      this.#drop(dispatcher)
      this.#tokenFile.stale()
    }
    if (status < 200 || status > 299) {
      let reason = STATUS_CODES[status] ?? String(status)
      let message = text.slice(0, 500)
      try {
        const s = JSON.parse(text) as { reason?: string; message?: string }
        reason = s.reason ?? reason
        message = s.message ?? message
      } catch { /* not a Status object */ }
      throw new KubeApiError(status, reason, `${method} ${path}: ${status} ${message}`, { retryAfterMs: status === 429 || status === 503 ? retryAfterMs(retryAfter) : null })
    }
    return (text === '' ? null : JSON.parse(text)) as T
  }

  /** Close the pooled connections (in-flight requests finish first). */
  close(): void {
    const shared = this.#shared
    this.#shared = null
    if (shared !== null) void shared.dispatcher.close().catch(() => {})
  }

  /**
   * The Agent this request goes through: the shared one while it is young,
   * else `fresh` (the one client-node just built, with the current TLS
   * material) becomes the shared one. undefined: plain HTTP without TLS
   * options, undici's global (pooled) dispatcher.
   */
  #dispatcher(fresh: Dispatcher | undefined): Dispatcher | undefined {
    if (fresh === undefined) return undefined
    const now = performance.now()
    const shared = this.#shared
    if (shared !== null && now - shared.since < DISPATCHER_MAX_AGE_MS) return shared.dispatcher
    if (shared !== null) void shared.dispatcher.close().catch(() => {})
    this.#shared = { dispatcher: fresh, since: now }
    return fresh
  }

  #drop(dispatcher: Dispatcher | undefined): void {
    if (dispatcher === undefined || this.#shared?.dispatcher !== dispatcher) return
    this.#shared = null
    void dispatcher.close().catch(() => {}) // requests still on it finish; new ones get a fresh Agent
  }

  /** A watcher that asks for bookmarks, lets the server end the watch first, and gives up on a silent one. */
  watcher(options: WatcherOptions = {}): BookmarkWatch {
    return new BookmarkWatch(this.config, { ...options, onUnauthorized: () => this.#tokenFile.stale() })
  }
}

type Authenticator = Parameters<KubeConfig['addAuthenticator']>[0]

/** The authProvider name of a user whose bearer token TokenFileAuth reads from `config.path`. */
const TOKEN_FILE_PROVIDER = 'sallyport-token-file'

/** A token read from its file is used this long before the file is read again (at once after a 401). */
const TOKEN_RECHECK_MS = 1_000

function withTokenFile(user: User, file: string): User {
  const { token: _token, authProvider: _provider, ...rest } = user
  return { ...rest, authProvider: { name: TOKEN_FILE_PROVIDER, config: { path: file } } }
}

/** The current user's `tokenFile` (client-go) or `token-file` (client-node) in a kubeconfig's text, unless it also gives a `token` (which wins, as in client-go). */
export function kubeconfigTokenFile(text: string, userName: string | null): string | null {
  if (userName === null) return null
  let doc: unknown
  try { doc = parseYaml(text) } catch { return null }
  const users = (doc as { users?: unknown } | null)?.users
  if (!Array.isArray(users)) return null
  const entry = users.find((u: unknown) => (u as { name?: unknown } | null)?.name === userName) as { user?: Record<string, unknown> } | undefined
  const user = entry?.user
  if (user === undefined || user === null || (typeof user.token === 'string' && user.token !== '')) return null
  const file = user.tokenFile ?? user['token-file']
  return typeof file === 'string' && file !== '' ? file : null
}

/**
 * The bearer token of a file (a projected service account token the kubelet
 * rotates, a kubeconfig's tokenFile a tool rewrites), read again a second after
 * the last read and at once after a 401 (client-go's cached token source also
 * starts over on a 401). Surrounding whitespace is not part of it; a file that
 * cannot be read (or is empty, mid-rewrite) leaves the last token in use.
 */
class TokenFileAuth implements Authenticator {
  #path = ''
  #token = ''
  #readAt = Number.NEGATIVE_INFINITY

  isAuthProvider(user: User): boolean {
    return (user.authProvider as { name?: unknown } | undefined)?.name === TOKEN_FILE_PROVIDER
  }

  async applyAuthentication(user: User, opts: { headers?: unknown }): Promise<void> {
    const file = String((user.authProvider as { config: { path: unknown } }).config.path)
    if (file !== this.#path || performance.now() - this.#readAt >= TOKEN_RECHECK_MS) {
      let token = ''
      let failure: unknown = null
      try { token = (await fs.promises.readFile(file, 'utf8')).trim() } catch (err) { failure = err }
      if (token !== '' || file !== this.#path) {
        this.#path = file
        this.#token = token
      }
      this.#readAt = performance.now()
      if (this.#token === '') throw new KubeApiError(0, 'NoCredentials', `no bearer token in ${file}${failure === null ? '' : `: ${errorText(failure)}`}`, failure === null ? undefined : { cause: failure })
    }
    const headers = (opts.headers ??= {}) as Record<string, string>
    headers.Authorization = `Bearer ${this.#token}`
  }

  /** The token was refused: read the file again before the next request. */
  stale(): void {
    this.#readAt = Number.NEGATIVE_INFINITY
  }
}

/** How the last watch went: how long it was open and how many events (bookmarks too) it delivered. */
export interface WatchOutcome { readonly lastedMs: number; readonly events: number }

/** A watch given up for silence: how long it was open, what it delivered, and whether this watcher's server was ever seen to send a bookmark. */
export interface SilentWatch extends WatchOutcome { readonly silentMs: number; readonly serverSendsBookmarks: boolean }

export interface WatcherOptions {
  /** Nothing received (no event, no bookmark, no headers) for this long: the watch is aborted and resumed (default WATCH_SILENCE_MS). */
  readonly silenceMs?: number
  /** Told of each watch given up for silence (ListWatch then watches again from its last resourceVersion). */
  readonly onSilent?: (watch: SilentWatch) => void
  /** Applied to each ADDED, MODIFIED and DELETED event's object before it is handed on (null: none). */
  readonly transform?: ((obj: KubernetesObject) => KubernetesObject) | null
  /** Told when a watch is refused with 401 (KubeClient: read the token file again). */
  readonly onUnauthorized?: () => void
  /** Told of the resourceVersion of every event received (BOOKMARKs too): the newest state seen. */
  readonly onResourceVersion?: ((resourceVersion: string) => void) | null
}

/**
 * The longest a watch may receive nothing before it is given up. The API server
 * sends a BOOKMARK on every watch that asked for them about once a minute (the
 * watch cache's bookmark frequency), so a healthy quiet watch never gets near
 * it; three missed bookmarks mean the connection is dead (half-open after a NAT
 * or load balancer dropped it, an API server VIP that moved). Over HTTP/1.1 we
 * have no pings: client-go notices the same within 45 s through its HTTP/2
 * health check (ReadIdleTimeout 30 s + PingTimeout 15 s).
 */
export const WATCH_SILENCE_MS = 3 * 60_000

// client-node's Watch sends only the query parameters ListWatch gives it; bookmarks
// (allowWatchBookmarks) keep the resourceVersion fresh on quiet resources, so a
// reconnect resumes close to now instead of replaying or hitting 410, and keep
// a healthy watch from looking silent. Its inactivity timeout (requestTimeoutMs,
// reset by every chunk received) is our silence bound: when it fires, ListWatch
// watches again at once from the last resourceVersion (a 410 then relists). The
// server ends each watch after timeoutSeconds (spread 5–10 min like client-go's
// reflector). It remembers how its last watch went, for the reconnect delay
// (kube-source.ts).
export class BookmarkWatch extends Watch {
  #last: WatchOutcome | null = null
  /** What refused the watch request in flight, if anything did (RefusalRecorder fills it in). */
  readonly #refusal: { current: Refusal | null }
  readonly #silenceMs: number
  readonly #onSilent: ((watch: SilentWatch) => void) | null
  readonly #transform: ((obj: KubernetesObject) => KubernetesObject) | null
  readonly #onUnauthorized: (() => void) | null
  readonly #onResourceVersion: ((resourceVersion: string) => void) | null
  /** A BOOKMARK arrived on one of this watcher's watches: its server sends them, so silence means a dead connection. */
  #bookmarked = false

  constructor(config: KubeConfig, options: WatcherOptions = {}) {
    const refusal: { current: Refusal | null } = { current: null }
    super(recordingRefusals(config, refusal))
    this.#refusal = refusal
    this.#silenceMs = options.silenceMs ?? WATCH_SILENCE_MS
    this.#onSilent = options.onSilent ?? null
    this.#transform = options.transform ?? null
    this.#onUnauthorized = options.onUnauthorized ?? null
    this.#onResourceVersion = options.onResourceVersion ?? null
    ;(this as unknown as { requestTimeoutMs: number }).requestTimeoutMs = this.#silenceMs
  }

  /** The last watch that ended; null before one has. */
  lastWatch(): WatchOutcome | null {
    return this.#last
  }

  override async watch(path: string, queryParams: Record<string, string | number | boolean | undefined>, callback: Parameters<Watch['watch']>[2], done: Parameters<Watch['watch']>[3]): Promise<AbortController> {
    const timeoutSeconds = 300 + Math.floor(Math.random() * 300)
    const started = performance.now()
    let events = 0
    /** An ERROR event other than 410 (which ListWatch answers by relisting): the watch failed. */
    let failure: KubeApiError | null = null
    let ended = false
    const refusal = this.#refusal
    refusal.current = null
    const end = (err: unknown): void => {
      if (ended) return
      ended = true
      // client-node's Error carries the status code alone: the answer's Retry-After and Status
      // message (a 429 from API Priority and Fairness, a 503) come from what the recorder kept.
      const refused = refusal.current
      refusal.current = null
      const code = (err as { statusCode?: unknown } | null)?.statusCode
      if (refused !== null && typeof code === 'number' && refused.status === code) err = refusalError(path, refused)
      const last = { lastedMs: performance.now() - started, events }
      this.#last = last
      // client-node reports its inactivity timeout as a TimeoutError (and ListWatch resumes at once).
      if ((err as { name?: unknown } | null)?.name === 'TimeoutError') this.#onSilent?.({ ...last, silentMs: this.#silenceMs, serverSendsBookmarks: this.#bookmarked })
      if ((err as { statusCode?: unknown } | null)?.statusCode === 401) this.#onUnauthorized?.()
      // The server ends a watch after an ERROR event: hand the Status on as
      // the watch's error (ListWatch reports it; kube-source backs off), not
      // as a clean end it would resume from at once.
      done(err ?? failure)
    }
    try {
      return await super.watch(path, { ...queryParams, allowWatchBookmarks: true, timeoutSeconds },
        (phase, obj, watchObj) => {
          if (phase === 'ERROR') {
            failure = watchFailure(path, obj)
            if (failure === null) events++
            callback(phase, obj, watchObj)
            return
          }
          events++
          if (phase === 'BOOKMARK') this.#bookmarked = true
          const rv = (obj as KubernetesObject | null)?.metadata?.resourceVersion
          if (rv !== undefined && rv !== '') this.#onResourceVersion?.(rv)
          const transform = this.#transform
          callback(phase, transform !== null && (phase === 'ADDED' || phase === 'MODIFIED' || phase === 'DELETED') ? transform(obj as KubernetesObject) : obj, watchObj)
        },
        end)
    } catch (err) {
      // Credentials that could not be had (a token file unreadable, an exec plugin failing) reject
      // before client-node's watch reaches its request, and it never calls done: ListWatch would
      // wait for an end that never comes (and the rejection would go unhandled).
      end(err instanceof KubeApiError ? err : new KubeApiError(0, 'NoCredentials', `watch ${path}: ${errorText(err)}`, { cause: err }))
      return new AbortController()
    }
  }
}

/** The answer that refused a watch request: its status, Retry-After and (the start of) its body. */
interface Refusal { readonly status: number; readonly retryAfter: string | string[] | undefined; readonly body: string }

/** The most of a refusal's body kept: a Status is a few hundred bytes. */
const REFUSAL_BODY_MAX = 16 * 1024

/**
 * The KubeConfig a BookmarkWatch hands client-node's Watch: the same, but each
 * watch request's dispatcher (the one authentication chose, or undici's global
 * one) goes through a RefusalRecorder, so a refused request's headers and body
 * are kept in `slot` before client-node reduces the answer to its status code.
 */
function recordingRefusals(config: KubeConfig, slot: { current: Refusal | null }): KubeConfig {
  const interceptor: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) => dispatch(opts, new RefusalRecorder(handler, slot))
  return new Proxy(config, {
    get(target, prop) {
      if (prop === 'applySecurityAuthentication') {
        return async (ctx: RequestContext): Promise<void> => {
          await target.applySecurityAuthentication(ctx)
          ctx.setDispatcher(((ctx.getDispatcher() as Dispatcher | undefined) ?? getGlobalDispatcher()).compose(interceptor))
        }
      }
      const value: unknown = Reflect.get(target, prop, target)
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value
    },
  })
}

/**
 * Passes a 2xx answer (a watch stream) straight through. Any other final
 * answer is held until its body has arrived (at most REFUSAL_BODY_MAX of it is
 * kept), recorded, then handed on whole: client-node aborts the request as
 * soon as it sees the status, which would otherwise cut the body off unread.
 */
class RefusalRecorder implements Dispatcher.DispatchHandler {
  readonly #handler: Dispatcher.DispatchHandler
  readonly #slot: { current: Refusal | null }
  #held: { readonly status: number; readonly headers: IncomingHttpHeaders; readonly statusMessage: string | undefined; readonly chunks: Buffer[]; size: number } | null = null

  constructor(handler: Dispatcher.DispatchHandler, slot: { current: Refusal | null }) {
    this.#handler = handler
    this.#slot = slot
  }

  onRequestStart(controller: Dispatcher.DispatchController, context: unknown): void { this.#handler.onRequestStart?.(controller, context) }
  onRequestUpgrade(controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders, socket: Duplex): void {
    this.#handler.onRequestUpgrade?.(controller, statusCode, headers, socket)
  }
  onResponseStarted(): void { (this.#handler as { onResponseStarted?: () => void }).onResponseStarted?.() }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders, statusMessage?: string): void {
    if (statusCode < 300 || this.#held !== null) { this.#handler.onResponseStart?.(controller, statusCode, headers, statusMessage); return }
    this.#held = { status: statusCode, headers, statusMessage, chunks: [], size: 0 }
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const held = this.#held
    if (held === null) { this.#handler.onResponseData?.(controller, chunk); return }
    if (held.size < REFUSAL_BODY_MAX) { held.chunks.push(chunk); held.size += chunk.length }
  }

  onResponseEnd(controller: Dispatcher.DispatchController, trailers: IncomingHttpHeaders): void {
    const held = this.#held
    if (held !== null) {
      const body = Buffer.concat(held.chunks)
      this.#slot.current = { status: held.status, retryAfter: held.headers['retry-after'], body: body.subarray(0, REFUSAL_BODY_MAX).toString('utf8') }
      this.#handler.onResponseStart?.(controller, held.status, held.headers, held.statusMessage)
      if (body.length > 0) this.#handler.onResponseData?.(controller, body)
    }
    this.#handler.onResponseEnd?.(controller, trailers)
  }

  onResponseError(controller: Dispatcher.DispatchController, error: Error): void {
    const held = this.#held
    if (held !== null) this.#slot.current = { status: held.status, retryAfter: held.headers['retry-after'], body: '' }
    this.#handler.onResponseError?.(controller, error)
  }
}

/** A refused watch request as an error like a refused list's: the Status's reason and message, and the Retry-After of a 429 or 503. */
function refusalError(path: string, r: Refusal): KubeApiError {
  let reason = STATUS_CODES[r.status] ?? String(r.status)
  let message = r.body.slice(0, 500)
  try {
    const s = JSON.parse(r.body) as { reason?: unknown; message?: unknown }
    if (typeof s.reason === 'string' && s.reason !== '') reason = s.reason
    if (typeof s.message === 'string') message = s.message.slice(0, 500)
  } catch { /* not a Status object */ }
  return new KubeApiError(r.status, reason, `watch ${path}: ${r.status} ${message}`, { retryAfterMs: r.status === 429 || r.status === 503 ? retryAfterMs(r.retryAfter) : null })
}

/**
 * The error an ERROR watch event stands for, from its Status; null for a 410
 * (history compacted: ListWatch relists, a routine end).
 */
function watchFailure(path: string, obj: unknown): KubeApiError | null {
  const s = (typeof obj === 'object' && obj !== null ? obj : {}) as { code?: unknown; reason?: unknown; message?: unknown; details?: { retryAfterSeconds?: unknown } }
  const code = typeof s.code === 'number' ? s.code : 500
  if (code === 410) return null
  const reason = typeof s.reason === 'string' && s.reason !== '' ? s.reason : (STATUS_CODES[code] ?? String(code))
  const message = typeof s.message === 'string' ? s.message.slice(0, 500) : reason
  const after = s.details?.retryAfterSeconds
  return new KubeApiError(code, reason, `watch ${path}: ERROR event ${code} ${message}`, { retryAfterMs: typeof after === 'number' && after > 0 ? Math.min(after * 1000, MAX_RETRY_AFTER_MS) : null })
}

/**
 * Whether a list failed because the resourceVersion it asked for is not
 * available on the server that answered: compacted away (410 Expired), or
 * ahead of its watch cache (504, "Too large resource version": another API
 * server of the control plane that has not caught up, an etcd restored from a
 * backup). client-go's reflector then lists again at once with none (a quorum
 * read); apimachinery's IsTooLargeResourceVersionError reads the same cause.
 */
export function isResourceVersionUnavailable(err: unknown): boolean {
  if (!(err instanceof KubeApiError)) return false
  if (err.statusCode === 410) return true
  return err.statusCode === 504 && /too large resource version/i.test(err.message)
}

export function errorText(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as NodeJS.ErrnoException).code ?? ((err.cause as NodeJS.ErrnoException | undefined)?.code)
    return code === undefined ? err.message : `${code}: ${err.message}`
  }
  return String(err)
}
