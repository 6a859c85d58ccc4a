// The fixture corpus: every fixtures/valid/*.yaml document validates without
// errors; every fixtures/invalid/*.yaml file yields exactly the problems its
// leading comments announce:
//   # expect: <field>: <message substring>            one line per error
//   # expect-warning: <field>: <message substring>    one line per warning
// (field is '' for whole-document problems: `# expect: : document is ...`).
// Fields must match exactly; messages by substring. Valid files may announce
// warnings the same way.

import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseAllDocuments } from 'yaml'
import type { ConfigProblem } from '../../lib/resources/problem.ts'
import { validateDocument } from '../../lib/validate/validate.ts'

const ROOT = fileURLToPath(new URL('../../fixtures/', import.meta.url))

interface Expect { field: string; message: string }

function expectations(text: string, tag: 'expect' | 'expect-warning'): Expect[] {
  const out: Expect[] = []
  for (const line of text.split('\n')) {
    const m = new RegExp(`^# ${tag}: (.*)$`).exec(line)
    if (m === null) continue
    const rest = m[1] as string
    const cut = rest.indexOf(': ')
    out.push(cut < 0 ? { field: rest, message: '' } : { field: rest.slice(0, cut), message: rest.slice(cut + 2) })
  }
  return out
}

function problemsOf(file: string, text: string): ConfigProblem[] {
  const out: ConfigProblem[] = []
  parseAllDocuments(text).forEach((d, i) => {
    t.equal(d.errors.length, 0, `${file} doc ${i} is YAML`)
    out.push(...validateDocument(d.toJS(), { file, doc: i }).problems)
  })
  return out
}

/** What differs between the problems found and the ones announced; [] when they match exactly. */
function mismatches(got: readonly ConfigProblem[], want: readonly Expect[]): string[] {
  const left = [...got]
  const out: string[] = []
  for (const w of want) {
    const i = left.findIndex((p) => p.field === w.field && p.message.includes(w.message))
    if (i >= 0) left.splice(i, 1)
    else out.push(`missing ${w.field}: ${w.message}`)
  }
  for (const p of left) out.push(`unexpected ${p.field}: ${p.message}`)
  return out
}

const list = (dir: string): string[] => readdirSync(join(ROOT, dir)).filter((f) => f.endsWith('.yaml')).sort()

t.test('valid fixtures', async (t) => {
  const files = list('valid')
  t.ok(files.length >= 15, `${files.length} files`)
  for (const file of files) {
    const text = readFileSync(join(ROOT, 'valid', file), 'utf8')
    const problems = problemsOf(file, text)
    t.same(mismatches(problems.filter((p) => p.severity === 'error'), []), [], `valid/${file} has no errors`)
    t.same(mismatches(problems.filter((p) => p.severity === 'warning'), expectations(text, 'expect-warning')), [], `valid/${file} warnings as announced`)
  }
})

t.test('invalid fixtures', async (t) => {
  const files = list('invalid')
  t.ok(files.length >= 40, `${files.length} files`)
  for (const file of files) {
    const text = readFileSync(join(ROOT, 'invalid', file), 'utf8')
    const want = expectations(text, 'expect')
    t.ok(want.length > 0, `invalid/${file} announces its problem`)
    const problems = problemsOf(file, text)
    t.same(mismatches(problems.filter((p) => p.severity === 'error'), want), [], `invalid/${file} errors as announced`)
    t.same(mismatches(problems.filter((p) => p.severity === 'warning'), expectations(text, 'expect-warning')), [], `invalid/${file} warnings as announced`)
  }
})
