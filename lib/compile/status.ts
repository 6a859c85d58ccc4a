// Status produced by compile for every input object, valid or not, in Gateway
// API's condition vocabulary. The kube source writes it back; file mode logs it
// and shows it in /config_dump.

export interface Condition {
  readonly type: string
  readonly status: 'True' | 'False' | 'Unknown'
  readonly reason: string
  readonly message: string
  readonly observedGeneration: number
}

/** Per-parent status of a Route (RouteParentStatus) or per-ancestor status of a policy (PolicyAncestorStatus). */
export interface ParentStatus {
  readonly parentRef: { readonly group: string; readonly kind: string; readonly namespace: string; readonly name: string; readonly sectionName: string | null; readonly port: number | null }
  readonly controllerName: string
  readonly conditions: readonly Condition[]
}

export interface ListenerStatus {
  readonly name: string
  readonly attachedRoutes: number
  readonly supportedKinds: ReadonlyArray<{ readonly group: string; readonly kind: string }>
  readonly conditions: readonly Condition[]
}

/** Gateway API GatewayStatusAddress: a network address bound to a Gateway. */
export interface GatewayStatusAddress {
  readonly type: 'IPAddress' | 'Hostname'
  readonly value: string
}

export interface ObjectStatus {
  readonly kind: string
  readonly apiVersion: string
  readonly namespace: string
  readonly name: string
  readonly generation: number
  /** Object-level conditions (GatewayClass, Gateway, Backend, invalid objects). */
  readonly conditions: readonly Condition[]
  /** Routes: per parent. Policies: per ancestor. Backend: per parent Gateway. Empty otherwise. */
  readonly parents: readonly ParentStatus[]
  /** Gateways only. */
  readonly listeners: readonly ListenerStatus[]
  /**
   * Gateways only: status.addresses, the addresses of the --publish-service
   * Service (compile/addresses.ts). Absent: sallyport publishes none (no
   * --publish-service); empty: none are bound. Either way the status writer
   * removes the field: the Gateway's controller writes what it knows.
   */
  readonly addresses?: readonly GatewayStatusAddress[]
}

export interface Status {
  /** Keyed by `kind/namespace/name`. */
  readonly objects: ReadonlyMap<string, ObjectStatus>
  /**
   * `namespace/name` of the Gateways this compile served (their GatewayClass is
   * the one we were started for, and ours). Gateway API: a controller owns the
   * parent/ancestor entries for these Gateways only; another deployment with the
   * same controllerName may own those of other Gateways.
   */
  readonly servedGateways: ReadonlySet<string>
}
