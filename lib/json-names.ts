// Repeated names in a JSON object (RFC 8259 §4: they SHOULD be unique). Read
// by the configuration parser (a manifest with a key twice is an error, as in
// YAML) and by the PayloadProcessor (a body its rules saw only the last value
// of is written back as checked).

/**
 * Where some object of `text` (valid JSON: JSON.parse read it) holds a name a
 * second time — the offset of that name's opening quote — or -1. Names are
 * compared as decoded (`"m"` and `"\u006d"`). JSON.parse keeps the last value;
 * another reader may keep the first (RFC 8259 §4 leaves it open). One linear
 * scan; a Set per object only while it is open.
 */
export function duplicateNameAt(text: string): number {
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
        if (names.has(name)) return start
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
  return -1
}
