// Semantic pieces more than one kind uses: label selectors, extension lists,
// subjectAltNames, CA choice, insecureSkipVerify, parent/target references.

import { asArr, asObj, asStr, has, objsAt, strAt } from './access.ts'
import type { Obj } from './access.ts'
import { hostnameProblem } from './checks.ts'
import { Findings, child, item } from './findings.ts'
import { checkExtensionConfig } from './rules-extensions.ts'

/** metav1.LabelSelector: In/NotIn need values, Exists/DoesNotExist take none. */
export function checkLabelSelector(sel: Obj | null, base: string, f: Findings): void {
  for (const [req, i] of objsAt(sel, 'matchExpressions')) {
    const at = item(child(base, 'matchExpressions'), i)
    const op = strAt(req, 'operator')
    const n = asArr(req.values).length
    if ((op === 'In' || op === 'NotIn') && n === 0) f.error(child(at, 'values'), `operator ${op} needs at least one value`)
    if ((op === 'Exists' || op === 'DoesNotExist') && n > 0) f.error(child(at, 'values'), `operator ${op} takes no values`)
  }
}

/** The egress proposal's extension items: unique names; config or rawConfig, not both. */
export function checkExtensions(list: unknown, base: string, f: Findings): void {
  const names = new Map<string, number>()
  asArr(list).forEach((v, i) => {
    const ext = asObj(v)
    if (ext === null) return
    const at = item(base, i)
    const name = strAt(ext, 'name')
    if (name !== null) {
      const first = names.get(name)
      if (first !== undefined) f.error(child(at, 'name'), `extension name "${name}" repeats ${item(base, first)}`)
      else names.set(name, i)
    }
    if (has(ext, 'config') && has(ext, 'rawConfig')) f.error(child(at, 'rawConfig'), 'set config or rawConfig, not both')
    else checkExtensionConfig(ext, at, f)
  })
}

/** Gateway API SubjectAltName: hostname iff type Hostname, uri iff type URI. */
export function checkSubjectAltNames(list: unknown, base: string, f: Findings): void {
  asArr(list).forEach((v, i) => {
    const san = asObj(v)
    if (san === null) return
    const at = item(base, i)
    const type = strAt(san, 'type')
    const hostname = strAt(san, 'hostname') ?? ''
    const uri = strAt(san, 'uri') ?? ''
    if (type === 'Hostname') {
      if (hostname === '') f.error(child(at, 'hostname'), 'required when type is Hostname')
      else {
        const p = hostnameProblem(hostname)
        if (p !== null) f.error(child(at, 'hostname'), p)
      }
      if (uri !== '') f.error(child(at, 'uri'), 'must not be set when type is Hostname')
    }
    if (type === 'URI') {
      if (uri === '') f.error(child(at, 'uri'), 'required when type is URI')
      if (hostname !== '') f.error(child(at, 'hostname'), 'must not be set when type is URI')
    }
  })
}

/**
 * BackendTLSPolicyValidation's CEL: caCertificateRefs and wellKnownCACertificates
 * are exclusive; `required` says whether one of them must be present (the
 * policy) or both may be absent (Backends, where absent means system trust).
 */
export function checkCaChoice(tls: Obj | null, base: string, refsKey: string, wellKnownKey: string, required: boolean, f: Findings): void {
  const refs = asArr(tls?.[refsKey]).length > 0
  const wellKnown = (strAt(tls, wellKnownKey) ?? '') !== ''
  if (refs && wellKnown) f.error(child(base, wellKnownKey), `set ${refsKey} or ${wellKnownKey}, not both`)
  else if (required && !refs && !wellKnown) f.error(child(base, refsKey), `one of ${refsKey} or ${wellKnownKey} is required`)
}

/** insecureSkipVerify: true is allowed but must show (DESIGN.md safety defaults). */
export function warnInsecure(tls: Obj | null, base: string, f: Findings): void {
  if (tls !== null && tls.insecureSkipVerify === true) {
    f.warn(child(base, 'insecureSkipVerify'), 'certificate verification is disabled (insecureSkipVerify: true)')
  }
}

/** Policy targets must be of `allowedKinds` (group gateway.networking.k8s.io unless `coreKinds` lists them). */
export function checkTargetRef(ref: Obj, at: string, allowedKinds: readonly string[], f: Findings): void {
  const kind = strAt(ref, 'kind') ?? ''
  if (!allowedKinds.includes(kind)) f.error(child(at, 'kind'), `"${kind}" cannot be targeted; expected one of ${allowedKinds.join(', ')}`)
}

/** Two references to the same parent need distinct sectionName/port (Gateway API CommonRouteSpec CEL). */
export function checkParentRefs(spec: Obj | null, f: Findings): void {
  const seen = new Map<string, number>()
  for (const [ref, i] of objsAt(spec, 'parentRefs')) {
    const key = [strAt(ref, 'group') ?? 'gateway.networking.k8s.io', strAt(ref, 'kind') ?? 'Gateway', strAt(ref, 'namespace') ?? '', strAt(ref, 'name') ?? '', strAt(ref, 'sectionName') ?? '', String(ref.port ?? '')].join('|')
    const first = seen.get(key)
    if (first !== undefined) f.error(item('spec.parentRefs', i), `duplicates spec.parentRefs[${first}]; set a distinct sectionName or port`)
    else seen.set(key, i)
  }
}

/** Unique rule names within a route (Gateway API experimental CEL). */
export function checkRuleNames(spec: Obj | null, f: Findings): void {
  const seen = new Set<string>()
  for (const [rule, i] of objsAt(spec, 'rules')) {
    const name = asStr(rule.name)
    if (name === null) continue
    if (seen.has(name)) f.error(child(item('spec.rules', i), 'name'), `rule name "${name}" is not unique within the route`)
    seen.add(name)
  }
}

/** Route hostnames: RFC 1123, wildcard only leading, never an IP. */
export function checkHostnames(spec: Obj | null, f: Findings): void {
  asArr(spec?.hostnames).forEach((h, i) => {
    const s = asStr(h)
    if (s === null) return
    const p = hostnameProblem(s)
    if (p !== null) f.error(item('spec.hostnames', i), p)
  })
}

