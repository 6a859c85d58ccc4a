// Leader election on a coordination.k8s.io/v1 Lease, the way client-go's
// leaderelection package does it (standard values: lease 15 s, renew deadline
// 10 s, retry period 2 s):
// - every retry period, try to acquire or renew: create the Lease if absent;
//   take it if it is ours or expired; write with the resourceVersion we read,
//   so two candidates racing for it cannot both win (409 for the loser);
// - expiry is judged on OUR clock: a follower notes when it last saw the
//   lease record change and waits leaseDuration from then (client-go's
//   observedTime), so clock skew between nodes does not matter;
// - a leader that cannot renew within the renew deadline steps down (before
//   the lease can expire for the others): at lastRenew + renewDeadline a timer
//   steps it down whatever is in flight, isLeader() says false from then on
//   even if that timer runs late, and every acquire/renew attempt is aborted
//   when it outlives the renew deadline (client-go's context timeout). A Lease
//   request could otherwise hang for the client's 30 s request timeout and keep
//   a stale leader writing status next to its successor;
// - stop() releases the lease (holderIdentity emptied, ReleaseOnCancel) so a
//   successor takes over at once after a graceful shutdown. Best effort and
//   short: it aborts the attempt in flight and gives the release
//   RELEASE_TIMEOUT_MS, after which the lease is left to expire (a shutdown
//   must not wait on an API server that does not answer).
// - a request that keeps failing is retried every retry period all the same,
//   but logged once per distinct error, then at most every FAILURE_LOG_EVERY_MS
//   (a Role without Leases logged a line every 2 s forever); a success after
//   failures is logged once.

import { createHash } from 'node:crypto'
import os from 'node:os'
import { logger } from '../observe/log.ts'
import { RepeatThrottle } from '../observe/repeat-throttle.ts'
import { kubeLeader } from '../observe/metrics.ts'
import { KubeApiError, errorText, type KubeClient } from '../config/kube-client.ts'

const log = logger('leader')

/** How long stop() tries to hand the lease back. */
export const RELEASE_TIMEOUT_MS = 2000

/** Why we cut an attempt short ourselves (stepping down, stopping): not a failure to log. */
class CutShort extends Error {}

/** The same failure of the Lease requests is logged again at most this often. */
const FAILURE_LOG_EVERY_MS = 5 * 60_000
const RENEW_DEADLINE_PASSED = 'could not renew the leader lease within the renew deadline; stepping down'

export interface LeaderElectionOptions {
  readonly client: KubeClient
  /** Lease namespace (POD_NAMESPACE). */
  readonly namespace: string
  readonly name: string
  /** Holder identity (POD_NAME). */
  readonly identity: string
  readonly leaseDurationMs?: number
  readonly renewDeadlineMs?: number
  readonly retryPeriodMs?: number
  readonly onChange?: (leader: boolean) => void
  /** The same failure is logged again at most this often (default 5 min). */
  readonly failureLogEveryMs?: number
}

interface LeaseSpec {
  holderIdentity?: string
  leaseDurationSeconds?: number
  acquireTime?: string
  renewTime?: string
  leaseTransitions?: number
}

interface Lease {
  apiVersion?: string
  kind?: string
  metadata: { name: string; namespace?: string; resourceVersion?: string }
  spec?: LeaseSpec
}

/** POD_NAMESPACE and POD_NAME from the downward API, else the hostname (and `default`). */
export function podIdentity(env: NodeJS.ProcessEnv = process.env): { namespace: string; identity: string } {
  const ns = env.POD_NAMESPACE
  const name = env.POD_NAME
  return { namespace: ns === undefined || ns === '' ? 'default' : ns, identity: name === undefined || name === '' ? os.hostname() : name }
}

export class LeaderElector {
  readonly #client: KubeClient
  readonly #path: string
  readonly #collection: string
  readonly #name: string
  readonly #namespace: string
  readonly #identity: string
  readonly #leaseMs: number
  readonly #renewDeadlineMs: number
  readonly #retryMs: number
  readonly #onChange: ((leader: boolean) => void) | null
  #leader = false
  /** performance.now() when the last successful attempt started (the renewTime it wrote is that or later). */
  #lastRenew = 0
  /** Steps a leader down at lastRenew + renewDeadline. */
  #deadline: NodeJS.Timeout | null = null
  /** The acquire/renew attempt in flight. */
  #attempt: AbortController | null = null
  /** The last lease record seen (holder + renewTime) and when we saw it change (our clock). */
  #observedRecord = ''
  #observedAt = 0
  /** Holder named by the last lease read. */
  #observedHolder = ''
  #timer: NodeJS.Timeout | null = null
  #stopped = false
  #ticking: Promise<void> = Promise.resolve()
  /** Failures since the last success, per distinct error: logged once, then at most every failureLogEveryMs. */
  readonly #failures: RepeatThrottle
  #failureCount = 0

  constructor(options: LeaderElectionOptions) {
    this.#client = options.client
    this.#namespace = options.namespace
    this.#name = options.name
    this.#identity = options.identity
    this.#collection = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(options.namespace)}/leases`
    this.#path = `${this.#collection}/${encodeURIComponent(options.name)}`
    this.#leaseMs = options.leaseDurationMs ?? 15_000
    this.#renewDeadlineMs = options.renewDeadlineMs ?? 10_000
    this.#retryMs = options.retryPeriodMs ?? 2_000
    this.#onChange = options.onChange ?? null
    this.#failures = new RepeatThrottle(options.failureLogEveryMs ?? FAILURE_LOG_EVERY_MS)
  }

  get identity(): string { return this.#identity }

  /** Leader, and within the renew deadline of the last renewal (a step-down timer that runs late changes nothing). */
  isLeader(): boolean {
    return this.#leader && performance.now() < this.#lastRenew + this.#renewDeadlineMs
  }

  start(): void {
    this.#stopped = false
    this.#schedule(0)
  }

  /** Stop campaigning; a leader releases the lease so another replica takes over now. `release: false` simulates a crash. */
  async stop(options: { release?: boolean } = {}): Promise<void> {
    this.#stopped = true
    if (this.#timer !== null) clearTimeout(this.#timer)
    if (this.#deadline !== null) clearTimeout(this.#deadline)
    this.#deadline = null
    const wasLeader = this.#leader
    this.#setLeader(false) // no more status writes from here on
    this.#attempt?.abort(new CutShort('stopping'))
    await this.#ticking
    if (wasLeader && options.release !== false) {
      const signal = AbortSignal.timeout(RELEASE_TIMEOUT_MS)
      try {
        const lease = await this.#client.request<Lease>('GET', this.#path, { signal })
        if (lease.spec?.holderIdentity === this.#identity) {
          const now = microTime(new Date())
          await this.#client.request('PUT', this.#path, { signal, body: { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: now, acquireTime: now } } })
          log.info({ lease: this.#name, identity: this.#identity }, 'released the leader lease')
        }
      } catch (err) {
        log.warn({ err: errorText(err) }, 'could not release the leader lease; it will expire')
      }
    }
  }

  #schedule(delay: number): void {
    if (this.#stopped) return
    this.#timer = setTimeout(() => {
      this.#timer = null
      this.#ticking = this.#tick().finally(() => this.#schedule(this.#retryMs))
    }, delay)
    this.#timer.unref()
  }

  async #tick(): Promise<void> {
    const started = performance.now()
    // A leader's attempt ends at its deadline; anyone's within the renew deadline.
    const budget = this.#leader ? this.#lastRenew + this.#renewDeadlineMs - started : this.#renewDeadlineMs
    const attempt = new AbortController()
    this.#attempt = attempt
    const leading = this.#leader
    const timer = setTimeout(() => {
      // A leader's attempt ends at its renew deadline, which is the step-down itself
      // (#armDeadline's timer ends at the same instant; whichever fires first steps down).
      if (leading && this.#leader) this.#stepDown(RENEW_DEADLINE_PASSED)
      else attempt.abort(new Error(`no answer within the renew deadline (${this.#renewDeadlineMs} ms)`))
    }, Math.max(0, budget))
    timer.unref()
    let ok: boolean
    try {
      ok = await this.#tryAcquireOrRenew(attempt.signal)
      this.#succeeded()
    } catch (err) {
      // An attempt we cut short ourselves (stepping down, stopping) is no failure of the API server's.
      if (attempt.signal.aborted && attempt.signal.reason instanceof CutShort) log.debug({ lease: this.#name, err: errorText(attempt.signal.reason) }, 'leader election: attempt cut short')
      else this.#failed(attempt.signal.aborted ? attempt.signal.reason : err)
      ok = false
    } finally {
      clearTimeout(timer)
      this.#attempt = null
    }
    if (this.#stopped) return
    if (ok && (this.#leader || performance.now() - started < this.#renewDeadlineMs)) {
      this.#lastRenew = started
      this.#armDeadline()
      this.#setLeader(true)
    } else if (this.#leader && !ok && this.#observedHolder !== this.#identity) {
      this.#stepDown(null)
    }
  }

  /**
   * Log a failed attempt: an error not seen since the last success at once,
   * one already logged again at most every failureLogMs (with how many
   * failures it stands for). Per error, so two that alternate (a 403, then a
   * timeout) do not make every attempt a new one.
   */
  #failed(err: unknown): void {
    if (this.#stopped) return
    this.#failureCount++
    const text = errorText(err)
    // The same refusal of a GET or a PUT is one error (a 403 is a 403).
    const key = err instanceof KubeApiError && err.statusCode !== 0 ? `${err.statusCode} ${err.reason}` : text
    const noted = this.#failures.note(key)
    if (!noted.log) {
      log.debug({ lease: this.#name, err: text }, 'leader election: lease request failed again')
      return
    }
    const fields = { lease: `${this.#namespace}/${this.#name}`, err: text, ...(noted.repeats === null ? {} : { repeats: noted.repeats, failures: this.#failureCount }) }
    if (err instanceof KubeApiError && err.statusCode === 403) {
      log.error(fields, 'leader election: forbidden to use the Lease (no status is written); check the Role in deploy/kubernetes/rbac.yaml')
    } else {
      log.warn(fields, 'leader election: lease request failed')
    }
  }

  #succeeded(): void {
    if (this.#failureCount === 0) return
    log.info({ lease: `${this.#namespace}/${this.#name}`, failures: this.#failureCount }, 'leader election: lease requests succeed again')
    this.#failures.clear()
    this.#failureCount = 0
  }

  /** Step down at lastRenew + renewDeadline unless a renewal comes first. */
  #armDeadline(): void {
    if (this.#deadline !== null) clearTimeout(this.#deadline)
    this.#deadline = setTimeout(() => {
      this.#deadline = null
      if (this.#leader && performance.now() >= this.#lastRenew + this.#renewDeadlineMs) {
        this.#stepDown(RENEW_DEADLINE_PASSED)
      } else if (this.#leader) {
        this.#armDeadline() // fired a little early
      }
    }, Math.max(0, this.#lastRenew + this.#renewDeadlineMs - performance.now()))
    this.#deadline.unref()
  }

  #stepDown(warning: string | null): void {
    if (this.#deadline !== null) clearTimeout(this.#deadline)
    this.#deadline = null
    if (warning !== null && this.#leader) log.warn({ lease: this.#name, identity: this.#identity, renewDeadlineMs: this.#renewDeadlineMs }, warning)
    this.#attempt?.abort(new CutShort('stepped down'))
    this.#setLeader(false)
  }

  async #tryAcquireOrRenew(signal: AbortSignal): Promise<boolean> {
    const now = new Date()
    const mine: LeaseSpec = {
      holderIdentity: this.#identity,
      leaseDurationSeconds: Math.max(1, Math.round(this.#leaseMs / 1000)),
      renewTime: microTime(now),
    }
    let lease: Lease
    try {
      lease = await this.#client.request<Lease>('GET', this.#path, { signal })
    } catch (err) {
      if (!(err instanceof KubeApiError) || err.statusCode !== 404) throw err
      try {
        await this.#client.request('POST', this.#collection, {
          signal,
          body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: this.#name, namespace: this.#namespace }, spec: { ...mine, acquireTime: microTime(now), leaseTransitions: 0 } },
        })
        this.#observedHolder = this.#identity
        return true
      } catch (createErr) {
        if (createErr instanceof KubeApiError && createErr.statusCode === 409) return false // another replica created it first
        throw createErr
      }
    }
    const spec = lease.spec ?? {}
    const holder = spec.holderIdentity ?? ''
    const record = `${holder}|${spec.renewTime ?? ''}|${spec.leaseDurationSeconds ?? ''}`
    if (record !== this.#observedRecord) {
      this.#observedRecord = record
      this.#observedAt = Date.now()
    }
    this.#observedHolder = holder
    const durationMs = (spec.leaseDurationSeconds ?? 0) * 1000
    const held = holder !== '' && holder !== this.#identity && Date.now() - this.#observedAt < durationMs
    if (held) return false
    const next: Lease = {
      ...lease,
      spec: {
        ...spec, ...mine,
        acquireTime: holder === this.#identity ? spec.acquireTime : microTime(now),
        leaseTransitions: holder === this.#identity ? (spec.leaseTransitions ?? 0) : (spec.leaseTransitions ?? 0) + 1,
      },
    }
    try {
      await this.#client.request('PUT', this.#path, { body: next, signal })
    } catch (err) {
      if (err instanceof KubeApiError && err.statusCode === 409) return false // someone wrote it since we read it
      throw err
    }
    this.#observedHolder = this.#identity
    return true
  }

  #setLeader(leader: boolean): void {
    if (leader === this.#leader) return
    this.#leader = leader
    kubeLeader.set(leader ? 1 : 0)
    log.info({ lease: `${this.#namespace}/${this.#name}`, identity: this.#identity, leader }, leader ? 'became the leader' : 'not the leader')
    try {
      this.#onChange?.(leader)
    } catch (err) {
      log.error({ err }, 'leader change handler failed')
    }
  }
}

/**
 * A Lease time as the API server takes it: metav1.MicroTime, RFC 3339 with
 * exactly six fractional digits. `toISOString()`'s three are refused with 400
 * ("cannot parse ... as .000000"): no replica could ever take the lease.
 */
export function microTime(date: Date): string {
  return date.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z')
}

/** A Lease's name is a DNS subdomain: at most 253 characters. */
const MAX_LEASE_NAME = 253

/**
 * The Lease the replicas serving `gatewayClass` elect their leader on:
 * `sallyport-<class>`. A class name is itself a DNS subdomain of up to 253
 * characters, so past 243 the prefix would make a name the API server refuses
 * (422) and no replica could lead. Such a name is cut and ends with `-` and 10
 * hex digits of the class name's SHA-256: the same in every replica and across
 * restarts, distinct for class names sharing a long prefix, and still a DNS
 * subdomain (the cut never leaves a label ending in `-` or `.`).
 */
export function leaseNameFor(gatewayClass: string): string {
  const name = `sallyport-${gatewayClass}`
  if (name.length <= MAX_LEASE_NAME) return name
  const hash = createHash('sha256').update(gatewayClass).digest('hex').slice(0, 10)
  const head = name.slice(0, MAX_LEASE_NAME - hash.length - 1).replace(/[-.]+$/, '')
  return `${head}-${hash}`
}
