// `--only compile`: runs the compile benchmarks other modules own
// (bench/compile*.ts), each in its own process, bounded in time, and keeps
// their output for the report and the JSON.

import { spawn } from 'node:child_process'
import { readdirSync } from 'node:fs'
import path from 'node:path'

export interface CompileBenchRun {
  readonly file: string
  readonly exitCode: number | null
  readonly seconds: number
  readonly output: string
}

export async function runCompileBenches(benchDir: string, timeoutMs: number): Promise<CompileBenchRun[]> {
  const files = readdirSync(benchDir).filter((f) => /^compile.*\.ts$/.test(f)).sort()
  const runs: CompileBenchRun[] = []
  for (const f of files) {
    const started = Date.now()
    const { code, output } = await new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = spawn(process.execPath, [path.join(benchDir, f)], { cwd: path.dirname(benchDir), stdio: ['ignore', 'pipe', 'pipe'] })
      let text = ''
      child.stdout.on('data', (c: Buffer) => { text += c.toString('utf8') })
      child.stderr.on('data', (c: Buffer) => { text += c.toString('utf8') })
      const timer = setTimeout(() => { text += `\n(killed after ${timeoutMs} ms)`; child.kill('SIGKILL') }, timeoutMs)
      child.once('close', (c) => { clearTimeout(timer); resolve({ code: c, output: text }) })
      child.once('error', (err) => { clearTimeout(timer); resolve({ code: null, output: err.message }) })
    })
    runs.push({ file: `bench/${f}`, exitCode: code, seconds: (Date.now() - started) / 1000, output: output.trim() })
  }
  return runs
}
