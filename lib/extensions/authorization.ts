// Authorization: which clients may use a route (or a backend, or a Gateway),
// by the attributed identity — namespace and serviceAccount from the Pod IP
// or a verified SPIFFE client certificate. Anyone else gets 403.
//
//   config: { allow: [{ namespace: team-a }, { namespace: ml, serviceAccount: trainer }, { spiffeId: spiffe://td/ns/x/sa/y }] }
//
// `*` matches any value; unidentified clients are denied unless
// `allowUnidentified: true`.

import type { CompiledExtension } from '../compile/table.ts'
import type { ClientInfo, ExtensionHooks, HookResult, RequestView } from './plugin-api.ts'

interface Rule { readonly namespace: string | null; readonly serviceAccount: string | null; readonly spiffeId: string | null }

function matches(v: string | null, want: string | null): boolean {
  return want === null || want === '*' || v === want
}

export function isAllowed(rules: readonly Rule[], client: ClientInfo): boolean {
  for (const r of rules) {
    if (matches(client.namespace, r.namespace) && matches(client.serviceAccount, r.serviceAccount) && matches(client.spiffeId, r.spiffeId)) return true
  }
  return false
}

export function authorization(spec: CompiledExtension): ExtensionHooks {
  const allow = Array.isArray(spec.config.allow) ? spec.config.allow : []
  const rules: Rule[] = allow.map((a) => {
    const o = (a ?? {}) as Record<string, unknown>
    const str = (k: string): string | null => typeof o[k] === 'string' ? o[k] as string : null
    return { namespace: str('namespace'), serviceAccount: str('serviceAccount'), spiffeId: str('spiffeId') }
  })
  const allowUnidentified = spec.config.allowUnidentified === true
  return {
    requestHeaders(req: RequestView): HookResult {
      const c = req.client
      if (c.namespace === null && c.spiffeId === null) {
        return allowUnidentified ? undefined : { deny: { status: 403, reason: 'client identity unknown' } }
      }
      if (isAllowed(rules, c)) return
      return { deny: { status: 403, reason: `client ${c.namespace ?? '?'}/${c.serviceAccount ?? '?'} may not use this route` } }
    },
  }
}
