// The built-in extension types (issue 7), shared by validate (config checks),
// compile (canonical names, default phases) and extensions/ (the factories).
// Types are written as a bare name (`RateLimit`), with a group prefix
// (`sallyport.io/RateLimit`) or in the egress proposal's spelling
// `gateway.networking.k8s.io/CredentialInjector:v1`; all name one type.

export const ExtensionType = {
  CREDENTIAL_INJECTOR: 'CredentialInjector',
  OAUTH2: 'OAuth2ClientCredentials',
  AWS_SIGV4: 'AWSSigV4',
  RATE_LIMIT: 'RateLimit',
  AI_USAGE: 'AIUsage',
  PAYLOAD_PROCESSOR: 'PayloadProcessor',
  EXTERNAL_PROCESSOR: 'ExternalProcessor',
  PLUGIN: 'Plugin',
  AUTHORIZATION: 'Authorization',
} as const
export type ExtensionType = typeof ExtensionType[keyof typeof ExtensionType]

const KNOWN: ReadonlySet<string> = new Set(Object.values(ExtensionType))
const ALIASES: ReadonlyMap<string, ExtensionType> = new Map([
  ['AITokenUsage', ExtensionType.AI_USAGE],
  ['ExtProc', ExtensionType.EXTERNAL_PROCESSOR],
  ['OAuth2', ExtensionType.OAUTH2],
  ['SigV4', ExtensionType.AWS_SIGV4],
])

/** `gateway.networking.k8s.io/CredentialInjector:v1` → `CredentialInjector`; null when not a built-in. */
export function canonicalType(type: string): ExtensionType | null {
  let name = type
  const slash = name.lastIndexOf('/')
  if (slash !== -1) name = name.slice(slash + 1)
  const colon = name.indexOf(':')
  if (colon !== -1) name = name.slice(0, colon)
  if (KNOWN.has(name)) return name as ExtensionType
  return ALIASES.get(name) ?? null
}

/**
 * A CredentialInjector with `oauth2` or `awsSigV4` in its config is that
 * variant (the "injector variants"); the canonical type says which.
 */
export function effectiveType(type: ExtensionType, config: Readonly<Record<string, unknown>>): ExtensionType {
  if (type !== ExtensionType.CREDENTIAL_INJECTOR) return type
  if (config.oauth2 !== undefined) return ExtensionType.OAUTH2
  if (config.awsSigV4 !== undefined) return ExtensionType.AWS_SIGV4
  return type
}

/** Types of which one instance applies per request: a more specific scope replaces a less specific one of the same type. */
export const SINGLETON_TYPES: ReadonlySet<string> = new Set([
  ExtensionType.CREDENTIAL_INJECTOR, ExtensionType.OAUTH2, ExtensionType.AWS_SIGV4, ExtensionType.AUTHORIZATION,
])

export const PHASES = ['request-headers', 'request-body', 'response-headers', 'response-body'] as const
export type Phase = typeof PHASES[number]

/** Phases a type runs in when `phase` is not set. */
export function defaultPhases(type: ExtensionType | null, config: Readonly<Record<string, unknown>>): Phase[] {
  switch (type) {
    case ExtensionType.AWS_SIGV4: {
      const sig = (config.awsSigV4 ?? config) as Record<string, unknown>
      return sig.payload === 'unsigned' ? ['request-headers'] : ['request-body']
    }
    case ExtensionType.AI_USAGE: return ['request-headers', 'response-body']
    // response-headers: an upstream's 401 to the cached token drops it (extensions/oauth2.ts).
    case ExtensionType.OAUTH2: return ['request-headers', 'response-headers']
    case ExtensionType.PAYLOAD_PROCESSOR: {
      const out: Phase[] = []
      if (config.request !== undefined) out.push('request-body')
      if (config.response !== undefined) out.push('response-body')
      return out.length > 0 ? out : ['request-body']
    }
    case ExtensionType.EXTERNAL_PROCESSOR: {
      const list = Array.isArray(config.phases) ? config.phases.filter((p): p is Phase => (PHASES as readonly unknown[]).includes(p)) : []
      return list.length > 0 ? list : ['request-headers']
    }
    case ExtensionType.PLUGIN: return [...PHASES]
    default: return ['request-headers']
  }
}

/** Default bound for body phases: 1 MiB (config `maxBodyBytes` changes it per extension). */
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024
