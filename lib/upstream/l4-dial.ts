// L4 connects (TCPRoute / TLSRoute): one connection per client connection, no
// pooling — the bytes belong to the client's own session. The endpoint is
// chosen by smooth weighted round robin per Cluster object (a new table starts
// fresh); when a connect fails (refused, unreachable, DNS, timeout) the next
// endpoint is tried, each at most once. A TLS failure is an answer about the
// backend — same CA, same name on every endpoint — so it ends the dial at once
// (as connect.ts does across the addresses of one endpoint).
//
// TLS origination (our definition of the GEP-1897 "implementation-dependent"
// rows, see README "TCPRoute and TLSRoute"): a cluster with TLS (Backend tls,
// or a Service targeted by a BackendTLSPolicy) is dialled with TLS when the
// caller asks (`originateTls`): TCPRoute and TLSRoute on a Terminate listener.
// TLSRoute passthrough never asks — the client's own TLS goes through.
// No ALPN is offered: the stream is not ours to interpret.

import { isIP, type Socket } from 'node:net'
import type { Cluster, Endpoint } from '../compile/table.ts'
import { ErrorCode, SallyportError } from '../errors.ts'
import { upstreamConnectErrors } from '../observe/upstream-metrics.ts'
import { WeightedRoundRobin } from './balancer.ts'
import type { Connector, PendingConnect } from './connect.ts'
import { connectReason, normalizeUpstreamError } from './normalize-error.ts'
import { buildClientTls, endpointServername, type ClientTls } from './tls.ts'
import type { L4Connection, L4DialCallback, L4DialRequest, PendingDial } from './types.ts'

/** Builds a Connector the way the registry builds its pools'. */
export type ConnectorFactory = (cluster: Cluster, endpoint: Endpoint, tls: ClientTls | null, timeoutMs: number) => Connector

/** Usable addresses of one hostname for one cluster (DNS, then the destination guard); `error` when none. */
export type HostnameResolver = (cluster: Cluster, hostname: string) => Promise<{ readonly addresses: readonly string[]; readonly error: SallyportError | null }>

/** The resolution after an expired answer's refresh; null when the answer is current (resolve.ts `refreshed`). */
export type HostnameRefresher = (cluster: Cluster, hostname: string) => Promise<unknown> | null

export interface L4DialerOptions {
  readonly connector: ConnectorFactory
  /** The registry's guarded resolution (issue 5): hostname endpoints are dialled by address, like the pools'. */
  readonly resolve: HostnameResolver
  /** Every address of an expired answer refused: its refresh, to dial a changed answer (as the pools' connect fallback). */
  readonly refreshed?: HostnameRefresher
  readonly connectTimeoutMs: number
}

interface ClusterState {
  /** What the state was built from (keyOf): a DNS change rebuilds it. */
  readonly key: string
  readonly endpoints: readonly Endpoint[]
  readonly balancer: WeightedRoundRobin
  readonly labels: readonly string[]
  /**
   * Built once per Cluster object and TLS server name, on first TLS dial: '' the
   * cluster's own; else an endpoint's own name (tls.ts endpointServername).
   */
  readonly clientTls: Map<string, ClientTls>
  /** `${index}|${tls}|${timeoutMs}` → Connector (it keeps the TLS session ticket for resumption). */
  readonly connectors: Map<string, Connector>
}

/** One dial: cancel() stops its name resolution or connect; the callback then gets CLIENT_ABORTED. */
class Dial implements PendingDial {
  cancelled = false
  connect: PendingConnect | null = null
  /** Moved on to a refreshed address list (once per dial). */
  relisted = false

  cancel(): void {
    if (this.cancelled) return
    this.cancelled = true
    this.connect?.cancel()
  }
}

function cancelled(): SallyportError {
  return new SallyportError(ErrorCode.CLIENT_ABORTED, 'the client left while the backend was being dialled')
}

function endpointLabel(endpoint: Endpoint): string {
  if (endpoint.kind === 'unix') return `unix:${endpoint.host}`
  return endpoint.host.includes(':') ? `[${endpoint.host}]:${endpoint.port}` : `${endpoint.host}:${endpoint.port}`
}

export class L4Dialer {
  readonly #factory: ConnectorFactory
  readonly #resolve: HostnameResolver
  readonly #refreshed: HostnameRefresher | null
  readonly #defaultConnectMs: number
  readonly #clusters = new WeakMap<Cluster, ClusterState>()

  constructor(options: L4DialerOptions) {
    this.#factory = options.connector
    this.#resolve = options.resolve
    this.#refreshed = options.refreshed ?? null
    this.#defaultConnectMs = options.connectTimeoutMs
  }

  dial(req: L4DialRequest, callback: L4DialCallback): PendingDial {
    const cluster = req.cluster
    const dial = new Dial()
    if (cluster.endpoints.length === 0) {
      process.nextTick(callback, new SallyportError(ErrorCode.NO_HEALTHY_UPSTREAM, `no endpoints for ${cluster.id}`), null)
      return dial
    }
    if (!hasHostnames(cluster)) {
      const state = this.#stateOf(cluster, cluster.endpoints)
      this.#attempt(req, dial, state, state.balancer.pick() ?? 0, 0, callback)
      return dial
    }
    this.#expand(cluster).then((r) => {
      if (dial.cancelled) return callback(cancelled(), null)
      if (r.error !== null) return callback(r.error, null)
      const state = this.#stateOf(cluster, r.endpoints)
      this.#attempt(req, dial, state, state.balancer.pick() ?? 0, 0, callback)
    }, (err: unknown) => callback(new SallyportError(ErrorCode.INTERNAL, 'resolving backend names failed', { cause: err }), null))
    return dial
  }

  /** Hostname endpoints → one IP endpoint per usable address (the rest as they are). */
  async #expand(cluster: Cluster): Promise<{ endpoints: Endpoint[]; error: SallyportError | null }> {
    const resolutions = await Promise.all(cluster.endpoints.map((e) => resolvedHere(cluster, e) ? this.#resolve(cluster, e.host) : null))
    const endpoints: Endpoint[] = []
    let error: SallyportError | null = null
    cluster.endpoints.forEach((e, i) => {
      const r = resolutions[i]
      if (r === null) { endpoints.push(e); return }
      if (r.error !== null) error ??= r.error
      // The name stays with its addresses: their connections' TLS server name.
      for (const host of r.addresses) endpoints.push({ host, port: e.port, kind: 'ip', weight: e.weight, zone: e.zone, name: e.host })
    })
    if (endpoints.length > 0) return { endpoints, error: null }
    return { endpoints, error: error ?? new SallyportError(ErrorCode.NO_HEALTHY_UPSTREAM, `no usable addresses for ${cluster.id}`) }
  }

  #attempt(req: L4DialRequest, dial: Dial, state: ClusterState, index: number, tried: number, callback: L4DialCallback): void {
    const cluster = req.cluster
    const label = state.labels[index]
    const connector = this.#connector(req, state, index)
    dial.connect = connector.connect(null, (err, socket) => {
      dial.connect = null
      if (dial.cancelled) {
        socket?.destroy()
        callback(cancelled(), null)
        return
      }
      if (socket !== null) {
        callback(null, connected(socket, label))
        return
      }
      const e = normalizeUpstreamError(err, null, label)
      if (e.code === ErrorCode.UPSTREAM_CONNECT) upstreamConnectErrors.inc({ backend: cluster.id, reason: connectReason(e) })
      const next = tried + 1
      if (e.code === ErrorCode.UPSTREAM_CONNECT && next < state.endpoints.length) {
        this.#attempt(req, dial, state, (index + 1) % state.endpoints.length, next, callback)
        return
      }
      if (e.code === ErrorCode.UPSTREAM_CONNECT && this.#afterRefresh(req, dial, state, e, callback)) return
      callback(e, null)
    })
  }

  /**
   * Every address refused: when a name's answer had expired (served while its
   * refresh runs), dial the addresses of the refreshed answer if it changed.
   * False: nothing to wait for.
   */
  #afterRefresh(req: L4DialRequest, dial: Dial, tried: ClusterState, err: SallyportError, callback: L4DialCallback): boolean {
    const refresh = this.#refreshed
    const cluster = req.cluster
    if (refresh === null || dial.relisted || !hasHostnames(cluster)) return false
    const waits = cluster.endpoints.map((e) => resolvedHere(cluster, e) ? refresh(cluster, e.host) : null).filter((p) => p !== null)
    if (waits.length === 0) return false
    dial.relisted = true
    Promise.all(waits).then(() => this.#expand(cluster)).then((r) => {
      if (dial.cancelled) return callback(cancelled(), null)
      if (r.error !== null || keyOf(r.endpoints) === tried.key) return callback(err, null)
      const state = this.#stateOf(cluster, r.endpoints)
      this.#attempt(req, dial, state, state.balancer.pick() ?? 0, 0, callback)
    }, () => callback(err, null))
    return true
  }

  #connector(req: L4DialRequest, state: ClusterState, index: number): Connector {
    const cluster = req.cluster
    const tls = req.originateTls && cluster.tls !== null
    // Route timeout (BackendTrafficPolicy on the route), then the cluster's, then the registry default.
    const timeoutMs = req.connectMs ?? cluster.connectTimeoutMs ?? this.#defaultConnectMs
    const key = `${index}|${tls ? 1 : 0}|${timeoutMs}`
    let c = state.connectors.get(key)
    if (c === undefined) {
      let clientTls: ClientTls | null = null
      if (tls && cluster.tls !== null) {
        const name = endpointServername(cluster.tls, state.endpoints[index])
        clientTls = state.clientTls.get(name ?? '') ?? null
        if (clientTls === null) state.clientTls.set(name ?? '', clientTls = buildClientTls(cluster.tls, name))
      }
      c = this.#factory(cluster, state.endpoints[index], clientTls, timeoutMs)
      state.connectors.set(key, c)
    }
    return c
  }

  #stateOf(cluster: Cluster, endpoints: readonly Endpoint[]): ClusterState {
    const state = this.#clusters.get(cluster)
    if (state !== undefined && (state.endpoints === endpoints || state.key === keyOf(endpoints))) return state
    const fresh: ClusterState = {
      key: keyOf(endpoints), endpoints, labels: endpoints.map(endpointLabel),
      balancer: new WeightedRoundRobin(endpoints),
      clientTls: state?.clientTls ?? new Map(),
      connectors: new Map(),
    }
    this.#clusters.set(cluster, fresh)
    return fresh
  }
}

/** Addresses and, for a name's, the name (its connections' TLS server name): two names may share an address. */
function keyOf(endpoints: readonly Endpoint[]): string {
  return endpoints.map((e) => e.name === undefined ? endpointLabel(e) : `${endpointLabel(e)}#${e.name}`).join(',')
}

function hasHostnames(cluster: Cluster): boolean {
  for (const e of cluster.endpoints) if (resolvedHere(cluster, e)) return true
  return false
}

/**
 * Whether a hostname endpoint goes through the guarded resolution here. Issue 9:
 * through an upstream proxy, names are the proxy's to resolve (connect.ts) — but
 * an IP literal in a name's place (`CONNECT 169.254.169.254:80` to a requested
 * host) is an address we do see: the guard and the Gateway's CIDR lists judge it
 * before the proxy is asked for it (resolve.ts checks it without DNS).
 */
function resolvedHere(cluster: Cluster, e: Endpoint): boolean {
  if (e.kind !== 'hostname') return false
  return cluster.upstreamProxy == null || isIP(e.host) !== 0
}

function connected(socket: Socket, label: string): L4Connection {
  // Half-close both ways (README): the upstream's FIN must not end our write side.
  socket.allowHalfOpen = true
  const address = socket.remoteAddress
  const endpoint = address === undefined ? label : address.includes(':') ? `[${address}]:${socket.remotePort}` : `${address}:${socket.remotePort}`
  return { socket, endpoint }
}
