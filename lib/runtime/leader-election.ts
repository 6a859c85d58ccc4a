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
//   the lease can expire for the others);
// - stop() releases the lease (holderIdentity emptied, ReleaseOnCancel) so a
//   successor takes over at once after a graceful shutdown.

import os from 'node:os'
import { logger } from '../observe/log.ts'
import { kubeLeader } from '../observe/metrics.ts'
import { KubeApiError, errorText, type KubeClient } from '../config/kube-client.ts'

const log = logger('leader')

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
  #lastRenew = 0
  /** The last lease record seen (holder + renewTime) and when we saw it change (our clock). */
  #observedRecord = ''
  #observedAt = 0
  /** Holder named by the last lease read. */
  #observedHolder = ''
  #timer: NodeJS.Timeout | null = null
  #stopped = false
  #ticking: Promise<void> = Promise.resolve()

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
  }

  get identity(): string { return this.#identity }

  isLeader(): boolean {
    return this.#leader
  }

  start(): void {
    this.#stopped = false
    this.#schedule(0)
  }

  /** Stop campaigning; a leader releases the lease so another replica takes over now. `release: false` simulates a crash. */
  async stop(options: { release?: boolean } = {}): Promise<void> {
    this.#stopped = true
    if (this.#timer !== null) clearTimeout(this.#timer)
    await this.#ticking
    const wasLeader = this.#leader
    this.#setLeader(false)
    if (wasLeader && options.release !== false) {
      try {
        const lease = await this.#client.request<Lease>('GET', this.#path)
        if (lease.spec?.holderIdentity === this.#identity) {
          const now = new Date().toISOString()
          await this.#client.request('PUT', this.#path, { body: { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: now, acquireTime: now } } })
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
    let ok: boolean
    try {
      ok = await this.#tryAcquireOrRenew()
    } catch (err) {
      log.warn({ lease: this.#name, err: errorText(err) }, 'leader election: lease request failed')
      ok = false
    }
    if (this.#stopped) return
    if (ok) {
      this.#lastRenew = Date.now()
      this.#setLeader(true)
    } else if (this.#leader && Date.now() - this.#lastRenew > this.#renewDeadlineMs) {
      log.warn({ lease: this.#name, identity: this.#identity }, 'could not renew the leader lease within the renew deadline; stepping down')
      this.#setLeader(false)
    } else if (this.#leader && !ok && this.#observedHolder !== this.#identity) {
      this.#setLeader(false)
    }
  }

  async #tryAcquireOrRenew(): Promise<boolean> {
    const now = new Date()
    const mine: LeaseSpec = {
      holderIdentity: this.#identity,
      leaseDurationSeconds: Math.max(1, Math.round(this.#leaseMs / 1000)),
      renewTime: now.toISOString(),
    }
    let lease: Lease
    try {
      lease = await this.#client.request<Lease>('GET', this.#path)
    } catch (err) {
      if (!(err instanceof KubeApiError) || err.statusCode !== 404) throw err
      try {
        await this.#client.request('POST', this.#collection, {
          body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: this.#name, namespace: this.#namespace }, spec: { ...mine, acquireTime: now.toISOString(), leaseTransitions: 0 } },
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
        acquireTime: holder === this.#identity ? spec.acquireTime : now.toISOString(),
        leaseTransitions: holder === this.#identity ? (spec.leaseTransitions ?? 0) : (spec.leaseTransitions ?? 0) + 1,
      },
    }
    try {
      await this.#client.request('PUT', this.#path, { body: next })
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
