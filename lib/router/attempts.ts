// Retries and priority failover of one request (issue 6). A rule whose
// backends span several priority levels, that has a retry policy, or that
// sends to a parent gateway gets an AttemptPlan (built once per rule object);
// the request then goes through an AttemptLoop instead of one forward().
//
// - Failover: levels 0, 1, 2… (backendRef priority; a Backend with Envoy
//   Gateway `fallback: true` sits below every non-fallback one). Traffic goes
//   to the lowest level with an available backend (an endpoint neither
//   ejected nor failing checks, the backend not marked overloaded — see
//   upstream/circuit-breaker.ts for the overload threshold); when none is
//   available the primary level is used anyway (panic routing).
// - Retries decide on the error code or the status, never on message text.
//   A client abort is never retried. Once response headers went downstream
//   nothing is retried (response bodies are never buffered). A retry goes to
//   another backend when one is available (the failed one is avoided), and is
//   admitted by the target backend's retry budget and maxParallelRetries.
//   Within a backend, a retry goes to an endpoint the request has not tried
//   while one is available (UpstreamRequest.avoid; Envoy Gateway sets Envoy's
//   previous_hosts retry predicate on every retry policy).
// - Connect failures are retried in one place: when the plan retries them
//   (connect-failure trigger, retries > 0) the registry's endpoint fallback is
//   off for these requests (UpstreamRequest.connectFallback false) and each
//   connect failure is one counted retry, budgeted like any other, to the next
//   pick (another backend if available, else the balancer's next endpoint).
//   Without such a policy the registry tries each endpoint of the backend once.
// - Parent mode (a Backend that is another egress gateway): only failures to
//   connect are retried (the request never left), never the request itself;
//   the parent does request-level retries (egress proposal, Parent Mode).
// - Backoff: an HTTPRoute retry.backoff is a minimum (Gateway API
//   HTTPRouteRetry: "not retried before the configured minimum duration"):
//   the n-th retry waits d = min(max, backoff × 2^n), never below backoff,
//   plus up to d/2 of jitter above it. Otherwise (BackendTrafficPolicy
//   perRetry.backOff, or no backoff given) full jitter as Envoy does,
//   random(0, min(max, base × 2^n)). Retry-After on a retried answer is
//   honoured when no other backend can take the retry, up to
//   RETRY_AFTER_CAP_MS (a longer wait answers the client instead).

import { ErrorCode, SallyportError } from '../errors.ts'
import type { Cluster, ExtensionChain, RouteRule, RouteTable, WeightedCluster } from '../compile/table.ts'
import type { OutgoingHeaders, ResilienceView, UpstreamHandler, UpstreamRequest, UpstreamResponse, UpstreamTunnel, Upstreams } from '../upstream/types.ts'
import { Cancel } from '../upstream/cancel.ts'
import { PER_TRY_TIMEOUT, STREAM_REFUSED, codeOf } from '../upstream/normalize-error.ts'
import { upstreamFailovers, upstreamRetries, upstreamRetryBudgetExhausted } from '../observe/resilience-metrics.ts'
import { applyHeaderEdits } from './headers.ts'
import { ReplayBody } from './replay-body.ts'

export const DEFAULT_BACKOFF_BASE_MS = 25
export const RETRY_AFTER_CAP_MS = 10_000
/** Envoy Gateway's retryOn default when a BackendTrafficPolicy retry names no triggers. */
const DEFAULT_TRIGGERS: readonly string[] = ['connect-failure', 'refused-stream', 'retriable-status-codes']
const DEFAULT_CODES: readonly number[] = [503]
/**
 * Envoy Gateway's gRPC retryOn triggers and the grpc-status each stands for
 * (Envoy's retry_on `cancelled`, `deadline-exceeded`, `internal`,
 * `resource-exhausted`, `unavailable`): Envoy reads them from the response
 * head only, so a trailers-only answer, never a status in trailers after a
 * body (that response is already on its way to the client).
 */
const GRPC_TRIGGERS: Readonly<Record<string, string>> = {
  cancelled: '1', 'deadline-exceeded': '4', 'resource-exhausted': '8', internal: '13', unavailable: '14',
}
/** Connect retries of a parent-mode backend without a retry policy. */
const PARENT_CONNECT_RETRIES = 2

export interface RetryPlan {
  readonly retries: number
  readonly connect: boolean
  readonly reset: boolean
  readonly refusedStream: boolean
  readonly timeout: boolean
  readonly status5xx: boolean
  readonly gatewayError: boolean
  readonly codes: ReadonlySet<number>
  /** gRPC statuses retried when an upstream answers trailers-only with one (the gRPC triggers); empty: none. */
  readonly grpcStatuses: ReadonlySet<string>
  readonly baseMs: number
  readonly maxMs: number
  /** HTTPRoute retry.backoff: no retry goes out sooner; 0: none (full jitter from 0). */
  readonly minMs: number
  /** null: no per-try timeout. */
  readonly perTryMs: number | null
}

export interface AttemptPlan {
  /** Backends by failover level, lowest (primary) first; denied backends left out. */
  readonly levels: ReadonlyArray<readonly WeightedCluster[]>
  readonly priorities: readonly number[]
  readonly retry: RetryPlan
  readonly routeLabel: string
  /**
   * Issue 7: an attempt may need another chain run — the backends' extension
   * chains differ, or one chain serves backends that differ in what it reads
   * (chainInputsDiffer).
   */
  readonly mixedChains: boolean
}

const NO_RETRY: RetryPlan = {
  retries: 0, connect: false, reset: false, refusedStream: false, timeout: false, status5xx: false, gatewayError: false,
  codes: new Set(), grpcStatuses: new Set(), baseMs: DEFAULT_BACKOFF_BASE_MS, maxMs: DEFAULT_BACKOFF_BASE_MS * 10, minMs: 0, perTryMs: null,
}

/** HTTPRoute retry and BackendTrafficPolicy retry (merged by compile into RetrySpec) → what to retry on. */
export function retryPlanOf(rule: RouteRule): RetryPlan {
  const spec = rule.retry
  if (spec === null) return NO_RETRY
  const p = spec.policy
  // Gateway API HTTPRoute retry: listed codes, plus connection errors (disconnect, reset, timeout, TCP failure).
  const fromRoute = p === null
  const triggers = new Set(fromRoute ? ['connect-failure', 'reset', 'timeout', 'retriable-status-codes'] : p.triggers.length > 0 ? p.triggers : DEFAULT_TRIGGERS)
  const codes = spec.codes.length > 0 ? spec.codes : fromRoute ? [] : p.httpStatusCodes.length > 0 ? p.httpStatusCodes : triggers.has('retriable-status-codes') ? DEFAULT_CODES : []
  const baseMs = spec.backoffMs ?? p?.backoffBase ?? DEFAULT_BACKOFF_BASE_MS
  // Envoy's RetryStateImpl::wouldRetryFromReset: `reset`, `5xx` and `gateway-error` retry any
  // reset — a refused connection, a dropped one, a try cut by its per-try timeout (a local reset).
  const anyReset = triggers.has('reset') || triggers.has('5xx') || triggers.has('gateway-error')
  // `reset-before-request`: a reset before any byte went upstream — a refused connection, a refused stream.
  const beforeRequest = triggers.has('reset-before-request')
  const statuses = new Set(triggers.has('retriable-status-codes') || fromRoute ? codes : [])
  // `retriable-4xx`: Envoy's only retriable 4xx is 409 (a conflict another try may not meet).
  if (triggers.has('retriable-4xx')) statuses.add(409)
  return {
    retries: Math.max(0, spec.attempts),
    connect: anyReset || beforeRequest || triggers.has('connect-failure'),
    reset: anyReset,
    refusedStream: beforeRequest || triggers.has('refused-stream'),
    timeout: anyReset || triggers.has('timeout'),
    status5xx: triggers.has('5xx'),
    gatewayError: triggers.has('gateway-error'),
    codes: statuses,
    grpcStatuses: new Set([...triggers].flatMap((name) => GRPC_TRIGGERS[name] === undefined ? [] : [GRPC_TRIGGERS[name]])),
    baseMs,
    maxMs: p?.backoffMax ?? baseMs * 10,
    minMs: spec.backoffMs ?? 0,
    perTryMs: p?.perTryTimeout ?? null,
  }
}

const plans = new WeakMap<RouteRule, AttemptPlan | null>()

/** The rule's plan, or null when one forward() does (one level, no retries, no parent gateway). Built once per rule object. */
// hot path
export function attemptPlanOf(rule: RouteRule, table: RouteTable): AttemptPlan | null {
  let plan = plans.get(rule)
  if (plan === undefined) {
    plan = buildPlan(rule, table)
    plans.set(rule, plan)
  }
  return plan
}

function buildPlan(rule: RouteRule, table: RouteTable): AttemptPlan | null {
  const backends = rule.backends
  if (backends === null || backends.length === 0) return null
  const levelOf = new Map<WeightedCluster, number>()
  let maxRegular = 0
  let parent = false
  for (const b of backends) {
    const c = b.cluster === null ? undefined : table.clusters.get(b.cluster)
    if (c?.parentGateway === true) parent = true
    if (c?.fallback !== true) maxRegular = Math.max(maxRegular, b.priority)
  }
  for (const b of backends) {
    if (('denied' in b && b.denied !== undefined) || b.weight <= 0) continue
    const c = b.cluster === null ? undefined : table.clusters.get(b.cluster)
    // Envoy Gateway Backend `fallback`: used only when the others are unavailable.
    levelOf.set(b, c?.fallback === true ? Math.max(b.priority, maxRegular + 1) : b.priority)
  }
  const priorities = [...new Set(levelOf.values())].sort((a, b) => a - b)
  let retry = retryPlanOf(rule)
  if (priorities.length <= 1 && retry.retries === 0 && !parent) return null
  if (parent && retry.retries === 0) retry = { ...NO_RETRY, retries: PARENT_CONNECT_RETRIES, connect: true }
  const levels = priorities.map((p) => backends.filter((b) => levelOf.get(b) === p))
  return { levels, priorities, retry, routeLabel: `${rule.route.namespace}/${rule.route.name}`, mixedChains: chainInputsDiffer(rule, [...levelOf.keys()], table) }
}

/**
 * Whether two of the rule's backends need different chain runs. Identical
 * chains are shared objects (compile/extensions.ts), so identity tells chains
 * apart; but one chain (Route or Gateway scope) also runs on what differs per
 * backend: the Host (Backend hostname; an AWSSigV4 signature covers it) and the
 * backendRef header edits applied before it (a signature covers those too).
 * The path is the rule's (URLRewrite), the same for every backend.
 */
function chainInputsDiffer(rule: RouteRule, backends: readonly WeightedCluster[], table: RouteTable): boolean {
  const first = backends[0]
  if (first === undefined) return false
  const firstHost = staticAuthority(rule, first, table)
  for (let i = 1; i < backends.length; i++) {
    const b = backends[i] as WeightedCluster
    if (!sameChainInput(first, firstHost, b, staticAuthority(rule, b, table))) return true
  }
  return false
}

/** The Host an attempt to `b` sends when it does not depend on the request; null: the client's. */
function staticAuthority(rule: RouteRule, b: WeightedCluster, table: RouteTable): string | null {
  return rule.rewriteHost ?? (b.cluster === null ? null : table.clusters.get(b.cluster)?.hostname ?? null)
}

/** The request `a`'s chain made for `aHost` is also the one `b`'s would make for `bHost`. */
function sameChainInput(a: WeightedCluster, aHost: string | null, b: WeightedCluster, bHost: string | null): boolean {
  const chain = a.extensions ?? null
  if ((b.extensions ?? null) !== chain) return false
  return chain === null || (aHost === bHost && a.requestHeaders === b.requestHeaders)
}

/** What the loop needs of the request context (forward.ts RequestContext). */
export interface AttemptOwner extends UpstreamHandler {
  readonly table: RouteTable
  readonly rule: RouteRule | null
  readonly authority: string
  readonly ended: boolean
  backend: WeightedCluster | null
  cluster: Cluster | null
  /** Retries made so far (the access line's `retries`). */
  retries: number
  /**
   * Issue 7: run `chain` (a backend's extensions; null: none) on `req`, the
   * request as it was before any chain with the attempt's backendRef header
   * edits, then hand the result to `sink.forward`, or call `sink.abandon` when
   * the chain answered itself.
   */
  attemptChain?(chain: ExtensionChain | null, req: UpstreamRequest, sink: AttemptSink): void
  /**
   * An attempt goes back to a backend of the first chain run after another run
   * (A → B → A): the request's response hooks and reply headers are the first
   * run's again, since the attempt sends the request that run made.
   */
  resumeFirstChain?(): void
}

/** Issue 7: what an attempt's extension chain run continues with. */
export interface AttemptSink {
  forward(req: UpstreamRequest): void
  abandon(): void
}

/** Weighted pick among a level's backends that `ok` accepts; null when none. */
function pickIn(level: readonly WeightedCluster[], table: RouteTable, ok: (c: Cluster) => boolean, rnd: number): WeightedCluster | null {
  let total = 0
  for (let i = 0; i < level.length; i++) {
    const c = level[i].cluster === null ? undefined : table.clusters.get(level[i].cluster as string)
    if (c !== undefined && ok(c)) total += level[i].weight
  }
  if (total === 0) return null
  let r = rnd * total
  let last: WeightedCluster | null = null
  for (let i = 0; i < level.length; i++) {
    const c = level[i].cluster === null ? undefined : table.clusters.get(level[i].cluster as string)
    if (c === undefined || !ok(c)) continue
    last = level[i]
    r -= level[i].weight
    if (r < 0) return level[i]
  }
  return last
}

/** Weighted pick over a whole level, as pickBackend does (unresolved refs keep their share of 500s). */
function pickAny(level: readonly WeightedCluster[], rnd: number): WeightedCluster | null {
  let total = 0
  for (let i = 0; i < level.length; i++) total += level[i].weight
  let r = rnd * total
  for (let i = 0; i < level.length; i++) {
    r -= level[i].weight
    if (r < 0) return level[i]
  }
  return level.length > 0 ? level[level.length - 1] : null
}

/**
 * The backend for an attempt: the lowest level with an available backend not
 * in `avoid`; else the lowest with any available; else the primary level.
 */
// hot path
export function pickFailover(plan: AttemptPlan, table: RouteTable, resilience: ResilienceView | undefined, avoid: readonly Cluster[] | null, rnd: number): { backend: WeightedCluster; level: number } | null {
  const levels = plan.levels
  if (resilience !== undefined) {
    if (avoid !== null) {
      for (let l = 0; l < levels.length; l++) {
        const b = pickIn(levels[l], table, (c) => !avoid.includes(c) && resilience.available(c), rnd)
        if (b !== null) return { backend: b, level: l }
      }
    }
    for (let l = 0; l < levels.length; l++) {
      const b = pickIn(levels[l], table, (c) => resilience.available(c), rnd)
      if (b !== null) return { backend: b, level: l }
    }
  }
  const b = pickAny(levels[0], rnd)
  return b === null ? null : { backend: b, level: 0 }
}

/** Why a failed attempt may be retried (the metric reason); null: it may not. */
function errorReason(err: SallyportError, plan: RetryPlan, parent: boolean, timedOut: boolean): string | null {
  if (timedOut) return !parent && plan.timeout ? 'timeout' : null
  switch (err.code) {
    case ErrorCode.UPSTREAM_CONNECT:
    case ErrorCode.UPSTREAM_DNS: return plan.connect ? 'connect' : null
    case ErrorCode.UPSTREAM_RESET: {
      if (parent) return null
      // Only REFUSED_STREAM (RFC 9113 §8.7: not processed) is a refusal; INTERNAL_ERROR
      // and the rest are resets, retried only with the reset trigger.
      if (plan.refusedStream && codeOf(err.cause) === STREAM_REFUSED) return 'refused_stream'
      return plan.reset ? 'reset' : null
    }
    case ErrorCode.UPSTREAM_TIMEOUT: return !parent && plan.timeout ? 'timeout' : null
    default: return null
  }
}

function statusReason(status: number, headers: OutgoingHeaders, plan: RetryPlan): string | null {
  if (status === 508) return null // a loop answer is final (x-sallyport-hops)
  if (plan.grpcStatuses.size > 0 && status === 200) {
    const grpc = headers['grpc-status']
    if (typeof grpc === 'string' && plan.grpcStatuses.has(grpc)) return 'grpc_status'
  }
  if (plan.codes.has(status)) return 'status_code'
  if (plan.gatewayError && (status === 502 || status === 503 || status === 504)) return 'status_gateway'
  if (plan.status5xx && status >= 500) return 'status_5xx'
  return null
}

/** Nothing was sent: the breaker refused, no endpoint exists, or its name did not resolve. Another level may take it at no retry cost. */
function isUnsent(code: ErrorCode): boolean {
  return code === ErrorCode.OVERLOADED || code === ErrorCode.NO_HEALTHY_UPSTREAM || code === ErrorCode.UPSTREAM_CONNECT || code === ErrorCode.UPSTREAM_DNS
}

// hot path
/**
 * Start the attempts of one request; `req` is the request for `owner.cluster`:
 * when its backend has a chain, the chain's output (its backendRef header edits
 * applied before the chain ran); without one, the request without backendRef
 * header edits (each attempt applies its own). `pristine`: the request before
 * any backendRef edit or chain, given when the plan's chain inputs differ; an
 * attempt whose chain input differs from the first one's starts from it
 * (sameChainInput).
 */
export function startAttempts(owner: AttemptOwner, req: UpstreamRequest, plan: AttemptPlan, level: number, upstreams: Upstreams, pristine: UpstreamRequest | null = null): void {
  new AttemptLoop(owner, req, plan, level, upstreams, pristine).send()
}

class AttemptLoop implements UpstreamHandler, AttemptSink {
  readonly #owner: AttemptOwner
  readonly #base: UpstreamRequest
  readonly #pristine: UpstreamRequest | null
  /** The backend `#base` was made for: its chain ran on the request with its backendRef edits. */
  readonly #first: WeightedCluster
  readonly #plan: AttemptPlan
  readonly #upstreams: Upstreams
  readonly #resilience: ResilienceView | undefined
  readonly #body: ReplayBody | null
  #level: number
  #retries = 0
  #tried: Cluster[] | null = null
  /** Endpoints (`host:port`) earlier attempts failed at: the next pick avoids them when it can. */
  #endpoints: string[] | null = null
  /** The cluster whose retry budget the current attempt holds. */
  #budgetOf: Cluster | null = null
  #attemptController: Cancel | null = null
  #timer: NodeJS.Timeout | null = null
  #timedOut = false
  #done = false
  /** An attempt failed to connect: later ones do not follow an MCP session's tag back to its endpoint (UpstreamRequest.pinSession). */
  #unpinned = false
  /** The owner's chain run is not the first one (an attempt ran another backend's chain). */
  #otherRun = false

  constructor(owner: AttemptOwner, req: UpstreamRequest, plan: AttemptPlan, level: number, upstreams: Upstreams, pristine: UpstreamRequest | null) {
    this.#owner = owner
    this.#base = req
    this.#pristine = pristine
    this.#first = owner.backend as WeightedCluster
    this.#plan = plan
    this.#level = level
    this.#upstreams = upstreams
    this.#resilience = upstreams.resilience
    // Replay needs a copy of the body; an upgrade (tunnel) is never retried.
    this.#body = req.body !== null && req.upgrade === null && (plan.retry.retries > 0 || plan.levels.length > 1) ? new ReplayBody(req.body) : null
    if (level > 0) upstreamFailovers.inc({ route: plan.routeLabel, from_priority: String(plan.priorities[0]), to_priority: String(plan.priorities[level]) })
    req.signal.addEventListener('abort', this)
  }

  /** Parent signal listener: the client left or the route timeout fired. */
  handleEvent(): void {
    if (this.#timer !== null && this.#attemptController === null) {
      // Waiting for a backoff: nobody is going to answer.
      clearTimeout(this.#timer)
      this.#timer = null
      this.#finish()
    }
    this.#attemptController?.abort(this.#base.signal.reason)
  }

  send(): void {
    const owner = this.#owner
    const cluster = owner.cluster as Cluster
    const backend = owner.backend as WeightedCluster
    const base = this.#base
    const retry = this.#plan.retry
    let signal = base.signal
    if (retry.perTryMs !== null) {
      const ac = new Cancel()
      this.#attemptController = ac
      signal = ac
      this.#timedOut = false
      this.#timer = setTimeout(onPerTryTimeout, retry.perTryMs, this)
    } else {
      this.#attemptController = null
    }
    const rule = owner.rule
    const authority = (rule !== null ? rule.rewriteHost : null) ?? cluster.hostname ?? owner.authority
    const connectFallback = !retry.connect || retry.retries === 0
    const body = this.#body === null ? base.body : this.#body.next()
    // Issue 7: an attempt whose chain input differs from the first one's — another chain (e.g. its
    // own CredentialInjector), or the same one for another Host or other backendRef edits (a SigV4
    // signature covers both) — runs its chain on the request as it was before any edit or chain, its
    // own edits applied first, so nothing made for the first backend reaches this one.
    const first = this.#first
    const firstChain = first.extensions ?? null
    const p = this.#pristine
    if (p !== null && owner.attemptChain !== undefined && !sameChainInput(first, base.authority, backend, authority)) {
      const headers = { ...p.headers }
      if (backend.requestHeaders !== null) applyHeaderEdits(headers, backend.requestHeaders)
      const req: UpstreamRequest = { ...p, cluster, authority, headers, body, signal, connectFallback, avoid: this.#endpoints, pinSession: !this.#unpinned }
      this.#otherRun = true
      return owner.attemptChain(backend.extensions ?? null, req, this)
    }
    // Back to the first run's input after another run (A → B → A): this attempt sends the first
    // run's request, so its answer goes through that run's response hooks, with its reply headers.
    if (this.#otherRun) {
      this.#otherRun = false
      owner.resumeFirstChain?.()
    }
    let headers = base.headers
    // Without a chain the base request has no backendRef edits: each attempt applies its backend's.
    // With one they were applied before it ran, and this backend's are the same (sameChainInput).
    if (firstChain === null && backend.requestHeaders !== null) {
      headers = { ...headers }
      applyHeaderEdits(headers, backend.requestHeaders)
    }
    this.forward({ ...base, cluster, authority, headers, body, signal, connectFallback, avoid: this.#endpoints, pinSession: !this.#unpinned })
  }

  /** The attempt's request, ready (after its chain, which ran on its backendRef edits): upstream. */
  forward(req: UpstreamRequest): void {
    if (this.#done || this.#owner.ended) return
    this.#upstreams.forward(req, this)
  }

  /** The attempt's chain answered (denied or failed): nothing was sent; the owner answered. */
  abandon(): void {
    this.#endAttempt()
    this.#finish()
  }

  timedOut(): void {
    this.#timer = null
    this.#timedOut = true
    this.#attemptController?.abort(new SallyportError(ErrorCode.UPSTREAM_TIMEOUT, 'per-try timeout exceeded', { detail: PER_TRY_TIMEOUT }))
  }

  // ── UpstreamHandler ──

  onResponse(res: UpstreamResponse): void {
    this.#endAttempt()
    const owner = this.#owner
    if (owner.ended || this.#done) { res.body.destroy(); return }
    const reason = statusReason(res.status, res.headers, this.#plan.retry)
    if (reason !== null && owner.cluster?.parentGateway !== true && this.#retry(reason, res.headers, res.endpoint)) {
      res.body.destroy()
      return
    }
    this.#finish()
    owner.onResponse(res)
  }

  onInformational(status: number, headers: OutgoingHeaders): void {
    const owner = this.#owner
    if (!owner.ended && !this.#done) owner.onInformational?.(status, headers)
  }

  onTunnel(tunnel: UpstreamTunnel): void {
    this.#endAttempt()
    this.#finish()
    this.#owner.onTunnel(tunnel)
  }

  onError(err: SallyportError, endpoint?: string): void {
    const timedOut = this.#timedOut
    this.#endAttempt()
    const owner = this.#owner
    if (owner.ended || this.#done) return
    // A client abort (or the route timeout) is final and counts against nobody.
    if (err.code === ErrorCode.CLIENT_ABORTED && !timedOut) { this.#finish(); owner.onError(err, endpoint); return }
    const cluster = owner.cluster as Cluster
    if (err.code === ErrorCode.UPSTREAM_CONNECT) this.#unpinned = true
    const reason = errorReason(err, this.#plan.retry, cluster.parentGateway === true, timedOut)
    if (reason !== null && this.#retry(reason, null, endpoint)) return
    // Not sent at all (breaker, no endpoint, connect failure): another level may take it once, retries or not.
    if (isUnsent(err.code) && this.#failoverUnsent()) return
    this.#finish()
    owner.onError(timedOut ? new SallyportError(ErrorCode.UPSTREAM_TIMEOUT, 'per-try timeout exceeded') : err, endpoint)
  }

  // ── decisions ──

  /** `endpoint`: where the failed attempt went (avoided by the retry's pick when it can). */
  #retry(reason: string, headers: OutgoingHeaders | null, endpoint: string | undefined): boolean {
    const plan = this.#plan
    if (this.#retries >= plan.retry.retries) return false
    if (this.#body !== null && !this.#body.replayable) return false
    const failed = this.#owner.cluster as Cluster
    const next = this.#next(failed)
    if (next === null) return false
    const resilience = this.#resilience
    if (resilience !== undefined) {
      const refused = resilience.admitRetry(next.cluster)
      if (refused !== null) {
        if (refused === 'budget') upstreamRetryBudgetExhausted.inc()
        return false
      }
      this.#budgetOf = next.cluster
    }
    let delay = this.#backoff()
    if (headers !== null && next.cluster === failed) {
      const after = retryAfter(headers)
      if (after !== null) {
        if (after > RETRY_AFTER_CAP_MS) { this.#releaseBudget(); return false }
        delay = Math.max(delay, after)
      }
    }
    this.#retries++
    this.#owner.retries = this.#retries
    if (endpoint !== undefined && endpoint !== '') (this.#endpoints ??= []).push(endpoint)
    upstreamRetries.inc({ backend: failed.id, reason })
    this.#switchTo(next)
    this.#timer = setTimeout(onBackoffDone, delay, this)
    return true
  }

  /** A failover of an attempt that never left (no retry budget spent): only to a level not tried yet. */
  #failoverUnsent(): boolean {
    const failed = this.#owner.cluster as Cluster
    if (this.#body !== null && !this.#body.replayable) return false
    const next = this.#next(failed)
    if (next === null || next.level <= this.#level) return false
    this.#switchTo(next)
    queueMicrotask(() => { if (!this.#owner.ended && !this.#done) this.send() })
    return true
  }

  /** The next backend: another available one if any, else the same. */
  #next(failed: Cluster): { backend: WeightedCluster; cluster: Cluster; level: number } | null {
    const tried = this.#tried ?? (this.#tried = [])
    if (!tried.includes(failed)) tried.push(failed)
    const owner = this.#owner
    const pick = pickFailover(this.#plan, owner.table, this.#resilience, tried, Math.random())
    if (pick === null || pick.backend.cluster === null) return null
    const cluster = owner.table.clusters.get(pick.backend.cluster)
    if (cluster === undefined) return null
    return { backend: pick.backend, cluster, level: pick.level }
  }

  #switchTo(next: { backend: WeightedCluster; cluster: Cluster; level: number }): void {
    const plan = this.#plan
    if (next.level !== this.#level) {
      upstreamFailovers.inc({ route: plan.routeLabel, from_priority: String(plan.priorities[this.#level]), to_priority: String(plan.priorities[next.level]) })
      this.#level = next.level
    }
    this.#owner.backend = next.backend
    this.#owner.cluster = next.cluster
  }

  #backoff(): number {
    return backoffDelay(this.#plan.retry, this.#retries, Math.random())
  }

  backoffDone(): void {
    this.#timer = null
    if (this.#owner.ended || this.#done || this.#base.signal.aborted) return this.#finish()
    this.send()
  }

  #endAttempt(): void {
    if (this.#timer !== null) { clearTimeout(this.#timer); this.#timer = null }
    this.#attemptController = null
    this.#timedOut = false
    this.#releaseBudget()
  }

  #releaseBudget(): void {
    if (this.#budgetOf !== null && this.#resilience !== undefined) this.#resilience.retryDone(this.#budgetOf)
    this.#budgetOf = null
  }

  #finish(): void {
    if (this.#done) return
    this.#done = true
    this.#releaseBudget()
    this.#body?.release()
    this.#base.signal.removeEventListener('abort', this)
  }
}

/** The wait before retry `n` (0: the first), `rnd` in [0, 1). See the backoff note at the top. */
export function backoffDelay(r: RetryPlan, n: number, rnd: number): number {
  const d = Math.min(r.maxMs, r.baseMs * 2 ** n)
  if (r.minMs === 0) return Math.floor(rnd * d)
  const floor = Math.max(r.minMs, d)
  return floor + Math.floor(rnd * floor / 2)
}

function onPerTryTimeout(loop: AttemptLoop): void {
  loop.timedOut()
}

function onBackoffDone(loop: AttemptLoop): void {
  loop.backoffDone()
}

/** Retry-After in ms (delay-seconds or HTTP-date); null when absent. */
function retryAfter(headers: OutgoingHeaders): number | null {
  const v = headers['retry-after']
  if (v === undefined) return null
  const text = (Array.isArray(v) ? v[0] : v).trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  const at = Date.parse(text)
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now())
}
