// Step 1: which Gateways we serve and what their listeners become. Listeners
// are grouped per port; the first listener on a port (oldest Gateway, then
// listener order) fixes the port's protocol and, on HTTPS, its frontend
// client-certificate validation; later incompatible ones are Conflicted
// (Gateway API ListenerConditionConflicted).

import { createHash } from 'node:crypto'
import type { DataRef, Gateway, Listener, ModelObject, RouteGroupKind, Secret } from '../resources/model.ts'
import type { ConfigProblem } from '../resources/problem.ts'
import type { Snapshot } from '../resources/snapshot.ts'
import type { Condition, ObjectStatus } from './status.ts'
import type { PortProtocol, ServerCert } from './table.ts'
import { GATEWAY_GROUP, condition, sortedValues, statusKey } from './conditions.ts'
import { dataRefSource, resolveBundle, resolveTlsSecret } from './refs.ts'
import { ANY_HOST, covers } from './hostnames.ts'
import { checkCertificates, tlsSecretDates, tlsSecretFault, tlsSecretNameProblem } from './tls-material.ts'
import { TLS_OPTIONS, parseTlsVersion, type TlsVersion } from '../validate/annotations.ts'
import { listenerConflicts, type ListenerConflict } from '../validate/listener-conflicts.ts'
import type { GatewayAddressing } from './addresses.ts'

export const DEFAULT_CONTROLLER = 'sallyport.io/gateway-controller'

export interface ServedListener {
  readonly gateway: Gateway
  /** `namespace/name` of the Gateway. */
  readonly gatewayKey: string
  readonly listener: Listener
  /** Lowercased listener hostname, null = any. */
  readonly hostname: string | null
  readonly protocol: PortProtocol | null
  readonly tlsMode: 'Terminate' | 'Passthrough' | null
  /** Accepted, not conflicted, refs resolved: routes may attach and the listener is programmed. */
  readonly ready: boolean
  readonly kinds: readonly RouteGroupKind[]
  /** Listener conditions (attachedRoutes is added by compile after attachment). */
  readonly conditions: readonly Condition[]
  readonly cert: ServerCert | null
  readonly clientValidation: { readonly caPem: string; readonly required: boolean } | null
  /** The listener's tls.options TLS versions (terminating listeners; defaults otherwise). */
  readonly tlsVersions: { readonly min: TlsVersion; readonly max: TlsVersion }
}

export interface ServedGateway {
  readonly gateway: Gateway
  readonly key: string
  readonly listeners: readonly ServedListener[]
}

export interface GatewayPlan {
  readonly served: readonly ServedGateway[]
  /** GatewayClass status and the status of Gateways of our class we cannot serve. */
  readonly statuses: readonly ObjectStatus[]
}

const HTTP_KINDS: readonly RouteGroupKind[] = [{ group: GATEWAY_GROUP, kind: 'HTTPRoute' }, { group: GATEWAY_GROUP, kind: 'GRPCRoute' }]

/** Kinds a listener may carry, first the defaults (Gateway API Listener.allowedRoutes.kinds). */
function kindsFor(protocol: PortProtocol, tlsMode: 'Terminate' | 'Passthrough' | null): { allowed: readonly RouteGroupKind[]; defaults: readonly RouteGroupKind[] } {
  switch (protocol) {
    case 'HTTP': case 'HTTPS': return { allowed: HTTP_KINDS, defaults: HTTP_KINDS }
    case 'TCP': return { allowed: [{ group: GATEWAY_GROUP, kind: 'TCPRoute' }], defaults: [{ group: GATEWAY_GROUP, kind: 'TCPRoute' }] }
    case 'TLS': {
      // TLSRoute by SNI: Passthrough forwards the raw stream; Terminate decrypts with the
      // listener's certificate and forwards the decrypted stream (issue 8).
      const kinds = [{ group: GATEWAY_GROUP, kind: 'TLSRoute' }]
      return { allowed: kinds, defaults: kinds }
    }
  }
}

function isProtocol(p: string): p is PortProtocol {
  return p === 'HTTP' || p === 'HTTPS' || p === 'TCP' || p === 'TLS'
}

export function planGateways(snapshot: Snapshot, gatewayClass: string, controllerName: string): GatewayPlan {
  const statuses: ObjectStatus[] = []
  const cls = snapshot.gatewayClasses.get(gatewayClass)
  const gateways = sortedValues(snapshot.gateways).filter(g => g.gatewayClassName === gatewayClass)
  if (cls !== undefined) {
    if (cls.controllerName !== controllerName) {
      // Not ours: say why on the Gateways that name it (the log, /config_dump, `routes`); leave the
      // class to its controller. The status writer never writes these: the Gateways are that
      // controller's, and a status from us would flap with its own.
      for (const g of gateways) {
        const msg = `GatewayClass ${gatewayClass} belongs to controller ${cls.controllerName}, not ${controllerName}`
        statuses.push(gatewayStatus(g, [condition('Accepted', false, 'Invalid', msg, g.meta.generation), condition('Programmed', false, 'Invalid', msg, g.meta.generation)]))
      }
      return { served: [], statuses }
    }
    statuses.push({
      kind: 'GatewayClass', apiVersion: cls.apiVersion, namespace: '', name: cls.meta.name, generation: cls.meta.generation,
      conditions: [condition('Accepted', true, 'Accepted', `handled by ${controllerName}`, cls.meta.generation)], parents: [], listeners: [],
    })
  }
  // Per port: protocol (and TLS mode) and frontend validation fixed by the first listener, hostnames seen.
  const ports = new Map<number, PortClaim>()
  const served: ServedGateway[] = []
  for (const gateway of gateways) {
    const key = `${gateway.meta.namespace}/${gateway.meta.name}`
    const within = conflictsWithin(gateway)
    const listeners = gateway.listeners.map(l => planListener(snapshot, gateway, key, l, ports, within.get(l) ?? null))
    served.push({ gateway, key, listeners })
  }
  return { served: withOverlaps(served), statuses }
}

/**
 * GEP-3567, Gateway API ListenerConditionOverlappingTLSConfig: served HTTPS
 * listeners on one port (of any Gateway) whose hostnames overlap — one covers
 * the other; a listener without hostname covers all — each get
 * OverlappingTLSConfig=True, reason OverlappingHostnames. A negative-polarity
 * condition: never set False. They keep serving; a request for one's host on a
 * connection another's SNI selected is answered 421 (router/misdirected.ts).
 */
function withOverlaps(served: ServedGateway[]): ServedGateway[] {
  const byPort = new Map<number, ServedListener[]>()
  for (const sg of served) {
    for (const l of sg.listeners) {
      if (!l.ready || l.protocol !== 'HTTPS') continue
      const list = byPort.get(l.listener.port)
      if (list === undefined) byPort.set(l.listener.port, [l])
      else list.push(l)
    }
  }
  const overlaps = new Map<ServedListener, string[]>()
  for (const list of byPort.values()) {
    for (let i = 0; i < list.length; i++) {
      for (let j = i + 1; j < list.length; j++) {
        const a = list[i]
        const b = list[j]
        const ha = a.hostname ?? ANY_HOST
        const hb = b.hostname ?? ANY_HOST
        if (!covers(ha, hb) && !covers(hb, ha)) continue
        noteOverlap(overlaps, a, b)
        noteOverlap(overlaps, b, a)
      }
    }
  }
  if (overlaps.size === 0) return served
  return served.map(sg => sg.listeners.some(l => overlaps.has(l)) ? { ...sg, listeners: sg.listeners.map(l => withOverlap(l, overlaps.get(l))) } : sg)
}

function noteOverlap(overlaps: Map<ServedListener, string[]>, l: ServedListener, other: ServedListener): void {
  const text = `${other.gatewayKey}/${other.listener.name} (${other.hostname ?? 'any hostname'})`
  const list = overlaps.get(l)
  if (list === undefined) overlaps.set(l, [text])
  else list.push(text)
}

function withOverlap(l: ServedListener, others: string[] | undefined): ServedListener {
  if (others === undefined) return l
  const message = `hostname ${l.hostname ?? '(any)'} overlaps ${others.length === 1 ? 'that of listener' : 'those of listeners'} ${others.join(', ')} on port ${l.listener.port}: ` +
    'each serves the connections its TLS server name selects, and a request on one of them for another\'s hostname gets 421 Misdirected Request'
  return { ...l, conditions: [...l.conditions, condition('OverlappingTLSConfig', true, 'OverlappingHostnames', message, l.gateway.meta.generation)] }
}

/** The listeners of `gateway` that are not distinct, and why (validate/listener-conflicts.ts). */
function conflictsWithin(gateway: Gateway): Map<Listener, ListenerConflict> {
  const byIndex = listenerConflicts(gateway.listeners.map((l) => ({ name: l.name, protocol: l.protocol, port: l.port, hostname: l.hostname, tlsMode: l.tls?.mode ?? null })))
  const out = new Map<Listener, ListenerConflict>()
  for (const [i, conflict] of byIndex) out.set(gateway.listeners[i] as Listener, conflict)
  return out
}

/** What the first listener on a port fixed for the listeners after it. */
interface PortClaim {
  readonly protocol: PortProtocol
  readonly tlsMode: string | null
  readonly hostnames: Set<string>
  /** `namespace/name` of the Gateway whose listener claimed the port. */
  readonly gateway: string
  readonly frontend: Frontend
}

/**
 * A listener's frontend client-certificate validation (Gateway.spec.tls.frontend,
 * HTTPS only): what it resolves to, and how to compare and name it.
 */
interface Frontend {
  /** null: no client certificates asked (or refs that do not resolve: see `problem`). */
  readonly validation: ServedListener['clientValidation']
  readonly problem: { readonly reason: string; readonly message: string } | null
  /** Equal keys, equal handshakes: mode and CA content once resolved, else mode and the refs as written. */
  readonly key: string
  /** For messages: `none`, or the mode and the CA refs. */
  readonly text: string
}

const NO_FRONTEND: Frontend = { validation: null, problem: null, key: '', text: 'none' }

function frontendOf(snapshot: Snapshot, gateway: Gateway, listener: Listener): Frontend {
  const fv = gateway.frontendValidation
  if (fv === null || listener.protocol !== 'HTTPS') return NO_FRONTEND
  const { caRefs, mode } = frontendSettings(fv, listener.port)
  if (caRefs.length === 0) return NO_FRONTEND
  const text = `${mode}, CA ${caRefs.map(refText).join(', ')}`
  const from = { group: GATEWAY_GROUP, kind: 'Gateway', namespace: gateway.meta.namespace }
  // Parsed here: a bundle node could not read would leave an empty trust store (no
  // client verified). One that does not parse is InvalidCACertificateRef on the
  // listeners it validates, and compares as unresolved (its refs as written).
  const r = resolveBundle(snapshot, from, caRefs, 'ca.crt', 'InvalidCACertificateRef', checkCertificates)
  if (!r.ok) return { validation: null, problem: { reason: r.reason, message: r.message }, key: `unresolved\0${text}`, text }
  if (r.value === null) return NO_FRONTEND
  const required = mode === 'AllowValidOnly'
  return { validation: { caPem: r.value, required }, problem: null, key: `${mode}\0${r.value}`, text }
}

/** GEP-91: validation is per port, the default for ports without their own entry. */
function frontendSettings(fv: NonNullable<Gateway['frontendValidation']>, port: number): { readonly caRefs: readonly DataRef[]; readonly mode: string } {
  const perPort = fv.perPort.find(p => p.port === port)
  return { caRefs: perPort?.caCertificateRefs ?? fv.caCertificateRefs, mode: perPort?.mode ?? fv.mode }
}

function refText(ref: DataRef): string {
  return `${ref.kind} ${ref.namespace}/${ref.name}${ref.key === null ? '' : `[${ref.key}]`}`
}

function planListener(
  snapshot: Snapshot, gateway: Gateway, gatewayKey: string, listener: Listener,
  ports: Map<number, PortClaim>,
  within: ListenerConflict | null,
): ServedListener {
  const gen = gateway.meta.generation
  const hostname = listener.hostname === null ? null : listener.hostname.toLowerCase()
  const base = { gateway, gatewayKey, listener, hostname }
  if (!isProtocol(listener.protocol)) {
    return {
      ...base, protocol: null, tlsMode: null, ready: false, kinds: [], cert: null, clientValidation: null, tlsVersions: DEFAULT_VERSIONS,
      conditions: [
        condition('Accepted', false, 'UnsupportedProtocol', `protocol ${listener.protocol} is not supported`, gen),
        condition('Programmed', false, 'Invalid', 'listener not accepted', gen),
        condition('ResolvedRefs', true, 'ResolvedRefs', '', gen),
        condition('Conflicted', false, 'NoConflicts', '', gen),
      ],
    }
  }
  const protocol = listener.protocol
  const tlsMode = protocol === 'HTTPS' ? 'Terminate' : protocol === 'TLS' ? (listener.tls?.mode ?? 'Terminate') : null

  // Conflicts on the port: within this Gateway, every listener of a conflicting set;
  // with an earlier Gateway's listeners on the port, this one (it came later). Protocol
  // first, then hostname (Gateway API Listener docs), then frontend validation: one TLS
  // handshake serves every listener of a port (the client's certificate is asked, or
  // required, before its SNI has picked a listener's routes), so listeners that cannot
  // be isolated must validate alike — GEP-91 makes validation per port for this reason.
  // Within a Gateway it is per port already; between Gateways the later one differing
  // is thrown out, never served under the port's validation (an mTLS bypass) nor
  // imposing its own on the older one's clients.
  const frontend = frontendOf(snapshot, gateway, listener)
  let conflict: Condition = condition('Conflicted', false, 'NoConflicts', '', gen)
  const seen = ports.get(listener.port)
  const hostKey = hostname ?? ''
  if (within !== null) {
    conflict = condition('Conflicted', true, within.reason, within.message, gen)
  } else if (seen === undefined) {
    ports.set(listener.port, { protocol, tlsMode, hostnames: new Set([hostKey]), gateway: gatewayKey, frontend })
  } else if (seen.protocol !== protocol || seen.tlsMode !== tlsMode) {
    conflict = condition('Conflicted', true, 'ProtocolConflict', `port ${listener.port} already serves ${seen.protocol}${seen.tlsMode !== null ? ` (${seen.tlsMode})` : ''}`, gen)
  } else if (seen.hostnames.has(hostKey) || protocol === 'TCP') {
    conflict = condition('Conflicted', true, 'HostnameConflict', `another listener on port ${listener.port} already uses hostname ${hostname ?? '(any)'}`, gen)
  } else if (seen.frontend.key !== frontend.key) {
    conflict = condition('Conflicted', true, 'FrontendValidationConflict',
      `port ${listener.port} is held by Gateway ${seen.gateway}, whose client-certificate validation there (${seen.frontend.text}) differs from this Gateway's (${frontend.text}); listeners on one port share one TLS handshake`, gen)
  } else {
    seen.hostnames.add(hostKey)
  }

  // Route kinds.
  const { allowed, defaults } = kindsFor(protocol, tlsMode)
  let kinds = defaults
  let refs: Condition = condition('ResolvedRefs', true, 'ResolvedRefs', '', gen)
  if (listener.allowedRoutes.kinds.length > 0) {
    kinds = listener.allowedRoutes.kinds.filter(k => allowed.some(a => a.group === k.group && a.kind === k.kind))
    const bad = listener.allowedRoutes.kinds.filter(k => !kinds.includes(k))
    if (bad.length > 0) refs = condition('ResolvedRefs', false, 'InvalidRouteKinds', `unsupported route kinds: ${bad.map(k => k.kind).join(', ')}`, gen)
  }

  // Server certificate for TLS termination.
  let cert: ServerCert | null = null
  let certOk = true
  const tlsVersions = tlsMode === 'Terminate' ? listenerVersions(listener.tls?.options ?? {}) : DEFAULT_VERSIONS
  if (tlsMode === 'Terminate') {
    const from = { group: GATEWAY_GROUP, kind: 'Gateway', namespace: gateway.meta.namespace }
    const certRefs = listener.tls?.certificateRefs ?? []
    if (certRefs.length === 0) {
      certOk = false
      refs = condition('ResolvedRefs', false, 'InvalidCertificateRef', 'TLS termination needs at least one certificateRef', gen)
    }
    for (const ref of certRefs) {
      const r = resolveTlsSecret(snapshot, from, ref, 'InvalidCertificateRef')
      if (!r.ok) {
        certOk = false
        refs = condition('ResolvedRefs', false, r.reason, r.message, gen)
        break
      }
      // Gateway API leaves more than one ref implementation-specific. Only the first is
      // served: node's SNI callback puts only a context's last-set certificate on the
      // connection, so an RSA and an ECDSA one side by side (Envoy's way) cannot be
      // chosen by the client's signature algorithms. certificateProblems warns of the rest.
      if (cert === null) {
        const id = createHash('sha256').update(r.value.certPem).update('\0').update(r.value.keyPem).digest('hex').slice(0, 16)
        cert = { id, hostname, certPem: r.value.certPem, keyPem: r.value.keyPem, minVersion: tlsVersions.min }
      }
    }
  }

  // Frontend client-certificate validation (Gateway.spec.tls.frontend), HTTPS only.
  const clientValidation = frontend.validation
  if (frontend.problem !== null) {
    certOk = false
    refs = condition('ResolvedRefs', false, frontend.problem.reason, frontend.problem.message, gen)
  }

  const ready = conflict.status === 'False' && certOk
  return {
    ...base, protocol, tlsMode, ready, kinds, cert, clientValidation, tlsVersions,
    conditions: [
      // A conflicted listener is thrown out, not accepted (and says why).
      conflict.status === 'True' ? condition('Accepted', false, conflict.reason, conflict.message, gen) : condition('Accepted', true, 'Accepted', '', gen),
      ready ? condition('Programmed', true, 'Programmed', '', gen) : condition('Programmed', false, 'Invalid', conflict.status === 'True' ? conflict.message : refs.message, gen),
      refs,
      conflict,
    ],
  }
}

const DEFAULT_VERSIONS = { min: 'TLSv1.2', max: 'TLSv1.3' } as const

/**
 * A listener's tls.options sallyport.io/min-version and max-version. What
 * cannot be read keeps the default (validate warns), and so does a max-version
 * under the min-version.
 */
function listenerVersions(options: Readonly<Record<string, string>>): { readonly min: TlsVersion; readonly max: TlsVersion } {
  const read = (name: string, fallback: TlsVersion): TlsVersion => {
    const text = options[name]
    const r = text === undefined ? null : parseTlsVersion(text)
    return r !== null && r.ok ? r.value : fallback
  }
  const min = read(TLS_OPTIONS.MIN_VERSION, DEFAULT_VERSIONS.min)
  const max = read(TLS_OPTIONS.MAX_VERSION, DEFAULT_VERSIONS.max)
  return { min, max: min === 'TLSv1.3' ? 'TLSv1.3' : max }
}

/**
 * The TLS material listeners of `gateways` name and TLS cannot use, as
 * problems of the object holding it (its file, object and field, once per
 * object): kubernetes.io/tls Secrets of terminating listeners, and the
 * frontend validation CA bundles of HTTPS listeners. The log, /config_dump and
 * `sallyport validate` say which and why, as for an object validation drops;
 * the listeners themselves are ResolvedRefs=False (InvalidCertificateRef,
 * InvalidCACertificateRef).
 */
export function certificateProblems(snapshot: Snapshot, gateways: Iterable<Gateway>, now: number): ConfigProblem[] {
  const found = new Map<ModelObject, { field: string; message: string; listeners: string[]; served: boolean; severity: ConfigProblem['severity'] }>()
  const note = (object: ModelObject, field: string, message: string, listener: string, served = false, severity: ConfigProblem['severity'] = served ? 'warning' : 'error'): void => {
    const seen = found.get(object)
    if (seen === undefined) found.set(object, { field, message, listeners: [listener], served, severity })
    else if (!seen.listeners.includes(listener)) seen.listeners.push(listener)
  }
  for (const g of gateways) {
    const fv = g.frontendValidation
    for (const l of g.listeners) {
      const name = `${g.meta.namespace}/${g.meta.name}/${l.name}`
      if (l.tls !== null && (l.protocol === 'HTTPS' || (l.protocol === 'TLS' && l.tls.mode === 'Terminate'))) {
        l.tls.certificateRefs.forEach((ref, i) => {
          if (ref.group !== '' || ref.kind !== 'Secret') return
          const secret = snapshot.secrets.get(`${ref.namespace}/${ref.name}`)
          const fault = secret === undefined || secret.type !== 'kubernetes.io/tls' ? null : tlsSecretFault(secret)
          if (fault !== null) note(secret as Secret, fault.field, fault.message, name)
          // Only a listener's first certificateRef is served (planListener): the others were
          // ignored without a word, an ECDSA one beside an RSA one included.
          if (i > 0 && secret !== undefined && secret.type === 'kubernetes.io/tls' && fault === null) {
            note(secret, 'data[tls.crt]', `certificateRefs[${i}]: only a listener's first certificateRef is served`, name, false, 'warning')
            return
          }
          // Outside its dates: served all the same. Clients that check dates refuse it either
          // way (another listener's certificate would not name the host), and one not valid
          // yet by some clock skew becomes valid by itself, which a refused listener would
          // not until the configuration changes again.
          const dates = secret === undefined || secret.type !== 'kubernetes.io/tls' || fault !== null ? null : tlsSecretDates(secret, now)
          if (dates !== null) note(secret as Secret, 'data[tls.crt]', dates, name, true)
          // A hostname its certificate does not name: served all the same, as for the dates.
          const unnamed = dates !== null || fault !== null || secret === undefined || secret.type !== 'kubernetes.io/tls' || l.hostname === null ? null : tlsSecretNameProblem(secret, l.hostname.toLowerCase())
          if (unnamed !== null) note(secret as Secret, 'data[tls.crt]', unnamed, name, true)
        })
      }
      if (fv !== null && l.protocol === 'HTTPS') {
        for (const ref of frontendSettings(fv, l.port).caRefs) {
          const source = dataRefSource(snapshot, ref, 'ca.crt')
          const bad = source === null ? null : checkCertificates(source.pem)
          if (source !== null && bad !== null) note(source.object, source.field, `client CA bundle: ${bad}`, name)
        }
      }
    }
  }
  const out: ConfigProblem[] = []
  for (const [object, { field, message, listeners, served, severity }] of found) {
    out.push({
      source: object.source, kind: object.kind, namespace: object.meta.namespace, name: object.meta.name, field,
      message: `${message}; ${served ? 'served all the same' : 'not served'}: listener ${listeners.join(', ')}`, severity,
    })
  }
  return out
}

export function gatewayStatus(g: Gateway, conditions: readonly Condition[], listeners: ObjectStatus['listeners'] = [], addresses?: ObjectStatus['addresses']): ObjectStatus {
  return {
    kind: 'Gateway', apiVersion: g.apiVersion, namespace: g.meta.namespace, name: g.meta.name, generation: g.meta.generation,
    conditions, parents: [], listeners, ...(addresses === undefined ? {} : { addresses }),
  }
}

/** Whether any listener of the Gateway is served (or it has none): it is Accepted as far as its listeners go. */
export function listenersAccepted(sg: ServedGateway): boolean {
  return sg.listeners.length === 0 || sg.listeners.some(l => l.ready)
}

/**
 * Gateway-level conditions once listener outcomes are known; `addressing`:
 * what spec.addresses calls for (addresses.ts). A listener problem keeps its
 * reason (it is the one that stops traffic); the address problem's message is
 * added to it.
 */
export function gatewayConditions(sg: ServedGateway, addressing: Pick<GatewayAddressing, 'accepted' | 'programmed'> | null = null): Condition[] {
  const gen = sg.gateway.meta.generation
  const ready = sg.listeners.filter(l => l.ready).length
  const invalid = sg.listeners.length - ready
  const accepted = listenersAccepted(sg)
  let acceptedCondition = condition('Accepted', accepted, invalid > 0 ? 'ListenersNotValid' : 'Accepted', invalid > 0 ? `${invalid} of ${sg.listeners.length} listeners are not valid` : '', gen)
  let programmedCondition = condition('Programmed', ready > 0, ready > 0 ? 'Programmed' : 'Invalid', ready > 0 ? '' : 'no listener is programmed', gen)
  const badAddress = addressing?.accepted ?? null
  if (badAddress !== null) acceptedCondition = accepted ? withMessage(badAddress, acceptedCondition.message) : withMessage(acceptedCondition, badAddress.message)
  const unusable = addressing?.programmed ?? null
  if (unusable !== null) programmedCondition = ready > 0 ? unusable : withMessage(programmedCondition, unusable.message)
  return [acceptedCondition, programmedCondition]
}

function withMessage(c: Condition, more: string): Condition {
  return more === '' ? c : { ...c, message: c.message === '' ? more : `${c.message}; ${more}` }
}

export { statusKey }
