// Issue 9: reaching external destinations through a corporate HTTP CONNECT
// proxy, set on a Backend or on a whole Gateway.
//
// - Backend `sallyport.io/upstream-proxy: "http://proxy.corp:3128"`: that
//   Backend's connections (HTTP pools and L4) go through the proxy; `none`
//   keeps the Backend direct even when its Gateway names a proxy.
// - Gateway `sallyport.io/upstream-proxy`: every external cluster its routes
//   send to (a Backend that does not wrap in-cluster endpoints, an
//   ExternalName Service) without a choice of its own goes through the proxy,
//   and so do CONNECT tunnels to requested hosts. A cluster shared by Gateways
//   naming different proxies takes the first of them by namespace/name.
//   In-cluster Services and Pods never go through it.
// - `sallyport.io/upstream-proxy-secret: "name"` (a Secret of the annotated
//   object's namespace, keys `username` and `password`) adds
//   Proxy-Authorization: Basic.
//
// An unreadable annotation is ignored and reported (validate warns; status
// gets a `sallyport.io/UpstreamProxy` condition False). A missing or
// incomplete Secret keeps the proxy but sends no credentials, so the proxy's
// own 407 says what is wrong rather than a silent direct connection.

import type { Snapshot } from '../resources/snapshot.ts'
import { ANNOTATIONS, parseSecretRef, parseUpstreamProxy } from '../validate/annotations.ts'
import type { UpstreamProxy } from './table.ts'

export type ProxyChoice = UpstreamProxy | 'none' | null

export class UpstreamProxies {
  readonly #snapshot: Snapshot
  readonly #gateways = new Map<string, UpstreamProxy | null>()
  readonly #backends = new Map<string, ProxyChoice>()
  /** Holder (`Gateway/namespace/name`, or a Backend's backendKey) → problems, for objects that carry the annotation. */
  readonly problems = new Map<string, string[]>()
  /** Objects that carry the annotation (status shows the condition only for them). */
  readonly annotated = new Set<string>()

  constructor(snapshot: Snapshot) {
    this.#snapshot = snapshot
  }

  /** A Backend's own choice by its key (backendKey): a proxy, `none` (direct), or null (none set: its Gateway's applies). */
  forBackend(key: string): ProxyChoice {
    let choice = this.#backends.get(key)
    if (choice === undefined) {
      const backend = this.#snapshot.backends.get(key)
      choice = backend === undefined ? null : this.#read(key, backend.meta.namespace, backend.meta.annotations)
      this.#backends.set(key, choice)
    }
    return choice
  }

  /** The Gateway's proxy for external destinations, or null. */
  forGateway(gatewayKey: string): UpstreamProxy | null {
    let p = this.#gateways.get(gatewayKey)
    if (p === undefined) {
      const gw = this.#snapshot.gateways.get(gatewayKey)
      const choice = gw === undefined ? null : this.#read(`Gateway/${gatewayKey}`, gw.meta.namespace, gw.meta.annotations)
      p = choice === 'none' ? null : choice
      this.#gateways.set(gatewayKey, p)
    }
    return p
  }

  /** The proxy of the first Gateway (by namespace/name) among `gatewayKeys` that names one. */
  forGateways(gatewayKeys: Iterable<string>): UpstreamProxy | null {
    for (const g of [...new Set(gatewayKeys)].sort()) {
      const p = this.forGateway(g)
      if (p !== null) return p
    }
    return null
  }

  #read(holder: string, namespace: string, annotations: Readonly<Record<string, string>>): ProxyChoice {
    const text = annotations[ANNOTATIONS.UPSTREAM_PROXY]
    if (text === undefined) return null
    this.annotated.add(holder)
    const problems: string[] = []
    const parsed = parseUpstreamProxy(text)
    if (!parsed.ok) {
      this.problems.set(holder, [`${ANNOTATIONS.UPSTREAM_PROXY}: ${parsed.message}; connecting directly`])
      return null
    }
    if (parsed.value === 'none') return 'none'
    let authorization: string | null = null
    const ref = annotations[ANNOTATIONS.UPSTREAM_PROXY_SECRET]
    if (ref !== undefined) {
      const key = parseSecretRef(ref, namespace)
      if (!key.ok) problems.push(`${ANNOTATIONS.UPSTREAM_PROXY_SECRET}: ${key.message}; no credentials sent`)
      else {
        const secret = this.#snapshot.secrets.get(key.value)
        const user = secret?.data.username
        const pass = secret?.data.password
        if (secret === undefined) problems.push(`${ANNOTATIONS.UPSTREAM_PROXY_SECRET}: Secret ${key.value} not found; no credentials sent`)
        else if (user === undefined || pass === undefined) problems.push(`${ANNOTATIONS.UPSTREAM_PROXY_SECRET}: Secret ${key.value} needs keys username and password; no credentials sent`)
        else authorization = 'Basic ' + Buffer.concat([user, Buffer.from(':'), pass]).toString('base64')
      }
    }
    if (problems.length > 0) this.problems.set(holder, problems)
    return { host: parsed.value.host, port: parsed.value.port, authorization }
  }
}
