// Extension type → factory. A compiled extension that carries an error
// (missing Secret, unknown type) or whose config the factory rejects becomes
// hooks that fail in its phases: failOpen then decides, as for any failure.

import type { CompiledExtension } from '../compile/table.ts'
import { ExtensionType } from '../extension-types.ts'
import type { ExtensionHooks } from './plugin-api.ts'
import type { EventSink } from './events.ts'
import type { RedisPool } from './redis-client.ts'
import { credentialInjector } from './credential-injector.ts'
import { oauth2 } from './oauth2.ts'
import { awsSigV4 } from './sigv4.ts'
import { rateLimit } from './rate-limit.ts'
import { aiUsage } from './ai-usage.ts'
import { payloadProcessor } from './payload-processor.ts'
import { externalProcessor } from './ext-proc.ts'
import { authorization } from './authorization.ts'
import { plugin } from './plugin.ts'

export interface Services {
  readonly redis: RedisPool
  readonly events: EventSink
}

const READY = Promise.resolve()

function failing(message: string): ExtensionHooks {
  const fail = (): never => { throw new Error(message) }
  return { requestHeaders: fail, requestBody: fail, responseHeaders: fail, responseBody: fail }
}

export function createBuiltin(spec: CompiledExtension, services: Services): { hooks: ExtensionHooks; ready: Promise<void> } {
  if (spec.error !== null) return { hooks: failing(spec.error), ready: READY }
  try {
    switch (spec.type) {
      case ExtensionType.CREDENTIAL_INJECTOR: return { hooks: credentialInjector(spec), ready: READY }
      case ExtensionType.OAUTH2: return { hooks: oauth2(spec), ready: READY }
      case ExtensionType.AWS_SIGV4: return { hooks: awsSigV4(spec), ready: READY }
      case ExtensionType.RATE_LIMIT: return { hooks: rateLimit(spec, services.redis), ready: READY }
      case ExtensionType.AI_USAGE: return { hooks: aiUsage(spec, services.redis), ready: READY }
      case ExtensionType.PAYLOAD_PROCESSOR: return { hooks: payloadProcessor(spec), ready: READY }
      case ExtensionType.EXTERNAL_PROCESSOR: return { hooks: externalProcessor(spec), ready: READY }
      case ExtensionType.AUTHORIZATION: return { hooks: authorization(spec), ready: READY }
      case ExtensionType.PLUGIN: {
        const p = plugin(spec)
        return { hooks: p.hooks, ready: p.ready }
      }
      default: return { hooks: failing(`unknown extension type ${spec.type}`), ready: READY }
    }
  } catch (err) {
    return { hooks: failing(`${spec.type} config: ${err instanceof Error ? err.message : String(err)}`), ready: READY }
  }
}
