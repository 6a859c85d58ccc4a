// Deep freeze for the compiled table: plain objects and arrays are frozen,
// Map values are walked (a ReadonlyMap type guards the maps themselves),
// RegExps are left alone (their lastIndex is state; ours are never global).

export function deepFreeze<T>(value: T): T {
  freeze(value, new Set())
  return value
}

function freeze(value: unknown, seen: Set<object>): void {
  if (value === null || typeof value !== 'object' || seen.has(value)) return
  seen.add(value)
  if (value instanceof RegExp) return
  if (value instanceof Map) {
    for (const v of value.values()) freeze(v, seen)
    return
  }
  if (Array.isArray(value)) {
    for (const v of value) freeze(v, seen)
  } else {
    for (const v of Object.values(value)) freeze(v, seen)
  }
  Object.freeze(value)
}
