// A small JSONPath subset for payload field selectors: `$`, `.name`,
// `['name']`, `[n]`, `[*]`, `.*` and `..name` (any depth), e.g.
// `$.messages[*].content` or `$..email`. Parsed once at load.

import { isRawNumber } from './json-source.ts'

export type Step =
  | { readonly kind: 'name'; readonly name: string }
  | { readonly kind: 'index'; readonly index: number }
  | { readonly kind: 'any' }
  | { readonly kind: 'deep'; readonly name: string }

export function parseSelector(text: string): Step[] {
  if (!text.startsWith('$')) throw new Error(`selector ${text} must start with $`)
  const steps: Step[] = []
  let i = 1
  while (i < text.length) {
    if (text.startsWith('..', i)) {
      const m = /^[A-Za-z0-9_$-]+/.exec(text.slice(i + 2))
      if (m === null) throw new Error(`selector ${text}: a name must follow ..`)
      steps.push({ kind: 'deep', name: m[0] })
      i += 2 + m[0].length
    } else if (text[i] === '.') {
      if (text[i + 1] === '*') { steps.push({ kind: 'any' }); i += 2; continue }
      const m = /^[A-Za-z0-9_$-]+/.exec(text.slice(i + 1))
      if (m === null) throw new Error(`selector ${text}: a name must follow .`)
      steps.push({ kind: 'name', name: m[0] })
      i += 1 + m[0].length
    } else if (text[i] === '[') {
      const end = text.indexOf(']', i)
      if (end === -1) throw new Error(`selector ${text}: unclosed [`)
      const inner = text.slice(i + 1, end).trim()
      if (inner === '*') steps.push({ kind: 'any' })
      else if (/^\d+$/.test(inner)) steps.push({ kind: 'index', index: Number(inner) })
      else if (/^'[^']*'$|^"[^"]*"$/.test(inner)) steps.push({ kind: 'name', name: inner.slice(1, -1) })
      else throw new Error(`selector ${text}: unsupported [${inner}]`)
      i = end + 1
    } else {
      throw new Error(`selector ${text}: unexpected ${text[i]}`)
    }
  }
  return steps
}

type Visit = (parent: Record<string, unknown> | unknown[], key: string | number, value: unknown) => void

/** Calls `visit` for every (parent, key) the selector reaches; the root itself is never visited. */
export function select(root: unknown, steps: readonly Step[], visit: Visit): void {
  walk(root, steps, 0, visit, null, null)
}

function walk(value: unknown, steps: readonly Step[], i: number, visit: Visit, parent: Record<string, unknown> | unknown[] | null, key: string | number | null): void {
  if (i === steps.length) {
    if (parent !== null && key !== null) visit(parent, key, value)
    return
  }
  // A number kept as its source text (json-source.ts) is a leaf, not an object to walk into.
  if (value === null || typeof value !== 'object' || isRawNumber(value)) return
  const step = steps[i] as Step
  const obj = value as Record<string, unknown> | unknown[]
  switch (step.kind) {
    case 'name':
      if (!Array.isArray(obj) && Object.hasOwn(obj, step.name)) walk(obj[step.name], steps, i + 1, visit, obj, step.name)
      return
    case 'index':
      if (Array.isArray(obj) && step.index < obj.length) walk(obj[step.index], steps, i + 1, visit, obj, step.index)
      return
    case 'any':
      if (Array.isArray(obj)) for (let k = 0; k < obj.length; k++) walk(obj[k], steps, i + 1, visit, obj, k)
      else for (const k of Object.keys(obj)) walk(obj[k], steps, i + 1, visit, obj, k)
      return
    case 'deep': {
      if (!Array.isArray(obj) && Object.hasOwn(obj, step.name)) walk(obj[step.name], steps, i + 1, visit, obj, step.name)
      const children = Array.isArray(obj) ? obj : Object.values(obj)
      for (const c of children) walk(c, steps, i, visit, null, null)
    }
  }
}
