// GatewayClass and Gateway rules beyond the schema: the listener CEL of
// apis/v1/gateway_types.go, what sallyport needs to terminate TLS, and
// GEP-3792's spec.mesh.

import { asArr, asObj, has, objAt, objsAt, strAt } from './access.ts'
import type { Obj } from './access.ts'
import { hostnameProblem, isIPAddress } from './checks.ts'
import { Findings, child, item, key } from './findings.ts'
import { TLS_OPTIONS, parseTlsVersion, type TlsVersion } from './annotations.ts'
import { checkLabelSelector } from './rules-common.ts'
import { listenerConflicts, type ListenerShape } from './listener-conflicts.ts'

export function checkGatewayClass(_doc: Obj, _f: Findings): void {
  // The schema says all there is (controllerName pattern, parametersRef shape).
}

/** The spec.addresses types sallyport can publish (compile/addresses.ts); others are Accepted=False, UnsupportedAddress. */
export const GATEWAY_ADDRESS_TYPES: ReadonlySet<string> = new Set(['IPAddress', 'Hostname'])

export function checkGateway(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  checkListeners(spec, f)
  for (const [addr, i] of objsAt(spec, 'addresses')) {
    const type = strAt(addr, 'type') ?? 'IPAddress'
    const value = strAt(addr, 'value') ?? ''
    if (type === 'IPAddress' && value !== '' && !isIPAddress(value)) f.error(child(item('spec.addresses', i), 'value'), `"${value}" is not an IP address`)
    // As compile will say in status; whether an address is the --publish-service Service's only serve knows.
    if (!GATEWAY_ADDRESS_TYPES.has(type)) {
      f.warn(child(item('spec.addresses', i), 'type'), `address type ${type} is not supported (IPAddress, Hostname): the Gateway is not Accepted (UnsupportedAddress); its listeners are still served`)
    }
  }
  checkFrontend(objAt(objAt(spec, 'tls'), 'frontend'), f)
  checkMesh(objAt(spec, 'mesh'), f)
}

function checkListeners(spec: Obj | null, f: Findings): void {
  const names = new Map<string, number>()
  const triples = new Map<string, number>()
  const shapes: ListenerShape[] = []
  const indexes: number[] = []
  for (const [l, i] of objsAt(spec, 'listeners')) {
    if (typeof l.port === 'number') {
      shapes.push({ name: strAt(l, 'name') ?? '', protocol: strAt(l, 'protocol') ?? '', port: l.port, hostname: strAt(l, 'hostname'), tlsMode: strAt(objAt(l, 'tls'), 'mode') })
      indexes.push(i)
    }
    const at = item('spec.listeners', i)
    const name = strAt(l, 'name') ?? ''
    const first = names.get(name)
    if (first !== undefined) f.error(child(at, 'name'), `listener name "${name}" is not unique (also spec.listeners[${first}])`)
    else names.set(name, i)

    const protocol = strAt(l, 'protocol') ?? ''
    const hostname = strAt(l, 'hostname')
    const triple = `${String(l.port)}|${protocol}|${hostname ?? ''}`
    const dup = triples.get(triple)
    if (dup !== undefined) f.error(at, `port, protocol and hostname repeat spec.listeners[${dup}]`)
    else triples.set(triple, i)

    if (hostname !== null) {
      const p = hostnameProblem(hostname)
      if (p !== null) f.error(child(at, 'hostname'), p)
      if (protocol === 'TCP' || protocol === 'UDP') f.error(child(at, 'hostname'), `must not be set for protocol ${protocol}`)
    }
    checkListenerTls(l, at, protocol, f)
    const ns = objAt(objAt(l, 'allowedRoutes'), 'namespaces')
    if (strAt(ns, 'from') === 'Selector' && !has(ns, 'selector')) f.error(child(at, 'allowedRoutes.namespaces.selector'), 'required when from is Selector')
    checkLabelSelector(objAt(ns, 'selector'), child(at, 'allowedRoutes.namespaces.selector'), f)
  }
  // Listeners that differ in protocol on one port are not served, and the rest of the Gateway
  // is: a warning each. (One hostname twice on a port is the error above.)
  for (const [k, conflict] of listenerConflicts(shapes)) {
    if (conflict.reason !== 'ProtocolConflict') continue
    f.warn(child(item('spec.listeners', indexes[k] as number), 'port'), `${conflict.message} (Conflicted: ${conflict.reason})`)
  }
}

function checkListenerTls(l: Obj, at: string, protocol: string, f: Findings): void {
  const tls = objAt(l, 'tls')
  const tlsAt = child(at, 'tls')
  if (protocol === 'HTTP' || protocol === 'TCP' || protocol === 'UDP') {
    if (tls !== null) f.error(tlsAt, `must not be set for protocol ${protocol}`)
    return
  }
  if (protocol !== 'HTTPS' && protocol !== 'TLS') return
  if (tls === null) {
    f.error(tlsAt, `required for protocol ${protocol}`)
    return
  }
  const mode = strAt(tls, 'mode')
  const refs = asArr(tls.certificateRefs).length
  if (protocol === 'TLS' && mode === null) f.error(child(tlsAt, 'mode'), 'required for protocol TLS (Terminate or Passthrough)')
  if (protocol === 'HTTPS' && mode === 'Passthrough') f.error(child(tlsAt, 'mode'), 'must be Terminate for protocol HTTPS')
  // Passthrough forwards the client's TLS untouched, so there is nothing to present.
  if (mode === 'Passthrough' && refs > 0) f.error(child(tlsAt, 'certificateRefs'), 'must be empty for mode Passthrough')
  // sallyport terminates TLS itself and has no other certificate source than these refs.
  if (mode !== 'Passthrough' && refs === 0) f.error(child(tlsAt, 'certificateRefs'), `required to terminate TLS on a ${protocol} listener`)
  checkTlsOptions(objAt(tls, 'options'), child(tlsAt, 'options'), mode === 'Passthrough', f)
}

/** Listener tls.options: what sallyport cannot read is ignored, with a warning (the listener serves on the defaults). */
function checkTlsOptions(options: Obj | null, at: string, passthrough: boolean, f: Findings): void {
  if (options === null) return
  const versions: Partial<Record<string, TlsVersion>> = {}
  for (const [name, value] of Object.entries(options)) {
    const where = key(at, name)
    if (name !== TLS_OPTIONS.MIN_VERSION && name !== TLS_OPTIONS.MAX_VERSION) {
      f.warn(where, `not an option sallyport reads (${TLS_OPTIONS.MIN_VERSION}, ${TLS_OPTIONS.MAX_VERSION}); ignored`)
      continue
    }
    if (passthrough) { f.warn(where, 'a Passthrough listener does not terminate TLS; ignored'); continue }
    const r = parseTlsVersion(typeof value === 'string' ? value : String(value))
    if (!r.ok) f.warn(where, `${r.message}; ignored`)
    else versions[name] = r.value
  }
  const min = versions[TLS_OPTIONS.MIN_VERSION]
  if (min === 'TLSv1.3' && versions[TLS_OPTIONS.MAX_VERSION] === 'TLSv1.2') {
    f.warn(key(at, TLS_OPTIONS.MAX_VERSION), `lower than ${TLS_OPTIONS.MIN_VERSION}; ignored`)
  }
}

function checkFrontend(frontend: Obj | null, f: Findings): void {
  if (frontend === null) return
  const ports = new Map<number, number>()
  for (const [pp, i] of objsAt(frontend, 'perPort')) {
    const port = typeof pp.port === 'number' ? pp.port : -1
    const first = ports.get(port)
    if (first !== undefined) f.error(child(item('spec.tls.frontend.perPort', i), 'port'), `port ${port} repeats spec.tls.frontend.perPort[${first}]`)
    else ports.set(port, i)
  }
}

function checkMesh(mesh: Obj | null, f: Findings): void {
  if (mesh === null) return
  const tb = mesh.trustBundle
  const refs: Array<[Obj, string]> = Array.isArray(tb)
    ? tb.flatMap((v, i): Array<[Obj, string]> => { const o = asObj(v); return o === null ? [] : [[o, item('spec.mesh.trustBundle', i)]] })
    : asObj(tb) === null ? [] : [[asObj(tb) as Obj, 'spec.mesh.trustBundle']]
  for (const [ref, at] of refs) {
    // ClusterTrustBundles are cluster-scoped: a namespace on the reference means a mix-up.
    if (strAt(ref, 'kind') === 'ClusterTrustBundle' && has(ref, 'namespace')) f.warn(child(at, 'namespace'), 'ignored: ClusterTrustBundle is cluster-scoped')
  }
  checkLabelSelector(objAt(mesh, 'selector'), 'spec.mesh.selector', f)
}
