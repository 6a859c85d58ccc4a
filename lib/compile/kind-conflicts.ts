// HTTPRoute and GRPCRoute on one listener with overlapping hostnames.
//
// Gateway API GRPCRouteSpec.hostnames: "If a Route (A) of type HTTPRoute or
// GRPCRoute is attached to a Listener and that listener already has another
// Route (B) of the other type attached and the intersection of the hostnames
// of A and B is non-empty, then the implementation MUST accept exactly one of
// these two routes": the oldest, then the first by "{namespace}/{name}"; the
// other gets Accepted=False on that parent. And GRPCRouteRule.matches:
// "Merging MUST not be done between GRPCRoutes and HTTPRoutes."
//
// Routes are taken oldest first, so a route turned away never turns away
// another: only routes that stay attached count as "already attached".

import type { GRPCRoute, HTTPRoute } from '../resources/model.ts'
import type { Condition } from './status.ts'
import type { AnyRoute, ParentOutcome, RouteAttachment } from './attach.ts'
import { compareAge, condition } from './conditions.ts'
import { ANY_HOST, covers } from './hostnames.ts'

/** Per route turned away: listener key (`ns/gateway/listener`) → why. */
export type KindConflicts = ReadonlyMap<AnyRoute, ReadonlyMap<string, string>>

const NONE: KindConflicts = new Map()

function overlap(a: readonly string[], b: readonly string[]): string | null {
  for (const x of a) {
    for (const y of b) {
      if (covers(x, y)) return y
      if (covers(y, x)) return x
    }
  }
  return null
}

function show(hostname: string): string {
  return hostname === ANY_HOST ? 'any hostname' : `hostname ${hostname}`
}

/**
 * The routes each listener turns away. `attach` gives a route's attachment
 * (the same one compile() then uses). Without GRPCRoutes there is nothing to
 * do and no route is attached twice (issue 11: thousands of HTTPRoutes).
 */
export function findKindConflicts(
  httpRoutes: readonly HTTPRoute[], grpcRoutes: readonly GRPCRoute[], attach: (route: AnyRoute) => RouteAttachment,
): KindConflicts {
  if (grpcRoutes.length === 0 || httpRoutes.length === 0) return NONE
  const routes: Array<HTTPRoute | GRPCRoute> = [...httpRoutes, ...grpcRoutes].sort(compareAge)
  const kept = new Map<string, Array<{ route: AnyRoute; hostnames: readonly string[] }>>()
  const out = new Map<AnyRoute, Map<string, string>>()
  for (const route of routes) {
    for (const parent of attach(route).parents) {
      for (const a of parent.attachments) {
        const key = `${parent.gatewayKey}/${a.listener.listener.name}`
        const list = kept.get(key) ?? []
        let why: string | null = null
        for (const other of list) {
          if (other.route.kind === route.kind) continue
          const host = overlap(a.hostnames, other.hostnames)
          if (host === null) continue
          why = `${other.route.kind} ${other.route.meta.namespace}/${other.route.meta.name} (older) serves ${show(host)} on listener ${key}: an HTTPRoute and a GRPCRoute cannot share a hostname`
          break
        }
        if (why === null) {
          list.push({ route, hostnames: a.hostnames })
          kept.set(key, list)
          continue
        }
        let mine = out.get(route)
        if (mine === undefined) { mine = new Map(); out.set(route, mine) }
        mine.set(key, why)
      }
    }
  }
  return out
}

/**
 * The attachment without the listeners that turned the route away; a parent
 * left with none is Accepted=False. The listeners still count the route in
 * attachedRoutes (that count follows allowedRoutes and parentRefs alone).
 */
export function withoutConflicts(attachment: RouteAttachment, turnedAway: ReadonlyMap<string, string>): RouteAttachment {
  const gen = attachment.route.meta.generation
  const parents = attachment.parents.map((p): ParentOutcome => {
    const left = p.attachments.filter(a => !turnedAway.has(`${p.gatewayKey}/${a.listener.listener.name}`))
    if (left.length === p.attachments.length) return p
    const reasons = p.attachments.filter(a => !left.includes(a)).map(a => turnedAway.get(`${p.gatewayKey}/${a.listener.listener.name}`) as string)
    const accepted: Condition = left.length > 0 ? p.accepted : condition('Accepted', false, 'HostnameConflict', reasons.join('; '), gen)
    return { ...p, attachments: left, accepted }
  })
  return { route: attachment.route, parents }
}
