// Policy kinds: BackendTLSPolicy (v1/v1alpha3 and GEP-1897 v1alpha2 shapes),
// Envoy Gateway's BackendTrafficPolicy, and sallyport's EgressExtension.

import { asArr, has, objAt, objsAt, strAt } from './access.ts'
import type { Obj } from './access.ts'
import { Findings, child, item } from './findings.ts'
import { checkCaChoice, checkExtensions, checkSubjectAltNames, checkTargetRef } from './rules-common.ts'
import { cidrProblem, headerNameProblem, wholeRegexProblem } from './checks.ts'

// GEP-4488 / egress proposal: "Backend is explicitly disallowed as a targetRef
// for BackendTLSPolicy" — a Backend carries its own TLS.
const NOT_TLS_TARGETS = new Set(['Backend', 'XBackend'])

/** BackendTLSPolicy v1 / v1alpha3 (and v1alpha2 documents already in that shape). */
export function checkBackendTLSPolicy(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  for (const [ref, i] of objsAt(spec, 'targetRefs')) {
    const kind = strAt(ref, 'kind') ?? ''
    if (NOT_TLS_TARGETS.has(kind)) f.error(child(item('spec.targetRefs', i), 'kind'), `a ${kind} cannot be targeted; set tls on the ${kind} itself`)
  }
  checkTargetDuplicates(spec, f)
  const v = objAt(spec, 'validation')
  if (!has(v, 'hostname')) f.error('spec.validation.hostname', 'required (SNI and the name to verify)')
  checkCaChoice(v, 'spec.validation', 'caCertificateRefs', 'wellKnownCACertificates', true, f)
  checkSubjectAltNames(v?.subjectAltNames, 'spec.validation.subjectAltNames', f)
  if (v !== null && v.insecureSkipVerify === true) f.warn('spec.validation.insecureSkipVerify', 'certificate verification is disabled (insecureSkipVerify: true)')
}

function checkTargetDuplicates(spec: Obj | null, f: Findings): void {
  const seen = new Map<string, number>()
  for (const [ref, i] of objsAt(spec, 'targetRefs')) {
    const key = [strAt(ref, 'group') ?? '', strAt(ref, 'kind') ?? '', strAt(ref, 'name') ?? '', strAt(ref, 'sectionName') ?? ''].join('|')
    const first = seen.get(key)
    if (first !== undefined) f.error(item('spec.targetRefs', i), `duplicates spec.targetRefs[${first}]; set a distinct sectionName`)
    else seen.set(key, i)
  }
}

/** GEP-1897 v1alpha2: targetRef + tls {certRefs | caCertRefs, standardCerts | wellKnownCACerts, hostname}. */
export function checkBackendTLSPolicyV1alpha2(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  const kind = strAt(objAt(spec, 'targetRef'), 'kind') ?? ''
  if (NOT_TLS_TARGETS.has(kind)) f.error('spec.targetRef.kind', `a ${kind} cannot be targeted; set tls on the ${kind} itself`)
  const tls = objAt(spec, 'tls')
  if (has(tls, 'certRefs') && has(tls, 'caCertRefs')) f.error('spec.tls.caCertRefs', 'set certRefs or caCertRefs (two spellings of one field), not both')
  if (has(tls, 'standardCerts') && has(tls, 'wellKnownCACerts')) f.error('spec.tls.wellKnownCACerts', 'set standardCerts or wellKnownCACerts (two spellings of one field), not both')
  const refs = asArr(tls?.certRefs).length + asArr(tls?.caCertRefs).length > 0
  const system = (strAt(tls, 'standardCerts') ?? strAt(tls, 'wellKnownCACerts') ?? '') !== ''
  // "If CertRefs is unspecified, then StandardCerts must be set to System", and not both.
  if (refs && system) f.error(has(tls, 'certRefs') ? 'spec.tls.certRefs' : 'spec.tls.caCertRefs', 'set CA references or System certificates, not both')
  if (!refs && !system) f.error('spec.tls.certRefs', 'one of certRefs or standardCerts: System is required')
}

// A Backend (Envoy Gateway, or the egress proposal's Backend/XBackend) takes
// backend-level fields, between a route's policy and a listener's
// (compile/policies.ts): unlike BackendTLSPolicy, nothing excludes it here.
const BTP_TARGETS = ['Gateway', 'HTTPRoute', 'GRPCRoute', 'TCPRoute', 'TLSRoute', 'UDPRoute', 'Backend', 'XBackend']

/** Envoy Gateway BackendTrafficPolicy: target, and the unions of its sub-structures. */
export function checkBackendTrafficPolicy(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  const single = objAt(spec, 'targetRef')
  const many = objsAt(spec, 'targetRefs')
  if (single !== null && many.length > 0) f.error('spec.targetRefs', 'set targetRef or targetRefs, not both')
  if (single === null && many.length === 0) f.error('spec.targetRefs', 'one of targetRef or targetRefs is required')
  if (single !== null) checkTargetRef(single, 'spec.targetRef', BTP_TARGETS, f)
  for (const [ref, i] of many) checkTargetRef(ref, item('spec.targetRefs', i), BTP_TARGETS, f)
  checkTargetDuplicates(spec, f)

  const top = spec?.enableIPv6
  const nested = objAt(spec, 'protocols')?.enableIPv6
  if (typeof top === 'boolean' && typeof nested === 'boolean' && top !== nested) {
    f.error('spec.protocols.enableIPv6', `${String(nested)} contradicts spec.enableIPv6: ${String(top)}`)
  }

  const lb = objAt(spec, 'loadBalancer')
  if (lb !== null) {
    const type = strAt(lb, 'type')
    if (type === 'ConsistentHash' && !has(lb, 'consistentHash')) f.error('spec.loadBalancer.consistentHash', 'required when type is ConsistentHash')
    if (type !== 'ConsistentHash' && has(lb, 'consistentHash')) f.error('spec.loadBalancer.consistentHash', `must not be set when type is ${type ?? ''}`)
    const ch = objAt(lb, 'consistentHash')
    const chType = strAt(ch, 'type')
    for (const [t, key] of [['Header', 'header'], ['Cookie', 'cookie']] as const) {
      if (ch === null) break
      if (chType === t && !has(ch, key)) f.error(`spec.loadBalancer.consistentHash.${key}`, `required when type is ${t}`)
      if (chType !== t && has(ch, key)) f.error(`spec.loadBalancer.consistentHash.${key}`, `must not be set when type is ${chType ?? ''}`)
    }
    // Envoy Gateway CEL: slow start exists only for RoundRobin and LeastRequest.
    if (has(lb, 'slowStart') && type !== 'RoundRobin' && type !== 'LeastRequest') f.error('spec.loadBalancer.slowStart', `only supported with RoundRobin or LeastRequest, not ${type ?? ''}`)
  }

  const active = objAt(objAt(spec, 'healthCheck'), 'active')
  if (active !== null) {
    const type = strAt(active, 'type')
    if (type === 'HTTP' && !has(active, 'http')) f.error('spec.healthCheck.active.http', 'required when type is HTTP')
    if (type !== 'HTTP' && has(active, 'http')) f.error('spec.healthCheck.active.http', `must not be set when type is ${type ?? ''}`)
    if (type !== 'TCP' && has(active, 'tcp')) f.error('spec.healthCheck.active.tcp', `must not be set when type is ${type ?? ''}`)
  }

  const rl = objAt(spec, 'rateLimit')
  if (rl !== null) {
    const type = strAt(rl, 'type')
    for (const [t, key] of [['Local', 'local'], ['Global', 'global']] as const) {
      if (type === t && !has(rl, key)) f.error(`spec.rateLimit.${key}`, `required when type is ${t}`)
      if (type !== t && has(rl, key)) f.error(`spec.rateLimit.${key}`, `must not be set when type is ${type ?? ''}`)
      // Each rule becomes a RateLimit extension match (compile/extensions.ts rateLimitExtension):
      // a value that does not compile or a range that does not parse would fail or never match.
      for (const [rule, r] of objsAt(objAt(rl, key), 'rules')) {
        const at = item(`spec.rateLimit.${key}.rules`, r)
        const request = objAt(objAt(rule, 'cost'), 'request')
        if (request !== null && strAt(request, 'from') === 'Number' && !has(request, 'number')) f.error(`${at}.cost.request.number`, 'required when from is Number')
        if (request !== null && strAt(request, 'from') === 'Metadata') f.warn(`${at}.cost.request`, 'a cost from Metadata (what Envoy filters write) is not supported: each request takes 1 token')
        if (objAt(objAt(rule, 'cost'), 'response') !== null) f.warn(`${at}.cost.response`, 'a response cost is not supported (ignored): to charge by the tokens an AI answer used, give the Backend an AIUsage extension with a budget')
        for (const [sel, s] of objsAt(rule, 'clientSelectors')) {
          const at = `${item(`spec.rateLimit.${key}.rules`, r)}.${item('clientSelectors', s)}`
          for (const [h, i] of objsAt(sel, 'headers')) {
            const name = strAt(h, 'name')
            const nameProblem = name === null ? null : headerNameProblem(name)
            if (nameProblem !== null) f.error(`${item(`${at}.headers`, i)}.name`, nameProblem)
            const value = strAt(h, 'value')
            // Envoy Gateway refuses it too: a Distinct header has no value to invert.
            if (h.invert === true && strAt(h, 'type') === 'Distinct') f.error(`${item(`${at}.headers`, i)}.invert`, 'must not be set when type is Distinct')
            const problem = strAt(h, 'type') === 'RegularExpression' && value !== null ? wholeRegexProblem(value) : null
            if (problem !== null) f.error(`${item(`${at}.headers`, i)}.value`, problem)
          }
          const cidr = strAt(objAt(sel, 'sourceCIDR'), 'value')
          const problem = cidr === null ? null : cidrProblem(cidr)
          if (problem !== null) f.error(`${at}.sourceCIDR.value`, problem)
        }
      }
    }
  }
}

const EXTENSION_TARGETS = ['Gateway', 'HTTPRoute']

/** sallyport.io/v1alpha1 EgressExtension. */
export function checkEgressExtension(doc: Obj, f: Findings): void {
  const spec = objAt(doc, 'spec')
  for (const [ref, i] of objsAt(spec, 'targetRefs')) {
    const at = item('spec.targetRefs', i)
    checkTargetRef(ref, at, EXTENSION_TARGETS, f)
    const group = strAt(ref, 'group') ?? 'gateway.networking.k8s.io'
    if (group !== 'gateway.networking.k8s.io') f.error(child(at, 'group'), `"${group}" is not gateway.networking.k8s.io`)
    if (strAt(ref, 'kind') === 'HTTPRoute' && has(ref, 'sectionName')) f.error(child(at, 'sectionName'), 'only a Gateway target may name a section (listener)')
  }
  checkTargetDuplicates(spec, f)
  checkExtensions(spec?.extensions, 'spec.extensions', f)
}
