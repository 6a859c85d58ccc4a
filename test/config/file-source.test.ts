import t, { type Test } from 'tap'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { EMPTY_SETTLE_MS, FileSource, MAX_FILE_BYTES, readConfigSet } from '../../lib/config/file-source.ts'
import { configReloadFailures } from '../../lib/observe/metrics.ts'
import { compile } from '../../lib/compile/compile.ts'
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

t.test('a broken file keeps its own last good objects; the other files\' changes apply; fixing it reloads', async (t) => {
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
  t.equal(c.snapshots.length, 2, 'the change to a.yaml applies')
  t.equal(value(c.snapshots[1], 't/a'), '2')
  t.equal(value(c.snapshots[1], 't/b'), '1', 'b.yaml keeps its last good objects')
  t.same(source.rejected().map((p) => p.source.file), [path.join(dir, 'b.yaml')], 'rejected() names the file held back')
  t.match(source.rejected()[0]?.message, /^line 4\b/)
  t.equal(await failures('parse'), before + 1)
  fs.writeFileSync(path.join(dir, 'c.yaml'), cm('c', '1'))
  await source.reload()
  t.equal(value(c.snapshots.at(-1), 't/c'), '1', 'a file added meanwhile applies')
  t.equal(await failures('parse'), before + 1, 'the same broken file is reported once')
  const count = c.snapshots.length
  await source.reload()
  t.equal(c.snapshots.length, count, 'nothing changed: nothing emitted')

  fs.writeFileSync(path.join(dir, 'b.yaml'), cm('b', '2'))
  await source.reload()
  t.equal(value(c.snapshots.at(-1), 't/b'), '2', 'fixed: its new objects apply')
  t.equal(value(c.snapshots.at(-1), 't/a'), '2')
  t.same(source.rejected(), [])

  fs.writeFileSync(path.join(dir, 'b.yaml'), cm('b', '2'))
  await source.reload()
  t.equal(c.snapshots.length, count + 1, 'same content: nothing emitted')

  // Broken, then removed: its objects go.
  fs.writeFileSync(path.join(dir, 'b.yaml'), 'kind: [\n')
  await source.reload()
  fs.rmSync(path.join(dir, 'b.yaml'))
  await source.reload()
  t.equal(value(c.snapshots.at(-1), 't/b'), undefined, 'a broken file removed: its objects are removed')
  t.same(source.rejected(), [])
})

t.test('a file broken since startup holds nothing back', async (t) => {
  // The first load serves the rest; later changes to the rest must apply too, as a restart on the same files would.
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '1'))
  fs.writeFileSync(path.join(dir, 'second.yaml'), 'kind: ConfigMap\n  x: [\n')
  const c = collector()
  const source = new FileSource([dir], { watch: false })
  t.teardown(() => source.close())
  await source.start(c.listener)
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '2'))
  fs.writeFileSync(path.join(dir, 'third.yaml'), cm('third', '1'))
  await source.reload()
  t.equal(c.snapshots.length, 2)
  const s = c.snapshots[1]
  t.equal(value(s, 't/a'), '2', 'an edit applies')
  t.equal(value(s, 't/third'), '1', 'an added file applies')
  t.same(s?.problems.map((p) => p.source.file), [path.join(dir, 'second.yaml')], 'the broken file is still reported')
  t.same(source.rejected(), [], 'nothing of it served before: nothing held back')
  fs.writeFileSync(path.join(dir, 'second.yaml'), cm('second', '1'))
  await source.reload()
  t.equal(value(c.snapshots.at(-1), 't/second'), '1', 'fixed: applied')
  t.same(c.snapshots.at(-1)?.problems, [])
})

t.test('an unreadable file or directory keeps its last good objects; the rest applies', async (t) => {
  const root = tempDir(t)
  const one = path.join(root, 'one')
  const two = path.join(root, 'two')
  fs.mkdirSync(one)
  fs.mkdirSync(two)
  fs.writeFileSync(path.join(one, 'a.yaml'), cm('a', '1'))
  fs.writeFileSync(path.join(one, 'b.yaml'), cm('b', '1'))
  fs.writeFileSync(path.join(two, 'c.yaml'), cm('c', '1'))
  const c = collector()
  const source = new FileSource([one, two], { watch: false })
  t.teardown(() => source.close())
  await source.start(c.listener)

  // A dangling symlink (a ConfigMap's link mid-swap, a target removed).
  fs.rmSync(path.join(one, 'b.yaml'))
  fs.symlinkSync(path.join(root, 'missing.yaml'), path.join(one, 'b.yaml'))
  fs.writeFileSync(path.join(one, 'a.yaml'), cm('a', '2'))
  await source.reload()
  t.equal(value(c.snapshots.at(-1), 't/a'), '2')
  t.equal(value(c.snapshots.at(-1), 't/b'), '1', 'the unreadable file keeps its objects')
  t.match(source.rejected()[0], { source: { file: path.join(one, 'b.yaml') }, message: /cannot read: ENOENT/ })

  // A --config directory gone: the files read under it keep their objects.
  fs.rmSync(two, { recursive: true })
  fs.writeFileSync(path.join(one, 'a.yaml'), cm('a', '3'))
  await source.reload()
  t.equal(value(c.snapshots.at(-1), 't/a'), '3')
  t.equal(value(c.snapshots.at(-1), 't/c'), '1', 'the missing directory\'s objects are kept')
  t.same(source.rejected().map((p) => p.source.file).sort(), [path.join(one, 'b.yaml'), two])
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

/** A watching source on `paths` (short debounce), started. */
async function watching(t: Test, paths: string[], options: { recheckMs?: number } = {}): Promise<ReturnType<typeof collector>> {
  const c = collector()
  const source = new FileSource(paths, { debounceMs: 50, ...options })
  t.teardown(() => source.close())
  await source.start(c.listener)
  t.equal(c.snapshots.length, 1, 'first load')
  return c
}

t.test('a configuration directory replaced under its name is watched again', async (t) => {
  for (const how of ['rm -rf and copy', 'mv away and mv in']) {
    await t.test(how, async (t) => {
      const root = tempDir(t)
      const dir = path.join(root, 'cfg')
      fs.mkdirSync(dir)
      fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '1'))
      const c = await watching(t, [dir])
      let next = c.next()
      if (how === 'rm -rf and copy') {
        // Within the debounce: no reload sees the directory missing.
        fs.rmSync(dir, { recursive: true })
        fs.mkdirSync(dir)
        fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '2'))
      } else {
        const fresh = path.join(root, 'cfg.new')
        fs.mkdirSync(fresh)
        fs.writeFileSync(path.join(fresh, 'a.yaml'), cm('a', '2'))
        fs.renameSync(dir, path.join(root, 'cfg.old'))
        fs.renameSync(fresh, dir)
      }
      t.equal(value(await next, 't/a'), '2', 'the new directory is read')
      next = c.next()
      fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '3'))
      t.equal(value(await next, 't/a'), '3', 'and a later edit in it is seen')
    })
  }
})

t.test('--config naming a symlink: swapping the link is seen, then edits in its new target', async (t) => {
  const root = tempDir(t)
  for (const rev of ['rev1', 'rev2']) {
    fs.mkdirSync(path.join(root, rev))
    fs.writeFileSync(path.join(root, rev, 'a.yaml'), cm('a', rev))
  }
  const current = path.join(root, 'current')
  fs.symlinkSync('rev1', current)
  const c = await watching(t, [current])
  t.equal(value(c.snapshots[0], 't/a'), 'rev1')
  let next = c.next()
  // git-sync's atomic swap: a new link renamed over the old one.
  fs.symlinkSync('rev2', path.join(root, 'tmp-link'))
  fs.renameSync(path.join(root, 'tmp-link'), current)
  t.equal(value(await next, 't/a'), 'rev2', 'the swap is applied')
  next = c.next()
  fs.writeFileSync(path.join(root, 'rev2', 'a.yaml'), cm('a', 'rev2-edited'))
  t.equal(value(await next, 't/a'), 'rev2-edited', 'an edit in the new target is seen')
})

t.test('a directory replaced where no event reaches the gateway is noticed by the periodic re-check', async (t) => {
  // --config root/link/cfg with `link` swapped: the events are in root, which is not watched.
  const root = tempDir(t)
  for (const rev of ['r1', 'r2']) {
    fs.mkdirSync(path.join(root, rev, 'cfg'), { recursive: true })
    fs.writeFileSync(path.join(root, rev, 'cfg', 'a.yaml'), cm('a', rev))
  }
  fs.symlinkSync('r1', path.join(root, 'link'))
  const c = await watching(t, [path.join(root, 'link', 'cfg')], { recheckMs: 100 })
  const next = c.next()
  fs.symlinkSync('r2', path.join(root, 'tmp-link'))
  fs.renameSync(path.join(root, 'tmp-link'), path.join(root, 'link'))
  t.equal(value(await next, 't/a'), 'r2')
})

t.test('symlinked subdirectories are read and watched; links that loop are not followed', async (t) => {
  const root = tempDir(t)
  const dir = path.join(root, 'cfg')
  fs.mkdirSync(dir)
  fs.mkdirSync(path.join(root, 'teams-src'))
  fs.writeFileSync(path.join(root, 'outside.yaml'), cm('outside', '1'))
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '1'))
  fs.writeFileSync(path.join(root, 'teams-src', 'b.yaml'), cm('b', '1'))
  fs.symlinkSync(path.join('..', 'teams-src'), path.join(dir, 'teams'))
  fs.symlinkSync('.', path.join(dir, 'self'))
  fs.symlinkSync('..', path.join(dir, 'up'))
  const set = await readConfigSet([dir])
  t.same(set.files.map((f) => path.relative(dir, f)), ['a.yaml', path.join('teams', 'b.yaml')], 'the linked directory once; nothing through the loops')
  t.same(set.problems, [])

  const c = await watching(t, [dir])
  t.equal(value(c.snapshots[0], 't/b'), '1')
  const next = c.next()
  fs.writeFileSync(path.join(root, 'teams-src', 'b.yaml'), cm('b', '2'))
  t.equal(value(await next, 't/b'), '2', 'an edit in the linked directory is seen')
})

t.test('files carry no creationTimestamp: an object added later is the newer one, whatever its name or file', async (t) => {
  const G = 'gateway.networking.k8s.io/v1'
  const gatewayYaml = (name: string, protocol: string): string =>
    `apiVersion: ${G}\nkind: Gateway\nmetadata:\n  name: ${name}\n  namespace: default\nspec:\n  gatewayClassName: sallyport\n  listeners:\n    - name: l\n      protocol: ${protocol}\n      port: 8080\n`
  const routeYaml = (host: string): string =>
    `apiVersion: ${G}\nkind: HTTPRoute\nmetadata:\n  name: good\n  namespace: default\nspec:\n  parentRefs: [{ name: egress }]\n  hostnames: [${host}]\n  rules: [{ backendRefs: [{ name: svc, port: 80 }] }]\n`
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'class.yaml'), `apiVersion: ${G}\nkind: GatewayClass\nmetadata:\n  name: sallyport\nspec:\n  controllerName: sallyport.io/gateway-controller\n`)
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml('egress', 'HTTP'))
  fs.writeFileSync(path.join(dir, 'route.yaml'), routeYaml('good.test'))
  const c = collector()
  const source = new FileSource([dir], { watch: false })
  t.teardown(() => source.close())
  await source.start(c.listener)
  const served = (s: Snapshot | undefined): string[] | undefined =>
    s === undefined ? undefined : compile(s, { now: 0, version: 1, gatewayClass: 'sallyport' }).table.ports.get(8080)?.listeners.map((l) => l.gateway)
  t.same(served(c.snapshots[0]), ['default/egress'])

  // A Gateway whose name sorts first, on the serving Gateway's port with another protocol.
  fs.writeFileSync(path.join(dir, 'a-new.yaml'), gatewayYaml('a-new', 'TCP'))
  // A duplicate of the serving route, in a file that sorts first.
  fs.writeFileSync(path.join(dir, '00-team-b.yaml'), routeYaml('hijack.test'))
  await source.reload()
  const s = c.snapshots.at(-1)
  t.same(served(s), ['default/egress'], 'the serving Gateway keeps the port; the newcomer is the conflicted one')
  t.same(s?.httpRoutes.get('default/good')?.hostnames, ['good.test'], 'the serving route stays')
  const dup = s?.problems.find((p) => p.message.startsWith('duplicate'))
  t.equal(dup?.source.file, path.join(dir, '00-team-b.yaml'), 'the duplicate error names the newcomer')
  t.match(dup?.message, `already defined at ${path.join(dir, 'route.yaml')}:0; this one is ignored`)

  // An edit keeps an object's age.
  fs.writeFileSync(path.join(dir, 'gateway.yaml'), gatewayYaml('egress', 'HTTP').replace('name: l', 'name: l2'))
  await source.reload()
  t.same(served(c.snapshots.at(-1)), ['default/egress'], 'edited, still the older')
})

t.test('a directory with no configuration file in it is a warning, until one is added', async (t) => {
  const dir = tempDir(t)
  fs.writeFileSync(path.join(dir, 'notes.txt'), 'hello')
  const c = collector()
  const source = new FileSource([dir], { watch: false })
  t.teardown(() => source.close())
  await source.start(c.listener)
  t.match(c.snapshots[0]?.problems, [{ source: { file: dir }, severity: 'warning', message: 'no configuration file (.yaml, .yml, .json) found' }])
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '1'))
  await source.reload()
  t.same(c.snapshots.at(-1)?.problems, [])
})

t.test('a file too large, a FIFO or a device named like a manifest is a problem, never read whole or waited on', async (t) => {
  const dir = tempDir(t)
  const outside = tempDir(t)
  fs.writeFileSync(path.join(dir, 'a.yaml'), cm('a', '1'))
  // A sparse file one byte past the bound: costs no disk, and its size alone refuses it.
  fs.closeSync(fs.openSync(path.join(dir, 'big.yaml'), 'w'))
  fs.truncateSync(path.join(dir, 'big.yaml'), MAX_FILE_BYTES + 1)
  // A FIFO nobody writes: opening it to read would wait for a writer for ever (and every reload after it).
  const fifo = path.join(outside, 'fifo')
  execFileSync('mkfifo', [fifo])
  fs.symlinkSync(fifo, path.join(dir, 'fifo.yaml'))
  // A device without end: reading it whole would fill the heap.
  fs.symlinkSync('/dev/zero', path.join(dir, 'zero.yaml'))
  t.teardown(() => {
    // Should a read be waiting on the FIFO, a writer that comes and goes lets it end.
    try { fs.closeSync(fs.openSync(fifo, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK)) } catch { /* no reader waiting */ }
  })
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new Error('reading the set did not end')), 5000) })
  const set = await Promise.race([readConfigSet([dir]), timeout]).finally(() => clearTimeout(timer))
  t.same(set.docs.map((d) => d.source.file), [path.join(dir, 'a.yaml')], 'the manifest beside them is read')
  const byFile = new Map(set.problems.map((p) => [path.basename(p.source.file), p.message]))
  t.match(byFile.get('big.yaml'), /^cannot read: larger than 8 MiB/)
  t.match(byFile.get('fifo.yaml'), /^cannot read: not a regular file/)
  t.match(byFile.get('zero.yaml'), /^cannot read: not a regular file/)
})
