// Compile decides what a listener should be; only the data plane knows whether
// its port could be bound. A listener compile programmed whose port failed to
// bind (EADDRINUSE, EACCES) is not serving, so the status that is shown
// (/config_dump, the log) and written (Kubernetes mode) must not say
// Programmed=True for it. This overlays the bind failures of the table that
// serves on compile's status; the runtime re-publishes it whenever the set of
// failed ports changes (a bind retry succeeding flips it back).
//
// Reasons are Gateway API's: a listener's Programmed=False with reason Pending
// is "not yet online and ready to accept client traffic", which is what a port
// the runtime keeps retrying is (Invalid would blame the configuration). The
// spec's PortUnavailable belongs to the Accepted condition, and the listener's
// configuration is accepted: routes attach and it serves once the port frees.

import { condition, statusKey } from '../compile/conditions.ts'
import type { Condition, ListenerStatus, ObjectStatus, Status } from '../compile/status.ts'
import type { RouteTable } from '../compile/table.ts'

export interface BindFailure {
  readonly port: number
  /** Error code and message (what /config_dump's failedPorts shows). */
  readonly error: string
  /** The message alone: the address, port and OS error (`cannot listen on 127.0.0.1:80: listen EACCES: ...`). */
  readonly message: string
}

/** The listeners served on `port` of `table`, as `namespace/gateway/listener`. */
export function listenersOnPort(table: RouteTable, port: number): string[] {
  return (table.ports.get(port)?.listeners ?? []).map((l) => `${l.gateway}/${l.name}`)
}

/** `status` with every listener on a failed port Programmed=False, and its Gateway's Programmed saying so. */
export function withBindFailures(status: Status, table: RouteTable, failed: readonly BindFailure[]): Status {
  if (failed.length === 0) return status
  // Gateway `namespace/name` → listener name → the failure of its port.
  const byGateway = new Map<string, Map<string, BindFailure>>()
  for (const f of failed) {
    for (const l of table.ports.get(f.port)?.listeners ?? []) {
      let m = byGateway.get(l.gateway)
      if (m === undefined) byGateway.set(l.gateway, m = new Map())
      m.set(l.name, f)
    }
  }
  if (byGateway.size === 0) return status
  const objects = new Map(status.objects)
  for (const [gatewayKey, failures] of byGateway) {
    const slash = gatewayKey.indexOf('/')
    const key = statusKey('Gateway', gatewayKey.slice(0, slash), gatewayKey.slice(slash + 1))
    const obj = objects.get(key)
    if (obj === undefined) continue
    objects.set(key, overlayGateway(obj, failures))
  }
  return { ...status, objects }
}

function overlayGateway(obj: ObjectStatus, failures: ReadonlyMap<string, BindFailure>): ObjectStatus {
  const unbound: string[] = []
  const listeners = obj.listeners.map((l): ListenerStatus => {
    const f = failures.get(l.name)
    const programmed = l.conditions.find((c) => c.type === 'Programmed')
    // A listener compile did not program (conflicted, bad reference) keeps compile's reason: that one is the cause.
    if (f === undefined || programmed === undefined || programmed.status !== 'True') return l
    unbound.push(`${l.name} (port ${f.port})`)
    const notBound = condition('Programmed', false, 'Pending', `${f.message}; retrying until the port can be bound`, programmed.observedGeneration)
    return { ...l, conditions: l.conditions.map((c) => c === programmed ? notBound : c) }
  })
  if (unbound.length === 0) return obj
  const ready = listeners.filter((l) => l.conditions.some((c) => c.type === 'Programmed' && c.status === 'True')).length
  const summary = `${unbound.length} of ${listeners.length} listeners cannot bind their port: ${unbound.join(', ')}`
  // As compile does for invalid listeners: the Gateway is Programmed while any
  // listener is; the message says which are not. None at all: Pending. A
  // Gateway compile left Programmed=False with listeners programmed (an address
  // it asked for cannot be used) keeps that reason.
  const conditions = obj.conditions.map((c): Condition => {
    if (c.type !== 'Programmed') return c
    if (c.status === 'False') return { ...c, message: `${c.message}; ${ready > 0 ? summary : `no listener is programmed: ${summary}`}` }
    return ready > 0
      ? condition('Programmed', true, 'Programmed', summary, c.observedGeneration)
      : condition('Programmed', false, 'Pending', `no listener is programmed: ${summary}`, c.observedGeneration)
  })
  return { ...obj, conditions, listeners }
}
