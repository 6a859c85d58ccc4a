// Listeners of one Gateway that are not distinct (Gateway API, Listener docs):
// on one port, differing protocols (or TLS modes), or one hostname twice (any
// two TCP listeners). Every listener of such a set is conflicted: "implementations
// may accept a partial Listener set only if they throw out *all* the conflicting
// Listeners. No picking one of the conflicting listeners as the winner."
// One rule for compile (Conflicted=True, nothing served on them) and for
// `sallyport validate` (a warning on each listener), so the two never disagree.

/** What the rule reads of a listener. */
export interface ListenerShape {
  readonly name: string
  readonly protocol: string
  readonly port: number
  readonly hostname: string | null
  /** tls.mode as written; null when absent. */
  readonly tlsMode: string | null
}

export interface ListenerConflict {
  readonly reason: 'ProtocolConflict' | 'HostnameConflict'
  readonly message: string
}

/** Protocols a port is served with; listeners of other protocols take no part. */
function served(protocol: string): boolean {
  return protocol === 'HTTP' || protocol === 'HTTPS' || protocol === 'TCP' || protocol === 'TLS'
}

/** The conflicted listeners of one Gateway, by their index in `listeners`. */
export function listenerConflicts(listeners: readonly ListenerShape[]): Map<number, ListenerConflict> {
  const out = new Map<number, ListenerConflict>()
  const byPort = new Map<number, number[]>()
  listeners.forEach((l, i) => {
    if (!served(l.protocol)) return
    const list = byPort.get(l.port)
    if (list === undefined) byPort.set(l.port, [i])
    else list.push(i)
  })
  const at = (i: number): ListenerShape => listeners[i] as ListenerShape
  const modeOf = (l: ListenerShape): string => `${l.protocol}/${l.protocol === 'HTTPS' ? 'Terminate' : l.protocol === 'TLS' ? (l.tlsMode ?? 'Terminate') : ''}`
  for (const [port, list] of byPort) {
    if (list.length < 2) continue
    const modes = new Set(list.map((i) => modeOf(at(i))))
    if (modes.size > 1) {
      const names = list.map((i) => `${at(i).name} (${at(i).protocol})`).join(', ')
      for (const i of list) out.set(i, { reason: 'ProtocolConflict', message: `listeners on port ${port} differ in protocol: ${names}; none of them is served` })
      continue
    }
    const byHost = new Map<string, number[]>()
    for (const i of list) {
      const key = at(list[0] as number).protocol === 'TCP' ? '' : (at(i).hostname ?? '').toLowerCase()
      const same = byHost.get(key)
      if (same === undefined) byHost.set(key, [i])
      else same.push(i)
    }
    for (const [host, same] of byHost) {
      if (same.length < 2) continue
      const names = same.map((i) => at(i).name).join(', ')
      for (const i of same) out.set(i, { reason: 'HostnameConflict', message: `listeners ${names} on port ${port} share hostname ${host === '' ? '(any)' : host}; none of them is served` })
    }
  }
  return out
}
