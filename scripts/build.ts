// `npm run build`: the production form of sallyport in dist/ — the same
// modules as plain JavaScript (tsc, types erased, relative `.ts` imports
// rewritten to `.js`) beside the files they read at run time (schemas/, the
// quickstart fixtures, package.json). Node then loads no TypeScript stripper,
// which is about 30 MB of resident memory (bench/RESULTS.md, Memory). The Dockerfile
// and bench/ run dist/; `npm start`, `npm test` and development run the
// TypeScript directly.

import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'

const root = path.resolve(import.meta.dirname, '..')
// Optional argument: another output directory (the build test uses a temporary one).
const dist = path.resolve(process.argv[2] ?? path.join(root, 'dist'))
fs.rmSync(dist, { recursive: true, force: true })
execFileSync(process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', path.join(root, 'tsconfig.build.json'), '--outDir', dist], { stdio: 'inherit', cwd: root })
for (const dir of ['schemas', path.join('fixtures', 'quickstart')]) fs.cpSync(path.join(root, dir), path.join(dist, dir), { recursive: true })
fs.copyFileSync(path.join(root, 'package.json'), path.join(dist, 'package.json'))
fs.chmodSync(path.join(dist, 'bin', 'sallyport.js'), 0o755)
process.stdout.write(`built ${path.relative(process.cwd(), dist) || '.'}/\n`)
