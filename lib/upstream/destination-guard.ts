// The confused-deputy guard on resolved addresses (issue 5; DESIGN.md "Safety
// defaults"; GEP-4488's DNS trust model). On by default: an address a Backend
// hostname resolves to is refused when it is loopback, link-local (cloud
// metadata included), private, CGNAT, unspecified, multicast/broadcast,
// reserved, or inside the cluster's Pod/Service CIDRs (--cluster-cidr) —
// unless the admin allowed it: globally (--allow-destination-cidr) or by every
// Gateway whose routes use the Backend (sallyport.io/allow-destination-cidrs).
// The Gateways' deny-lists and allow-lists (compiled into
// Cluster.destination) are applied here too. Services are in-cluster
// destinations and are not guarded. Checked once per DNS answer, not per request.

import { guardedRangeOf, matchCidr, matchCidrCarried, parseCidr, type Cidr } from '../address-ranges.ts'
import type { Cluster, ClusterDestination } from '../compile/table.ts'

export interface GuardOptions {
  /** Guarded addresses allowed for every Gateway (--allow-destination-cidr). */
  readonly allowCidrs?: readonly string[]
  /** Pod and Service ranges of the cluster (--cluster-cidr). */
  readonly clusterCidrs?: readonly string[]
}

/** Reasons (metrics label values): a guarded range label, or one of these. */
export const RefusalReason = { DENIED: 'denied', NOT_ALLOWED: 'not-allowed', CLUSTER: 'cluster', REVERSE_DNS: 'reverse-dns' } as const

interface CompiledGateway {
  readonly allow: readonly Cidr[]
  readonly deny: readonly Cidr[]
  readonly only: readonly Cidr[] | null
}

function cidrs(list: readonly string[]): Cidr[] {
  return list.map(parseCidr).filter((c): c is Cidr => c !== null)
}

export class DestinationGuard {
  readonly #allow: readonly Cidr[]
  readonly #cluster: readonly Cidr[]
  readonly #compiled = new WeakMap<ClusterDestination, readonly CompiledGateway[]>()

  constructor(options: GuardOptions = {}) {
    const allow = options.allowCidrs ?? []
    const cluster = options.clusterCidrs ?? []
    this.#allow = cidrs(allow)
    this.#cluster = cidrs(cluster)
    if (this.#allow.length !== allow.length || this.#cluster.length !== cluster.length) throw new Error('destination guard: a CIDR does not parse')
  }

  /**
   * Whether addresses of this cluster are checked at all: Backends (external
   * destinations), and a Service whose endpoints are names: an ExternalName
   * Service, whose name any route author may point at 169.254.169.254 or
   * 127.0.0.1 (the confused deputy Kubernetes' own ExternalName warning is about).
   */
  applies(cluster: Cluster): boolean {
    if (cluster.kind === 'Backend') return true
    for (const e of cluster.endpoints) if (e.kind === 'hostname') return true
    return false
  }

  /** null: the address may be used for `cluster`; else the refusal reason. */
  check(cluster: Cluster, address: string): string | null {
    if (!this.applies(cluster)) return null
    const gateways = this.#gatewaysOf(cluster.destination ?? null)
    for (const g of gateways) {
      // An IPv6 address carrying a denied IPv4 one (DNS64/NAT64, 6to4) is denied too.
      if (matchCidrCarried(g.deny, address) !== null) return RefusalReason.DENIED
      if (g.only !== null && matchCidr(g.only, address) === null) return RefusalReason.NOT_ALLOWED
    }
    const range = matchCidr(this.#cluster, address) !== null ? RefusalReason.CLUSTER : guardedRangeOf(address)
    if (range === null) return null
    if (matchCidr(this.#allow, address) !== null) return null
    // Allowed only if every Gateway that routes here allows it (no Gateway known: nobody did).
    if (gateways.length === 0) return range
    for (const g of gateways) if (matchCidr(g.allow, address) === null) return range
    return null
  }

  #gatewaysOf(destination: ClusterDestination | null): readonly CompiledGateway[] {
    if (destination === null) return []
    let compiled = this.#compiled.get(destination)
    if (compiled === undefined) {
      compiled = destination.gateways.map(g => ({
        allow: cidrs(g.allowCidrs), deny: cidrs(g.denyCidrs), only: g.onlyCidrs === null ? null : cidrs(g.onlyCidrs),
      }))
      this.#compiled.set(destination, compiled)
    }
    return compiled
  }
}

/** PTR suffix lists an address of `cluster` must satisfy (Backend's own, then each Gateway's); [] when none. */
export function reverseDnsRequirements(cluster: Cluster): ReadonlyArray<readonly string[]> {
  const d = cluster.destination ?? null
  if (d === null) return []
  const out: Array<readonly string[]> = []
  if (d.reverseDnsSuffixes !== null) out.push(d.reverseDnsSuffixes)
  for (const g of d.gateways) if (g.reverseDnsSuffixes !== null) out.push(g.reverseDnsSuffixes)
  return out
}
