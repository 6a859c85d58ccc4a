// Deep freeze for the compiled table: plain objects and arrays are frozen,
// Map values are walked (a ReadonlyMap type guards the maps themselves),
// RegExps are left alone (their lastIndex is state; ours are never global).
//
// Issue 11 (reload at 5,000+ routes): the walk freezes each object before its
// children and stops at anything already frozen, so the frozen flag is the
// visited mark (no Set of every object) and a piece shared with an earlier
// table — a cluster, a compiled rule reused across compiles — is walked once
// in its life, not once per compile. Invariant this relies on: nothing but
// deepFreeze freezes table pieces, so a frozen object's children are frozen
// too (the shared empty lists of vhosts.ts hold nothing).

export function deepFreeze<T>(value: T): T {
  freeze(value)
  return value
}

function freeze(value: unknown): void {
  if (value === null || typeof value !== 'object' || Object.isFrozen(value)) return
  if (value instanceof RegExp) return
  // A Map's entries stay writable through its methods (ReadonlyMap guards
  // them); freezing the Map object itself only marks it visited.
  Object.freeze(value)
  if (value instanceof Map) {
    for (const v of value.values()) freeze(v)
  } else if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) freeze(value[i])
  } else {
    for (const k in value) freeze((value as Record<string, unknown>)[k])
  }
}
