// An undocumented knob does not exist for users: every metric sallyport
// registers is named in the README, every code an access line can carry
// has its row in the README's access-log table, with the status it answers,
// and every sallyport.io annotation sallyport reads has a row in a table.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { ErrorCode, statusOf } from '../../lib/errors.ts'
import { ANNOTATIONS, TLS_OPTIONS } from '../../lib/validate/annotations.ts'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const README = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8')

t.test('every registered metric is in the README', async (t) => {
  const dir = path.join(ROOT, 'lib/observe')
  for (const file of fs.readdirSync(dir)) {
    if (file.endsWith('.ts') && fs.readFileSync(path.join(dir, file), 'utf8').includes('registers: [registry]')) await import(path.join(dir, file))
  }
  const { registry } = await import('../../lib/observe/metrics.ts')
  const names = (await registry.getMetricsAsJSON()).map((m) => m.name)
  t.ok(names.length > 40, `${names.length} metrics registered`)
  // The process family (prom-client's default collectors) has one row, `sallyport_process_*`.
  // Named in code spans: `name` or `name{labels}`.
  const missing = names.filter((n) => !n.startsWith('sallyport_process_') && !README.includes(`\`${n}\``) && !README.includes(`\`${n}{`))
  t.same(missing, [], 'each one named in the README')
  t.ok(README.includes('`sallyport_process_*`'), 'and the process family')
})

t.test('every access-line code has its README row, with its status', async (t) => {
  const sideLoop = new Set<string>([ErrorCode.CONFIG_READ, ErrorCode.CONFIG_PARSE, ErrorCode.CONFIG_INVALID, ErrorCode.LISTEN, ErrorCode.USAGE])
  for (const code of Object.values(ErrorCode)) {
    if (sideLoop.has(code)) continue
    t.ok(README.includes(`| \`${code}\` | ${statusOf(code)} |`), `${code} → ${statusOf(code)}`)
  }
})

t.test('every sallyport.io annotation and listener TLS option has a README table row', async (t) => {
  const rows = README.split('\n').filter((l) => l.startsWith('|'))
  for (const name of [...Object.values(ANNOTATIONS), ...Object.values(TLS_OPTIONS)]) {
    t.ok(rows.some((r) => r.includes(`\`${name}\``) || r.includes(`\`${name}:`)), name)
  }
})
