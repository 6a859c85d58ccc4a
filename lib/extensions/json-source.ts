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

/** The source text of a number parsed by parseKeepingNumbers (`12345678901234567890`, `1e400`, `1.10`). */
export function numberText(value: unknown): string {
  return (value as { rawJSON: string }).rawJSON
}
