// Backend rules beyond the schema, per published shape (see kinds.ts for how
// the shape is chosen): the "set iff" CEL of GEP-4488 / XBackend, the egress
// proposal's ExactlyOneOf destination, Envoy Gateway's endpoint unions, and
// the hostname guard rails every shape shares (GEP-4488 "Security Model").

import { asArr, asObj, asStr, has, objAt, objsAt, strAt } from './access.ts'
import type { Obj } from './access.ts'
import { externalHostnameProblem, isIPAddress } from './checks.ts'
import { Findings, child, item } from './findings.ts'
import { checkCaChoice, checkExtensions, checkLabelSelector, checkSubjectAltNames, warnInsecure } from './rules-common.ts'

function checkHostname(host: string | null, at: string, f: Findings): void {
  if (host === null) return
  const p = externalHostnameProblem(host)
  if (p !== null) f.error(at, p)
}

/** GEP-4488 Backend and XBackend share one spec. */
export function checkGep4488Backend(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  const type = strAt(spec, 'type')
  // self.type == 'ExternalHostname' ? has(self.externalHostname) : !has(self.externalHostname)
  for (const [t, key] of [['ExternalHostname', 'externalHostname'], ['EndpointSelector', 'endpointSelector']] as const) {
    if (type === t && !has(spec, key)) f.error(`spec.${key}`, `required when type is ${t}`)
    if (type !== t && has(spec, key)) f.error(`spec.${key}`, `must not be set when type is ${type ?? ''}`)
  }
  checkHostname(strAt(objAt(spec, 'externalHostname'), 'hostname'), 'spec.externalHostname.hostname', f)

  const sel = objAt(spec, 'endpointSelector')
  if (sel !== null) {
    // ExactlyOneOf=SelectorRef,Selector; the selector may be the embedded LabelSelector.
    const forms = [has(sel, 'selectorRef'), has(sel, 'selector'), has(sel, 'matchLabels') || has(sel, 'matchExpressions')].filter(Boolean).length
    if (forms === 0) f.error('spec.endpointSelector', 'set exactly one of selectorRef or selector')
    if (forms > 1) f.error('spec.endpointSelector', 'set exactly one of selectorRef or selector, not several')
    checkLabelSelector(objAt(sel, 'selector'), 'spec.endpointSelector.selector', f)
    checkLabelSelector(sel, 'spec.endpointSelector', f)
  }

  const tls = objAt(spec, 'tls')
  if (tls !== null) {
    const mode = strAt(tls, 'mode')
    if (mode === 'ClientAndServer' && !has(tls, 'clientCertificateRef')) f.error('spec.tls.clientCertificateRef', 'required when mode is ClientAndServer')
    if (mode !== 'ClientAndServer' && has(tls, 'clientCertificateRef')) f.error('spec.tls.clientCertificateRef', `must not be set when mode is ${mode ?? ''}`)
    const validation = objAt(tls, 'validation')
    checkCaChoice(validation, 'spec.tls.validation', 'caCertificateRefs', 'wellKnownCACertificates', false, f)
    checkSubjectAltNames(validation?.subjectAltNames, 'spec.tls.validation.subjectAltNames', f)
    warnInsecure(tls, 'spec.tls', f)
    warnInsecure(validation, 'spec.tls.validation', f)
  }

  const protocol = strAt(spec, 'protocol')
  for (const key of ['mcp', 'protocolOptions.mcp']) {
    const present = key === 'mcp' ? has(spec, 'mcp') : has(objAt(spec, 'protocolOptions'), 'mcp')
    if (present && protocol !== 'MCP') f.error(`spec.${key}`, `MCP options need protocol MCP (protocol is ${protocol ?? 'unset'})`)
  }
  checkExtensions(spec?.extensions, 'spec.extensions', f)
}

const EGRESS_TYPE_FIELD: Readonly<Record<string, string>> = {
  Fqdn: 'fqdn', FQDN: 'fqdn', Ip: 'ip', IP: 'ip', KubernetesService: 'service',
}

/** The egress gateways proposal's Backend (spec.destination). */
export function checkEgressBackend(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  const dest = objAt(spec, 'destination')
  const base = 'spec.destination'
  const type = strAt(dest, 'type') ?? ''
  const want = EGRESS_TYPE_FIELD[type]
  // +kubebuilder:validation:ExactlyOneOf=fqdn;service;ip, and it must be the one `type` names.
  for (const key of ['fqdn', 'ip', 'service']) {
    if (key === want && !has(dest, key)) f.error(child(base, key), `required when type is ${type}`)
    if (key !== want && has(dest, key)) f.error(child(base, key), `must not be set when type is ${type}`)
  }
  checkHostname(strAt(objAt(dest, 'fqdn'), 'hostname'), `${base}.fqdn.hostname`, f)
  checkEgressIp(dest?.ip, `${base}.ip`, f)

  const ports = objsAt(dest, 'ports')
  if (ports.length === 0) f.error(`${base}.ports`, 'at least one port is required')
  const numbers = new Map<number, number>()
  for (const [port, i] of ports) {
    const at = item(`${base}.ports`, i)
    const n = typeof port.number === 'number' ? port.number : -1
    const first = numbers.get(n)
    if (first !== undefined) f.error(child(at, 'number'), `port ${n} repeats ${item(`${base}.ports`, first)}`)
    else numbers.set(n, i)
    const tls = objAt(port, 'tls')
    if (tls !== null) {
      const mode = strAt(tls, 'mode')
      if (mode === 'Mutual' && !has(tls, 'clientCertificateRef')) f.error(child(at, 'tls.clientCertificateRef'), 'required when mode is Mutual')
      if (mode !== 'Mutual' && has(tls, 'clientCertificateRef')) f.error(child(at, 'tls.clientCertificateRef'), `must not be set when mode is ${mode ?? ''}`)
      warnInsecure(tls, child(at, 'tls'), f)
    }
    if (has(objAt(port, 'protocolOptions'), 'mcp') && strAt(port, 'protocol') !== 'MCP') {
      f.error(child(at, 'protocolOptions.mcp'), `MCP options need protocol MCP (protocol is ${strAt(port, 'protocol') ?? 'unset'})`)
    }
  }
  checkExtensions(spec?.extensions, 'spec.extensions', f)
}

function checkEgressIp(ip: unknown, at: string, f: Findings): void {
  if (ip === undefined || ip === null) return
  const o = asObj(ip)
  const one = (value: unknown, field: string): void => {
    const s = asStr(value)
    if (s !== null && !isIPAddress(s)) f.error(field, `"${s}" is not an IP address`)
  }
  if (o === null) return one(ip, at)
  if (has(o, 'address') === has(o, 'addresses')) f.error(at, 'set exactly one of address or addresses')
  one(o.address, child(at, 'address'))
  asArr(o.addresses).forEach((a, i) => one(a, item(child(at, 'addresses'), i)))
}

/** Envoy Gateway's Backend (gateway.envoyproxy.io/v1alpha1). */
export function checkEnvoyBackend(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  const dynamic = strAt(spec, 'type') === 'DynamicResolver'
  const endpoints = objsAt(spec, 'endpoints')
  if (dynamic && endpoints.length > 0) f.error('spec.endpoints', 'must not be set when type is DynamicResolver')
  if (!dynamic && endpoints.length === 0) f.error('spec.endpoints', 'at least one endpoint is required')
  let unix = 0
  for (const [ep, i] of endpoints) {
    const at = item('spec.endpoints', i)
    const kinds = ['fqdn', 'ip', 'unix'].filter((k) => has(ep, k))
    if (kinds.length !== 1) f.error(at, 'set exactly one of fqdn, ip or unix')
    checkHostname(strAt(objAt(ep, 'fqdn'), 'hostname'), child(at, 'fqdn.hostname'), f)
    const address = strAt(objAt(ep, 'ip'), 'address')
    if (address !== null && !isIPAddress(address)) f.error(child(at, 'ip.address'), `"${address}" is not an IP address`)
    const path = strAt(objAt(ep, 'unix'), 'path')
    if (path !== null && !path.startsWith('/')) f.error(child(at, 'unix.path'), `"${path}" must be an absolute path`)
    if (has(ep, 'unix')) unix++
  }
  // Envoy Gateway: a Backend's endpoints are all unix sockets or none of them are.
  if (unix > 0 && unix < endpoints.length) f.error('spec.endpoints', 'unix endpoints cannot be mixed with fqdn or ip endpoints')

  const tls = objAt(spec, 'tls')
  if (tls !== null) {
    checkCaChoice(tls, 'spec.tls', 'caCertificateRefs', 'wellKnownCACertificates', false, f)
    if (tls.insecureSkipVerify === true && (asArr(tls.caCertificateRefs).length > 0 || has(tls, 'wellKnownCACertificates'))) {
      f.error('spec.tls.insecureSkipVerify', 'cannot be combined with caCertificateRefs or wellKnownCACertificates')
    }
    checkSubjectAltNames(tls.subjectAltNames, 'spec.tls.subjectAltNames', f)
    warnInsecure(tls, 'spec.tls', f)
  }
  checkExtensions(spec?.extensions, 'spec.extensions', f)
}
