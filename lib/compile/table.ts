// The compiled RouteTable: everything the hot path needs, decided once at
// compile time. Plain frozen data (plus RegExp) so `sallyport routes`,
// /config_dump and golden tests can print it. The data path imports only these
// types (`import type`), never config/ or the compile functions.
//
// Conventions: absent optional stages are `null` (test `!== null`), durations
// are milliseconds, header names are lowercased.

import type { ErrorCode } from '../errors.ts'
import type { HostnameIndex } from '../hostname-index.ts'
import type {
  ActiveHealthCheck, CircuitBreakerPolicy, ExtensionSpec, HealthCheckPayload, LoadBalancerPolicy, PassiveHealthCheck, RetryPolicy,
} from '../resources/model.ts'

export type { ActiveHealthCheck, CircuitBreakerPolicy, ExtensionSpec, HealthCheckPayload, LoadBalancerPolicy, PassiveHealthCheck, RetryPolicy }

export interface RouteTable {
  /** Monotonic compile counter (passed into compile). */
  readonly version: number
  /** ms since epoch; the `now` passed into compile. */
  readonly builtAt: number
  readonly gatewayClass: string
  /** One entry per listening port. */
  readonly ports: ReadonlyMap<number, PortEntry>
  /** Resolved backends by Cluster.id. */
  readonly clusters: ReadonlyMap<string, Cluster>
  /** Client attribution: Pod IP → identity (issue 7). Empty when no Pods are known. */
  readonly clients: ReadonlyMap<string, ClientIdentity>
  /**
   * Every extension chain the rules reference (issue 7), so the runtime can
   * prepare them (load plugins, reuse state) before the swap. Absent: none.
   */
  readonly extensionChains?: readonly ExtensionChain[]
}

export interface ClientIdentity {
  readonly namespace: string
  readonly serviceAccount: string
  readonly pod: string
}

// ───────────────────────────── listeners ─────────────────────────────

export type PortProtocol = 'HTTP' | 'HTTPS' | 'TCP' | 'TLS'

/** A Gateway listener served on a port (several may share one port, distinguished by hostname). */
export interface ListenerRef {
  /** `namespace/name` of the Gateway. */
  readonly gateway: string
  readonly name: string
  readonly hostname: string | null
}

export interface PortEntry {
  readonly port: number
  readonly protocol: PortProtocol
  readonly listeners: readonly ListenerRef[]
  /** HTTP and HTTPS ports (and TLS-terminate forwarding HTTP): host → virtual host. */
  readonly http: HostIndex | null
  /** HTTPS and TLS Terminate: server certificates selected by SNI. */
  readonly serverTls: ServerTls | null
  /** TCP ports: the TCPRoute served (one per port; more attached routes get Conflicted in status). */
  readonly tcp: L4Route | null
  /** TLS ports: routes by SNI (passthrough, or terminate then forward). */
  readonly sni: SniIndex | null
}

export interface ServerCert {
  /** Content hash of cert+key, for reuse of SecureContexts across tables. */
  readonly id: string
  /** Listener hostname this certificate serves (exact or `*.suffix`), null = any. */
  readonly hostname: string | null
  readonly certPem: string
  /** Secret material: never printed (config dump replaces it). */
  readonly keyPem: string
  /**
   * The listener's lowest TLS version (its `sallyport.io/min-version`): the
   * version is settled before the server name picks a listener, so a
   * connection this certificate served below it is closed after the handshake.
   */
  readonly minVersion: 'TLSv1.2' | 'TLSv1.3'
}

/** SNI → the certificate of the listener it selects; the fallback is that of the listener without hostname. */
export interface ServerTls extends HostnameIndex<ServerCert> {
  /** Frontend client-certificate validation (Gateway.spec.tls.frontend); null = no client certs asked. */
  readonly clientValidation: { readonly caPem: string; readonly required: boolean } | null
  readonly alpn: readonly string[]
  /**
   * GEP-3567: the listener a name selects, by the rules certificates are
   * selected by. An HTTPS connection serves the listener its SNI selected; a
   * request whose host selects another gets 421 (lib/router/misdirected.ts).
   * null: fewer than two listeners on the port (nothing to tell apart), or
   * no HTTP on it (TLS listeners).
   */
  readonly listenerNames: ListenerNames | null
  /** TLS versions the port negotiates: the lowest min-version of its listeners, the lowest max-version. */
  readonly minVersion: 'TLSv1.2' | 'TLSv1.3'
  readonly maxVersion: 'TLSv1.2' | 'TLSv1.3'
}

/** Listener hostnames → index in PortEntry.listeners; the fallback is the listener without hostname. */
export type ListenerNames = HostnameIndex<number>

// ───────────────────────────── HTTP routing ─────────────────────────────

/** Host → virtual host; the fallback holds the routes that accept any hostname. */
export interface HostIndex extends HostnameIndex<VirtualHost> {
  /**
   * The same hosts and their Exact / PathPrefix keys as one compact hash index
   * (lib/compile/lookup-index.ts; lib/router/match.ts matchOnPort). Derived
   * data, not configuration: a non-enumerable property, so dumps, goldens and
   * deepFreeze skip it. Absent on hand-built tables, and `index` undefined
   * until ensureLookupIndexes has run (the matcher walks the maps and trees
   * above then): the runtime builds it just after the swap, so a reload does
   * not wait for it (issue 11).
   */
  readonly lookup?: LookupSlot
}

/** Filled once, after compile (ensureLookupIndexes); the one mutable piece of a table. */
export interface LookupSlot {
  index: LookupIndex | undefined
}

/**
 * Open-addressing hash tables (layout in lib/lookup-hash.ts): a lookup reads
 * a few slots of two flat arrays instead of a chain of Map buckets and node
 * objects, so its cost does not grow with the number of hosts and routes
 * (bench/compile.ts). The arrays are not frozen (they are not enumerable);
 * nothing writes them after compile.
 */
export interface LookupIndex {
  /** Exact hosts and wildcard suffixes ('.example.com'); capacity a power of two. */
  readonly hostSlots: ReadonlyArray<number | string | RouteMatch>
  readonly hostMask: number
  /** (vhost, Exact path) and (vhost, PathPrefix without trailing '/'), except the root prefix. */
  readonly pathSlots: ReadonlyArray<number | string | RouteMatch>
  readonly pathMask: number
  /** Per path slot: where its match list starts in `matches`. */
  readonly pathLists: Int32Array
  /** Per vhost id: key hash, root prefix list, deepest prefix, flags. */
  readonly vhostInfo: Int32Array
  /** By vhost id. */
  readonly vhosts: readonly VirtualHost[]
  /** Every match list of the port, each in precedence order and ended by null. */
  readonly matches: ReadonlyArray<RouteMatch | null>
  /** Vhost id of the catch-all, -1 if none. */
  readonly fallback: number
  /** Number of wildcard suffixes (0: no suffix probes). */
  readonly wildcards: number
  /** Deepest PathPrefix key of the port, in segments. */
  readonly maxDepth: number
}

/**
 * All matches applicable to one hostname pattern, ranked by Gateway API precedence.
 * An exact vhost also carries (ranked after its own) the matches of the wildcard
 * and catch-all routes that cover its hostname, so falling through is never needed.
 */
export interface VirtualHost {
  readonly hostname: string
  /** Path → matches with an Exact path match on it, in precedence order. */
  readonly exactPaths: ReadonlyMap<string, readonly RouteMatch[]>
  /** Segment tree of PathPrefix matches (the longest matching prefix is consulted first). */
  readonly prefixes: PrefixNode
  /** RegularExpression path matches, in precedence order. */
  readonly regexes: readonly RouteMatch[]
  /** True when some match of this vhost tests the query string (parse it only then). */
  readonly needsQuery: boolean
}

export interface PrefixNode {
  /** Next path segment → child. */
  readonly children: ReadonlyMap<string, PrefixNode>
  /** Matches whose prefix ends exactly at this node, in precedence order. */
  readonly matches: readonly RouteMatch[]
}

export interface HeaderMatcher {
  /** Lowercased. */
  readonly name: string
  readonly exact: string | null
  readonly regex: RegExp | null
}

export interface PathMatcher {
  readonly type: 'Exact' | 'PathPrefix' | 'RegularExpression'
  readonly value: string
  /** Anchored; only for RegularExpression. */
  readonly regex: RegExp | null
}

export interface RouteMatch {
  readonly path: PathMatcher
  /** Uppercase method or null. */
  readonly method: string | null
  readonly headers: readonly HeaderMatcher[] | null
  readonly query: readonly HeaderMatcher[] | null
  readonly rule: RouteRule
  /** Position in the precedence order (0 = highest); for explanations and tests. */
  readonly rank: number
}

export interface RouteRef {
  readonly kind: 'HTTPRoute' | 'GRPCRoute' | 'TCPRoute' | 'TLSRoute'
  readonly namespace: string
  readonly name: string
}

export interface HeaderEdits {
  /** Lowercased names. */
  readonly set: ReadonlyArray<readonly [string, string]>
  readonly add: ReadonlyArray<readonly [string, string]>
  readonly remove: readonly string[]
}

export interface PathRewrite {
  readonly type: 'ReplaceFullPath' | 'ReplacePrefixMatch'
  readonly value: string
}

export interface Redirect {
  readonly scheme: string | null
  readonly hostname: string | null
  readonly port: number | null
  readonly path: PathRewrite | null
  readonly statusCode: number
}

export interface Mirror {
  readonly cluster: string | null
  readonly percent: number
}

/** A fixed answer: invalid backends (500), no backends (500), or a policy denial. */
export interface DirectResponse {
  readonly status: number
  readonly code: ErrorCode
  readonly body: string
}

export interface RouteTimeouts {
  readonly requestMs: number | null
  readonly backendRequestMs: number | null
  readonly connectMs: number | null
  readonly idleMs: number | null
}

export interface WeightedCluster {
  /** Cluster id; null when this backendRef could not be resolved (requests picked for it get 500). */
  readonly cluster: string | null
  readonly weight: number
  /** Failover level (0 = primary). */
  readonly priority: number
  /** Per-backendRef header edits. */
  readonly requestHeaders: HeaderEdits | null
  readonly responseHeaders: HeaderEdits | null
  /**
   * Set (403) when the Gateway's destination policy denies this backend (issue 5:
   * region lock, deny-list, guard on a static address); absent otherwise.
   */
  readonly denied?: DirectResponse
  /**
   * The ready-to-run extension chain for this rule × cluster (issue 7): Route,
   * Backend and Gateway scopes merged by precedence and sorted by priority in
   * compile. Absent or null: no extensions.
   */
  readonly extensions?: ExtensionChain | null
}

export interface RouteRule {
  /** Stable id, e.g. `httproute/ns/name/rule/0`; used in metrics, logs and dumps. */
  readonly id: string
  readonly route: RouteRef
  readonly ruleIndex: number
  readonly ruleName: string | null
  /** Gateway `namespace/name` and listener name the rule was attached through (first one). */
  readonly gateway: string
  readonly requestHeaders: HeaderEdits | null
  readonly responseHeaders: HeaderEdits | null
  readonly redirect: Redirect | null
  readonly rewriteHost: string | null
  readonly rewritePath: PathRewrite | null
  readonly mirrors: readonly Mirror[] | null
  /** Set instead of backends when the rule answers by itself. */
  readonly direct: DirectResponse | null
  /** Weighted choices; null when `direct` or `redirect` answers. */
  readonly backends: readonly WeightedCluster[] | null
  /** Sum of backend weights (0: every request gets 500 per Gateway API). */
  readonly totalWeight: number
  readonly timeouts: RouteTimeouts
  readonly retry: RetrySpec | null
  /** Extensions at Route scope merged with Gateway scope (Backend scope lives on the Cluster). */
  readonly extensions: readonly ExtensionSpec[] | null
  /** Meshed route (GEP-3792): connect to endpoints with the gateway's mesh identity. */
  readonly meshed: boolean
  /** GRPCRoute rules: answer errors as gRPC status. */
  readonly grpc: boolean
  /**
   * Forward-proxy mode (issue 9): HTTP CONNECT to this rule's hostnames is
   * allowed for these ports (HTTPRoute annotation sallyport.io/connect-ports).
   * Absent or null: CONNECT is refused.
   */
  readonly connect?: ConnectPolicy | null
}

/** What CONNECT may do through a rule (issue 9; lib/router/forward-proxy.ts). */
export interface ConnectPolicy {
  /** Requested ports allowed (the `:port` of `CONNECT host:port`). */
  readonly ports: readonly number[]
  /** Peek the tunnelled ClientHello and require SNI == the requested host (sallyport.io/connect-verify-sni). */
  readonly verifySni: boolean
  /**
   * Set when the rule names no backendRefs: the tunnel goes to the requested
   * host:port itself, under the Gateway's destination policy. Absent or null:
   * the tunnel goes to the rule's backends.
   */
  readonly requested?: RequestedDestination | null
}

/**
 * CONNECT to the requested host (issue 9): the Gateway's destination policy
 * for names the configuration never saw. Host lists are decided when the
 * CONNECT arrives; addresses when it is dialled (the confused-deputy guard,
 * CIDR lists, reverse DNS), through `cluster` with the host as its endpoint.
 */
export interface RequestedDestination {
  /** Template: id `CONNECT/<namespace>/<route>/<rule index>` (a bounded metric label), kind Backend (guarded), no endpoints; the Gateway's upstream proxy. */
  readonly cluster: Cluster
  /** Every requested host is refused with this (a region lock: requested hosts carry no region); null: decide per host. */
  readonly refusal: string | null
  /** The Gateway's deny-list names; null: none. */
  readonly deny: HostPatterns | null
  /** The Gateway's allow-list names; null: no allow-list. */
  readonly allow: HostPatterns | null
  /** Address rules for a host on the allow-list (or when there is none). */
  readonly listed: ClusterDestination
  /** Address rules for a host not on the allow-list; null: refused (an allow-list without CIDRs). */
  readonly unlisted: ClusterDestination | null
}

/** Hostnames: exact, and wildcard suffixes ('.example.com' for '*.example.com'). */
export interface HostPatterns {
  readonly exact: readonly string[]
  readonly suffixes: readonly string[]
}

/** An HTTP CONNECT proxy the cluster's connections go through (issue 9). */
export interface UpstreamProxy {
  readonly host: string
  readonly port: number
  /** `Basic …` for Proxy-Authorization; secret material: dumpTable redacts it. */
  readonly authorization: string | null
}

export interface RetrySpec {
  readonly attempts: number
  readonly codes: readonly number[]
  /**
   * HTTPRoute retry.backoff, the minimum wait before a retry (Gateway API); null when the
   * route sets none. A BackendTrafficPolicy's perRetry.backOff stays in `policy`: its base
   * is not a minimum (full jitter, router/attempts.ts).
   */
  readonly backoffMs: number | null
  readonly policy: RetryPolicy | null
}

// ───────────────────────────── L4 routing ─────────────────────────────

export interface L4Route {
  readonly route: RouteRef
  readonly backends: readonly WeightedCluster[]
  readonly totalWeight: number
  readonly idleMs: number | null
  readonly connectMs: number | null
}

/** SNI → TLSRoute; the fallback is the route without hostnames. */
export interface SniIndex extends HostnameIndex<L4Route> {
  /** Passthrough forwards the raw TLS stream; Terminate decrypts with serverTls first. */
  readonly mode: 'Passthrough' | 'Terminate'
}

// ───────────────────────────── upstream clusters ─────────────────────────────

/** How to speak to a cluster's endpoints. 'HTTP' over TLS negotiates h2/http1.1 by ALPN. */
export type UpstreamProtocol = 'HTTP' | 'HTTP11' | 'HTTP2' | 'H2C' | 'MCP' | 'TCP' | 'TLS'

export interface Endpoint {
  /** IP literal, hostname to resolve, or unix socket path. */
  readonly host: string
  readonly port: number
  readonly kind: 'ip' | 'hostname' | 'unix'
  readonly weight: number
  readonly zone: string | null
  /**
   * Never set by compile: on an address the data path resolved from a hostname
   * endpoint, that hostname — the TLS server name of its connections when the
   * cluster's TLS names none (upstream/tls.ts endpointServername).
   */
  readonly name?: string
}

export interface ClusterTls {
  /** SNI to send (never an IP literal); null: none. */
  readonly servername: string | null
  /** Name verified against the certificate (SNI, validation hostname or Backend hostname). */
  readonly verifyHostname: string | null
  /** PEM bundle replacing system trust; null: system CAs. */
  readonly caPem: string | null
  readonly subjectAltNames: ReadonlyArray<{ readonly type: 'Hostname' | 'URI'; readonly value: string }>
  readonly certPem: string | null
  /** Secret material: never printed. */
  readonly keyPem: string | null
  readonly insecureSkipVerify: boolean
  readonly spkiPins: readonly string[]
  readonly crlPem: string | null
  readonly minVersion: 'TLSv1.2' | 'TLSv1.3'
  /** ALPN offered; empty: none. */
  readonly alpn: readonly string[]
  /** A CRL past its nextUpdate: 'fail' (default, fail closed) or 'allow' (annotation sallyport.io/crl-stale). */
  readonly crlStale: 'fail' | 'allow'
  /** Fetch CRLs from the certificates' http(s) distribution points, cached (annotation sallyport.io/crl-fetch; default off). */
  readonly crlFetch: boolean
  /**
   * Stapled OCSP (annotation sallyport.io/ocsp): always requested and verified when present
   * (a revoked answer refuses), except 'off'. Without a staple: 'allow' accepts, 'must-staple'
   * (default) refuses only certificates carrying the RFC 7633 must-staple extension, 'require' refuses.
   */
  readonly ocsp: 'off' | 'allow' | 'must-staple' | 'require'
  /** false: verify the chain only, no name (GEP-3792 mesh mTLS: workload identities are not hostnames). */
  readonly verifyName: boolean
  /** sha256 over every field above: part of the pool key, so rotation gets new pools. */
  readonly identityHash: string
}

export interface Cluster {
  /** `Kind.group/ns/name:port` for Backends (resources/model.ts backendKey), `Service/ns/name:port`. */
  readonly id: string
  readonly kind: 'Backend' | 'Service'
  readonly namespace: string
  readonly name: string
  /** The Backend's snapshot key (backendKey: group and kind included); absent for Services and CONNECT tunnels. */
  readonly backendKey?: string
  readonly port: number
  readonly protocol: UpstreamProtocol
  /** External hostname: sent as Host/:authority and used for SNI. null for Services/IPs. */
  readonly hostname: string | null
  readonly endpoints: readonly Endpoint[]
  readonly tls: ClusterTls | null
  /** MCP path (default /mcp) when protocol is MCP. */
  readonly mcpPath: string | null
  readonly extensions: readonly ExtensionSpec[] | null
  readonly lb: LoadBalancerPolicy | null
  readonly circuitBreaker: CircuitBreakerPolicy | null
  readonly healthCheck: { readonly active: ActiveHealthCheck | null; readonly passive: PassiveHealthCheck | null } | null
  /** Envoy Gateway Backend `fallback`. */
  readonly fallback: boolean
  /** Region label of the Backend, if any. */
  readonly region: string | null
  /** Resolve AAAA records too (BackendTrafficPolicy enableIPv6); default false: IPv4 only. */
  readonly enableIPv6: boolean
  /** TCP(+TLS) connect timeout of the cluster's pools (BackendTrafficPolicy timeout.tcp.connectTimeout); null/absent: the global one. Issue 6. */
  readonly connectTimeoutMs?: number | null
  /**
   * Parent mode (egress proposal, gateway chaining): the Backend is another egress
   * gateway (annotation sallyport.io/parent-gateway: "true"). Only the connection
   * to it is retried, never the request. Absent: false. Issue 6.
   */
  readonly parentGateway?: boolean
  /**
   * What resolved addresses must satisfy (issue 5): set on Backend clusters with
   * hostname endpoints; null (or absent) otherwise. The confused-deputy guard
   * itself applies to every resolved Backend address whether or not this is set.
   */
  readonly destination?: ClusterDestination | null
  /**
   * Issue 9: reach the endpoints through this HTTP CONNECT proxy (Backend
   * annotation sallyport.io/upstream-proxy); TLS origination runs
   * inside the tunnel. Absent or null: direct.
   */
  readonly upstreamProxy?: UpstreamProxy | null
}

/** Per-Gateway rules for the addresses a Backend's hostnames resolve to. */
export interface GatewayAddressPolicy {
  /** `namespace/name`. */
  readonly gateway: string
  /** Guarded ranges (loopback, private...) this Gateway allows, as CIDR text. */
  readonly allowCidrs: readonly string[]
  /** Never reachable through this Gateway. */
  readonly denyCidrs: readonly string[]
  /** Allow-list: addresses must be in one of these; null: no allow-list applies (none, or the hostname is on it). */
  readonly onlyCidrs: readonly string[] | null
  /** PTR names must end in one of these; null: no reverse-DNS check by this Gateway. */
  readonly reverseDnsSuffixes: readonly string[] | null
}

export interface ClusterDestination {
  /** One per Gateway whose routes use the cluster; an address must satisfy every one. */
  readonly gateways: readonly GatewayAddressPolicy[]
  /** The Backend's own sallyport.io/reverse-dns-suffixes; null: none. */
  readonly reverseDnsSuffixes: readonly string[] | null
}

// ───────────────────────────── extensions (issue 7) ─────────────────────────────

export type ExtensionPhase = 'request-headers' | 'request-body' | 'response-headers' | 'response-body'

/** One extension as the data path runs it: canonical type, phases, resolved secrets. */
export interface CompiledExtension {
  /**
   * State key: owner + name + a hash of type, config and secret values. State
   * (token buckets, cached OAuth2 tokens, loaded plugins) is kept across
   * reloads under this key; a rotated Secret changes it, so it starts fresh.
   */
  readonly key: string
  readonly name: string
  /** Canonical built-in type (CredentialInjector, RateLimit, ...) or the type as written when unknown. */
  readonly type: string
  /** The phases it runs in, from `phase` or the type's default. */
  readonly phases: readonly ExtensionPhase[]
  readonly priority: number
  readonly failOpen: boolean
  readonly scope: 'Route' | 'Backend' | 'Gateway'
  /** Where it was declared: `EgressExtension ns/name` or `Backend ns/name`. */
  readonly source: string
  /** Namespace of the declaring object (Secret refs default to it). */
  readonly namespace: string
  readonly config: Readonly<Record<string, unknown>>
  /**
   * Secret data resolved in compile, by the config path of the reference
   * (`secretRef`, `oauth2.secretRef`): key → value; and the TLS material of a
   * Redis `global.tls` by its path (`global.tls`: `ca.crt`, `tls.crt`,
   * `tls.key`). Never printed: dumpTable redacts `secrets`, logs never take it.
   */
  readonly secrets: Readonly<Record<string, Readonly<Record<string, string>>>>
  /** A resolution problem (missing Secret, no ReferenceGrant, unknown type): running it fails, per failOpen. */
  readonly error: string | null
}

export interface ExtensionChain {
  /** `rule id → cluster id`; stable, for logs and metrics. */
  readonly id: string
  /** Higher priority first; ties: Gateway, Backend, Route scope, then declaration order. */
  readonly extensions: readonly CompiledExtension[]
}
