// The import arrows of DESIGN.md, checked so nobody has to remember them:
// resources <- validate <- compile <- router/upstream/extensions <- listeners <- runtime <- bin.
// compile/ never imports the data path; the data path imports compile/ only as types and
// never reads config/; observe/ may be imported by anyone and imports nobody's internals.
import t from 'tap'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
const lib = path.join(root, 'lib')

function walk(dir: string): string[] {
  const out: string[] = []
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name)
    if (e.isDirectory()) out.push(...walk(p))
    else if (e.name.endsWith('.ts')) out.push(p)
  }
  return out
}

// What each module may import (values). `import type` is checked separately.
const allowed: Record<string, readonly string[]> = {
  '': ['resources'], // lib/errors.ts
  resources: ['resources', ''],
  validate: ['validate', 'resources', ''],
  compile: ['compile', 'resources', 'validate', ''],
  router: ['router', 'extensions', 'upstream', ''],
  extensions: ['extensions', 'upstream', ''],
  upstream: ['upstream', ''],
  listeners: ['listeners', 'router', 'extensions', 'upstream', ''],
  config: ['config', 'resources', 'validate', ''],
  runtime: ['runtime', 'config', 'compile', 'listeners', 'router', 'extensions', 'upstream', 'resources', 'validate', ''],
  observe: ['observe', ''],
}
const dataPath = new Set(['router', 'extensions', 'upstream', 'listeners'])

const importRe = /^\s*(import|export)\s+(type\s+)?[^'"]*?from\s+['"]([^'"]+)['"]/gm

t.test('lib/ imports follow the layering of DESIGN.md', async (t) => {
  const violations: string[] = []
  for (const file of walk(lib)) {
    const rel = path.relative(lib, file)
    const mod = rel.includes(path.sep) ? rel.split(path.sep)[0] as string : ''
    const src = fs.readFileSync(file, 'utf8')
    for (const m of src.matchAll(importRe)) {
      const spec = m[3] as string
      if (!spec.startsWith('.')) continue
      const target = path.relative(lib, path.resolve(path.dirname(file), spec))
      const tmod = target.includes(path.sep) ? target.split(path.sep)[0] as string : ''
      if (tmod === 'observe') continue
      const typeOnly = m[2] !== undefined
      if (dataPath.has(mod) && tmod === 'config') { violations.push(`${rel} -> ${target} (data path reads no sources)`); continue }
      if (dataPath.has(mod) && (tmod === 'compile' || tmod === 'resources') && typeOnly) continue
      if (mod === 'observe' && typeOnly) continue
      const ok = allowed[mod]
      if (ok === undefined) continue
      if (!ok.includes(tmod)) violations.push(`${rel} -> ${target}${typeOnly ? ' (type)' : ''}`)
    }
  }
  t.same(violations, [], 'no import crosses the layers')
})
