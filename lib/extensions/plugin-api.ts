// The hook interface every extension implements — the built-ins and the
// user's own plugins (type Plugin, config.path) alike. A plugin module's
// default export is a factory: `(config, context) => ExtensionHooks`.
//
//   // my-plugin.ts
//   import type { PluginFactory } from 'sallyport/lib/extensions/plugin-api.ts'
//   const create: PluginFactory = (config) => ({
//     requestHeaders(req) { req.headers['x-team'] = String(config.team) },
//   })
//   export default create
//
// Hooks run in the phases the extension is configured for, highest priority
// first. A hook may be async. It returns nothing to continue, `{ deny }` to
// answer the client itself (e.g. 403 with a reason), or — in body phases —
// `{ body }` to replace the body. A thrown error is a failure: with
// failOpen the request continues (counted, logged, an Event), otherwise the
// client gets 500 SP_ERR_EXTENSION_FAILED.

import type { OutgoingHeaders } from '../upstream/types.ts'

export type { OutgoingHeaders }

/** Who sent the request (client attribution): from the Pod IP or a verified SPIFFE client certificate. */
export interface ClientInfo {
  readonly address: string
  /** null: unknown client. */
  readonly namespace: string | null
  readonly serviceAccount: string | null
  readonly pod: string | null
  /** spiffe://… URI of a verified client certificate, null otherwise. */
  readonly spiffeId: string | null
}

/**
 * The request on its way upstream. `headers` (lowercased names) and `path` may
 * be changed by request hooks, except the fields the gateway owns
 * (gateway-fields.ts: Content-Length, Transfer-Encoding, Host, hop-by-hop
 * fields), whose edits are not applied; the same holds for a response's.
 */
export interface RequestView {
  readonly method: string
  /** Path and query as they will be sent. */
  path: string
  /** Host / :authority that will be sent. */
  readonly authority: string
  readonly headers: OutgoingHeaders
  readonly client: ClientInfo
  /** `namespace/name` of the route. */
  readonly route: string
  /** Rule id (`httproute/ns/name/rule/0`). */
  readonly rule: string
  /** Cluster id (`Backend/ns/name:443`). */
  readonly backend: string
  /** `namespace/name` of the Gateway. */
  readonly gateway: string
  /** 'http' or 'https' toward the upstream. */
  readonly scheme: 'http' | 'https'
}

export interface ResponseView {
  readonly status: number
  readonly headers: OutgoingHeaders
}

/** Answer the client instead of the upstream. status: an integer 200-599; headers must be writable and not the gateway's (else the extension failed). */
export interface Deny {
  readonly deny: { readonly status: number; readonly reason: string; readonly headers?: Readonly<Record<string, string>> }
}

export interface ReplaceBody {
  readonly body: Buffer
}

/** Request phases: headers for the client's answer (merged over the upstream's), e.g. RateLimit fields on a success. */
export interface ReplyHeaders {
  readonly responseHeaders: Readonly<Record<string, string>>
}

export type HookResult = void | undefined | Deny | ReplaceBody | ReplyHeaders
export type MaybePromise<T> = T | Promise<T>

/**
 * Sees response body chunks as they stream (nothing is held back). A body the
 * upstream compressed anyway (gzip, deflate, br) is shown decoded, up to
 * maxBodyBytes, while the client gets it as sent.
 */
export interface StreamObserver {
  chunk(data: Buffer): void
  /** The body ended whole. */
  end(): void
  /** The body ended early (the client left, the upstream failed, it could not be read on): what was seen is all there is. */
  abort?(): void
}

export interface ExtensionHooks {
  requestHeaders?(req: RequestView): MaybePromise<HookResult>
  /** The whole request body, buffered within the bound (maxBodyBytes, default 1 MiB). */
  requestBody?(req: RequestView, body: Buffer): MaybePromise<HookResult>
  /**
   * Asked before the request body is read: false leaves this body to stream
   * past `requestBody` unread (and unbounded by this extension). Absent: every body is read.
   */
  readsRequestBody?(req: RequestView): boolean
  responseHeaders?(req: RequestView, res: ResponseView): MaybePromise<HookResult>
  /** The whole response body, buffered within the bound. */
  responseBody?(req: RequestView, res: ResponseView, body: Buffer): MaybePromise<HookResult>
  /** As readsRequestBody, for `responseBody`, by the response head. */
  readsResponseBody?(req: RequestView, res: ResponseView): boolean
  /** Observe the response body without buffering it (runs in the response-body phase); null: not interested. */
  responseStream?(req: RequestView, res: ResponseView): StreamObserver | null
  /** The extension left the route table (reload): release timers, sockets. */
  close?(): MaybePromise<void>
}

export interface PluginContext {
  /** The extension's name and where it was declared. */
  readonly name: string
  readonly source: string
  /** Secret data resolved from `secretRef` in the config (key → value). Never log it. */
  readonly secrets: Readonly<Record<string, string>>
  /** Structured log lines (pino), component `plugin`. */
  readonly log: { info(fields: object, msg: string): void; warn(fields: object, msg: string): void }
}

export type PluginFactory = (config: Readonly<Record<string, unknown>>, context: PluginContext) => MaybePromise<ExtensionHooks>

/** Identity helper for typed plugin modules. */
export function definePlugin(factory: PluginFactory): PluginFactory {
  return factory
}
