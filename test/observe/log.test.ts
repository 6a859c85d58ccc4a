// The batching stdout destination: every line arrives whole and in order, whatever
// its size or characters, and what is pending leaves at exit.
import t from 'tap'
import type { Test } from 'tap'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const logModule = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'lib', 'observe', 'log.ts')

function runChild(t: Test, body: string): Promise<string> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-log-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'child.ts')
  fs.writeFileSync(file, `import { accessSink } from ${JSON.stringify(logModule)}\nconst sink = accessSink()!\n${body}\n`)
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'inherit'] })
    const chunks: Buffer[] = []
    child.stdout.on('data', (c: Buffer) => chunks.push(c))
    child.on('error', reject)
    child.on('exit', (code) => (code === 0 ? resolve(Buffer.concat(chunks).toString('utf8')) : reject(new Error(`child exited ${code}`))))
  })
}

t.test('lines of every size and script arrive whole and in order', async (t) => {
  const out = await runChild(t, `
const lines = []
for (let i = 0; i < 400; i++) lines.push(JSON.stringify({ i, s: 'x'.repeat(i * 7 % 900), u: 'é漢🙂'.repeat(i % 50) }) + '\\n')
lines.push(JSON.stringify({ big: 'b'.repeat(40000), u: '🙂'.repeat(3000) }) + '\\n') // longer than a batch
for (let i = 0; i < 3; i++) lines.push('{"after":' + i + '}\\n')
let k = 0
// Some in one turn, some across turns, the last ones left for exit.
for (; k < 200; k++) sink.write(lines[k])
await new Promise((r) => setImmediate(r))
for (; k < 401; k++) sink.write(lines[k])
await new Promise((r) => setTimeout(r, 5))
for (; k < lines.length; k++) sink.write(lines[k])
`)
  const got = out.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Record<string, unknown>)
  t.equal(got.length, 404, 'every line arrived, the pending ones at exit')
  t.same(got.slice(0, 400).map((o) => o.i), Array.from({ length: 400 }, (_, i) => i), 'in order')
  t.equal(got[57]?.u, 'é漢🙂'.repeat(7), 'multi-byte characters intact')
  t.equal((got[400]?.big as string).length, 40000, 'a line longer than a batch arrives whole')
  t.equal(got[400]?.u, '🙂'.repeat(3000))
  t.same(got.slice(401).map((o) => o.after), [0, 1, 2])
})

t.test('a live process writes its lines in one batch within FLUSH_MS, not one write per line or at exit', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-log-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'child.ts')
  // 20 lines, each in its own event-loop turn (immediates: 2 ms timers stretched past
  // FLUSH_MS on a loaded 2-core machine, and the batch then rightly went out in two),
  // then 600 ms alive before exiting.
  fs.writeFileSync(file, `import { accessSink } from ${JSON.stringify(logModule)}
const sink = accessSink()!
for (let i = 0; i < 20; i++) { sink.write('{"i":' + i + '}\\n'); await new Promise((r) => setImmediate(r)) }
await new Promise((r) => setTimeout(r, 600))
`)
  const { FLUSH_MS } = await import(logModule)
  const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'inherit'] })
  const chunks: Array<{ text: string, at: number }> = []
  child.stdout.on('data', (c: Buffer) => chunks.push({ text: c.toString('utf8'), at: Date.now() }))
  const exitedAt = await new Promise<number>((resolve) => child.on('exit', () => resolve(Date.now())))
  t.ok(chunks.length > 0, 'lines written')
  t.equal(chunks[0]?.text.split('\n').filter((l) => l !== '').length, 20, 'the first read holds all 20 lines: one write for the batch')
  t.ok(exitedAt - (chunks[0]?.at ?? exitedAt) > 300, `written by the ${FLUSH_MS} ms timer while the process was alive, not at exit`)
})

t.test('lines given as bytes and as strings keep their order, whatever their size', async (t) => {
  const out = await runChild(t, `
const scratch = Buffer.alloc(80000)
for (let i = 0; i < 300; i++) {
  const line = JSON.stringify({ i, pad: 'y'.repeat(i * 131 % 3000), u: '\u00e9\u{1f642}'.repeat(i % 9) }) + '\\n'
  if (i % 2 === 0) sink.write(line)
  else { const n = scratch.write(line, 0, 'utf8'); sink.writeBytes!(scratch, n); scratch.fill(0x41, 0, n) }
  if (i % 50 === 0) await new Promise((r) => setImmediate(r))
}
const big = JSON.stringify({ i: 300, big: 'z'.repeat(70000) }) + '\\n' // longer than the batch buffer
sink.writeBytes!(scratch, scratch.write(big, 0, 'utf8'))
sink.write('{"i":301}\\n')
`)
  const got = out.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as { i: number, u?: string, big?: string })
  t.same(got.map((o) => o.i), Array.from({ length: 302 }, (_, i) => i), 'every line, in order')
  t.equal(got[7]?.u, '\u00e9\u{1f642}'.repeat(7), 'bytes copied before the caller reuses its buffer')
  t.equal(got[300]?.big?.length, 70000, 'a line longer than the batch arrives whole')
})
