// Destination policy at Gateway scope (issue 5): what the routes of a Gateway
// may reach. Written as Gateway annotations (documented in the README), so it
// works with any Gateway API version and needs no extra CRD:
//
//   sallyport.io/allow-destination-cidrs  CIDRs exempt from the confused-deputy
//                                         guard (loopback, private, link-local...)
//   sallyport.io/destination-allowlist    hostnames (exact or *.suffix) and CIDRs;
//                                         when set, only these are reachable
//   sallyport.io/destination-denylist     hostnames and CIDRs never reachable
//   sallyport.io/allowed-regions          Backends must carry one of these
//                                         regions (label sallyport.io/region)
//   sallyport.io/reverse-dns-suffixes     PTR of each resolved address must be
//                                         under one of these (also per Backend)
//
// Everything decidable from configuration is decided here: region locks,
// hostname lists, and static Ip backends (egress proposal Ip, Envoy Gateway ip
// endpoints) against the guard — a denied Backend answers 403 from the rule
// and its status names the reason. What only DNS can tell (the addresses a
// name resolves to, their PTR names) travels on the Cluster as
// `destination` and is enforced by upstream/ when an answer arrives.
//
// Services, EndpointSelector and Service-typed Backends are in-cluster
// destinations: neither the guard nor the lists apply to them.

import type { Backend, Gateway } from '../resources/model.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import { guardedRangeOf, matchCidr, matchCidrCarried, parseCidr, type Cidr } from '../address-ranges.ts'
import { ErrorCode } from '../errors.ts'
import { DESTINATION, type HostList, listEntries, parseDnsSuffixes, parseHostList } from '../validate/annotations.ts'
import { REGION_LABEL } from '../resources/read-backend.ts'
import type { Cluster, ClusterDestination, DirectResponse, GatewayAddressPolicy, HostPatterns, RequestedDestination } from './table.ts'

export const ANNOTATION = DESTINATION

/** Process-wide settings (flags): --allow-destination-cidr, --cluster-cidr. */
export interface DestinationDefaults {
  /** Guarded addresses allowed for every Gateway. */
  readonly allowCidrs: readonly string[]
  /** The cluster's Pod and Service ranges: guarded like private ranges. */
  readonly clusterCidrs: readonly string[]
}

/** Why a Backend is denied for a Gateway: the Backend condition reason and message. */
export interface Denial {
  readonly reason: 'RegionNotAllowed' | 'DestinationDenied' | 'DestinationNotAllowed' | 'DestinationRefused'
  readonly message: string
  readonly direct: DirectResponse
}

interface GatewayPolicy {
  readonly allowCidrs: readonly Cidr[]
  readonly allowlist: HostList | null
  readonly denylist: HostList | null
  readonly regions: ReadonlySet<string> | null
  readonly reverseDnsSuffixes: readonly string[] | null
  /** Annotation entries that could not be read. */
  readonly problems: readonly string[]
}

const EMPTY: GatewayPolicy = { allowCidrs: [], allowlist: null, denylist: null, regions: null, reverseDnsSuffixes: null, problems: [] }

/** Gateway API wildcard semantics: *.example.com matches a.example.com and a.b.example.com, not example.com. */
function hostListed(list: HostList, host: string): boolean {
  if (list.exact.has(host)) return true
  for (const s of list.suffixes) if (host.length > s.length && host.endsWith(s)) return true
  return false
}

/** A suffix list for PTR checks (validate/annotations.ts), its problems prefixed with `field`. */
export function readSuffixes(value: string | undefined, field: string, problems: string[]): string[] | null {
  const r = parseDnsSuffixes(value)
  for (const m of r.problems) problems.push(`${field}: ${m}`)
  return r.suffixes
}

function hostList(list: readonly string[], field: string, problems: string[]): HostList {
  const r = parseHostList(list)
  for (const m of r.problems) problems.push(`${field}: ${m}`)
  return r.list
}

export function readGatewayPolicy(gateway: Gateway): GatewayPolicy {
  const a = gateway.meta.annotations
  if (!Object.keys(a).some(k => Object.values(ANNOTATION).includes(k as typeof ANNOTATION[keyof typeof ANNOTATION]))) return EMPTY
  const problems: string[] = []
  const allowCidrs: Cidr[] = []
  for (const e of listEntries(a[ANNOTATION.ALLOW_CIDRS]) ?? []) {
    const c = parseCidr(e)
    if (c === null) problems.push(`${ANNOTATION.ALLOW_CIDRS}: ${JSON.stringify(e)} is not a CIDR`)
    else allowCidrs.push(c)
  }
  const allow = listEntries(a[ANNOTATION.ALLOWLIST])
  const deny = listEntries(a[ANNOTATION.DENYLIST])
  const regions = listEntries(a[ANNOTATION.REGIONS])
  return {
    allowCidrs,
    allowlist: allow === null ? null : hostList(allow, ANNOTATION.ALLOWLIST, problems),
    denylist: deny === null ? null : hostList(deny, ANNOTATION.DENYLIST, problems),
    regions: regions === null ? null : new Set(regions),
    reverseDnsSuffixes: readSuffixes(a[ANNOTATION.REVERSE_DNS], ANNOTATION.REVERSE_DNS, problems),
    problems,
  }
}

function denial(reason: Denial['reason'], message: string): Denial {
  return { reason, message, direct: { status: 403, code: ErrorCode.FORBIDDEN, body: 'destination not allowed by gateway policy' } }
}

/** Destination policies of one compile: per Gateway, read once; verdicts per (Backend, Gateway). */
export class DestinationPolicies {
  readonly #snapshot: Snapshot
  readonly #globalAllow: readonly Cidr[]
  readonly #clusterCidrs: readonly Cidr[]
  readonly #gateways = new Map<string, GatewayPolicy>()
  readonly #verdicts = new Map<Cluster, Map<string, Denial | null>>()
  /** Backend key → Gateway key → denial; read by status. */
  readonly denials = new Map<string, Map<string, Denial>>()
  /** Backend key → problems with its own annotation. */
  readonly backendProblems = new Map<string, string[]>()

  constructor(snapshot: Snapshot, defaults: DestinationDefaults | undefined) {
    this.#snapshot = snapshot
    this.#globalAllow = (defaults?.allowCidrs ?? []).map(parseCidr).filter((c): c is Cidr => c !== null)
    this.#clusterCidrs = (defaults?.clusterCidrs ?? []).map(parseCidr).filter((c): c is Cidr => c !== null)
  }

  gatewayPolicy(gatewayKey: string): GatewayPolicy {
    let p = this.#gateways.get(gatewayKey)
    if (p === undefined) {
      const gw = this.#snapshot.gateways.get(gatewayKey)
      p = gw === undefined ? EMPTY : readGatewayPolicy(gw)
      this.#gateways.set(gatewayKey, p)
    }
    return p
  }

  /** Problems with a Gateway's destination annotations (status), [] when none. */
  gatewayProblems(gatewayKey: string): readonly string[] {
    return this.gatewayPolicy(gatewayKey).problems
  }

  /** Whether the Gateway has any destination annotation (status shows the condition only then). */
  hasPolicy(gatewayKey: string): boolean {
    return this.gatewayPolicy(gatewayKey) !== EMPTY
  }

  /** Issue 9: the Gateway's policy for CONNECT tunnels to requested hosts, applied to a template cluster. */
  requested(gatewayKey: string, cluster: Cluster): RequestedDestination {
    const p = this.gatewayPolicy(gatewayKey)
    const address = (onlyCidrs: readonly string[] | null): ClusterDestination => ({
      gateways: [{
        gateway: gatewayKey, allowCidrs: p.allowCidrs.map(c => c.text), denyCidrs: p.denylist === null ? [] : p.denylist.cidrs.map(c => c.text),
        onlyCidrs, reverseDnsSuffixes: p.reverseDnsSuffixes,
      }],
      reverseDnsSuffixes: null,
    })
    const patterns = (l: HostList | null): HostPatterns | null => l === null ? null : { exact: [...l.exact].sort(), suffixes: l.suffixes }
    const refusal = p.regions === null ? null
      : `the Gateway allows only Backends of regions ${[...p.regions].join(', ')}; a requested host has no region`
    return {
      cluster: { ...cluster, destination: address(null) },
      refusal,
      deny: patterns(p.denylist),
      allow: patterns(p.allowlist),
      listed: address(null),
      unlisted: p.allowlist === null ? address(null) : p.allowlist.cidrs.length === 0 ? null : address(p.allowlist.cidrs.map(c => c.text)),
    }
  }

  /**
   * The verdict for routes of `gatewayKey` sending to `cluster`; null: allowed
   * (at compile time). `proxied`: the cluster goes through an upstream proxy
   * for this Gateway, which resolves its names (the same for every call with
   * this cluster and Gateway).
   */
  check(cluster: Cluster, gatewayKey: string, proxied = false): Denial | null {
    // An ExternalName Service: its endpoint a name anyone with a Service may
    // choose, so the Gateway's hostname lists hold for it as for a Backend's.
    const externalName = isExternalName(cluster)
    if (cluster.kind !== 'Backend' && !externalName) return null
    // Issue 11: every rule asks for each of its backends; a verdict depends
    // only on (cluster, Gateway), so it is decided once per compile.
    let byGateway = this.#verdicts.get(cluster)
    if (byGateway === undefined) this.#verdicts.set(cluster, byGateway = new Map())
    const known = byGateway.get(gatewayKey)
    if (known !== undefined) return known
    if (externalName) {
      // A region lock holds for it as for a Backend: its region is the Service's own label.
      const policy = this.gatewayPolicy(gatewayKey)
      const d = regionVerdict('Service', this.#serviceRegion(cluster), policy) ?? hostnameVerdict(cluster, policy, proxied)
      byGateway.set(gatewayKey, d)
      return d
    }
    const key = cluster.backendKey
    if (key === undefined) return null
    const backend = this.#snapshot.backends.get(key)
    if (backend === undefined) return null
    const d = this.#verdict(backend, cluster, this.gatewayPolicy(gatewayKey), proxied)
    byGateway.set(gatewayKey, d)
    if (d !== null) {
      const m = this.denials.get(key) ?? new Map<string, Denial>()
      m.set(gatewayKey, d)
      this.denials.set(key, m)
    }
    return d
  }

  #verdict(backend: Backend, cluster: Cluster, policy: GatewayPolicy, proxied: boolean): Denial | null {
    const dest = backend.destination
    if (dest.type === 'EndpointSelector') return null // in-cluster
    // A Service is in-cluster, unless it is an ExternalName one: its endpoint is then that name.
    if (dest.type === 'Service' && !cluster.endpoints.some(e => e.kind === 'hostname')) return null
    const region = regionVerdict('Backend', backend.region, policy)
    if (region !== null) return region
    const named = hostnameVerdict(cluster, policy, proxied)
    if (named !== null) return named
    for (const e of cluster.endpoints) {
      if (e.kind !== 'ip') continue
      const r = this.#addressVerdict(e.host, policy)
      if (r !== null) return r
    }
    return null
  }

  /** The sallyport.io/region label of the ExternalName Service behind `cluster` (`Service/ns/name:port…`); null: none. */
  #serviceRegion(cluster: Cluster): string | null {
    const m = /^Service\/([^/]+)\/([^:]+):/.exec(cluster.id)
    if (m === null) return null
    return this.#snapshot.services.get(`${m[1]}/${m[2]}`)?.meta.labels[REGION_LABEL] ?? null
  }

  #addressVerdict(address: string, policy: GatewayPolicy): Denial | null {
    if (policy.denylist !== null && matchCidrCarried(policy.denylist.cidrs, address) !== null) return denial('DestinationDenied', `${address} is on the Gateway's destination deny-list`)
    if (policy.allowlist !== null && matchCidr(policy.allowlist.cidrs, address) === null) return denial('DestinationNotAllowed', `${address} is not on the Gateway's destination allow-list`)
    const range = matchCidr(this.#clusterCidrs, address) !== null ? 'cluster' : guardedRangeOf(address)
    if (range === null) return null
    if (matchCidr(policy.allowCidrs, address) !== null || matchCidr(this.#globalAllow, address) !== null) return null
    return denial('DestinationRefused', `${address} is a ${range} address; allow it explicitly with the Gateway annotation ${ANNOTATION.ALLOW_CIDRS} (or --allow-destination-cidr)`)
  }

  /**
   * What upstream/ must enforce on the addresses a Backend's hostnames resolve
   * to: one entry per Gateway using it (an address must satisfy each), plus the
   * Backend's own reverse-DNS suffixes. null for clusters without hostnames
   * or that are not Backends (nothing resolved, or in-cluster).
   */
  clusterDestination(cluster: Cluster, gatewayKeys: readonly string[]): ClusterDestination | null {
    if (isExternalName(cluster)) return { gateways: [...new Set(gatewayKeys)].sort().filter(g => this.#verdicts.get(cluster)?.get(g) == null).map(g => this.#addressPolicy(g, cluster)), reverseDnsSuffixes: null }
    if (cluster.kind !== 'Backend' || !cluster.endpoints.some(e => e.kind === 'hostname')) return null
    const key = cluster.backendKey
    if (key === undefined) return null
    const backend = this.#snapshot.backends.get(key)
    if (backend === undefined) return null
    const problems: string[] = []
    const own = readSuffixes(backend.meta.annotations[ANNOTATION.REVERSE_DNS], ANNOTATION.REVERSE_DNS, problems)
    if (problems.length > 0) this.backendProblems.set(key, problems)
    const gateways: GatewayAddressPolicy[] = []
    for (const g of [...new Set(gatewayKeys)].sort()) {
      // A Gateway that denies the Backend outright never sends to it: its lists do not narrow the others.
      if (this.denials.get(key)?.has(g) === true) continue
      gateways.push(this.#addressPolicy(g, cluster))
    }
    return { gateways, reverseDnsSuffixes: own }
  }

  /** What Gateway `g` requires of the addresses `cluster`'s names resolve to. */
  #addressPolicy(g: string, cluster: Cluster): GatewayAddressPolicy {
    const p = this.gatewayPolicy(g)
    const hostsOnList = p.allowlist !== null && cluster.endpoints.every(e => e.kind !== 'hostname' || hostListed(p.allowlist as HostList, e.host.toLowerCase()))
    return {
      gateway: g,
      allowCidrs: p.allowCidrs.map(c => c.text),
      denyCidrs: p.denylist === null ? [] : p.denylist.cidrs.map(c => c.text),
      onlyCidrs: p.allowlist === null || hostsOnList ? null : p.allowlist.cidrs.map(c => c.text),
      reverseDnsSuffixes: p.reverseDnsSuffixes,
    }
  }
}

/** A Gateway's region lock on a destination labelled `region` (null: unlabelled); null: allowed. */
function regionVerdict(kind: 'Backend' | 'Service', region: string | null, policy: GatewayPolicy): Denial | null {
  if (policy.regions === null) return null
  const allowed = [...policy.regions].join(', ')
  if (region === null) return denial('RegionNotAllowed', `${kind} has no ${REGION_LABEL} label; the Gateway allows regions ${allowed}`)
  if (!policy.regions.has(region)) return denial('RegionNotAllowed', `region ${region} is not among the Gateway's allowed regions (${allowed})`)
  return null
}

/** A Service cluster whose endpoint is a name: an ExternalName Service (the others have addresses). */
function isExternalName(cluster: Cluster): boolean {
  return cluster.kind === 'Service' && cluster.endpoints.some(e => e.kind === 'hostname')
}

/** The Gateway's hostname deny- and allow-lists on a cluster's names; null: allowed by them. */
function hostnameVerdict(cluster: Cluster, policy: GatewayPolicy, proxied: boolean): Denial | null {
  for (const e of cluster.endpoints) {
    if (e.kind !== 'hostname') continue
    const host = e.host.toLowerCase()
    if (policy.denylist !== null && hostListed(policy.denylist, host)) return denial('DestinationDenied', `${host} is on the Gateway's destination deny-list`)
    // An allow-list without CIDRs decides names here; with CIDRs, the resolved addresses may still qualify (upstream/),
    // unless an upstream proxy resolves the name: its addresses are never seen, so only the names can admit it.
    const allow = policy.allowlist
    if (allow !== null && !hostListed(allow, host)) {
      if (allow.cidrs.length === 0) return denial('DestinationNotAllowed', `${host} is not on the Gateway's destination allow-list`)
      if (proxied) return denial('DestinationNotAllowed', `${host} is not on the Gateway's destination allow-list, and through the upstream proxy its addresses are never seen to match the list's CIDRs`)
    }
  }
  return null
}
