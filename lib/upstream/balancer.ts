// Smooth weighted round robin (nginx's algorithm): over a window of
// sum(weights) picks each endpoint is chosen `weight` times, interleaved.
// Allocation-free per pick; state lives per Cluster object, so a new table
// starts fresh balancers while pools stay warm.

import type { Endpoint } from '../compile/table.ts'

export class WeightedRoundRobin {
  readonly #weights: Int32Array
  readonly #current: Int32Array
  readonly #total: number

  constructor(endpoints: readonly Endpoint[]) {
    const n = endpoints.length
    this.#weights = new Int32Array(n)
    this.#current = new Int32Array(n)
    let total = 0
    for (let i = 0; i < n; i++) {
      // Weight 0 endpoints are kept out of rotation (but still reachable by connect fallback).
      const w = Math.max(0, Math.floor(endpoints[i].weight))
      this.#weights[i] = w
      total += w
    }
    // All weights zero: treat them as equal rather than "nothing available".
    if (total === 0) {
      this.#weights.fill(1)
      total = n
    }
    this.#total = total
  }

  /** Index of the next endpoint; -1 when there are none. */
  // hot path
  pick(): number {
    const weights = this.#weights
    const current = this.#current
    const n = weights.length
    if (n === 0) return -1
    if (n === 1) return 0
    let best = -1
    for (let i = 0; i < n; i++) {
      if (weights[i] === 0) continue
      current[i] += weights[i]
      if (best === -1 || current[i] > current[best]) best = i
    }
    current[best] -= this.#total
    return best
  }
}
