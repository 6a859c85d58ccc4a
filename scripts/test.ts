// `npm test`: type-check, then the tap suite; ends with the line
// `N passed, N failed` that CI reads. Extra arguments go to tap (file filters).
import { spawn, spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import path from 'node:path'

// Follows the TAP stream's subtest nesting (four spaces per level) and keeps
// every failed assertion with its subtest path and YAML diagnostic, and every
// failed test file by name.
class FailureCollector {
  private partial = ''
  private readonly path: string[] = []
  private readonly found: string[] = []
  private entry: { lines: string[], indent: string, inDiag: boolean } | null = null

  push(text: string): void {
    const lines = (this.partial + text).split('\n')
    this.partial = lines.pop() ?? ''
    for (const line of lines) this.line(line)
  }

  report(): string {
    this.close()
    const shown = this.found.slice(0, 20)
    const more = this.found.length - shown.length
    return shown.map((f) => `${f}\n`).join('') + (more > 0 ? `# ... and ${more} more\n` : '')
  }

  private close(): void {
    if (this.entry !== null) this.found.push(this.entry.lines.join('\n'))
    this.entry = null
  }

  private line(line: string): void {
    const entry = this.entry
    if (entry !== null) {
      if (!entry.inDiag && line === `${entry.indent}  ---`) entry.inDiag = true
      if (entry.inDiag) {
        if (entry.lines.length < 40) entry.lines.push(line.slice(entry.indent.length))
        if (line === `${entry.indent}  ...`) this.close()
        return
      }
      this.close()
    }
    const indent = /^ */.exec(line)?.[0].length ?? 0
    const depth = Math.floor(indent / 4)
    const body = line.slice(indent)
    if (body.startsWith('# Subtest: ')) {
      this.path.length = depth
      this.path[depth] = body.slice('# Subtest: '.length)
      return
    }
    const m = /^(not ok|ok) \d+ - (.*?)(?: # .*)?$/.exec(body)
    if (m === null) return
    const name = m[2] ?? ''
    const isSummary = this.path.length > depth && this.path[depth] === name
    if (isSummary) this.path.length = depth
    if (m[1] !== 'not ok') return
    if (isSummary) {
      if (depth === 0) this.found.push(`not ok - ${name} (test file failed)`)
      return
    }
    const where = [...this.path.slice(0, depth), name].join(' > ')
    this.entry = { lines: [`not ok - ${where}`], indent: ' '.repeat(indent), inDiag: false }
  }
}

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
const failures = new FailureCollector()
child.stdout.on('data', (chunk: Buffer) => {
  process.stdout.write(chunk)
  const text = chunk.toString('utf8')
  failures.push(text)
  tail = (tail + text).slice(-4096)
})
child.on('close', (code) => {
  // tap's closing line: `# { total: 12, pass: 11, fail: 1, skip: 0 }`
  const m = /# \{ total: (\d+)(?:, pass: (\d+))?(?:, fail: (\d+))?(?:, skip: (\d+))?[^}]*\}\s*$/m.exec(tail.split('\n').filter((l) => l.startsWith('# {')).pop() ?? '')
  const pass = m === null ? 0 : Number(m[2] ?? 0)
  let fail = m === null ? 1 : Number(m[3] ?? 0)
  if (code !== 0 && fail === 0) fail = 1
  const skip = m === null ? 0 : Number(m[4] ?? 0)
  const passed = pass + (typeFailures === 0 ? 1 : 0)
  // CI logs keep only their tail: name what failed right above the summary.
  const report = failures.report()
  if (report !== '') process.stdout.write(`\n# failed assertions\n${report}`)
  const failed = fail + typeFailures
  process.stdout.write(`\n${passed} passed, ${failed} failed${skip > 0 ? `, ${skip} skipped` : ''}\n`)
  process.exit(failed === 0 ? 0 : 1)
})
