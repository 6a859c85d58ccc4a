// Which Gateway listener served a request, for its metric labels and span
// attributes. Several listeners (of one Gateway or several) may share a port,
// told apart by hostname; a rule may be attached through more than one of them,
// so the listener comes from the port and the request's host, not from the rule.

import type { ListenerRef, PortEntry } from '../compile/table.ts'
import { ANY_HOST, buildHostnameIndex, lookupHostname, type HostnameIndex } from '../hostname-index.ts'

/** A port's listeners by hostname, built on the port's first lookup (a table never changes, so neither does the index). */
const byHostname = new WeakMap<readonly ListenerRef[], HostnameIndex<ListenerRef>>()

/**
 * Frozen like the compiled indexes (its Map, array and entries too), so that
 * lookupHostname sees the shapes it sees for them (see there). Only the
 * index's own objects: the listeners are the table's.
 */
function frozen<T>(index: HostnameIndex<T>): HostnameIndex<T> {
  for (const w of index.wildcards) Object.freeze(w)
  Object.freeze(index.wildcards)
  Object.freeze(index.exact)
  return Object.freeze(index)
}

// hot path
/**
 * The listener on this port that takes `host` (lowercased), as routing picks
 * it: the one naming it exactly, else the longest wildcard covering it, else
 * the one without hostname; null when none at all. A port's only listener
 * takes every host.
 */
export function servingListener(entry: PortEntry | null, host: string): ListenerRef | null {
  if (entry === null) return null
  const listeners = entry.listeners
  if (listeners.length === 1) return listeners[0]
  let index = byHostname.get(listeners)
  if (index === undefined) {
    index = frozen(buildHostnameIndex(listeners.map(l => [l.hostname ?? ANY_HOST, l] as const)))
    byHostname.set(listeners, index)
  }
  return lookupHostname(index, host)
}

/** `namespace/name` of the Gateway that served the request: its listener's, else the port's first ('' for none). */
export function gatewayOf(entry: PortEntry | null, listener: ListenerRef | null): string {
  if (listener !== null) return listener.gateway
  return entry !== null && entry.listeners.length > 0 ? entry.listeners[0].gateway : ''
}
