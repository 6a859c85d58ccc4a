// `npm test`: type-check, then the tap suite; ends with the line
// `N passed, N failed` that CI reads. Extra arguments go to tap (file filters).
import { spawn, spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import path from 'node:path'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const bin = (name: string): string => path.join(root, 'node_modules', '.bin', name)

spawnSync('bash', [path.join(root, 'scripts', 'system-deps.sh')], { stdio: 'inherit', cwd: root })

let typeFailures = 0
process.stdout.write('# tsc --noEmit\n')
const tsc = spawnSync(bin('tsc'), ['--noEmit', '-p', 'tsconfig.json'], { cwd: root, encoding: 'utf8' })
if (tsc.status !== 0) {
  typeFailures = 1
  process.stdout.write(tsc.stdout + tsc.stderr)
  process.stdout.write('not ok - type-check failed\n')
} else {
  process.stdout.write('ok - type-check\n')
}

const args = ['--reporter=tap', ...process.argv.slice(2)]
const child = spawn(bin('tap'), args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, FORCE_COLOR: '0' } })
let tail = ''
child.stdout.on('data', (chunk: Buffer) => {
  process.stdout.write(chunk)
  tail = (tail + chunk.toString('utf8')).slice(-4096)
})
child.on('close', (code) => {
  // tap's closing line: `# { total: 12, pass: 11, fail: 1, skip: 0 }`
  const m = /# \{ total: (\d+)(?:, pass: (\d+))?(?:, fail: (\d+))?(?:, skip: (\d+))?[^}]*\}\s*$/m.exec(tail.split('\n').filter((l) => l.startsWith('# {')).pop() ?? '')
  const pass = m === null ? 0 : Number(m[2] ?? 0)
  let fail = m === null ? 1 : Number(m[3] ?? 0)
  if (code !== 0 && fail === 0) fail = 1
  const skip = m === null ? 0 : Number(m[4] ?? 0)
  const passed = pass + (typeFailures === 0 ? 1 : 0)
  const failed = fail + typeFailures
  process.stdout.write(`\n${passed} passed, ${failed} failed${skip > 0 ? `, ${skip} skipped` : ''}\n`)
  process.exit(failed === 0 ? 0 : 1)
})
