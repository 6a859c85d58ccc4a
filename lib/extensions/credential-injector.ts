// CredentialInjector (egress proposal, "Backend Extensions"; the
// `gateway.networking.k8s.io/CredentialInjector:v1` example): a static
// credential from a Secret key, set as a header (`Authorization: Bearer
// {value}`, `x-api-key: {value}`, any header) or a query parameter. Whatever
// the client sent under that name is replaced, so workloads never hold — nor
// can override — the key. The value was resolved in compile; a changed Secret
// recompiles into a new instance (rotation without restart).

import type { CompiledExtension } from '../compile/table.ts'
import type { ExtensionHooks, RequestView } from './plugin-api.ts'

/** The Secret value of `secretRef` (key, else the only key, else `token`). */
export function secretValue(spec: CompiledExtension, path: string, keyField = 'key', fallback = 'token'): string {
  const data = spec.secrets[path]
  if (data === undefined) throw new Error(`${path} is not set`)
  const ref = path.split('.').reduce<unknown>((o, p) => (o as Record<string, unknown> | undefined)?.[p], spec.config) as Record<string, unknown>
  const keys = Object.keys(data)
  const key = typeof ref[keyField] === 'string' ? ref[keyField] as string : keys.length === 1 ? keys[0] as string : fallback
  const v = data[key]
  if (v === undefined) throw new Error(`the Secret of ${path} has no key ${key}`)
  // Secrets written by hand often end in a newline; it is never part of a token.
  return v.replace(/[\r\n]+$/, '')
}

/** The name of one `name=value` pair of a query, form-decoded; as sent when it does not decode. */
function pairName(pair: string): string {
  const eq = pair.indexOf('=')
  const raw = (eq === -1 ? pair : pair.slice(0, eq)).replace(/\+/g, ' ')
  try { return decodeURIComponent(raw) } catch { return raw }
}

/**
 * Sets `value` as the query parameter `name`, last, dropping every pair the
 * client sent under that name (`api_key`, `api%5Fkey`, a bare `api_key`). The
 * other pairs pass byte for byte: re-serializing the query as a form changed
 * what the client sent (`a%20b` → `a+b`, `flag` → `flag=`, `~` → `%7E`) and
 * so what a signature over it or a server strict about it saw.
 */
export function setQueryParam(path: string, name: string, value: string): string {
  const q = path.indexOf('?')
  const base = q === -1 ? path : path.slice(0, q)
  const kept = q === -1 ? [] : path.slice(q + 1).split('&').filter(p => p !== '' && pairName(p) !== name)
  kept.push(`${encodeURIComponent(name)}=${encodeURIComponent(value)}`)
  return `${base}?${kept.join('&')}`
}

export interface Placement {
  readonly header: string | null
  readonly query: string | null
  readonly format: string
}

export function placement(config: Readonly<Record<string, unknown>>): Placement {
  const query = typeof config.queryParam === 'string' ? config.queryParam : null
  const header = query !== null ? null : (typeof config.header === 'string' ? config.header : 'authorization').toLowerCase()
  const format = typeof config.format === 'string' ? config.format : header === 'authorization' ? 'Bearer {value}' : '{value}'
  return { header, query, format }
}

// hot path
export function place(req: RequestView, p: Placement, rendered: string): void {
  if (p.query !== null) req.path = setQueryParam(req.path, p.query, rendered)
  else req.headers[p.header as string] = rendered
}

export function credentialInjector(spec: CompiledExtension): ExtensionHooks {
  const p = placement(spec.config)
  const rendered = p.format.split('{value}').join(secretValue(spec, 'secretRef'))
  return {
    requestHeaders(req: RequestView): void { place(req, p, rendered) },
  }
}
