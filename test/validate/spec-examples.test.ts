// Every manifest example in the specs sallyport implements (../shared/specs/*.md,
// beside the repository) must validate as written. Blocks are extracted at test
// time: fenced ```yaml blocks, and — because some specs were saved from HTML
// without fences — unfenced runs of YAML lines that start at `apiVersion:`.
// Only documents that parse and name a known kind count.
// Examples that do not parse (gep-4488-backend.md lost its indentation) are
// kept, re-indented, in fixtures/valid/spec-gep-4488-examples.yaml.

import t from 'tap'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseAllDocuments } from 'yaml'
import { isKnownKind, validateDocument } from '../../lib/validate/validate.ts'
import { extractYamlBlocks } from './spec-blocks.ts'

const SPECS = fileURLToPath(new URL('../../../shared/specs/', import.meta.url))

/**
 * Documented exceptions: examples that are visibly incomplete or use
 * placeholders. Each lists the exact error fields its documents produce, so
 * anything else in the same example still has to validate.
 */
const EXCEPTIONS: ReadonlyArray<{ file: string; kind: string; name: string; fields: readonly string[]; why: string }> = [
  {
    file: 'egress-gateways-proposal.md', kind: 'Backend', name: 'openai-backend',
    fields: ['spec.destination.ports[0].tls.mode'],
    why: 'tls.mode is the placeholder "None | Simple | Mutual" listing the choices',
  },
  {
    file: 'gep-3792-out-of-cluster-gateways.md', kind: 'Gateway', name: 'ocg-gateway',
    fields: ['spec.listeners'],
    why: 'listeners elided ("# ... other gateway spec fields ..."); mesh.trustBundle itself validates',
  },
  {
    file: 'gep-3792-out-of-cluster-gateways.md', kind: 'Secret', name: 'mesh-ca-secret',
    fields: ['data[ca.crt]'],
    why: 'data is a comment placeholder ("# Paste the base64-encoded CA certificate ..."), not base64',
  },
  {
    file: 'gep-3792-out-of-cluster-gateways.md', kind: 'Secret', name: 'ocg-ca-secret',
    fields: ['data[ca.crt]'],
    why: 'data is a comment placeholder ("# Paste the base64-encoded CA certificate ..."), not base64',
  },
]

const missing = existsSync(SPECS) ? false : `no specs folder at ${SPECS}`

t.test('manifest examples in the specs validate', { skip: missing }, async (t) => {
  const used = new Set<string>()
  let checked = 0
  for (const file of readdirSync(SPECS).filter((f) => f.endsWith('.md')).sort()) {
    const blocks = extractYamlBlocks(readFileSync(join(SPECS, file), 'utf8'))
    blocks.forEach((block, b) => {
      const docs = parseAllDocuments(block)
      const list = Array.isArray(docs) ? docs : [docs]
      if (list.some((d) => d.errors.length > 0)) {
        // Go, `...` placeholders, or (gep-4488-backend.md) YAML whose indentation
        // was lost when the page was saved as text: not a manifest we can read.
        // fixtures/valid/spec-gep-4488-examples.yaml keeps those examples, re-indented.
        if (/^kind: /m.test(block)) t.comment(`${file} block ${b}: not parseable YAML, skipped`)
        return
      }
      list.forEach((d, i) => {
        const doc = d.toJS() as unknown
        const o = typeof doc === 'object' && doc !== null ? (doc as Record<string, unknown>) : null
        if (o === null || typeof o.apiVersion !== 'string' || typeof o.kind !== 'string') return
        if (!isKnownKind(o.apiVersion, o.kind)) return
        checked++
        const { info, problems } = validateDocument(doc, { file, doc: i })
        const errors = problems.filter((p) => p.severity === 'error').map((p) => p.field).sort()
        const ex = EXCEPTIONS.find((e) => e.file === file && e.kind === info.kind && e.name === info.name)
        const label = `${file} block ${b} doc ${i}: ${info.kind} ${info.name || '<no name>'}`
        if (ex !== undefined) {
          used.add(`${ex.file}|${ex.kind}|${ex.name}`)
          t.same(errors, [...ex.fields].sort(), `${label} fails only where documented (${ex.why})`)
        } else {
          t.same(problems.filter((p) => p.severity === 'error').map((p) => `${p.field}: ${p.message}`), [], `${label} validates`)
        }
      })
    })
  }
  t.ok(checked >= 12, `checked ${checked} example documents`)
  for (const e of EXCEPTIONS) t.ok(used.has(`${e.file}|${e.kind}|${e.name}`), `exception ${e.file} ${e.kind} ${e.name} still matches an example`)
})
