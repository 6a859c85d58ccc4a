// JSON documents whose numbers keep their source text. A body parsed with
// JSON.parse and written back with JSON.stringify has every number go through
// a double: 12345678901234567890 → 12345678901234567000, 1e400 → null,
// 1.10 → 1.1. Parsed here, a number is a raw JSON value (JSON.parse source
// text access, ES2025, in Node 24) that JSON.stringify writes back as it was.

interface RawJson {
  rawJSON(text: string): object
  isRawJSON(value: unknown): boolean
}

// Not yet in TypeScript's lib (5.9).
const raw = JSON as unknown as RawJson

/** JSON.parse, with numbers kept as raw JSON values (objects: select and scans treat them as leaves). */
export function parseKeepingNumbers(text: string): unknown {
  return JSON.parse(text, keepNumber)
}

function keepNumber(_key: string, value: unknown, context?: { source?: string }): unknown {
  return typeof value === 'number' && context?.source !== undefined ? raw.rawJSON(context.source) : value
}

/** A number parsed by parseKeepingNumbers. */
export function isRawNumber(value: unknown): boolean {
  return raw.isRawJSON(value)
}

/**
 * Whether some object of `text` (valid JSON: JSON.parse read it) holds a name
 * twice, names compared as decoded (`"m"` and `"\u006d"`). JSON.parse keeps
 * the last value; another reader may keep the first (RFC 8259 §4 leaves it
 * open). One linear scan; a Set per object only while it is open.
 */
export function hasDuplicateName(text: string): boolean {
  // One entry per open container: the names of an object, null for an array.
  const open: Array<Set<string> | null> = []
  let expectName = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x22 /* " */) {
      const start = i
      let escaped = false
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i)
        if (d === 0x5c /* \ */) { escaped = true; i++ } else if (d === 0x22) break
      }
      if (expectName) {
        const literal = text.slice(start, i + 1)
        const name = escaped ? JSON.parse(literal) as string : literal.slice(1, -1)
        const names = open[open.length - 1] as Set<string>
        if (names.has(name)) return true
        names.add(name)
        expectName = false
      }
    } else if (c === 0x7b /* { */) {
      open.push(new Set())
      expectName = true
    } else if (c === 0x5b /* [ */) {
      open.push(null)
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      open.pop()
      expectName = false
    } else if (c === 0x2c /* , */) {
      expectName = (open[open.length - 1] ?? null) !== null
    }
  }
  return false
}
