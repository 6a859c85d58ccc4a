// Endpoint choice within one cluster (Envoy Gateway loadBalancer types):
// RoundRobin (smooth weighted, nginx's algorithm), LeastRequest (power of two
// choices, Envoy's default), Random (weighted), ConsistentHash (a ring built
// once per endpoint set; keyed by a header, a cookie or the client address)
// for session persistence. Optional slow start ramps a (re)joining endpoint's
// weight from 10 % to 100 % over the window (Envoy's min_weight_percent).
//
// Every balancer skips endpoints that are ejected or failing active checks;
// when none is available it picks among all of them (Envoy's panic routing —
// failing over to another priority level is the router's decision, made
// before the cluster is chosen). Picks are allocation-free; "nothing at all"
// (no endpoints) is null. State lives per Cluster object, so a new table
// starts fresh balancers while pools and health stay.

import type { Endpoint, LoadBalancerPolicy } from '../compile/table.ts'
import type { OutgoingHeaders } from './types.ts'
import type { EndpointHealth } from './outlier.ts'

/**
 * What a pick may look at: the request's headers and client address
 * (ConsistentHash), and the endpoints a retry should not go back to
 * (ClusterRuntime.pick; the balancers themselves ignore it).
 */
export interface PickInput {
  readonly headers: OutgoingHeaders
  readonly clientAddress: string
  readonly avoid?: readonly string[] | null
}

export interface Balancer {
  // hot path
  /** Index of the endpoint to use; null when the cluster has none. `now`: performance.now() (0 when no health state changes). */
  pick(input: PickInput, now: number): number | null
}

/** Slow start: Envoy's minimum weight share while ramping. */
const SLOW_START_MIN = 0.1

function rampOf(h: EndpointHealth, windowMs: number, now: number): number {
  const age = now - h.since
  if (age >= windowMs || age < 0) return 1
  return Math.max(SLOW_START_MIN, age / windowMs)
}

/** Endpoint i's weight now: its configured weight, ramped while it slow-starts (windowMs > 0). */
function weightNow(weights: Float64Array, health: readonly EndpointHealth[], i: number, windowMs: number, now: number): number {
  return windowMs > 0 ? weights[i] * rampOf(health[i], windowMs, now) : weights[i]
}

/** Endpoint weights, weight 0 kept out of rotation; all zero means all equal. */
export function weightsOf(endpoints: readonly Endpoint[]): Float64Array {
  const n = endpoints.length
  const w = new Float64Array(n)
  let total = 0
  for (let i = 0; i < n; i++) {
    w[i] = Math.max(0, Math.floor(endpoints[i].weight))
    total += w[i]
  }
  if (total === 0) w.fill(1)
  return w
}

export class WeightedRoundRobin implements Balancer {
  readonly #weights: Float64Array
  readonly #current: Float64Array
  readonly #health: readonly EndpointHealth[] | null
  readonly #slowStartMs: number

  constructor(endpoints: readonly Endpoint[], health: readonly EndpointHealth[] | null = null, slowStartMs = 0) {
    this.#weights = weightsOf(endpoints)
    this.#current = new Float64Array(endpoints.length)
    this.#health = health
    this.#slowStartMs = slowStartMs
  }

  pick(_input?: PickInput, now = 0): number | null {
    const n = this.#weights.length
    if (n === 0) return null
    if (n === 1) return 0
    const best = this.#round(now, true)
    return best !== -1 ? best : this.#round(now, false)
  }

  #round(now: number, healthy: boolean): number {
    const weights = this.#weights
    const current = this.#current
    const health = this.#health
    let best = -1
    let total = 0
    for (let i = 0; i < weights.length; i++) {
      if (weights[i] === 0) continue
      let w = weights[i]
      if (health !== null) {
        if (healthy && !health[i].isAvailable(now)) continue
        w = weightNow(weights, health, i, this.#slowStartMs, now)
      }
      current[i] += w
      total += w
      if (best === -1 || current[i] > current[best]) best = i
    }
    if (best !== -1) current[best] -= total
    return best
  }
}

/** Weighted random among available endpoints (then among all). */
export class RandomPick implements Balancer {
  readonly #weights: Float64Array
  readonly #health: readonly EndpointHealth[]
  readonly #slowStartMs: number

  constructor(endpoints: readonly Endpoint[], health: readonly EndpointHealth[], slowStartMs = 0) {
    this.#weights = weightsOf(endpoints)
    this.#health = health
    this.#slowStartMs = slowStartMs
  }

  pick(_input: PickInput, now: number): number | null {
    const n = this.#weights.length
    if (n === 0) return null
    if (n === 1) return 0
    const i = this.#draw(now, true)
    return i !== -1 ? i : this.#draw(now, false)
  }

  #draw(now: number, healthy: boolean): number {
    const weights = this.#weights
    const health = this.#health
    let total = 0
    for (let i = 0; i < weights.length; i++) {
      if (healthy && !health[i].isAvailable(now)) continue
      total += weightNow(weights, health, i, this.#slowStartMs, now)
    }
    if (total === 0) return -1
    let r = Math.random() * total
    for (let i = 0; i < weights.length; i++) {
      if (healthy && !health[i].isAvailable(now)) continue
      r -= weightNow(weights, health, i, this.#slowStartMs, now)
      if (r < 0) return i
    }
    return -1
  }
}

/**
 * Power of two choices (Envoy LEAST_REQUEST, choice_count 2): two random
 * available endpoints, the one with fewer exchanges in flight per weight wins.
 */
export class LeastRequest implements Balancer {
  readonly #weights: Float64Array
  readonly #health: readonly EndpointHealth[]
  readonly #slowStartMs: number

  constructor(endpoints: readonly Endpoint[], health: readonly EndpointHealth[], slowStartMs = 0) {
    this.#weights = weightsOf(endpoints)
    this.#health = health
    this.#slowStartMs = slowStartMs
  }

  pick(_input: PickInput, now: number): number | null {
    const n = this.#weights.length
    if (n === 0) return null
    if (n === 1) return 0
    const health = this.#health
    let a = -1
    let b = -1
    // Up to 2n random probes for two distinct available endpoints (the second
    // drawn from the others, so two endpoints are always compared); a
    // mostly-ejected cluster falls back to a scan.
    for (let tries = 0; tries < 2 * n && b === -1; tries++) {
      const i = a === -1 ? (Math.random() * n) | 0 : (a + 1 + ((Math.random() * (n - 1)) | 0)) % n
      if (this.#weights[i] === 0 || !health[i].isAvailable(now)) continue
      if (a === -1) a = i
      else if (i !== a) b = i
    }
    if (a === -1) {
      for (let i = 0; i < n; i++) if (this.#weights[i] > 0 && health[i].isAvailable(now)) { a = i; break }
      if (a === -1) return (Math.random() * n) | 0 // panic: none available
    }
    if (b === -1) return a
    return this.#load(b, now) < this.#load(a, now) ? b : a
  }

  #load(i: number, now: number): number {
    return (this.#health[i].inflight + 1) / weightNow(this.#weights, this.#health, i, this.#slowStartMs, now)
  }
}

/** 32-bit FNV-1a over a string's UTF-16 code units. */
export function hash32(text: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  // Final avalanche (murmur3 fmix32): FNV alone clusters similar keys on the ring.
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

/** Ring points per unit of weight (Envoy's ring hash minimum is 1024 points in all; this gives ≥ 100 per endpoint). */
const POINTS_PER_WEIGHT = 100

/** The value of one cookie in a Cookie header; null when absent. */
export function cookieValue(header: string | string[] | undefined, name: string): string | null {
  if (header === undefined) return null
  const text = Array.isArray(header) ? header.join('; ') : header
  let at = 0
  while (at < text.length) {
    while (text.charCodeAt(at) === 32) at++
    const semi = text.indexOf(';', at)
    const end = semi === -1 ? text.length : semi
    const eq = text.indexOf('=', at)
    if (eq !== -1 && eq < end && text.slice(at, eq).trim() === name) return text.slice(eq + 1, end).trim()
    at = end + 1
  }
  return null
}

/**
 * Consistent hashing on a ring (Envoy RING_HASH): each endpoint owns points
 * proportional to its weight; a key goes to the owner of the first point at or
 * after its hash, skipping unavailable owners. Adding or removing one endpoint
 * moves only that endpoint's share of keys. A request without the key
 * (header or cookie absent) gets a random point of the ring, so a random
 * available endpoint, weighted.
 */
export class ConsistentHash implements Balancer {
  readonly #points: Uint32Array
  readonly #owners: Int32Array
  readonly #health: readonly EndpointHealth[]
  readonly #n: number
  readonly #by: NonNullable<LoadBalancerPolicy['consistentHash']>

  constructor(endpoints: readonly Endpoint[], health: readonly EndpointHealth[], by: NonNullable<LoadBalancerPolicy['consistentHash']>) {
    this.#health = health
    this.#n = endpoints.length
    this.#by = { ...by, header: by.header === null ? null : by.header.toLowerCase() }
    const weights = weightsOf(endpoints)
    const ring: Array<[number, number]> = []
    for (let i = 0; i < endpoints.length; i++) {
      if (weights[i] === 0) continue
      const label = `${endpoints[i].host}:${endpoints[i].port}`
      const count = POINTS_PER_WEIGHT * weights[i]
      for (let v = 0; v < count; v++) ring.push([hash32(`${label}#${v}`), i])
    }
    ring.sort((x, y) => x[0] - y[0])
    this.#points = Uint32Array.from(ring, (r) => r[0])
    this.#owners = Int32Array.from(ring, (r) => r[1])
  }

  pick(input: PickInput, now: number): number | null {
    const n = this.#n
    if (n === 0) return null
    if (n === 1) return 0
    const key = this.#keyOf(input)
    const points = this.#points
    // First point >= hash (binary search), wrapping. Without the key, a random
    // point: a weighted random pick that skips unavailable (and weight-0) endpoints.
    const h = key === null ? (Math.random() * 0x1_0000_0000) >>> 0 : hash32(key)
    let lo = 0
    let hi = points.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (points[mid] < h) lo = mid + 1
      else hi = mid
    }
    const owners = this.#owners
    const start = lo === points.length ? 0 : lo
    for (let k = 0; k < points.length; k++) {
      const owner = owners[(start + k) % points.length]
      if (this.#health[owner].isAvailable(now)) return owner
    }
    return owners[start] // panic: none available
  }

  #keyOf(input: PickInput): string | null {
    const by = this.#by
    if (by.type === 'SourceIP') return input.clientAddress
    if (by.type === 'Header' && by.header !== null) {
      const v = input.headers[by.header]
      return v === undefined ? null : Array.isArray(v) ? v.join(',') : v
    }
    if (by.type === 'Cookie' && by.cookie !== null) return cookieValue(input.headers.cookie, by.cookie)
    return null
  }
}

/** The balancer a cluster's loadBalancer policy asks for (default: weighted round robin). */
export function createBalancer(endpoints: readonly Endpoint[], health: readonly EndpointHealth[], policy: LoadBalancerPolicy | null): Balancer {
  const slow = policy?.slowStartWindowMs ?? 0
  switch (policy?.type) {
    case 'LeastRequest': return new LeastRequest(endpoints, health, slow)
    case 'Random': return new RandomPick(endpoints, health, slow)
    case 'ConsistentHash': return new ConsistentHash(endpoints, health, policy.consistentHash ?? { type: 'SourceIP', header: null, cookie: null })
    default: return new WeightedRoundRobin(endpoints, health, slow)
  }
}
