// Core and discovery kinds: only what sallyport relies on. Secret messages
// never include values.

import { asArr, objAt, objsAt, strAt } from './access.ts'
import type { Obj } from './access.ts'
import { isBase64, isIPAddress, isDnsSubdomain } from './checks.ts'
import { Findings, child, item, key as keyOf } from './findings.ts'

// Kubernetes ConfigMap/Secret keys: [-._a-zA-Z0-9]+, at most 253 characters.
const DATA_KEY = /^[-._a-zA-Z0-9]+$/

function checkKeys(map: Obj | null, base: string, f: Findings): void {
  if (map === null) return
  for (const key of Object.keys(map)) {
    if (key.length > 253 || !DATA_KEY.test(key)) f.error(keyOf(base, key), `"${key}" is not a valid key (letters, digits, '-', '_', '.')`)
  }
}

const REQUIRED_KEYS: Readonly<Record<string, readonly string[]>> = {
  'kubernetes.io/tls': ['tls.crt', 'tls.key'],
  'kubernetes.io/basic-auth': [],
  'kubernetes.io/ssh-auth': ['ssh-privatekey'],
  'kubernetes.io/dockerconfigjson': ['.dockerconfigjson'],
}

export function checkSecret(doc: Obj, f: Findings): void {
  const data = objAt(doc, 'data')
  const stringData = objAt(doc, 'stringData')
  checkKeys(data, 'data', f)
  checkKeys(stringData, 'stringData', f)
  for (const [key, value] of Object.entries(data ?? {})) {
    if (typeof value === 'string' && !isBase64(value)) f.error(keyOf('data', key), 'not valid base64 (use stringData for plain text)')
  }
  const type = strAt(doc, 'type') ?? 'Opaque'
  for (const key of REQUIRED_KEYS[type] ?? []) {
    if (data?.[key] === undefined && stringData?.[key] === undefined) f.error(keyOf('data', key), `required for a Secret of type ${type}`)
  }
}

export function checkConfigMap(doc: Obj, f: Findings): void {
  const data = objAt(doc, 'data')
  const binary = objAt(doc, 'binaryData')
  checkKeys(data, 'data', f)
  checkKeys(binary, 'binaryData', f)
  for (const [key, value] of Object.entries(binary ?? {})) {
    if (typeof value === 'string' && !isBase64(value)) f.error(keyOf('binaryData', key), 'not valid base64')
    if (data?.[key] !== undefined) f.error(keyOf('binaryData', key), `key "${key}" is also in data`)
  }
}

export function checkService(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  const type = strAt(spec, 'type') ?? 'ClusterIP'
  const external = strAt(spec, 'externalName')
  if (type === 'ExternalName' && external === null) f.error('spec.externalName', 'required when type is ExternalName')
  if (external !== null && !isDnsSubdomain(external.replace(/\.$/, ''))) f.error('spec.externalName', `"${external}" is not a valid DNS name`)
  const names = new Set<string>()
  const ports = objsAt(spec, 'ports')
  for (const [p, i] of ports) {
    const name = strAt(p, 'name') ?? ''
    if (ports.length > 1 && name === '') f.error(child(item('spec.ports', i), 'name'), 'required when a Service has more than one port')
    if (name !== '' && names.has(name)) f.error(child(item('spec.ports', i), 'name'), `port name "${name}" is not unique`)
    names.add(name)
  }
}

export function checkPod(doc: Obj, f: Findings): void {
  const status = objAt(doc, 'status')
  const ip = strAt(status, 'podIP')
  if (ip !== null && ip !== '' && !isIPAddress(ip)) f.error('status.podIP', `"${ip}" is not an IP address`)
  for (const [entry, i] of objsAt(status, 'podIPs')) {
    const v = strAt(entry, 'ip') ?? ''
    if (!isIPAddress(v)) f.error(child(item('status.podIPs', i), 'ip'), `"${v}" is not an IP address`)
  }
}

export function checkEndpointSlice(doc: Obj, f: Findings): void {
  const type = strAt(doc, 'addressType')
  for (const [ep, i] of objsAt(doc, 'endpoints')) {
    asArr(ep.addresses).forEach((a, j) => {
      const at = item(child(item('endpoints', i), 'addresses'), j)
      if (typeof a !== 'string') return
      const ok = type === 'FQDN' ? isDnsSubdomain(a) : type === 'IPv6' ? isIPAddress(a) && a.includes(':') : isIPAddress(a) && !a.includes(':')
      if (!ok) f.error(at, `"${a}" is not a valid ${type ?? ''} address`)
    })
  }
  const names = new Set<string>()
  for (const [p, i] of objsAt(doc, 'ports')) {
    const name = strAt(p, 'name') ?? ''
    if (names.has(name)) f.error(child(item('ports', i), 'name'), `port name "${name}" is not unique`)
    names.add(name)
  }
}

export function checkNothing(_doc: Obj, _f: Findings): void {}

