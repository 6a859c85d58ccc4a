import t, { type Test } from 'tap'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { EMPTY_SETTLE_MS, FileSource, readConfigSet } from '../../lib/config/file-source.ts'
import { configReloadFailures } from '../../lib/observe/metrics.ts'
import type { Snapshot } from '../../lib/resources/snapshot.ts'

const cm = (name: string, value: string): string =>
  `apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${name}\n  namespace: t\ndata:\n  k: "${value}"\n`

function tempDir(t: Test): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sallyport-fs-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** Collects emitted snapshots; `next()` waits (bounded) for the next one. */
function collector(): { snapshots: Snapshot[]; next: (timeoutMs?: number) => Promise<Snapshot>; listener: (s: Snapshot) => void } {
  const snapshots: Snapshot[] = []
  let waiter: ((s: Snapshot) => void) | null = null
  return {
    snapshots,
    listener: (s) => { snapshots.push(s); waiter?.(s); waiter = null },
    next: (timeoutMs = 5000) => new Promise<Snapshot>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no snapshot emitted in time')), timeoutMs)
      waiter = (s) => { clearTimeout(timer); resolve(s) }
    }),
  }
}

const value = (s: Snapshot | undefined, key: string): string | undefined => s?.configMaps.get(key)?.data.k

async function failures(reason: string): Promise<number> {
  const m = await configReloadFailures.get()
  return m.values.find((v) => v.labels.reason === reason && v.labels.source === 'file')?.value ?? 0
}

t.test('reads directories recursively, skipping hidden entries and other extensions', async (t) => {
  const dir = tempDir(t)
  fs.mkdirSync(path.join(dir, 'sub'))
  fs.mkdirSync(path.join(dir, '.git'))
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '1'))
  fs.writeFileSync(path.join(dir, 'sub', 'b.yml'), cm('b', '1'))
  fs.writeFileSync(path.join(dir, 'c.json'), JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c', namespace: 't' } }))
  fs.writeFileSync(path.join(dir, '.hidden.yaml'), cm('hidden', '1'))
  fs.writeFileSync(path.join(dir, '.git', 'x.yaml'), cm('git', '1'))
  fs.writeFileSync(path.join(dir, 'notes.txt'), 'hello')
  fs.writeFileSync(path.join(dir, 'a.yaml.swp'), 'binary')
  const set = await readConfigSet([dir])
  t.same(set.files.map((f) => path.relative(dir, f)), ['a.yaml', 'c.json', path.join('sub', 'b.yml')])
  t.same(set.problems, [])
  const missing = await readConfigSet([path.join(dir, 'nope.yaml')])
  t.match(missing.problems[0]?.message, /cannot read: ENOENT/)
})

t.test('a broken file keeps the last good set; fixing it reloads; unchanged content is not re-emitted', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '1'))
  fs.writeFileSync(path.join(dir, 'b.yaml'), cm('b', '1'))
  const c = collector()
  const source = new FileSource([dir], { watch: false })
  t.teardown(() => source.close())
  await source.start(c.listener)
  t.equal(c.snapshots.length, 1)
  t.equal(value(c.snapshots[0], 't/a'), '1')

  const before = await failures('parse')
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '2'))
  fs.writeFileSync(path.join(dir, 'b.yaml'), 'kind: ConfigMap\nmetadata:\n  name: b\n  labels: x: y\n')
  await source.reload()
  t.equal(c.snapshots.length, 1, 'nothing emitted: the change to a.yaml waits for b.yaml to parse')
  t.equal(await failures('parse'), before + 1)
  await source.reload()
  t.equal(await failures('parse'), before + 1, 'the same broken state is reported once')

  fs.writeFileSync(path.join(dir, 'b.yaml'), cm('b', '2'))
  await source.reload()
  t.equal(c.snapshots.length, 2)
  t.equal(value(c.snapshots[1], 't/a'), '2')
  t.equal(value(c.snapshots[1], 't/b'), '2')

  fs.writeFileSync(path.join(dir, 'b.yaml'), cm('b', '2'))
  await source.reload()
  t.equal(c.snapshots.length, 2, 'same content: nothing emitted')
})

t.test('first load with a broken file serves the others and reports it', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '1'))
  fs.writeFileSync(path.join(dir, 'z.yaml'), 'kind: ConfigMap\n  x: [\n')
  const c = collector()
  const source = new FileSource([dir], { watch: false })
  t.teardown(() => source.close())
  await source.start(c.listener)
  t.equal(c.snapshots.length, 1)
  t.equal(value(c.snapshots[0], 't/a'), '1')
  const p = c.snapshots[0]?.problems[0]
  t.equal(p?.source.file, path.join(dir, 'z.yaml'))
  t.match(p?.message, /^line \d+/)
})

t.test('watching: debounced, and a rename-save is seen', async (t) => {
  const dir = tempDir(t)
  const file = path.join(dir, 'a.yaml')
  fs.writeFileSync(file, cm('a', '0'))
  const c = collector()
  const source = new FileSource([file], { debounceMs: 300 })
  t.teardown(() => source.close())
  await source.start(c.listener)
  t.equal(c.snapshots.length, 1)

  // A burst of writes inside the debounce window gives one reload with the last content.
  let next = c.next()
  for (let i = 1; i <= 5; i++) fs.writeFileSync(file, cm('a', String(i)))
  const s = await next
  t.equal(value(s, 't/a'), '5')
  await new Promise((r) => setTimeout(r, 600))
  t.equal(c.snapshots.length, 2, 'one reload for the burst')

  // Editors save by writing a temp file and renaming it over the original.
  next = c.next()
  const tmp = path.join(dir, '.a.yaml.tmp')
  fs.writeFileSync(tmp, cm('a', 'renamed'))
  fs.renameSync(tmp, file)
  t.equal(value(await next, 't/a'), 'renamed')

  // And again: the watch survives the inode change.
  next = c.next()
  fs.writeFileSync(tmp, cm('a', 'renamed-again'))
  fs.renameSync(tmp, file)
  t.equal(value(await next, 't/a'), 'renamed-again')
})

t.test('a file that becomes empty is given time to be written before its objects go', async (t) => {
  // A save that truncates, then writes (`cat > file`, a copy in place): applying
  // the empty file would remove its objects (close their listeners) meanwhile.
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '1'))
  fs.writeFileSync(path.join(dir, 'b.yaml'), cm('b', '1'))
  const c = collector()
  const source = new FileSource([dir], { watch: false })
  t.teardown(() => source.close())
  await source.start(c.listener)

  fs.writeFileSync(path.join(dir, 'a.yaml'), '')
  await source.reload()
  t.equal(c.snapshots.length, 1, 'the empty file is not applied at once')
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '2'))
  await source.reload()
  t.equal(c.snapshots.length, 2, 'written within the settle time: applied')
  t.equal(value(c.snapshots[1], 't/a'), '2', 'with its new content; no set without it came in between')
  await new Promise((resolve) => setTimeout(resolve, EMPTY_SETTLE_MS + 300))
  t.equal(c.snapshots.length, 2, 'and the settle re-read finds nothing new')

  // An emptiness that lasts is applied once the settle time is over.
  const next = c.next(EMPTY_SETTLE_MS * 3)
  fs.writeFileSync(path.join(dir, 'a.yaml'), '\n')
  await source.reload()
  t.equal(c.snapshots.length, 2, 'held back first')
  const s = await next
  t.equal(value(s, 't/a'), undefined, 'then applied: its objects removed')
  t.equal(value(s, 't/b'), '1', 'the other file\'s kept')

  // A file that never held objects is applied empty at once.
  fs.writeFileSync(path.join(dir, 'a.yaml'), '')
  fs.writeFileSync(path.join(dir, 'b.yaml'), cm('b', '3'))
  await source.reload()
  t.equal(value(c.snapshots.at(-1), 't/b'), '3', 'a change beside an empty file that held nothing applies at once')
})
