// Which Gateway listener served a request, for its metric labels and span
// attributes. Several listeners (of one Gateway or several) may share a port,
// told apart by hostname; a rule may be attached through more than one of them,
// so the listener comes from the port and the request's host, not from the rule.

import type { ListenerRef, PortEntry } from '../compile/table.ts'

/**
 * The listener on this port that takes `host`, as routing picks it: the one
 * naming it exactly, else the longest wildcard covering it, else one without
 * hostname; null when none at all.
 */
export function servingListener(entry: PortEntry | null, host: string): ListenerRef | null {
  if (entry === null) return null
  const listeners = entry.listeners
  if (listeners.length === 1) return listeners[0]
  let fallback: ListenerRef | null = null
  let wildcard: ListenerRef | null = null
  for (let i = 0; i < listeners.length; i++) {
    const l = listeners[i]
    const h = l.hostname
    if (h === null) { fallback ??= l; continue }
    if (h === host) return l
    if (h.charCodeAt(0) === 42 /* '*' */ && host.length > h.length - 1 && host.endsWith(h.slice(1)) &&
      (wildcard === null || (wildcard.hostname as string).length < h.length)) wildcard = l
  }
  return wildcard ?? fallback
}

/** `namespace/name` of the Gateway that served the request: its listener's, else the port's first ('' for none). */
export function gatewayOf(entry: PortEntry | null, listener: ListenerRef | null): string {
  if (listener !== null) return listener.gateway
  return entry !== null && entry.listeners.length > 0 ? entry.listeners[0].gateway : ''
}
