// Gateway addresses. sallyport is one Deployment behind one Service, and every
// Gateway it serves is reached at that Service's addresses: `--publish-service
// NAMESPACE/NAME` names it, and its addresses become each served Gateway's
// status.addresses ("the network addresses that have been bound to the
// Gateway"), as ingress controllers publish their Service on Ingresses
// (ingress-nginx --publish-service).
//
// spec.addresses (Extended) cannot move the Service; a requested address is
// honoured when it is one the Service already has. Gateway API:
// - a type the implementation does not support: Accepted=False, reason
//   UnsupportedAddress;
// - an address that cannot be used: Programmed=False, reason AddressNotUsable;
// - none assigned, in particular a type requested without a value that the
//   implementation cannot fill in: Programmed=False, reason AddressNotAssigned.
// The listeners serve all the same (they are bound to the Service's addresses
// whatever the Gateway asks), and the messages say so. With spec.addresses the
// Gateway's status lists the requested addresses it got, and only those
// (conformance GatewayStaticAddresses).

import { parseIp } from '../address-ranges.ts'
import type { Gateway, Service } from '../resources/model.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import type { Condition, GatewayStatusAddress } from './status.ts'
import { condition } from './conditions.ts'
import { GATEWAY_ADDRESS_TYPES } from '../validate/rules-gateway.ts'


/** Where the `--publish-service` Service was found, and what it publishes. */
export interface PublishedAddresses {
  /** `namespace/name`, as the flag names it. */
  readonly service: string
  /** Load balancer addresses first (what a client outside the cluster reaches), then the cluster IPs. */
  readonly addresses: readonly GatewayStatusAddress[]
  /** Why there are none: the Service is missing or has no address (a warning, once per compile); null when there are some. */
  readonly problem: ConfigProblem | null
}

/** What a Gateway's status says about its addresses. */
export interface GatewayAddressing {
  /** status.addresses to write; undefined: sallyport publishes none (no --publish-service; the status writer removes the field, as for []). */
  readonly addresses: readonly GatewayStatusAddress[] | undefined
  /** Accepted=False, reason UnsupportedAddress, or null. */
  readonly accepted: Condition | null
  /** Programmed=False, reason AddressNotUsable or AddressNotAssigned, or null. */
  readonly programmed: Condition | null
}

const NOTHING: GatewayAddressing = { addresses: undefined, accepted: null, programmed: null }

/** The addresses of the Service `publishService` names; null without the flag. Reads the Service through the snapshot's map, so a change to it recompiles (references.ts). */
export function publishedAddresses(snapshot: Snapshot, publishService: string | null): PublishedAddresses | null {
  if (publishService === null) return null
  const service = snapshot.services.get(publishService)
  if (service === undefined) {
    const ns = publishService.slice(0, publishService.indexOf('/'))
    const watched = snapshot.watchedNamespaces
    const selector = snapshot.labelSelector
    // The likely causes first: what the flags keep sallyport from reading. A
    // --label-selector applies to Services too, and the API server filters: the
    // Service may well exist, unread: sallyport sees Services through the same filtered watch.
    const why = watched != null && !watched.has(ns) ? `namespace ${ns} is not watched (--namespace); Gateways get no status.addresses until it exists`
      : selector != null ? `no Service of that name matches --label-selector ${selector}, and sallyport reads only the objects it matches (give the Service those labels); Gateways get no status.addresses until one does`
        : 'no such Service; Gateways get no status.addresses until it exists'
    return { service: publishService, addresses: [], problem: flagProblem(publishService, why) }
  }
  const addresses = serviceAddresses(service)
  const problem = addresses.length > 0 ? null : flagProblem(publishService,
    service.type === 'ExternalName' ? 'an ExternalName Service has no address of its own; Gateways get no status.addresses'
      : 'the Service has no address (headless, or no cluster IP yet); Gateways get no status.addresses')
  return { service: publishService, addresses, problem }
}

/**
 * A Service's addresses as Gateway addresses: each load balancer ingress
 * (`ip`, `hostname`), then each external IP, then each cluster IP. Load balancer addresses come first:
 * the one a client outside the cluster can reach, and the conformance suite
 * reaches a Gateway at its first address.
 */
export function serviceAddresses(service: Service): GatewayStatusAddress[] {
  const out: GatewayStatusAddress[] = []
  const seen = new Set<string>()
  const add = (type: GatewayStatusAddress['type'], value: string): void => {
    const key = addressKey(type, value)
    if (seen.has(key)) return
    seen.add(key)
    out.push({ type, value })
  }
  for (const i of service.loadBalancerIngress) {
    if (i.ip !== null) add('IPAddress', i.ip)
    if (i.hostname !== null) add('Hostname', i.hostname)
  }
  if (service.type !== 'ExternalName') {
    for (const ip of service.externalIPs) add('IPAddress', ip)
    for (const ip of service.clusterIPs) add('IPAddress', ip)
  }
  return out
}

/** A Gateway's status.addresses and the conditions spec.addresses calls for. */
export function gatewayAddressing(gateway: Gateway, published: PublishedAddresses | null, served: boolean): GatewayAddressing {
  const requested = gateway.addresses
  if (requested.length === 0) {
    if (published === null) return NOTHING
    return { addresses: served ? published.addresses : [], accepted: null, programmed: null }
  }
  const available = published?.addresses ?? []
  const assigned: GatewayStatusAddress[] = []
  const unsupported: string[] = []
  const unusable: string[] = []
  const unassigned: string[] = []
  for (const r of requested) {
    if (!GATEWAY_ADDRESS_TYPES.has(r.type)) { unsupported.push(describe(r)); continue }
    // Gateway API: a value left out asks the implementation to pick one of that type.
    const matches = r.value === '' ? available.filter(a => a.type === r.type) : available.filter(a => a.type === r.type && addressKey(a.type, a.value) === addressKey(r.type, r.value))
    if (matches.length === 0) (r.value === '' ? unassigned : unusable).push(describe(r))
    for (const m of matches) if (!assigned.includes(m)) assigned.push(m)
  }
  const gen = gateway.meta.generation
  const where = published === null
    ? 'sallyport publishes no addresses (start it with --publish-service NAMESPACE/NAME, its Service)'
    : `Service ${published.service} (--publish-service) has ${published.addresses.length === 0 ? 'no address' : published.addresses.map(a => a.value).join(', ')}`
  // A Gateway none of whose listeners serves says so in its own reason.
  const still = served ? '; the listeners are still served, at the addresses of the Service in front of sallyport' : ''
  const accepted = unsupported.length === 0 ? null : condition('Accepted', false, 'UnsupportedAddress',
    `address ${unsupported.join(', ')}: sallyport supports address types IPAddress and Hostname${still}`, gen)
  let programmed: Condition | null = null
  if (unsupported.length > 0 || unusable.length > 0) {
    const bad = [...unsupported, ...unusable]
    programmed = condition('Programmed', false, 'AddressNotUsable', `requested address ${bad.join(', ')} cannot be ${published === null ? 'assigned' : 'used'}: ${where}${still}`, gen)
  } else if (unassigned.length > 0) {
    programmed = condition('Programmed', false, 'AddressNotAssigned', `requested address ${unassigned.join(', ')} cannot be assigned: ${where}${still}`, gen)
  }
  // Without the flag sallyport knows no address: none is assigned, and the status lists none.
  return { addresses: published === null ? undefined : served ? assigned : [], accepted, programmed }
}

/** One address for messages: `10.0.0.1 (IPAddress)`, `any IPAddress` for one without a value. */
function describe(a: { readonly type: string; readonly value: string }): string {
  return a.value === '' ? `any ${a.type}` : `${a.value} (${a.type})`
}

/** Identity of an address: IPs by their numeric value (`fd00::1` is `fd00:0::1`), hostnames case-insensitively. */
function addressKey(type: string, value: string): string {
  if (type === 'IPAddress') {
    const ip = parseIp(value)
    if (ip !== null) return `ip/${ip.family}/${ip.value}`
  }
  if (type === 'Hostname') return `host/${value.toLowerCase().replace(/\.$/, '')}`
  return `${type}/${value}`
}

function flagProblem(service: string, message: string): ConfigProblem {
  const slash = service.indexOf('/')
  return {
    source: { file: '--publish-service', doc: 0 }, kind: 'Service', namespace: service.slice(0, slash), name: service.slice(slash + 1), field: '',
    message, severity: 'warning',
  }
}
