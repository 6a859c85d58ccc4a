// Narrow `unknown` manifest values without casts sprinkled through the rules.
// Rules run only on documents the schema accepted, so these mostly confirm
// what the schema already said; they still never throw on odd input.

export type Obj = Readonly<Record<string, unknown>>

export function asObj(v: unknown): Obj | null {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Obj) : null
}

export function asArr(v: unknown): readonly unknown[] {
  return Array.isArray(v) ? v : []
}

export function asStr(v: unknown): string | null {
  return typeof v === 'string' ? v : null
}

export function asNum(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null
}

/** Object at `o[key]`, or null. */
export function objAt(o: Obj | null, key: string): Obj | null {
  return o === null ? null : asObj(o[key])
}

/** Objects of the list at `o[key]`, with their indexes (non-objects skipped). */
export function objsAt(o: Obj | null, key: string): Array<[Obj, number]> {
  const out: Array<[Obj, number]> = []
  if (o === null) return out
  asArr(o[key]).forEach((v, i) => {
    const x = asObj(v)
    if (x !== null) out.push([x, i])
  })
  return out
}

export function strAt(o: Obj | null, key: string): string | null {
  return o === null ? null : asStr(o[key])
}

export function has(o: Obj | null, key: string): boolean {
  return o !== null && o[key] !== undefined && o[key] !== null
}
