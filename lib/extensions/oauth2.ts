// OAuth2 client credentials (RFC 6749 §4.4) as a credential injector: the
// access token is fetched from the provider's token endpoint with the client
// id and secret of a Secret, cached, and refreshed in the background before it
// expires (`refreshBeforeSeconds`, default 60, or half the token's lifetime if
// that is shorter) — one fetch at a time (single-flight), never one per request. Requests wait only when there is no
// valid token at all (the first one, or after the provider was unreachable).
//
// An upstream's 401 to a request that carried the cached token (RFC 6750
// §3.1 invalid_token: revoked, or rotated at the provider before expires_in)
// drops that token, if it is still the one cached, so the next request waits
// for a new one instead of carrying a dead one until it expires. The 401
// itself goes back to the client (retried only if the retry policy lists
// 401). Not before MIN_REFRESH_MS after the token was fetched: an upstream
// that refuses every token costs one fetch a second at most, not one per 401.

import type { CompiledExtension } from '../compile/table.ts'
import { logger } from '../observe/log.ts'
import type { ExtensionHooks, RequestView, ResponseView } from './plugin-api.ts'
import { place, placement, secretValue, type Placement } from './credential-injector.ts'
import { readBounded } from '../read-bounded.ts'
import { INVALID_VALUE } from '../upstream/h1-parser.ts'

const log = logger('oauth2')

/** After a failed fetch, requests fail fast for this long instead of hammering the endpoint. */
const FAILURE_BACKOFF_MS = 1000
/** The earliest a refresh (or a 401's refetch) follows the fetch it replaces, whatever the token's lifetime. */
const MIN_REFRESH_MS = 1000
/**
 * The longest delay a node timer takes: above 2^31-1 ms (24.8 days) it fires
 * after 1 ms (TimeoutOverflowWarning), which made a token of a year's
 * lifetime refetched every millisecond. A later refresh waits in steps.
 */
const MAX_TIMER_MS = 2 ** 31 - 1
/** The lifetime of a token whose answer gives none (or none that is usable). */
const DEFAULT_LIFETIME_S = 300
/** A token answer is a few hundred bytes to a few KiB (JWTs); more fails the fetch. */
const MAX_ANSWER_BYTES = 64 * 1024

/** The clock and timers a TokenSource uses (tests inject their own). */
export interface Timers {
  /** Wall-clock milliseconds (expires_in is relative to now). */
  now(): number
  /** A one-shot timer that does not keep the process alive; returns what `cancel` takes. */
  arm(fn: () => void, ms: number): unknown
  cancel(handle: unknown): void
}

const realTimers: Timers = {
  now: Date.now,
  arm(fn, ms) { const t = setTimeout(fn, ms); t.unref(); return t },
  cancel(handle) { clearTimeout(handle as NodeJS.Timeout) },
}

interface Token {
  readonly rendered: string
  /** When it was fetched (a 401 drops it only MIN_REFRESH_MS after). */
  readonly fetchedAt: number
  readonly expiresAt: number
  /** When the background refresh is due: `refreshBeforeSeconds` ahead of expiry, or half the lifetime if that is shorter. */
  readonly refreshAt: number
}

export class TokenSource {
  readonly #config: Readonly<Record<string, unknown>>
  readonly #clientId: string
  readonly #clientSecret: string
  readonly #refreshBeforeMs: number
  readonly #format: string
  #token: Token | null = null
  #inflight: Promise<Token> | null = null
  #failedAt = 0
  #failure: Error | null = null
  readonly #timers: Timers
  #timer: unknown = null
  #closed = false
  /** Fetches so far (tests: "never fetched per request"). */
  fetches = 0

  constructor(spec: CompiledExtension, block: Readonly<Record<string, unknown>>, path: string, timers: Timers = realTimers) {
    this.#config = block
    this.#timers = timers
    if (typeof block.tokenUrl !== 'string') throw new Error('tokenUrl is required')
    this.#clientId = secretValue(spec, path, 'clientIdKey', 'client_id')
    this.#clientSecret = secretValue(spec, path, 'clientSecretKey', 'client_secret')
    this.#refreshBeforeMs = (typeof block.refreshBeforeSeconds === 'number' ? block.refreshBeforeSeconds : 60) * 1000
    this.#format = placement(block).format
  }

  // hot path
  /** The rendered credential now, or a promise of one when no valid token is cached. */
  current(): string | Promise<string> {
    const t = this.#token
    const now = this.#timers.now()
    if (t !== null && now < t.expiresAt) {
      // Due (the timer may lag): one refresh, single-flight; a failed one is retried after the backoff.
      if (now >= t.refreshAt && now - this.#failedAt >= FAILURE_BACKOFF_MS) void this.refresh().catch(() => {})
      return t.rendered
    }
    if (this.#failure !== null && now - this.#failedAt < FAILURE_BACKOFF_MS) return Promise.reject(this.#failure)
    return this.refresh().then(tok => tok.rendered)
  }

  /**
   * An upstream answered 401 to a request carrying `rendered`: drop it if it
   * is still the cached token and was fetched at least MIN_REFRESH_MS ago,
   * and fetch a new one (requests wait for it). true: dropped.
   */
  refused(rendered: string): boolean {
    const t = this.#token
    if (t === null || t.rendered !== rendered || this.#timers.now() - t.fetchedAt < MIN_REFRESH_MS) return false
    this.#token = null
    log.info({ tokenUrl: this.#config.tokenUrl }, 'oauth2 token refused by the upstream (401): fetching a new one')
    void this.refresh().catch(() => {})
    return true
  }

  /** The rendered credential cached now (valid or not); null when none. */
  cached(): string | null {
    return this.#token === null ? null : this.#token.rendered
  }

  /** Single-flight fetch. */
  refresh(): Promise<Token> {
    if (this.#inflight !== null) return this.#inflight
    const p = this.#fetch().then(
      (tok) => {
        this.#token = tok
        this.#failure = null
        this.#inflight = null
        this.#schedule(tok)
        return tok
      },
      (err: unknown) => {
        this.#inflight = null
        this.#failedAt = this.#timers.now()
        this.#failure = err instanceof Error ? err : new Error(String(err))
        log.warn({ tokenUrl: this.#config.tokenUrl, error: this.#failure.message }, 'oauth2 token fetch failed')
        throw this.#failure
      },
    )
    this.#inflight = p
    return p
  }

  close(): void {
    this.#closed = true
    if (this.#timer !== null) this.#timers.cancel(this.#timer)
  }

  /** Arms the refresh of `tok`: one timer, or a chain of the longest ones a node timer takes until it is due. */
  #schedule(tok: Token): void {
    if (this.#closed) return
    if (this.#timer !== null) this.#timers.cancel(this.#timer)
    const delay = Math.max(0, tok.refreshAt - this.#timers.now())
    this.#timer = delay > MAX_TIMER_MS
      ? this.#timers.arm(() => { this.#timer = null; this.#schedule(tok) }, MAX_TIMER_MS)
      : this.#timers.arm(() => { this.#timer = null; void this.refresh().catch(() => {}) }, delay)
  }

  async #fetch(): Promise<Token> {
    this.fetches++
    const c = this.#config
    const form = new URLSearchParams({ grant_type: 'client_credentials' })
    const scopes = Array.isArray(c.scopes) ? c.scopes.join(' ') : typeof c.scope === 'string' ? c.scope : ''
    if (scopes !== '') form.set('scope', scopes)
    if (typeof c.audience === 'string') form.set('audience', c.audience)
    const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' }
    if (c.authStyle === 'body') {
      form.set('client_id', this.#clientId)
      form.set('client_secret', this.#clientSecret)
    } else {
      // RFC 6749 §2.3.1: HTTP Basic with form-urlencoded id and secret.
      headers.authorization = 'Basic ' + Buffer.from(`${encodeURIComponent(this.#clientId)}:${encodeURIComponent(this.#clientSecret)}`).toString('base64')
    }
    const res = await fetch(c.tokenUrl as string, {
      method: 'POST', headers, body: form.toString(),
      signal: AbortSignal.timeout(typeof c.timeoutMs === 'number' ? c.timeoutMs : 5000),
    })
    if (!res.ok) {
      void res.body?.cancel().catch(() => {})
      throw new Error(`token endpoint answered ${res.status}`)
    }
    const text = await readBounded(res, MAX_ANSWER_BYTES, 'token endpoint')
    let body: Record<string, unknown>
    try { body = JSON.parse(text) as Record<string, unknown> } catch { throw new Error('token endpoint answered non-JSON') }
    if (typeof body.access_token !== 'string') throw new Error('token endpoint answer has no access_token')
    // RFC 6749 §A.12: visible characters. One with CR, LF or NUL could not be
    // sent: the fetch fails (failOpen decides), not every request it would go on.
    if (INVALID_VALUE.test(body.access_token)) throw new Error('token endpoint answer: access_token is not a valid field value')
    const now = this.#timers.now()
    const lifetimeMs = lifetimeOf(body.expires_in) * 1000
    // A lead as long as the lifetime (expires_in 60, the default lead 60 s)
    // would make every token due at once: a fetch per request, and one a
    // second while idle. Refresh at half the lifetime then.
    const lead = Math.min(this.#refreshBeforeMs, lifetimeMs / 2)
    return {
      rendered: this.#format.split('{value}').join(body.access_token),
      fetchedAt: now,
      expiresAt: now + lifetimeMs,
      refreshAt: Math.max(now + MIN_REFRESH_MS, now + lifetimeMs - lead),
    }
  }
}

/**
 * RFC 6749 §5.1 expires_in, in seconds (a number, or digits in a string as
 * some providers send it). Absent, not a number, 0 or negative: unknown, the
 * default lifetime. Taken as given, a lifetime of 0 or less made every token
 * expired on arrival: a fetch per request, and one a second while idle.
 */
function lifetimeOf(expiresIn: unknown): number {
  const n = typeof expiresIn === 'number' ? expiresIn : typeof expiresIn === 'string' && expiresIn.trim() !== '' ? Number(expiresIn) : NaN
  return Number.isFinite(n) && n > 0 ? n : DEFAULT_LIFETIME_S
}

/** Whether the request `req` went out with `rendered` where `p` places it. */
function carries(req: RequestView, p: Placement, rendered: string): boolean {
  if (p.query === null) return req.headers[p.header as string] === rendered
  // setQueryParam puts the credential last.
  return req.path.endsWith(`?${encodeURIComponent(p.query)}=${encodeURIComponent(rendered)}`) || req.path.endsWith(`&${encodeURIComponent(p.query)}=${encodeURIComponent(rendered)}`)
}

export function oauth2(spec: CompiledExtension, timers: Timers = realTimers): ExtensionHooks {
  const nested = spec.config.oauth2 !== undefined
  const block = (nested ? { ...spec.config, ...(spec.config.oauth2 as Record<string, unknown>) } : spec.config)
  const source = new TokenSource(spec, block, nested ? 'oauth2.secretRef' : 'secretRef', timers)
  const p = placement(block)
  // Warm the cache at load: the first request need not wait.
  void source.refresh().catch(() => {})
  return {
    requestHeaders(req: RequestView) {
      const v = source.current()
      if (typeof v === 'string') return place(req, p, v)
      return v.then(r => place(req, p, r))
    },
    // hot path (response-headers phase)
    responseHeaders(req: RequestView, res: ResponseView) {
      if (res.status !== 401) return
      const cached = source.cached()
      if (cached !== null && carries(req, p, cached)) source.refused(cached)
    },
    close() { source.close() },
  }
}
